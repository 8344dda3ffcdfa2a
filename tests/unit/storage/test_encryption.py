"""EncryptionConfiguration parsing and kube's value layouts for each provider."""

from __future__ import annotations

import base64
import os

import nacl.secret
import pytest
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from apiary_pb import envelope_pb2 as pb
from services.apiserver.storage import codec
from services.apiserver.storage.codec import Codec
from services.apiserver.storage.encryption import Encryption
from services.common.errors import InternalError

K1, K2 = os.urandom(32), os.urandom(32)
KEY = "/registry/secrets/default/s"


def config(*providers: dict, resources: list[str] | None = None) -> Encryption:
    return Encryption.parse(
        {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "EncryptionConfiguration",
            "resources": [{"resources": resources or ["secrets"], "providers": list(providers)}],
        }
    )


def keyed(kind: str, *keys: tuple[str, bytes]) -> dict:
    return {kind: {"keys": [{"name": n, "secret": base64.b64encode(k).decode()} for n, k in keys]}}


def secret() -> pb.Object:
    o = pb.Object(api_version="v1", kind="Secret", body=b'{"data":{"a":"Yg=="}}')
    o.metadata.name, o.metadata.namespace = "s", "default"
    return o


async def test_aescbc_layout_is_kubes():
    c = Codec(config(keyed("aescbc", ("key1", K1)), {"identity": {}}))
    value = await c.encode(KEY, secret())
    prefix = b"k8s:enc:aescbc:v1:key1:"
    assert value.startswith(prefix)
    data = value[len(prefix) :]
    dec = Cipher(algorithms.AES(K1), modes.CBC(data[:16])).decryptor()
    unpad = padding.PKCS7(128).unpadder()
    plain = unpad.update(dec.update(data[16:]) + dec.finalize()) + unpad.finalize()
    assert plain == codec.encode(secret())
    assert c.decode(value, 5, KEY) == codec.decode(plain, 5)


async def test_aesgcm_layout_uses_the_key_as_authenticated_data():
    c = Codec(config(keyed("aesgcm", ("k", K1[:16]))))
    value = await c.encode(KEY, secret())
    data = value[len(b"k8s:enc:aesgcm:v1:k:") :]
    assert AESGCM(K1[:16]).decrypt(data[:12], data[12:], KEY.encode()) == codec.encode(secret())
    # The same bytes under another key do not decrypt (the value is bound to its key).
    with pytest.raises(InternalError) as e:
        c.decode(value, 1, "/registry/secrets/default/other")
    assert 'unable to transform key "/registry/secrets/default/other"' in e.value.message


async def test_secretbox_layout():
    c = Codec(config(keyed("secretbox", ("sb", K1))))
    value = await c.encode(KEY, secret())
    data = value[len(b"k8s:enc:secretbox:v1:sb:") :]
    assert nacl.secret.SecretBox(K1).decrypt(data[24:], data[:24]) == codec.encode(secret())
    assert c.decode(value, 3, KEY).metadata.name == "s"


async def test_first_provider_writes_every_provider_reads_and_staleness():
    old = Codec(config(keyed("aescbc", ("key1", K1)), {"identity": {}}))
    new = Codec(config(keyed("aescbc", ("key2", K2), ("key1", K1)), {"identity": {}}))
    v1 = await old.encode(KEY, secret())
    v2 = await new.encode(KEY, secret())
    assert v2.startswith(b"k8s:enc:aescbc:v1:key2:")
    assert new.decode(v1, 1, KEY) == new.decode(v2, 1, KEY)
    assert new.is_stale(KEY, v1) and not new.is_stale(KEY, v2)
    plain = codec.encode(secret())
    assert new.is_stale(KEY, plain) and new.unwrap(plain, KEY) == (plain, True)
    # Back to identity first: encrypted values are stale, plain ones are current.
    ident = Codec(config({"identity": {}}, keyed("aescbc", ("key2", K2))))
    assert ident.is_stale(KEY, v2) and not ident.is_stale(KEY, plain)
    assert ident.decode(v2, 1, KEY).metadata.name == "s"


async def test_other_resources_stay_plain_and_wildcards():
    c = Codec(config(keyed("aescbc", ("key1", K1))))
    assert await c.encode("/registry/configmaps/default/c", secret()) == codec.encode(secret())
    every = Codec(config(keyed("aescbc", ("key1", K1)), resources=["*.*"]))
    assert (await every.encode("/registry/configmaps/default/c", secret())).startswith(b"k8s:enc:aescbc")
    apps = Encryption.parse(
        {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "EncryptionConfiguration",
            "resources": [{"resources": ["deployments.apps"], "providers": [keyed("aesgcm", ("k", K1))]}],
        }
    )
    assert apps.for_key("/registry/deployments/ns/d") is not None
    assert apps.for_key("/registry/pods/ns/p") is None


@pytest.mark.parametrize(
    "value",
    [
        b"k8s:enc:aescbc:v1:key1:" + os.urandom(48),
        b"k8s:enc:aescbc:v1:key1:short",
        b"k8s:enc:aescbc:v1:nokey:" + os.urandom(48),
        b"k8s:enc:kms:v2:unknown:xx",
    ],
)
def test_corrupt_values_are_internal_errors_naming_the_key(value):
    c = Codec(config(keyed("aescbc", ("key1", K1)), {"identity": {}}))
    with pytest.raises(InternalError) as e:
        c.decode(value, 1, KEY)
    assert e.value.code == 500 and KEY in e.value.message


@pytest.mark.parametrize(
    "doc",
    [
        {"kind": "Nope"},
        {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
         "resources": [{"resources": ["secrets"], "providers": []}]},
        {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
         "resources": [{"resources": ["secrets"], "providers": [{"aescbc": {"keys": [{"name": "k", "secret": "!!"}]}}]}]},
        {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
         "resources": [{"resources": ["secrets"], "providers": [{"aescbc": {"keys": [
             {"name": "k", "secret": base64.b64encode(b"short").decode()}]}}]}]},
        {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
         "resources": [{"resources": ["secrets"], "providers": [{"kms": {"apiVersion": "v1", "name": "x",
                                                                          "endpoint": "unix:///x"}}]}]},
        {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
         "resources": [{"resources": ["secrets"], "providers": [{"rot13": {}}]}]},
    ],
)
def test_bad_configurations_are_refused(doc):
    with pytest.raises(ValueError):
        Encryption.parse(doc)


def test_validation_messages_are_kubes() -> None:
    with pytest.raises(ValueError) as e:
        config({"aescbc": {"keys": [{"name": "k", "secret": base64.b64encode(b"short").decode()}]}},
               {"kms": {"apiVersion": "v2", "name": "a:b", "endpoint": "unix:///k.sock"}})
    assert str(e.value) == (
        '[resources[0].providers[0].aescbc.keys[0].secret: Invalid value: "REDACTED": secret is not of the expected '
        "length, got 5, expected one of [16 24 32], resources[0].providers[1].kms.name: Invalid value: \"a:b\": "
        "invalid KMS provider name a:b, must not contain ':']")
