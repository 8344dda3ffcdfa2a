"""RequestInfo: what a URL and method mean to the API, as kube's RequestInfoFactory parses them."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote

from .validation import is_valid_path_segment_name

API_PREFIXES = frozenset(("api", "apis"))
GROUPLESS_PREFIXES = frozenset(("api",))
SPECIAL_VERBS = frozenset(("proxy", "watch"))
SPECIAL_VERBS_NO_SUBRESOURCES = frozenset(("proxy",))
NAMESPACE_SUBRESOURCES = frozenset(("status", "finalize"))
READ_ONLY_VERBS = frozenset(("get", "list", "watch", "head", "options"))

_METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch",
                 "DELETE": "delete"}


@dataclass(slots=True)
class RequestInfo:
    path: str
    verb: str
    is_resource_request: bool = False
    api_prefix: str = ""
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    # The name from the URL itself; `name` may also come from a metadata.name field selector (for authz).
    path_name: str = ""
    # Set by the /watch/ prefix form (deprecated upstream, still served).
    watch_via_path: bool = False

    @property
    def read_only(self) -> bool:
        return self.verb in READ_ONLY_VERBS


def _split(path: str) -> list[str]:
    path = path.strip("/")
    return path.split("/") if path else []


def needs_raw_split(raw_path: bytes) -> bool:
    """Whether the raw path has an escaped slash, which the decoded path turns into a separator
    ("secrets/%2F" names the object "/", which is no list of secrets)."""
    return b"%2f" in raw_path.lower()


def split_raw(raw_path: bytes) -> list[str]:
    """The path's segments as sent, each unescaped on its own. Dot segments stay names, as kube's
    RequestInfoFactory leaves them (a namespace called ".." is a name with nothing in it)."""
    path = raw_path.decode("latin-1").strip("/")
    return [unquote(seg) for seg in path.split("/")] if path else []


def invalid_path_name(info: RequestInfo) -> str:
    """What storage's NamespaceKeyFunc answers (a 400) for a name that cannot be a path segment ("",
    when it can): asked after authorization, as kube's storage does."""
    name = info.path_name
    if not name or (name not in (".", "..") and "/" not in name and "%" not in name):
        return ""
    return f"Name parameter invalid: {json.dumps(name)}: {';'.join(is_valid_path_segment_name(name))}"


def parse_query(query_string: str | bytes) -> dict[str, str]:
    """Query parameters, first value of each (as kube's parameter codec reads them)."""
    if isinstance(query_string, bytes):
        query_string = query_string.decode("latin-1")
    out: dict[str, str] = {}
    if query_string:
        for k, v in parse_qsl(query_string, keep_blank_values=True):
            out.setdefault(k, v)
    return out


def _watch_param(value: str | None) -> bool:
    if value is None:
        return False
    # runtime.Convert_Slice_string_To_bool: only 0, f and false are false ("watch=" means true)
    return value.lower() not in ("false", "f", "0")


def _name_from_field_selector(selector: str) -> str:
    """metadata.name=<n> (or ==) as the only requirement gives the name, as RequiresExactMatch does."""
    terms = [t.strip() for t in selector.split(",") if t.strip()]
    if len(terms) != 1:
        return ""
    term = terms[0]
    for op in ("==", "="):
        key, sep, value = term.partition(op)
        if sep and "!" not in key:
            if key.strip() == "metadata.name":
                value = value.strip()
                # path.IsValidPathSegmentName
                if value not in (".", "..") and "/" not in value and "%" not in value:
                    return value
            return ""
    return ""


def parse(method: str, path: str, query: dict[str, str] | None = None,
          segments: list[str] | None = None) -> RequestInfo:
    """Parse like RequestInfoFactory.NewRequestInfo (segments: the path's, when split_raw made them).
    Raises ValueError for /watch without a resource."""
    info = RequestInfo(path=path, verb=method.lower())
    parts = _split(path) if segments is None else segments
    if len(parts) < 3 or parts[0] not in API_PREFIXES:
        return info
    info.api_prefix = parts[0]
    parts = parts[1:]
    if info.api_prefix not in GROUPLESS_PREFIXES:
        if len(parts) < 3:
            return info
        info.api_group = parts[0]
        parts = parts[1:]
    info.is_resource_request = True
    info.api_version = parts[0]
    parts = parts[1:]

    if parts[0] in SPECIAL_VERBS:
        if len(parts) < 2:
            raise ValueError(f"unable to determine kind and namespace from url, {path}")
        info.verb = parts[0]
        info.watch_via_path = parts[0] == "watch"
        parts = parts[1:]
    else:
        info.verb = _METHOD_VERBS.get(method.upper(), "")

    if parts[0] == "namespaces":
        if len(parts) > 1:
            info.namespace = parts[1]
            if len(parts) > 2 and parts[2] not in NAMESPACE_SUBRESOURCES:
                parts = parts[2:]
    info.parts = parts

    n = len(parts)
    if n >= 3 and info.verb not in SPECIAL_VERBS_NO_SUBRESOURCES:
        info.subresource = parts[2]
    if n >= 2:
        info.name = parts[1]
    if n >= 1:
        info.resource = parts[0]
    info.path_name = info.name

    if not info.name and info.verb == "get":
        query = query or {}
        info.verb = "watch" if _watch_param(query.get("watch")) else "list"
        fs = query.get("fieldSelector")
        if fs:
            info.name = _name_from_field_selector(fs)
    if not info.name and info.verb == "delete":
        info.verb = "deletecollection"
    return info
