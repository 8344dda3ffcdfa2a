"""Storage keys and continue tokens.

Keys are `/registry/<resource>/[<namespace>/]<name>` or, for groups served under their own
prefix, `/registry/<group>/<resource>/...`; the group is recognised by its dot.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
from dataclasses import dataclass

import orjson

from services.common.errors import BadRequest

CONTINUE_VERSION = "meta.k8s.io/v1"


@dataclass(frozen=True)
class KeyInfo:
    resource: str
    group: str
    name: str

    @property
    def qualified(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource


def key_info(key: str) -> KeyInfo:
    """resource, group and name as kube's error messages want them, derived from the key."""
    parts = [p for p in key.split("/") if p]
    if len(parts) >= 3 and "." in parts[1]:
        group, resource = parts[1], parts[2]
    elif len(parts) >= 2:
        group, resource = "", parts[1]
    else:
        group, resource = "", parts[0] if parts else ""
    return KeyInfo(resource, group, parts[-1] if parts else "")


def resource_prefix(key: str) -> str:
    """The prefix holding every object of the key's resource (where one watch cache lives)."""
    parts = [p for p in key.split("/") if p]
    if len(parts) >= 3 and "." in parts[1]:
        keep = 3
    elif len(parts) >= 2 and "." not in parts[1]:
        keep = 2
    else:
        return key if key.endswith("/") else key + "/"
    if len(parts) == keep and not key.endswith("/"):
        # A key naming exactly "/root/resource" is a prefix without its slash.
        return "/" + "/".join(parts) + "/"
    return "/" + "/".join(parts[:keep]) + "/"


def resource_label(prefix: str) -> str:
    """The resource as metrics label it: `pods`, `apiservices.apiregistration.k8s.io`."""
    return key_info(prefix + "x").qualified


def range_end(prefix: bytes) -> bytes:
    """The end of etcd's range for every key starting with prefix."""
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\x00"


def encode_continue(next_key: str, prefix: str, rv: int) -> str:
    """kube's continue token: base64url JSON of the list revision and the next key relative to prefix."""
    data = orjson.dumps({"v": CONTINUE_VERSION, "rv": rv, "start": next_key[len(prefix) :]})
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def decode_continue(token: str, prefix: str) -> tuple[str, int]:
    """(the key to continue from, the list revision); BadRequest when the token is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = orjson.loads(raw)
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise BadRequest("continue key is not valid: illegal base64 data") from None
    if not isinstance(data, dict) or data.get("v") != CONTINUE_VERSION:
        raise BadRequest("continue key is not valid: server does not recognize this encoded key")
    rv, start = data.get("rv"), data.get("start")
    if rv == -1:
        rv = 0  # kube's token for "continue at the latest revision", handed out after a 410
    elif not isinstance(rv, int) or isinstance(rv, bool) or rv <= 0:
        raise BadRequest(
            f"continue key is not valid: incorrect encoded start resourceVersion (version {CONTINUE_VERSION})"
        )
    if not isinstance(start, str) or not start:
        raise BadRequest("continue key is not valid: encoded start key empty")
    # As kube: the relative key must already be clean, so it cannot climb out of the prefix.
    rooted = start if start.startswith("/") else "/" + start
    if posixpath.normpath(rooted) != rooted or "/../" in rooted + "/":
        raise BadRequest(f"continue key is not valid: {start}")
    return prefix + start, rv
