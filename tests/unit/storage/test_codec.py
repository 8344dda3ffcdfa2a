"""Values in etcd (services/apiserver/storage/codec.py): round trips, determinism, and values it
cannot read."""
from __future__ import annotations

import base64
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apiary_pb import envelope_pb2 as pb
from services.apiserver.storage import codec
from services.apiserver.storage.codec import MAGIC, Codec
from services.apiserver.storage.encryption import Encryption
from services.common.errors import InternalError

KEY = "/registry/secrets/default/s"
names = st.from_regex(r"[a-z0-9]{1,12}", fullmatch=True)


@st.composite
def objects(draw: st.DrawFn) -> pb.Object:
    o = pb.Object(api_version="v1", kind="Secret", body=draw(st.binary(max_size=64)))
    o.metadata.name, o.metadata.namespace = draw(names), draw(names)
    o.metadata.labels.update(draw(st.dictionaries(names, names, max_size=4)))
    o.metadata.finalizers.extend(draw(st.lists(names, max_size=3)))
    return o


@given(objects(), st.integers(1, 2**62))
def test_round_trip_at_the_revision(obj: pb.Object, revision: int) -> None:
    obj.metadata.resource_version = "7"
    value = codec.encode(obj)
    assert value.startswith(MAGIC)
    assert obj.metadata.resource_version == "7"  # the caller's object is left as it was
    got = codec.decode(value, revision, KEY)
    assert got.metadata.resource_version == str(revision)  # resourceVersion is the etcd revision
    got.metadata.resource_version = "7"
    assert got == obj


@given(objects())
def test_encoding_is_deterministic_and_ignores_the_resource_version(obj: pb.Object) -> None:
    first = codec.encode(obj)
    obj.metadata.resource_version = "12"
    copy = pb.Object.FromString(obj.SerializeToString())
    assert codec.encode(copy) == first  # the no-op update check compares these bytes


@pytest.mark.parametrize("provider", ["aescbc", "aesgcm", "secretbox"])
@given(obj=objects())
async def test_round_trip_through_each_provider(provider: str, obj: pb.Object) -> None:
    enc = Encryption.parse({
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
        "resources": [{"resources": ["secrets"], "providers": [
            {provider: {"keys": [{"name": "k", "secret": base64.b64encode(os.urandom(32)).decode()}]}}]}],
    })
    c = Codec(enc)
    value = await c.encode(KEY, obj)
    assert value.startswith(f"k8s:enc:{provider}:v1:k:".encode()) and obj.SerializeToString() not in value
    assert c.decode(value, 3, KEY).body == obj.body
    assert c.unwrap(value, KEY) == (codec.encode(obj), False)


@pytest.mark.parametrize("value, why", [
    (b"", "unrecognized data"),
    (b"{\"kind\":\"Secret\"}", "unrecognized data"),
    (b"k8s:enc:aescbc:v1:key1:" + b"\x00" * 32, "an encrypted value (no decryption configured)"),
    (MAGIC + b"\xff\xff\xff", "unable to decode"),
])
def test_unreadable_values_are_internal_errors_naming_the_key(value: bytes, why: str) -> None:
    with pytest.raises(InternalError) as e:
        codec.decode(value, 1, KEY.encode())
    assert e.value.message.startswith(f'unable to decode "{KEY}"') and why in e.value.message
    assert e.value.code == 500
