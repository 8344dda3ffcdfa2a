"""Request-header authentication: the identity an authenticating front proxy asserts in X-Remote-* headers.

As kube's headerrequest authenticator: the headers count only on a connection whose client
certificate the request-header CA issued and whose CN is allowed (any CN when the allowed list is
empty); the checks on the certificate happen in the TLS layer (serving.ClientTrust) and in
Authenticator. The user is the first non-empty username header; groups are every non-empty value
of the group headers (not split on commas); extra keys are the rest of the header name after the
prefix, lower-cased and URL-unescaped.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from apiary_pb import envelope_pb2 as pb
from services.common.identity import AUTHENTICATED, UNAUTHENTICATED

ANONYMOUS = "system:anonymous"
DEFAULT_USERNAME_HEADERS = ("X-Remote-User",)
DEFAULT_UID_HEADERS = ("X-Remote-Uid",)
DEFAULT_GROUP_HEADERS = ("X-Remote-Group",)
DEFAULT_EXTRA_PREFIXES = ("X-Remote-Extra-",)

_HEX = frozenset(b"0123456789abcdefABCDEF")


def header_text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def unescape_extra_key(key: str) -> str:
    """url.PathUnescape, keeping the key as it is when it is not valid %-encoding."""
    if "%" not in key:
        return key
    raw = key.encode("utf-8")
    i = raw.find(b"%")
    while i != -1:
        if i + 2 >= len(raw) or raw[i + 1] not in _HEX or raw[i + 2] not in _HEX:
            return key
        i = raw.find(b"%", i + 3)
    return unquote_to_bytes(raw).decode("utf-8", "replace")


def with_authenticated_group(groups: list[str], name: str) -> list[str]:
    """group.AuthenticatedGroupAdder: every authenticated user but anonymous is in system:authenticated."""
    if name == ANONYMOUS or AUTHENTICATED in groups or UNAUTHENTICATED in groups:
        return groups
    return [*groups, AUTHENTICATED]


def _names(headers: Iterable[str]) -> tuple[bytes, ...]:
    out = []
    for h in headers:
        h = h.strip()
        if not h:
            raise ValueError(f"empty header {h!r}")
        out.append(h.lower().encode("latin-1"))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class RequestHeaderConfig:
    """The --requestheader-* flags, header names lower-cased as ASGI delivers them."""

    username_headers: tuple[bytes, ...]
    uid_headers: tuple[bytes, ...]
    group_headers: tuple[bytes, ...]
    extra_prefixes: tuple[bytes, ...]
    allowed_names: frozenset[str]

    @classmethod
    def from_flags(cls, username_headers: Sequence[str] = DEFAULT_USERNAME_HEADERS,
                   uid_headers: Sequence[str] = DEFAULT_UID_HEADERS,
                   group_headers: Sequence[str] = DEFAULT_GROUP_HEADERS,
                   extra_prefixes: Sequence[str] = DEFAULT_EXTRA_PREFIXES,
                   allowed_names: Iterable[str] = ()) -> RequestHeaderConfig:
        return cls(_names(username_headers), _names(uid_headers), _names(group_headers),
                   _names(extra_prefixes), frozenset(n for n in allowed_names if n))

    def allows(self, common_name: str) -> bool:
        return not self.allowed_names or common_name in self.allowed_names

    def user(self, headers: Sequence[tuple[bytes, bytes]]) -> pb.UserInfo | None:
        """The asserted identity; None when no username header has a value (then headers say nothing)."""
        name = self._first(headers, self.username_headers)
        if not name:
            return None
        uid = self._first(headers, self.uid_headers)
        groups = [header_text(v) for h in self.group_headers for k, v in headers if k == h and v]
        user = pb.UserInfo(name=name, uid=uid, groups=with_authenticated_group(groups, name))
        for prefix in self.extra_prefixes:
            for k, v in headers:
                if k.startswith(prefix) and len(k) > len(prefix):
                    key = unescape_extra_key(header_text(k[len(prefix):]))
                    user.extra[key].values.append(header_text(v))
        return user

    @staticmethod
    def _first(headers: Sequence[tuple[bytes, bytes]], names: tuple[bytes, ...]) -> str:
        for name in names:
            for k, v in headers:
                if k == name:
                    if v:
                        return header_text(v)
                    break  # http.Header.Get: the first value of that header, even when empty
        return ""
