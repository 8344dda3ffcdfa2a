"""Values in etcd: a magic prefix and the serialized apiary.Object, stored without resourceVersion."""

from __future__ import annotations

from apiary_pb import envelope_pb2 as pb
from services.common.errors import InternalError

MAGIC = b"k8s\x00apiary\x00"
ENCRYPTED = b"k8s:enc:"


def encode(obj: pb.Object) -> bytes:
    """Deterministic bytes, so that an update writing the same object is recognised as a no-op."""
    rv = obj.metadata.resource_version
    if rv:
        obj.metadata.resource_version = ""
    data = MAGIC + obj.SerializeToString(deterministic=True)
    if rv:
        obj.metadata.resource_version = rv
    return data


def decode(value: bytes, revision: int, key: bytes | str = b"") -> pb.Object:
    if not value.startswith(MAGIC):
        what = (
            "an encrypted value (no decryption configured)"
            if value.startswith(ENCRYPTED)
            else "unrecognized data"
        )
        raise InternalError(f"unable to decode {key!r}: {what}")
    obj = pb.Object()
    try:
        obj.ParseFromString(value[len(MAGIC) :])
    except Exception as e:  # noqa: BLE001 - protobuf raises DecodeError, a corrupt value is a 500
        raise InternalError(f"unable to decode {key!r}: {e}") from None
    obj.metadata.resource_version = str(revision)
    return obj
