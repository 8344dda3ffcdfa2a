import orjson
import pytest

from services.apiserver.negotiation import (
    DISCOVERY_V2, Output, decode_body, json_to_yaml, negotiate_discovery, negotiate_output, parse_accept,
    wants_json, yaml_to_json,
)
from services.common.decoding import MAX_DEPTH
from services.common.errors import BadRequest, NotAcceptable, UnsupportedMediaType

KUBECTL_TABLE = ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;"
                 "g=meta.k8s.io,application/json")
KUBECTL_DISCOVERY = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;"
                     "g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")


def test_parse_accept_orders_by_q_stably():
    ranges = parse_accept("text/html;q=0.5, application/json, application/yaml;q=0.9, */*;q=0")
    assert [r.mime for r in ranges] == ["application/json", "application/yaml", "text/html"]


@pytest.mark.parametrize("accept,expected", [
    ("", Output("json", False)),
    ("*/*", Output("json", False)),
    ("application/json", Output("json", False)),
    ("application/json, */*", Output("json", False)),
    ("application/yaml", Output("yaml", False)),
    ("application/yaml;q=0.9, application/json;q=0.8", Output("yaml", False)),
    (KUBECTL_TABLE, Output("json", True)),
    ("application/json;as=Table;v=v1beta1;g=meta.k8s.io", Output("json", True)),
    ("application/json;as=Table;g=meta.k8s.io;v=v1", Output("json", True)),
    ("application/yaml;as=Table;v=v1;g=meta.k8s.io", Output("yaml", True)),
    ("application/json;as=Table;v=v2;g=meta.k8s.io, application/json", Output("json", False)),
    ("application/vnd.kubernetes.protobuf, application/json", Output("protobuf", fallback=Output("json"))),
    ("application/vnd.kubernetes.protobuf", Output("protobuf")),
    ("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json", Output("json")),
    ("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
     "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
     Output("protobuf", partial="PartialObjectMetadataList",
            fallback=Output("json", partial="PartialObjectMetadataList"))),
    ("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1",
     Output("json", partial="PartialObjectMetadata", partial_version="v1beta1")),
    ("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v2, application/yaml", Output("yaml")),
    ("application/json;stream=watch", Output("json", False)),
])
def test_negotiate_output(accept, expected):
    assert negotiate_output(accept) == expected


@pytest.mark.parametrize("accept", ["text/html", "application/xml",
                                    "application/json;as=Unknown;g=meta.k8s.io;v=v1",
                                    "application/json;as=PartialObjectMetadata;g=example.com;v=v1"])
def test_negotiate_output_not_acceptable(accept):
    with pytest.raises(NotAcceptable) as e:
        negotiate_output(accept)
    assert e.value.code == 406


@pytest.mark.parametrize("accept,expected", [
    (KUBECTL_DISCOVERY, "v2"),
    ("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json", "v2beta1"),
    ("application/json;as=APIGroupDiscoveryList;v=v2;g=apidiscovery.k8s.io", "v2"),
    ("application/json", None),
    ("", None),
    ("*/*", None),
    ("application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList,application/json", None),
])
def test_negotiate_discovery(accept, expected):
    assert negotiate_discovery(accept) == expected


def test_discovery_content_type_is_exact():
    assert DISCOVERY_V2 == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def test_wants_json():
    assert wants_json("") and wants_json("application/json") and wants_json("*/*")
    assert not wants_json("application/vnd.kubernetes.protobuf")


def test_yaml_to_json_and_back_keeps_order():
    doc = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels: {b: '1', a: '2'}\ndata:\n  z: x\n"
    js = yaml_to_json(doc)
    assert orjson.loads(js) == {"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": "c", "labels": {"b": "1", "a": "2"}}, "data": {"z": "x"}}
    out = json_to_yaml(js).decode()
    assert out.startswith("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels:\n    b: '1'\n")
    assert "{" not in out  # block style


def test_malformed_yaml_is_bad_request():
    with pytest.raises(BadRequest) as e:
        yaml_to_json(b"a: [1, 2\nb: c")
    assert e.value.message.startswith("error converting YAML to JSON: ")


def test_decode_body_json_yaml_and_errors():
    assert decode_body("create", "application/json", b'{"a":1}') == (b'{"a":1}', "application/json")
    assert decode_body("create", "", b'{"a":1}') == (b'{"a":1}', "application/json")
    assert decode_body("update", "application/yaml; charset=utf-8", b"a: 1\n") == (b'{"a":1}', "application/json")
    # JSON is passed on unparsed: the registry decodes it once, and refuses it there with the same 400
    # (tests/unit/registry/test_decoding.py)
    assert decode_body("create", "application/json", b'{"a":') == (b'{"a":', "application/json")
    with pytest.raises(UnsupportedMediaType) as e:
        decode_body("create", "application/x-www-form-urlencoded", b"a=1")
    assert e.value.code == 415
    # protobuf needs the server's serializer for its kinds (tests/unit/proxy/test_protobuf.py); without one
    # it is a type like any other the server does not know
    with pytest.raises(UnsupportedMediaType) as e:
        decode_body("create", "application/vnd.kubernetes.protobuf", b"k8s\x00", "ConfigMap")
    assert e.value.code == 415


def test_decode_body_depth_is_limited():
    """Too deep YAML is refused here; too deep JSON is passed on and refused by the registry
    (tests/unit/registry/test_decoding.py), with kube's messages either way."""
    deep_yaml = ("a:\n" + "".join("  " * i + "- \n" for i in range(1, MAX_DEPTH + 2))).encode()
    with pytest.raises(BadRequest) as e:
        decode_body("create", "application/yaml", deep_yaml)
    assert e.value.message == f"error converting YAML to JSON: yaml: exceeded max depth of {MAX_DEPTH}"
    deep = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    for verb, ctype in (("create", "application/json"), ("patch", "application/merge-patch+json")):
        assert decode_body(verb, ctype, b'{"a":' + deep + b"}") == (b'{"a":' + deep + b"}", ctype)
    ok = b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1)
    assert decode_body("create", "application/json", b'{"a":' + ok + b"}")[1] == "application/json"


def test_yaml_alias_bomb_is_refused_at_once():
    lines = ["a: &a [x,x,x,x,x,x,x,x,x]"] + [
        f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi")]
    bomb = ("\n".join(lines) + "\n").encode()
    for verb, ctype in (("create", "application/yaml"), ("patch", "application/apply-patch+yaml")):
        with pytest.raises(BadRequest) as e:
            decode_body(verb, ctype, bomb)
        assert e.value.message == "error converting YAML to JSON: yaml: document contains excessive aliasing"


@pytest.mark.parametrize("ctype", ["application/json-patch+json", "application/merge-patch+json",
                                   "application/strategic-merge-patch+json"])
def test_decode_patch_passes_through(ctype):
    assert decode_body("patch", ctype, b'{"x":1}') == (b'{"x":1}', ctype)


def test_decode_apply_patch_yaml_and_json():
    ctype = "application/apply-patch+yaml"
    assert decode_body("patch", ctype, b'{"a":1}') == (b'{"a":1}', ctype)
    assert decode_body("patch", ctype, b"a: 1\nb: [x]\n") == (b'{"a":1,"b":["x"]}', ctype)


def test_decode_patch_with_plain_json_is_415():
    with pytest.raises(UnsupportedMediaType) as e:
        decode_body("patch", "application/json", b"{}")
    assert "application/json-patch+json" in e.value.message


def test_indent_json_is_go_marshal_indent_with_the_encoded_strings_kept():
    from services.apiserver.negotiation import indent_json
    body = b'{"kind":"X","a":{},"b":[],"c":[1,{"d":"x,\\"y:{\\u003c"}],"e":null,"f":-1.5e3}'
    assert indent_json(body) == (b'{\n  "kind": "X",\n  "a": {},\n  "b": [],\n  "c": [\n    1,\n    {\n'
                                 b'      "d": "x,\\"y:{\\u003c"\n    }\n  ],\n  "e": null,\n  "f": -1.5e3\n}')


@pytest.mark.parametrize("query,agent,pretty", [
    ({}, b"curl/8.5.0", True), ({}, b"Wget/1.21", True), ({}, b"Mozilla/5.0 (X11)", True),
    ({}, b"kubectl/v1.33.1 (linux/amd64)", False), ({"pretty": "true"}, b"", True),
    ({"pretty": "false"}, b"curl/8.5.0", False), ({"pretty": "1"}, b"python", True), ({"pretty": ""}, b"curl", True),
])
def test_pretty_as_kube_decides_it(query, agent, pretty):
    from services.apiserver.negotiation import wants_pretty
    assert wants_pretty(query, agent) is pretty
