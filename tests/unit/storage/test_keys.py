"""Key parsing, range ends, continue tokens and the value codec."""

from __future__ import annotations

import base64

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apiary_pb import envelope_pb2 as pb
from services.apiserver.storage import codec
from services.common.errors import BadRequest, InternalError
from services.apiserver.storage.keys import (
    decode_continue,
    encode_continue,
    key_info,
    range_end,
    resource_label,
    resource_prefix,
)


@pytest.mark.parametrize(
    "key,resource,group,name",
    [
        ("/registry/pods/default/a", "pods", "", "a"),
        ("/registry/namespaces/default", "namespaces", "", "default"),
        (
            "/registry/apiregistration.k8s.io/apiservices/v1.apps",
            "apiservices",
            "apiregistration.k8s.io",
            "v1.apps",
        ),
        ("/registry/example.com/widgets/ns/w1", "widgets", "example.com", "w1"),
        ("/registry/configmaps/ns/kube-root-ca.crt", "configmaps", "", "kube-root-ca.crt"),
    ],
)
def test_key_info(key, resource, group, name):
    info = key_info(key)
    assert (info.resource, info.group, info.name) == (resource, group, name)


@pytest.mark.parametrize(
    "key,prefix",
    [
        ("/registry/pods/default/a", "/registry/pods/"),
        ("/registry/pods/default/", "/registry/pods/"),
        ("/registry/pods/", "/registry/pods/"),
        ("/registry/pods", "/registry/pods/"),
        ("/registry/namespaces/default", "/registry/namespaces/"),
        (
            "/registry/apiregistration.k8s.io/apiservices/v1.apps",
            "/registry/apiregistration.k8s.io/apiservices/",
        ),
        ("/registry/apiregistration.k8s.io/", "/registry/apiregistration.k8s.io/"),
        ("/registry/", "/registry/"),
    ],
)
def test_resource_prefix(key, prefix):
    assert resource_prefix(key) == prefix


def test_resource_label():
    assert resource_label("/registry/pods/") == "pods"
    assert (
        resource_label("/registry/apiregistration.k8s.io/apiservices/")
        == "apiservices.apiregistration.k8s.io"
    )


def test_range_end():
    assert range_end(b"/registry/pods/") == b"/registry/pods0"
    assert range_end(b"a\xff") == b"b"
    assert range_end(b"\xff\xff") == b"\x00"


@given(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-./", min_size=1, max_size=30).filter(
        # clean relative keys only (kube refuses a start key that path.Clean would change)
        lambda s: ".." not in s and "//" not in s and not s.startswith("/") and not s.endswith("/")
        and "/./" not in f"/{s}/"
    ),
    st.integers(1, 2**62),
)
def test_continue_token_round_trip(rest, rv):
    prefix = "/registry/pods/"
    token = encode_continue(prefix + rest + "\x00", prefix, rv)
    assert "=" not in token
    assert decode_continue(token, prefix) == (prefix + rest + "\x00", rv)


def test_continue_token_is_kubes_format():
    token = encode_continue("/registry/pods/ns/b\x00", "/registry/pods/", 42)
    data = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    assert data == {"v": "meta.k8s.io/v1", "rv": 42, "start": "ns/b\x00"}


def _token(data) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(data)).rstrip(b"=").decode()


@pytest.mark.parametrize(
    "token",
    [
        "%%%",
        base64.urlsafe_b64encode(b"not json").decode(),
        _token([1, 2]),
        _token({"v": "other/v1", "rv": 1, "start": "a"}),
        _token({"v": "meta.k8s.io/v1", "rv": 0, "start": "a"}),
        _token({"v": "meta.k8s.io/v1", "rv": "1", "start": "a"}),
        _token({"v": "meta.k8s.io/v1", "rv": 1, "start": ""}),
        _token({"v": "meta.k8s.io/v1", "rv": 1, "start": "../../secrets/x"}),
        _token({"v": "meta.k8s.io/v1", "rv": 1, "start": "a/../../b"}),
    ],
)
def test_bad_continue_tokens(token):
    with pytest.raises(BadRequest):
        decode_continue(token, "/registry/pods/")


def test_codec_round_trip_drops_resource_version():
    o = pb.Object(api_version="v1", kind="Pod", body=b'{"spec":{}}')
    o.metadata.name, o.metadata.resource_version = "a", "7"
    o.metadata.labels.update({"b": "2", "a": "1"})
    value = codec.encode(o)
    assert value.startswith(b"k8s\x00apiary\x00")
    assert o.metadata.resource_version == "7"  # the caller's object is left as it was
    stored = pb.Object.FromString(value[len(codec.MAGIC) :])
    assert stored.metadata.resource_version == ""
    back = codec.decode(value, 9)
    assert back.metadata.resource_version == "9" and back.body == o.body
    # Deterministic: equal objects give equal bytes (needed to detect no-op updates).
    o2 = pb.Object()
    o2.CopyFrom(o)
    o2.metadata.labels.clear()
    o2.metadata.labels.update({"a": "1", "b": "2"})
    assert codec.encode(o2) == value


@pytest.mark.parametrize("value", [b"{}", b"k8s:enc:aescbc:v1:key:xxx", codec.MAGIC + b"\xff\xff\xff"])
def test_codec_rejects_foreign_values(value):
    with pytest.raises(InternalError):
        codec.decode(value, 1, b"/registry/pods/a")
