import base64

import pytest

from services.apis.install import new_catalogue
from services.apis.strategies import base64_error
from services.apiserver.registry.rest import strategy_for
from services.common import errors

CATALOGUE = new_catalogue()


def _s(resource, group=""):
    return strategy_for(CATALOGUE.lookup(group, "v1", resource))


def test_base64_error_positions():
    assert base64_error("cGFzcw==") is None
    assert base64_error("ab!d") == "illegal base64 data at input byte 2"
    assert base64_error("abc") == "illegal base64 data at input byte 0"


def test_secret_string_data_merged_and_defaulted():
    obj = {"metadata": {"name": "s"}, "data": {"a": "eA==", "b": "eA=="}, "stringData": {"b": "yy"}}
    _s("secrets").canonicalize(obj)
    assert obj == {"metadata": {"name": "s"}, "type": "Opaque",
                   "data": {"a": "eA==", "b": base64.b64encode(b"yy").decode()}}


def test_secret_bad_base64_is_400():
    with pytest.raises(errors.BadRequest) as e:
        _s("secrets").canonicalize({"data": {"a": "%%%%"}})
    assert e.value.message == 'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 0'


def test_secret_type_rules():
    s = _s("secrets")
    obj = {"metadata": {"name": "t", "namespace": "d"}, "type": "kubernetes.io/tls", "data": {"tls.crt": "eA=="}}
    causes = s.validate(obj)
    assert [c["field"] for c in causes] == ["data[tls.key]"]
    bad = {"metadata": {"name": "t", "namespace": "d"}, "type": "Opaque", "data": {"bad key": "eA=="}}
    assert s.validate(bad)[0]["field"] == "data[bad key]"


def test_configmap_rules():
    s = _s("configmaps")
    obj = {"metadata": {"name": "c", "namespace": "d"}, "data": {"k": "v"}, "binaryData": {"k": "eA=="}}
    causes = s.validate(obj)
    assert causes[0]["message"] == 'Invalid value: "k": duplicate of key present in binaryData'
    big = {"metadata": {"name": "c", "namespace": "d"}, "data": {"k": "x" * (1024 * 1024 + 1)}}
    assert s.validate(big)[0]["reason"] == "FieldValueTooLong"
    old = {"metadata": {"name": "c", "namespace": "d"}, "data": {"k": "v"}, "immutable": True}
    new = {"metadata": {"name": "c", "namespace": "d"}, "data": {"k": "v"}}
    assert [c["field"] for c in s.validate_update(new, old)] == ["immutable"]


def test_namespace_prepare():
    s = _s("namespaces")
    obj = {"metadata": {"name": "n"}, "spec": {"finalizers": ["example.com/x"]}, "status": {"phase": "Terminating"}}
    s.prepare_for_create(obj)
    assert obj["spec"]["finalizers"] == ["example.com/x", "kubernetes"] and obj["status"] == {"phase": "Active"}
    assert s.selectable_fields(obj) == {"metadata.name": "n", "status.phase": "Active"}


def test_apiservice_validation_and_local_status():
    s = _s("apiservices", "apiregistration.k8s.io")
    obj = {"metadata": {"name": "v1."}, "spec": {"group": "", "version": "v1", "groupPriorityMinimum": 18000,
                                                 "versionPriority": 1}}
    s.prepare_for_create(obj)
    assert obj["status"]["conditions"][0]["message"] == "Local APIServices are always available"
    assert s.validate(obj) == []
    bad = {"metadata": {"name": "v2."}, "spec": {"group": "", "version": "v2", "groupPriorityMinimum": 1,
                                                 "versionPriority": 1, "caBundle": "eA=="}}
    msgs = [c["field"] + ": " + c["message"] for c in s.validate(bad)]
    assert msgs == ["spec.group: Required value: only v1 may have an empty group and it better be legacy kube",
                    'spec.caBundle: Invalid value: "3 bytes": local APIServices may not have a caBundle']
