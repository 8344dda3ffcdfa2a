"""New random UIDs: str(uuid.uuid4()) (kube's uuid.NewUUID) without the UUID object, whose
constructor costs more than the random bytes and the formatting together (a few µs a call, and a
CREATE takes three: its Audit-ID, the object's uid, the admission request's uid)."""
from __future__ import annotations

import os


def new_uid() -> str:
    """A random (version 4, RFC 4122 variant) UUID in its canonical text form."""
    b = bytearray(os.urandom(16))
    b[6] = b[6] & 0x0F | 0x40  # version 4
    b[8] = b[8] & 0x3F | 0x80  # the RFC 4122 variant
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
