"""Encryption at rest: kube's EncryptionConfiguration (apiserver.config.k8s.io/v1) and its providers.

Per resource, the first provider encrypts every write and all of them are tried on reads, picked
by the value's prefix `k8s:enc:<provider>:v1:<key name>:` (KMS v2: `k8s:enc:kms:v2:<name>:`).
Layouts after the prefix are kube's: aescbc IV(16) + CBC with PKCS#7; aesgcm nonce(12) +
ciphertext + tag with the etcd key as authenticated data; secretbox nonce(24) + box; KMS v2 a
protobuf EncryptedObject whose data is AES-GCM under a DEK that the KMS plugin encrypted.

A value read back is "stale" when the current first provider (and key) did not write it; an
update of a stale value is always written, so that replacing every object re-encrypts it.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from apiary_pb import kms_v2_pb2 as kpb
from apiary_pb import kms_v2_pb2_grpc as kgrpc
from services.apiserver.fielderrors import ConfigError, quote
from services.common.duration import parse_duration

from . import metrics
from .keys import key_info

if TYPE_CHECKING:
    from .encryptionconfig import ProviderConfiguration

log = logging.getLogger(__name__)

ENC_PREFIX = b"k8s:enc:"
KMS_TIMEOUT = 3.0


class TransformError(Exception):
    """A value that no configured provider can read (corrupt, unknown key, wrong provider)."""


class NeedsDEK(Exception):
    """A KMS v2 value whose DEK is not decrypted yet: the async path asks the plugin first."""

    def __init__(self, provider: KMSv2Provider, obj: kpb.EncryptedObject) -> None:
        super().__init__("DEK not cached")
        self.provider, self.obj = provider, obj


class Provider(abc.ABC):
    """One way of writing values; prefix identifies what it wrote."""

    name: str = ""
    prefix: bytes = b""

    @abc.abstractmethod
    def encrypt(self, plain: bytes, ad: bytes) -> bytes: ...

    @abc.abstractmethod
    def decrypt(self, data: bytes, ad: bytes) -> bytes:
        """data without the prefix."""


class Identity(Provider):
    name = "identity"

    def encrypt(self, plain: bytes, ad: bytes) -> bytes:
        return plain

    def decrypt(self, data: bytes, ad: bytes) -> bytes:
        return data


class AESCBCProvider(Provider):
    def __init__(self, keyname: str, key: bytes) -> None:
        self.name = f"aescbc:{keyname}"
        self.prefix = f"k8s:enc:aescbc:v1:{keyname}:".encode()
        self.key = key

    def encrypt(self, plain: bytes, ad: bytes) -> bytes:
        iv = os.urandom(16)
        padder = padding.PKCS7(128).padder()
        padded = padder.update(plain) + padder.finalize()
        enc = Cipher(algorithms.AES(self.key), modes.CBC(iv)).encryptor()
        return iv + enc.update(padded) + enc.finalize()

    def decrypt(self, data: bytes, ad: bytes) -> bytes:
        if len(data) < 32 or len(data) % 16:
            raise TransformError("the stored data is not a multiple of the block size")
        dec = Cipher(algorithms.AES(self.key), modes.CBC(data[:16])).decryptor()
        padded = dec.update(data[16:]) + dec.finalize()
        unpadder = padding.PKCS7(128).unpadder()
        try:
            return unpadder.update(padded) + unpadder.finalize()
        except ValueError:
            raise TransformError("invalid PKCS7 data (empty or not padded)") from None


class AESGCMProvider(Provider):
    def __init__(self, keyname: str, key: bytes) -> None:
        self.name = f"aesgcm:{keyname}"
        self.prefix = f"k8s:enc:aesgcm:v1:{keyname}:".encode()
        self.aead = AESGCM(key)

    def encrypt(self, plain: bytes, ad: bytes) -> bytes:
        nonce = os.urandom(12)
        return nonce + self.aead.encrypt(nonce, plain, ad)

    def decrypt(self, data: bytes, ad: bytes) -> bytes:
        if len(data) < 12 + 16:
            raise TransformError("the stored data was shorter than the required size")
        try:
            return self.aead.decrypt(data[:12], data[12:], ad)
        except InvalidTag:
            raise TransformError("cipher: message authentication failed") from None


class Secretbox(Provider):
    def __init__(self, keyname: str, key: bytes) -> None:
        import nacl.secret  # imported here: only configurations using secretbox need PyNaCl

        self.name = f"secretbox:{keyname}"
        self.prefix = f"k8s:enc:secretbox:v1:{keyname}:".encode()
        self.box = nacl.secret.SecretBox(key)

    def encrypt(self, plain: bytes, ad: bytes) -> bytes:
        return bytes(self.box.encrypt(plain))  # nonce(24) + box, kube's layout

    def decrypt(self, data: bytes, ad: bytes) -> bytes:
        import nacl.exceptions

        if len(data) < 24 + 16:
            raise TransformError("the stored data was shorter than the required size")
        try:
            return self.box.decrypt(data)
        except nacl.exceptions.CryptoError:
            raise TransformError("output array was not large enough for encryption") from None


class KMSv2Provider(Provider):
    """kube's KMS v2 envelope: data under a local AES-GCM DEK; the plugin encrypts the DEK.

    Simplified DEK handling: one DEK per process (kube also reuses one and rotates it when the
    plugin's key id changes); it is generated and wrapped by the plugin on first use. Decrypted
    DEKs are cached by their encrypted form, so the plugin is asked once per DEK.
    """

    def __init__(self, name: str, endpoint: str, timeout: float = KMS_TIMEOUT) -> None:
        if not endpoint.startswith("unix://"):
            raise ValueError(f"kms provider {name!r}: endpoint must be unix:///path, got {endpoint!r}")
        self.name = f"kms:{name}"
        self.prefix = f"k8s:enc:kms:v2:{name}:".encode()
        self.endpoint = endpoint
        self.timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._stub: kgrpc.KeyManagementServiceStub | None = None
        self._dek: tuple[AESGCM, bytes, str] | None = None  # (cipher, encrypted DEK, key id)
        self._deks: dict[bytes, AESGCM] = {}
        self._lock = asyncio.Lock()

    def stub(self) -> kgrpc.KeyManagementServiceStub:
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(self.endpoint)
            self._stub = kgrpc.KeyManagementServiceStub(self._channel)
        return self._stub

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()

    async def status(self) -> kpb.StatusResponse:
        return await self.stub().Status(kpb.StatusRequest(), timeout=self.timeout)

    async def ready(self) -> None:
        """Make sure a DEK exists (asks the plugin once); writes stay synchronous afterwards."""
        if self._dek is not None:
            return
        async with self._lock:
            if self._dek is not None:
                return
            dek = AESGCM.generate_key(256)
            try:
                resp = await self.stub().Encrypt(
                    kpb.EncryptRequest(plaintext=dek, uid=os.urandom(8).hex()), timeout=self.timeout
                )
            except grpc.aio.AioRpcError as e:
                raise TransformError(f"KMS provider {self.name} failed to encrypt the DEK: {e.details()}") from None
            cipher = AESGCM(dek)
            self._deks[resp.ciphertext] = cipher
            self._dek = (cipher, resp.ciphertext, resp.key_id)

    async def fetch(self, obj: kpb.EncryptedObject) -> None:
        try:
            resp = await self.stub().Decrypt(
                kpb.DecryptRequest(
                    ciphertext=obj.encryptedDEKSource,
                    uid=os.urandom(8).hex(),
                    key_id=obj.keyID,
                    annotations=dict(obj.annotations),
                ),
                timeout=self.timeout,
            )
        except grpc.aio.AioRpcError as e:
            raise TransformError(f"KMS provider {self.name} failed to decrypt the DEK: {e.details()}") from None
        try:
            self._deks[obj.encryptedDEKSource] = AESGCM(resp.plaintext)
        except ValueError:
            raise TransformError("the KMS plugin returned an invalid DEK") from None

    @property
    def key_id(self) -> str:
        return self._dek[2] if self._dek else ""

    def encrypt(self, plain: bytes, ad: bytes) -> bytes:
        if self._dek is None:
            raise TransformError(f"KMS provider {self.name} has no DEK yet")
        cipher, edek, key_id = self._dek
        nonce = os.urandom(12)
        obj = kpb.EncryptedObject(
            encryptedData=nonce + cipher.encrypt(nonce, plain, ad),
            keyID=key_id,
            encryptedDEKSource=edek,
            encryptedDEKSourceType=kpb.AES_GCM_KEY,
        )
        return obj.SerializeToString(deterministic=True)

    def decrypt(self, data: bytes, ad: bytes) -> bytes:
        obj = kpb.EncryptedObject()
        try:
            obj.ParseFromString(data)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError: corrupt data
            raise TransformError("failed to unmarshal the encrypted object") from None
        if obj.encryptedDEKSourceType != kpb.AES_GCM_KEY:
            raise TransformError(f"unsupported encryptedDEKSourceType {obj.encryptedDEKSourceType}")
        cipher = self._deks.get(obj.encryptedDEKSource)
        if cipher is None:
            raise NeedsDEK(self, obj)
        d = obj.encryptedData
        if len(d) < 28:
            raise TransformError("the stored data was shorter than the required size")
        try:
            return cipher.decrypt(d[:12], d[12:], ad)
        except InvalidTag:
            raise TransformError("cipher: message authentication failed") from None

    def stale(self, data: bytes) -> bool:
        obj = kpb.EncryptedObject()
        try:
            obj.ParseFromString(data)
        except Exception:  # noqa: BLE001
            return True
        return obj.keyID != self.key_id


@dataclass
class Transformer:
    """The providers of one resource: the first writes, any of them reads."""

    providers: list[Provider]

    @property
    def first(self) -> Provider:
        return self.providers[0]

    def kms(self) -> list[KMSv2Provider]:
        return [p for p in self.providers if isinstance(p, KMSv2Provider)]

    async def ready(self) -> None:
        if isinstance(self.first, KMSv2Provider):
            await self.first.ready()

    def to_storage(self, plain: bytes, ad: bytes) -> bytes:
        p = self.first
        if not p.prefix:  # identity: no transformation to count
            return plain
        t = time.perf_counter()
        try:
            out = p.prefix + p.encrypt(plain, ad)
        except Exception:
            _transformed("to_storage", p, "Internal", t)
            raise
        _transformed("to_storage", p, "OK", t)
        return out

    def is_stale(self, value: bytes) -> bool:
        """Whether value was written by anything but the first provider (without decrypting it)."""
        first = self.first
        if isinstance(first, Identity):
            return value.startswith(ENC_PREFIX)
        if not value.startswith(first.prefix):
            return True
        return isinstance(first, KMSv2Provider) and first.stale(value[len(first.prefix) :])

    def from_storage(self, value: bytes, ad: bytes) -> tuple[bytes, bool]:
        """(the plain value, whether it should be rewritten with the first provider)."""
        if value.startswith(ENC_PREFIX):
            for i, p in enumerate(self.providers):
                if p.prefix and value.startswith(p.prefix):
                    data = value[len(p.prefix) :]
                    t = time.perf_counter()
                    try:
                        plain = p.decrypt(data, ad)
                    except Exception:
                        _transformed("from_storage", p, "Internal", t)
                        raise
                    _transformed("from_storage", p, "OK", t)
                    stale = i != 0 or (isinstance(p, KMSv2Provider) and p.stale(data))
                    return plain, stale
            raise TransformError("no matching prefix found")
        for i, p in enumerate(self.providers):
            if isinstance(p, Identity):
                return value, i != 0
        raise TransformError("no matching prefix found")


def _transformed(kind: str, p: Provider, status: str, started: float) -> None:
    """kube's transformation metrics, labelled by the provider's prefix (k8s:enc:aescbc:v1:key1:)."""
    prefix = p.prefix.decode(errors="replace")
    metrics.child(metrics.TRANSFORMATION_OPERATIONS, kind, prefix, status).inc()
    metrics.child(metrics.TRANSFORMATION_DURATION, kind, prefix).observe(time.perf_counter() - started)


class Encryption:
    """The EncryptionConfiguration: resource -> Transformer."""

    def __init__(self, rules: list[tuple[list[str], Transformer]]) -> None:
        self.rules = rules
        self._cache: dict[str, Transformer | None] = {}

    @classmethod
    def load(cls, path: str | Path) -> Encryption:
        from services.apiserver.configdecode import read_yaml

        try:
            doc = read_yaml(Path(path).read_bytes())
        except OSError as e:
            raise ConfigError(f"error reading encryption provider configuration {path}: {e}") from None
        except ConfigError as e:
            raise ConfigError(f"error decoding encryption provider configuration file {quote(str(path))}: "
                              f"{e}") from None
        return cls.parse(doc)

    @classmethod
    def parse(cls, doc: Any) -> Encryption:
        """The transformers of a configuration, validated with kube's messages (ConfigError)."""
        # Imported here: the typed models (pydantic) are for a storage started with a configuration.
        from services.apiserver.configdecode import decode

        from .encryptionconfig import KINDS, validate

        config = decode(doc, KINDS)
        errs = validate(config)
        if errs:
            raise ConfigError(str(errs))
        return cls([(list(r.resources), Transformer([p for c in r.providers for p in _providers(c)]))
                    for r in config.resources])

    def for_key(self, key: str) -> Transformer | None:
        """The transformer of the key's resource; None when it is stored in the clear."""
        info = key_info(key)
        cache_key = info.qualified
        if cache_key in self._cache:
            return self._cache[cache_key]
        found: Transformer | None = None
        for resources, t in self.rules:
            if any(_matches(r, info.resource, info.group) for r in resources):
                found = t
                break
        if found is not None and len(found.providers) == 1 and isinstance(found.first, Identity):
            found = None
        self._cache[cache_key] = found
        return found

    def kms_providers(self) -> list[KMSv2Provider]:
        return [p for _, t in self.rules for p in t.kms()]

    async def close(self) -> None:
        for p in self.kms_providers():
            await p.close()


def _matches(pattern: str, resource: str, group: str) -> bool:
    # Built-in groups are stored without their group in the key (/registry/deployments/...), so
    # "deployments.apps" also matches the bare resource.
    if pattern == "*.*":
        return True
    name, _, pgroup = pattern.partition(".")
    if name == "*":
        return pgroup == group
    return name == resource and (not pgroup or pgroup == group or not group)


def _providers(c: ProviderConfiguration) -> list[Provider]:
    """One validated provider entry; each key of aescbc/aesgcm/secretbox reads as a provider of its own."""
    if c.kms is not None:
        return [KMSv2Provider(c.kms.name, c.kms.endpoint, parse_duration(c.kms.timeout))]
    for keyed, cls in ((c.aescbc, AESCBCProvider), (c.aesgcm, AESGCMProvider), (c.secretbox, Secretbox)):
        if keyed is not None:
            return [cls(k.name, base64.b64decode(k.secret)) for k in keyed.keys]
    return [Identity()]
