"""One API request as a server of the library serves it (kube's endpoints/handlers RequestScope and request
decoding): the resource and strategy it resolves to, its options, and the body decoded once.

The kinds' OpenAPI definitions are the server's (Definitions): Kubernetes' own for the registry
(services.apis.schemas), an aggregated server's own for its kinds."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Protocol

from apiary_pb import registry_pb2 as rpb
from services.common import errors, tracing
from services.common.decoding import loads_json, loads_json_fields, parse_int64
from services.common.errors import BadRequest
from services.common.selectors import FieldSelector

from .. import validation as v
from ..catalogue import Catalogue
from ..registry.rest import Strategy
from ..registry.scope import Obj, options_invalid
from ..resource import ResourceInfo

# Larger bodies are decoded in a thread (see Decoder.decode).
INLINE_DECODE_BYTES = 64 * 1024
NOT_FOUND_MESSAGE = "the server could not find the requested resource"
MAX_MANAGER_LENGTH = 128
_OPTIONS_KINDS = {"create": "CreateOptions", "update": "UpdateOptions", "patch": "PatchOptions",
                  "delete": "DeleteOptions", "deletecollection": "DeleteOptions"}


class Definitions(Protocol):
    """The OpenAPI definitions of the served kinds and what decoding and patching read in them (the
    module services.apis.schemas is one)."""

    @property
    def ALL(self) -> Mapping[str, dict[str, Any]]: ...  # the definitions by name

    def definition_for(self, group: str, version: str, kind: str) -> str: ...

    def check(self, obj: dict[str, Any], schema_name: str, kind: str) -> tuple[list[str], str | None]: ...

    def merge_keys(self, schema_name: str) -> dict[str, str]: ...

    def replaced_fields(self, schema_name: str) -> frozenset[str]: ...


@dataclass
class Response:
    code: int
    body: bytes
    warnings: list[str] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)
    # The body's continuation after `body`, in parts as they come (APIRequest.chunked lists).
    more: AsyncIterator[bytes] | None = None


@dataclass
class Request:
    """One API request with the state the verbs share: timing, warnings, dry-run (a rest.Scope)."""

    req: rpb.APIRequest
    info: ResourceInfo
    strategy: Strategy
    definitions: Definitions
    timing: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    admit: bool = True
    audit_annotations: dict[str, str] = field(default_factory=dict)
    no_validators: bool = False   # the mutating phase said no validating plugin applies

    @property
    def query(self) -> Any:
        return self.req.query

    @property
    def schema_name(self) -> str:
        """The kind's definition among the server's definitions, by its group, version and kind."""
        return self.definitions.definition_for(self.info.group, self.info.version, self.info.kind)

    @property
    def namespace(self) -> str:
        return self.req.namespace if self.info.namespaced else ""

    @property
    def dry_run(self) -> bool:
        return self.req.query.get("dryRun", "") == "All"

    @property
    def field_manager(self) -> str:
        return self.req.query.get("fieldManager", "")

    @property
    def update_manager(self) -> str:
        """The manager an Update is recorded under: fieldManager, else the User-Agent up to its first "/"
        (kube's prefixFromUserAgent, at most 128 characters)."""
        return self.field_manager or self.req.user_agent.split("/", 1)[0][:MAX_MANAGER_LENGTH]

    @property
    def field_selector(self) -> str:
        """The fieldSelector query; a field this kind cannot select on is a 400, as kube answers. A label's
        old name (a pod's spec.host) is converted to the field it stands for."""
        text = self.req.query.get("fieldSelector", "")
        if text:
            known, aliases = self.strategy.field_labels, self.strategy.field_label_aliases
            selector = FieldSelector.parse(text)
            for req in selector.requirements:
                if req.field not in known:
                    raise BadRequest(f"field label not supported: {req.field}")
            if any(req.field in aliases for req in selector.requirements):
                text = str(FieldSelector(tuple(replace(req, field=aliases.get(req.field, req.field))
                                               for req in selector.requirements)))
        return text

    def for_item(self, namespace: str) -> Request:
        req = self.req
        if self.info.namespaced and not self.namespace and namespace:
            req = rpb.APIRequest()
            req.CopyFrom(self.req)
            req.namespace = namespace
        return Request(req, self.info, self.strategy, self.definitions, self.timing, self.warnings, self.admit,
                       audit_annotations=self.audit_annotations)

    def as_body_kind(self, strategy: Strategy) -> Request:
        """A subresource whose body is a kind of its own (Scale, Binding, Eviction, TokenRequest), never
        admitted."""
        return Request(self.req, strategy.info, strategy, self.definitions, self.timing, self.warnings,
                       admit=False)


def resolve(catalogue: Catalogue, definitions: Definitions, strategy_of: Callable[[ResourceInfo], Strategy],
            req: rpb.APIRequest, verb: str) -> Request:
    """The resource, subresource and strategy a request names; 404 or 405 as kube's routes answer."""
    info = catalogue.lookup(req.group, req.version, req.resource)
    if info is None:
        raise errors.NotFound(NOT_FOUND_MESSAGE)
    strategy = strategy_of(info)
    if req.subresource:
        sub = info.subresource(req.subresource)
        if sub is None:
            raise errors.NotFound(NOT_FOUND_MESSAGE)
        allowed = sub.verbs
        strategy = strategy.for_subresource(req.subresource)
    else:
        allowed = info.verbs
    # kube's routes: POST on a collection only, PUT and PATCH on an object only (else 405)
    misrouted = (verb == "create" and req.name and not req.subresource) or (
        verb in ("update", "patch") and not req.name)
    if verb not in allowed or misrouted:
        raise errors.MethodNotAllowed("the server does not allow this method on the requested resource")
    return Request(req, info, strategy, definitions)


# Options -----------------------------------------------------------------------------------


def check_options(r: Request, verb: str) -> None:
    """dryRun and fieldValidation of a write, as kube's options validation answers them."""
    kind = _OPTIONS_KINDS.get(verb)
    if kind is None:
        return
    causes: list[v.Cause] = []
    dry = r.query.get("dryRun")
    if dry is not None and dry not in ("All", ""):
        causes.append(v.not_supported("dryRun", dry, ["All"]))
    fv = r.query.get("fieldValidation")
    if fv is not None and fv not in ("Ignore", "Strict", "Warn", ""):
        causes.append(v.not_supported("fieldValidation", fv, ["Ignore", "Strict", "Warn"]))
    if causes:
        raise options_invalid(kind, causes)


NOT_OLDER_THAN = "NotOlderThan"


def check_list_options(r: Request, watch: bool) -> None:
    """What kube's ValidateListOptions and its storage answer before reading: a continue token with a
    resourceVersion is a 400; sendInitialEvents only on a watch, with resourceVersionMatch=NotOlderThan (422)."""
    q = r.query
    rv, token, match = q.get("resourceVersion", ""), q.get("continue", ""), q.get("resourceVersionMatch", "")
    initial = q.get("sendInitialEvents")
    causes: list[v.Cause] = []
    if watch:
        if initial is not None and match != NOT_OLDER_THAN:
            causes.append(v.forbidden("resourceVersionMatch",
                                      f"sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}"))
        if match:
            if initial is None:
                causes.append(v.forbidden("resourceVersionMatch",
                                          "resourceVersionMatch is forbidden for watch unless sendInitialEvents is "
                                          "provided"))
            if match != NOT_OLDER_THAN:
                causes.append(v.not_supported("resourceVersionMatch", match, [NOT_OLDER_THAN]))
    elif initial is not None:
        causes.append(v.forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"))
    if causes:
        raise options_invalid("ListOptions", causes)
    if token and rv and rv != "0":
        raise BadRequest("specifying resource version is not allowed when using continue")


def delete_options(r: Request) -> Obj:
    """DeleteOptions from the body and the query (the query wins), validated."""
    opts: Obj = {}
    if r.req.body and r.req.body.strip():
        try:
            opts = loads_json(r.req.body)
        except ValueError as e:
            raise BadRequest(f"couldn't get version/kind; json parse error: {e}") from None
        if not isinstance(opts, dict):
            raise BadRequest("json: cannot unmarshal into Go value of type v1.DeleteOptions")
    q = r.query
    if "gracePeriodSeconds" in q:
        opts["gracePeriodSeconds"] = parse_int64(q["gracePeriodSeconds"])
    if q.get("propagationPolicy"):
        opts["propagationPolicy"] = q["propagationPolicy"]
    if q.get("dryRun"):
        opts["dryRun"] = [q["dryRun"]]
    if q.get("preconditions.uid") or q.get("preconditions.resourceVersion"):
        pre = opts.setdefault("preconditions", {})
        if q.get("preconditions.uid"):
            pre["uid"] = q["preconditions.uid"]
        if q.get("preconditions.resourceVersion"):
            pre["resourceVersion"] = q["preconditions.resourceVersion"]
    causes: list[v.Cause] = []
    policy = opts.get("propagationPolicy")
    if policy is not None and policy not in ("Orphan", "Background", "Foreground"):
        causes.append(v.not_supported("propagationPolicy", policy, ["Foreground", "Background", "Orphan",
                                                                    "nil"]))
    if opts.get("orphanDependents") is not None and policy is not None:
        causes.append(v.invalid("propagationPolicy", policy,
                                "orphanDependents and deletionPropagation cannot be both set"))
    for d in opts.get("dryRun") or []:
        if d != "All":
            causes.append(v.not_supported("dryRun", d, ["All"]))
    if causes:
        raise options_invalid("DeleteOptions", causes)
    opts["kind"], opts["apiVersion"] = "DeleteOptions", "meta.k8s.io/v1"
    return opts


# Decoding ----------------------------------------------------------------------------------


class Decoder:
    """The body into the request's kind: parsed once (here, not in the proxy, which passes JSON on as it
    came), checked against the URL's group/version/kind and the schema, canonicalized."""

    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue

    async def decode(self, r: Request, body: bytes) -> Obj:
        """The body as the request's kind (kube's "About to convert to expected version" to
        "Conversion done", a span of its own here)."""
        with tracing.step("decode"):
            return await self._decode(r, body)

    async def _decode(self, r: Request, body: bytes) -> Obj:
        # Go's decoder keeps the last of repeated fields, as orjson does; strict decoding names them.
        ignore = r.query.get("fieldValidation") == "Ignore"

        def parse() -> tuple[Any, list[str]]:
            return (loads_json(body), []) if ignore else loads_json_fields(body)
        try:
            if len(body) <= INLINE_DECODE_BYTES:
                obj, duplicates = parse()
            else:
                # orjson holds the GIL while it parses, but the walks after it yield to this loop
                obj, duplicates = await asyncio.to_thread(parse)
        except ValueError as e:
            raise BadRequest(f"couldn't get version/kind; json parse error: {e}") from None
        if not isinstance(obj, dict):
            raise BadRequest("couldn't get version/kind; json parse error: json: cannot unmarshal "
                             f"{type(obj).__name__} into Go value of type struct {{ APIVersion string "
                             '"json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }')
        return self.check_object(r, obj, duplicates)

    def check_object(self, r: Request, obj: Obj, duplicates: list[str] | None = None,
                     patch: Callable[[], str] | None = None, canonical: bool = True) -> Obj:
        """GVK against the URL, schema (types, unknown and duplicate fields per fieldValidation), then
        canonicalize (unless not canonical: an applied configuration owns what it says, not its defaults).
        A patched object (patch: how kube shows the patch) fails strict validation with a
        422 on the field "patch", as kube's patch handler answers."""
        info = r.info
        av, kind = obj.get("apiVersion") or "", obj.get("kind") or ""
        if av and av != info.api_version:
            raise BadRequest(f"the API version in the data ({av}) does not match the expected API version "
                             f"({info.api_version})")
        if kind and kind != info.kind:
            known = {x.kind for x in self.catalogue.in_group_version(info.group, info.version)}
            internal = "core" if not info.group else info.group.split(".")[0]
            if kind in known:
                why = f"converting ({info.version}.{kind}) to ({internal}.{info.kind}): unknown conversion"
            else:
                why = f'no kind "{kind}" is registered for version "{info.api_version}" in scheme ' \
                      f'"pkg/api/legacyscheme/scheme.go:30"'
            raise BadRequest(f'{kind} in version "{info.version}" cannot be handled as a {info.kind}: {why}')
        obj["apiVersion"], obj["kind"] = info.api_version, info.kind
        if obj.get("metadata") is None:
            obj["metadata"] = {}
        unknown, type_error = r.definitions.check(obj, r.schema_name, info.kind)
        if type_error:
            raise r.strategy.cannot_handle(type_error)
        if unknown or duplicates:
            mode = r.query.get("fieldValidation") or "Warn"
            problems = [f'duplicate field "{d}"' for d in duplicates or ()]
            problems += [f'unknown field "{u}"' for u in unknown]
            if mode == "Strict":
                why = "strict decoding error: " + ", ".join(problems)
                if patch is not None:
                    raise errors.invalid("", "", "", [v.invalid("patch", patch(), why)])
                raise BadRequest(why)
            if mode == "Warn":
                r.warnings.extend(problems)
            _drop_paths(obj, unknown)
        if canonical:
            r.strategy.canonicalize(obj)
        return obj


def go_value(value: Any) -> str:
    """A decoded JSON value as Go prints an interface{} with %+v: map[a:1 b:[x y]]."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_value(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_value(x) for x in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _go_float(float(value))
    return str(value)


def _go_float(f: float) -> str:
    """strconv.FormatFloat(f, 'g', -1, 64): shortest digits, exponent form from 1e+06 or below 1e-04."""
    if f == 0:
        return "0"
    d = Decimal(repr(f)).normalize()
    exp = d.adjusted()
    if exp < -4 or exp >= 6:
        digits = "".join(map(str, d.as_tuple().digits))
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{'-' if f < 0 else ''}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    return format(d, "f")


def _drop_paths(obj: Obj, paths: list[str]) -> None:
    """Drop unknown fields (kube's decoder does not keep them); only plain dotted paths."""
    for p in paths:
        if "[" in p:
            continue
        node: Any = obj
        parts = p.split(".")
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(parts[-1], None)
