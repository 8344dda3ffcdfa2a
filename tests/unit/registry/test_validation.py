from services.apiserver import validation as v


def test_dns1123_subdomain_message():
    assert v.is_dns1123_subdomain("example.com") == []
    assert v.is_dns1123_subdomain("Foo") == [
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
        "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]
    assert v.is_dns1123_subdomain("a" * 254)[0] == "must be no more than 253 characters"


def test_dns1123_label_message():
    assert v.is_dns1123_label("my-name") == []
    assert v.is_dns1123_label("a.b") == [
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
        "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"]
    assert v.is_dns1123_label("a" * 64) == ["must be no more than 63 characters"]


def test_qualified_names_and_label_values():
    assert v.is_qualified_name("example.com/my-key") == []
    assert v.is_qualified_name("app") == []
    assert v.is_qualified_name("a/b/c")[0].startswith("a qualified name must consist of")
    assert v.is_qualified_name("/x") == ["prefix part must be non-empty"]
    assert v.is_qualified_name("Example.com/x")[0].startswith("prefix part a lowercase RFC 1123 subdomain")
    assert v.is_qualified_name("-x")[0].startswith("name part must consist of alphanumeric characters")
    assert v.is_qualified_name("x" * 64) == ["name part must be no more than 63 characters"]
    assert v.is_valid_label_value("") == []
    assert v.is_valid_label_value("v_1.2") == []
    assert v.is_valid_label_value("-v")[0].startswith("a valid label must be an empty string or consist of")


def test_config_keys():
    assert v.is_config_map_key("key.name") == []
    assert v.is_config_map_key("bad key")[0].startswith("a valid config key must consist of alphanumeric")
    assert v.is_config_map_key("..x") == ["must not start with '..'"]
    assert v.is_config_map_key(".") == ["must not be '.'"]


def test_object_meta_causes():
    causes = v.validate_object_meta({"name": "ok", "namespace": "default", "labels": {"bad key": "v"},
                                     "annotations": {"a": "x" * (256 * 1024)}}, True, v.is_dns1123_subdomain)
    assert [c["field"] for c in causes] == ["metadata.labels", "metadata.annotations"]
    assert causes[0]["message"].startswith('Invalid value: "bad key": name part must consist')
    assert causes[1] == {"reason": "FieldValueTooLong", "field": "metadata.annotations",
                         "message": "Too long: must have at most 262144 bytes"}
    causes = v.validate_object_meta({"name": "x"}, False, v.is_dns1123_label)
    assert causes == []
    causes = v.validate_object_meta({"name": "x"}, True, v.is_dns1123_label)
    assert causes == [{"reason": "FieldValueRequired", "message": "Required value", "field": "metadata.namespace"}]
    causes = v.validate_object_meta({"name": "x", "finalizers": ["custom"]}, False, v.is_dns1123_label)
    assert "neither a standard finalizer name nor is it fully qualified" in causes[0]["message"]
