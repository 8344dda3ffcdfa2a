"""Values in etcd: a magic prefix and the serialized apiary.Object, stored without resourceVersion,
optionally behind an encryption envelope (see encryption.py)."""

from __future__ import annotations

from apiary_pb import envelope_pb2 as pb
from services.common import tracing
from services.common.errors import InternalError

from .encryption import ENC_PREFIX, Encryption, NeedsDEK, Transformer, TransformError

MAGIC = b"k8s\x00apiary\x00"
# Set in `fields` of an object returned by Get whose stored value the first provider did not write:
# the registry then writes an unchanged update anyway (kube's GuaranteedUpdate on a stale value).
STALE_FIELD = "apiary.storage/stale-encryption"
ENCRYPTED = ENC_PREFIX


def encode(obj: pb.Object) -> bytes:
    """Deterministic bytes, so that an update writing the same object is recognised as a no-op."""
    rv = obj.metadata.resource_version
    if rv:
        obj.metadata.resource_version = ""
    data = MAGIC + obj.SerializeToString(deterministic=True)
    if rv:
        obj.metadata.resource_version = rv
    return data


def _text(key: bytes | str) -> str:
    return key.decode(errors="replace") if isinstance(key, bytes) else key


def decode(value: bytes, revision: int, key: bytes | str = b"") -> pb.Object:
    if not value.startswith(MAGIC):
        what = (
            "an encrypted value (no decryption configured)"
            if value.startswith(ENCRYPTED)
            else "unrecognized data"
        )
        raise InternalError(f'unable to decode "{_text(key)}": {what}')
    obj = pb.Object()
    try:
        obj.ParseFromString(value[len(MAGIC) :])
    except Exception as e:  # noqa: BLE001 - protobuf raises DecodeError, a corrupt value is a 500
        raise InternalError(f'unable to decode "{_text(key)}": {e}') from None
    obj.metadata.resource_version = str(revision)
    return obj


class Codec:
    """encode/decode with the EncryptionConfiguration applied per resource.

    Decoding is synchronous (the watch cache applies events in one step); the only asynchronous
    part, asking a KMS plugin for a DEK it has not seen, happens in decode_async / prepare.
    """

    def __init__(self, encryption: Encryption | None = None) -> None:
        self.encryption = encryption

    def transformer(self, key: bytes | str) -> Transformer | None:
        if self.encryption is None:
            return None
        return self.encryption.for_key(_text(key))

    async def encode(self, key: bytes | str, obj: pb.Object) -> bytes:
        plain = encode(obj)
        t = self.transformer(key)
        if t is None:
            return plain
        try:
            if tracing.ENABLED and tracing.recording():
                with tracing.step("TransformToStorage", {"key": _text(key), "provider": t.first.name}):
                    await t.ready()
                    return t.to_storage(plain, key if isinstance(key, bytes) else key.encode())
            await t.ready()
            return t.to_storage(plain, key if isinstance(key, bytes) else key.encode())
        except TransformError as e:
            raise InternalError(f'unable to transform key "{_text(key)}": {e}') from None

    def is_stale(self, key: bytes | str, value: bytes) -> bool:
        t = self.transformer(key)
        return t is not None and t.is_stale(value)

    def unwrap(self, value: bytes, key: bytes | str, t: Transformer | None = None) -> tuple[bytes, bool]:
        """(the plain stored value, stale); raises NeedsDEK for a KMS DEK not fetched yet."""
        if t is None:
            t = self.transformer(key)
            if t is None:
                return value, False
        try:
            return t.from_storage(value, key if isinstance(key, bytes) else key.encode())
        except TransformError as e:
            raise InternalError(f'unable to transform key "{_text(key)}": {e}') from None
        except ValueError as e:  # a broken ciphertext the crypto library refuses
            raise InternalError(f'unable to transform key "{_text(key)}": {e}') from None

    def decode(self, value: bytes, revision: int, key: bytes | str) -> pb.Object:
        if self.encryption is None:
            return decode(value, revision, key)
        plain, _ = self.unwrap(value, key)
        return decode(plain, revision, key)

    async def prepare(self, value: bytes, key: bytes | str) -> None:
        """Fetch what decode needs from a KMS plugin (a no-op for anything else)."""
        if self.encryption is None or not value.startswith(ENC_PREFIX):
            return
        try:
            self.unwrap(value, key)
        except NeedsDEK as n:
            try:
                await n.provider.fetch(n.obj)
            except TransformError as e:
                raise InternalError(f'unable to transform key "{_text(key)}": {e}') from None
        except InternalError:
            return  # decode reports it

    async def decode_async(self, value: bytes, revision: int, key: bytes | str) -> pb.Object:
        """decode, a KMS plugin asked first when it must be (a sampled request's decryption an event of its span)."""
        if self.encryption is not None and tracing.ENABLED and value.startswith(ENC_PREFIX) and tracing.recording():
            with tracing.step("TransformFromStorage", {"key": _text(key)}):
                plain, _ = await self._unwrap_async(value, key)
            return decode(plain, revision, key)
        try:
            return self.decode(value, revision, key)
        except NeedsDEK:
            await self.prepare(value, key)
            return self.decode(value, revision, key)

    async def unwrap_async(self, value: bytes, key: bytes | str) -> tuple[bytes, bool]:
        """unwrap, a KMS plugin asked first when it must be (a sampled request's decryption an event of its span)."""
        if self.encryption is not None and tracing.ENABLED and value.startswith(ENC_PREFIX) and tracing.recording():
            with tracing.step("TransformFromStorage", {"key": _text(key)}):
                return await self._unwrap_async(value, key)
        return await self._unwrap_async(value, key)

    async def _unwrap_async(self, value: bytes, key: bytes | str) -> tuple[bytes, bool]:
        try:
            return self.unwrap(value, key)
        except NeedsDEK:
            await self.prepare(value, key)
            return self.unwrap(value, key)
