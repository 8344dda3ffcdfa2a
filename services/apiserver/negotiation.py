"""Content negotiation: Accept parsing, request body decoding (JSON, YAML, patches), YAML output."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import yaml

from services.common.decoding import loads_json, yaml_to_json
from services.common.errors import NotAcceptable, UnsupportedMediaType

try:  # libyaml when available: an order of magnitude faster than the pure-Python codec
    _Dumper: Any = yaml.CSafeDumper
except AttributeError:  # pragma: no cover
    _Dumper = yaml.SafeDumper

JSON = "application/json"
YAML = "application/yaml"
PROTOBUF = "application/vnd.kubernetes.protobuf"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, APPLY_PATCH, STRATEGIC_MERGE_PATCH)

DISCOVERY_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
DISCOVERY_V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
_TABLE_VERSIONS = ("v1", "v1beta1")
_DISCOVERY_VERSIONS = ("v2", "v2beta1")


@dataclass(slots=True)
class MediaRange:
    type: str
    subtype: str
    params: dict[str, str] = field(default_factory=dict)
    q: float = 1.0

    @property
    def mime(self) -> str:
        return f"{self.type}/{self.subtype}"


def parse_media_type(value: str) -> MediaRange:
    head, *params = value.split(";")
    t, _, s = head.strip().lower().partition("/")
    mr = MediaRange(t, s)
    for p in params:
        k, sep, v = p.partition("=")
        if not sep:
            continue
        k = k.strip().lower()
        v = v.strip().strip('"')
        if k == "q":
            try:
                mr.q = float(v)
            except ValueError:
                mr.q = 0.0
        else:
            mr.params[k] = v
    return mr


def parse_accept(header: str) -> list[MediaRange]:
    """Media ranges in preference order: by q, then as listed."""
    ranges = [parse_media_type(p) for p in header.split(",") if p.strip()]
    ranges = [r for r in ranges if r.q > 0]
    ranges.sort(key=lambda r: -r.q)  # stable: equal q keeps the client's order
    return ranges


@dataclass(frozen=True, slots=True)
class Output:
    format: str = "json"  # json | yaml | protobuf
    table: bool = False
    # "PartialObjectMetadata" or "PartialObjectMetadataList" (as=...;g=meta.k8s.io): metadata only
    partial: str = ""
    partial_version: str = "v1"
    # For protobuf: the form to use for a kind without a message, when Accept allows one (client-go
    # asks "application/vnd.kubernetes.protobuf, application/json"); None means 406 for such kinds.
    fallback: Output | None = None

    @property
    def content_type(self) -> str:
        return YAML if self.format == "yaml" else PROTOBUF if self.format == "protobuf" else JSON

    @property
    def watch_content_type(self) -> str:
        return PROTOBUF + ";stream=watch" if self.format == "protobuf" else JSON

    @property
    def transforms(self) -> bool:
        """Whether the registry's JSON answer is rewritten here (anything but plain JSON or a Table)."""
        return self.format != "json" or bool(self.partial)


OUTPUT_JSON = Output()
_ACCEPTABLE = ("only the following media types are accepted: application/json, application/yaml, "
               "application/vnd.kubernetes.protobuf")
_PARTIAL_KINDS = ("PartialObjectMetadata", "PartialObjectMetadataList")
_PARTIAL_VERSIONS = ("v1", "v1beta1")


def _is_table(r: MediaRange) -> bool:
    return (r.params.get("as") == "Table" and r.params.get("g") == "meta.k8s.io"
            and r.params.get("v") in _TABLE_VERSIONS)


def _is_partial(r: MediaRange) -> bool:
    return (r.params.get("as") in _PARTIAL_KINDS and r.params.get("g") == "meta.k8s.io"
            and r.params.get("v") in _PARTIAL_VERSIONS)


def _output(ranges: list[MediaRange]) -> Output | None:
    for i, r in enumerate(ranges):
        wildcard = r.type == "*" or (r.type == "application" and r.subtype == "*")
        if wildcard:
            return OUTPUT_JSON
        if r.type != "application" or r.subtype not in ("json", "yaml", "vnd.kubernetes.protobuf"):
            continue
        fmt = "protobuf" if r.subtype == "vnd.kubernetes.protobuf" else r.subtype
        fallback = _output(ranges[i + 1:]) if fmt == "protobuf" else None
        if "as" in r.params:
            if _is_table(r) and fmt != "protobuf":  # kube's Table has no protobuf form
                return Output(fmt, True)
            if _is_partial(r):
                return Output(fmt, partial=r.params["as"], partial_version=r.params["v"], fallback=fallback)
            continue  # an unknown as=: the next range, or 406
        return Output(fmt, fallback=fallback)
    return None


def negotiate_output(accept: str) -> Output:
    """The response form for a resource request: JSON, YAML or protobuf, as a Table or as
    PartialObjectMetadata(List); JSON when Accept names none (or */*); 406 when it excludes them all."""
    if not accept or accept == JSON or accept == "*/*":
        return OUTPUT_JSON
    out = _output(parse_accept(accept))
    if out is None:
        raise NotAcceptable(_ACCEPTABLE)
    return out


def negotiate_discovery(accept: str) -> str | None:
    """'v2' or 'v2beta1' for aggregated discovery; None for the legacy documents."""
    if not accept:
        return None
    for r in parse_accept(accept):
        if r.type == "*" or (r.type == "application" and r.subtype == "*"):
            return None
        if r.mime != JSON:
            continue
        if "as" not in r.params:
            return None
        if (r.params.get("as") == "APIGroupDiscoveryList" and r.params.get("g") == "apidiscovery.k8s.io"
                and r.params.get("v") in _DISCOVERY_VERSIONS):
            return r.params["v"]
    raise NotAcceptable("only the following media types are accepted: application/json, " + DISCOVERY_V2)


def wants_json(accept: str) -> bool:
    """Whether a plain JSON document (discovery, OpenAPI, version) is acceptable."""
    if not accept:
        return True
    for r in parse_accept(accept):
        if r.type == "*" or (r.type == "application" and r.subtype in ("*", "json")):
            return True
    return False


# Request bodies -----------------------------------------------------------------


_PRETTY_AGENTS = (b"curl", b"Wget", b"Mozilla/5.0")
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\],:]|[^{}\[\],:"\s]+')


def wants_pretty(query: dict[str, str], user_agent: bytes) -> bool:
    """kube's isPrettyPrint: ?pretty=<bool> decides; without it, the agents of people (curl, Wget,
    browsers) get indented JSON."""
    pretty = query.get("pretty")
    if pretty:
        return pretty.lower() in ("1", "t", "true")
    return user_agent.startswith(_PRETTY_AGENTS)


def indent_json(body: bytes) -> bytes:
    """The body as json.MarshalIndent(obj, "", "  ") writes it, its strings left byte for byte as
    they were encoded (their escapes included)."""
    out: list[bytes] = []
    depth = 0
    tokens = [m.group() for m in _JSON_TOKEN.finditer(body)]
    for i, tok in enumerate(tokens):
        if tok in (b"{", b"["):
            out.append(tok)
            if i + 1 < len(tokens) and tokens[i + 1] in (b"}", b"]"):
                continue
            depth += 1
            out.append(b"\n" + b"  " * depth)
        elif tok in (b"}", b"]"):
            if out and out[-1] not in (b"{", b"["):
                depth -= 1
                out.append(b"\n" + b"  " * depth)
            out.append(tok)
        elif tok == b",":
            out.append(b",\n" + b"  " * depth)
        elif tok == b":":
            out.append(b": ")
        else:
            out.append(tok)
    return b"".join(out)


def json_to_yaml(body: bytes) -> bytes:
    """Block-style YAML with the keys in the order the JSON gave them."""
    obj = orjson.loads(body)
    out = yaml.dump(obj, Dumper=_Dumper, default_flow_style=False, sort_keys=False, allow_unicode=True)
    return out.encode()


def _maybe_json(body: bytes) -> bool:
    head = body.lstrip()[:1]
    return head in (b"{", b"[")


def _unsupported(accepted: tuple[str, ...]) -> UnsupportedMediaType:
    return UnsupportedMediaType(
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted))


_OBJECT_TYPES = (JSON, YAML, PROTOBUF)
# A server's protobuf serializer: (body, the kind the URL expects) -> the object as JSON.
ProtobufDecoder = Callable[[bytes, str], bytes]


def decode_body(verb: str, content_type: str, body: bytes, into: str = "",
                protobuf: ProtobufDecoder | None = None) -> tuple[bytes, str]:
    """The body as JSON, and the media type to hand the registry.

    Object bodies (create, update, delete options) come as JSON, YAML or Kubernetes protobuf (the
    kinds typed clients send, decoded by `protobuf`, the server's serializer for its kinds; without
    one, protobuf is refused as any unknown type); patches name their type. `into` is the kind the
    URL expects (for kube's error messages). A JSON body is passed on as it came, not parsed: the
    registry decodes it, once, with the same limits and messages. Only what is not JSON is converted
    here (YAML, protobuf, and an apply patch, which must be parsed to tell JSON from YAML).
    CPU-bound: the proxy calls it through its BodyDecoder, which keeps large bodies off the event loop.
    """
    media = content_type.split(";", 1)[0].strip().lower() if content_type else ""
    if verb == "patch":
        if media not in PATCH_TYPES:
            raise _unsupported(PATCH_TYPES)
        if media == APPLY_PATCH:
            if _maybe_json(body):
                try:
                    loads_json(body)
                    return body, media
                except ValueError:
                    pass
            return yaml_to_json(body), media
        return body, media
    if not body:
        return body, media or JSON
    if not media:
        media = JSON
    if media == JSON:
        return body, JSON
    if media == YAML:
        return yaml_to_json(body), JSON
    if media == PROTOBUF and protobuf is not None:
        return protobuf(body, into), JSON
    raise _unsupported(_OBJECT_TYPES)
