"""The verbs (k8s.io/apiserver endpoints/handlers + registry/generic Store): one request in, JSON out."""
from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from apiary_pb import storage_pb2 as spb
from services.common import envelope, errors, identity
from services.common.decoding import loads_json, loads_json_fields, parse_int64
from services.common.errors import BadRequest
from services.common.selectors import FieldSelector

from . import patch as patches
from . import printers, schemas
from . import validation as v
from .admission import AdmissionClient
from .auth import AuthClient
from .catalogue import Catalogue, ResourceInfo
from .store import Store
from .strategies import Strategy, now_rfc3339, strategy_for
from .strategies.reviews import TOKEN_REQUEST, TokenRequestStrategy

log = logging.getLogger(__name__)

Obj = dict[str, Any]
GUARANTEED_UPDATE_ATTEMPTS = 16
# Larger bodies are decoded in a thread (see Handlers.decode).
INLINE_DECODE_BYTES = 64 * 1024
GENERATE_NAME_ATTEMPTS = 8
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
MAX_GENERATED_NAME_LENGTH = 63 - 5
NOT_FOUND_MESSAGE = "the server could not find the requested resource"
NAMESPACE_TERMINATING = ("The system is ensuring all content is removed from this namespace.  Upon completion, "
                         "this namespace will automatically be purged by the system.")


def generate_name(base: str) -> str:
    """names.SimpleNameGenerator: base (cut to 58) + 5 random characters."""
    return base[:MAX_GENERATED_NAME_LENGTH] + "".join(random.choice(NAME_ALPHABET) for _ in range(5))


@dataclass
class Response:
    code: int
    body: bytes
    warnings: list[str] = field(default_factory=list)
    # The body's continuation after `body`, in parts as they come (APIRequest.chunked lists).
    more: AsyncIterator[bytes] | None = None


@dataclass
class Request:
    """One API request with the state the verbs share: timing, warnings, dry-run."""

    req: rpb.APIRequest
    info: ResourceInfo
    strategy: Strategy
    timing: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    admit: bool = True
    no_validators: bool = False   # the mutating phase said no validating plugin applies

    @property
    def query(self) -> Any:
        return self.req.query

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
    def field_selector(self) -> str:
        """The fieldSelector query; a field this kind cannot select on is a 400, as kube answers."""
        text = self.req.query.get("fieldSelector", "")
        if text:
            known = self.strategy.field_labels
            for req in FieldSelector.parse(text).requirements:
                if req.field not in known:
                    raise BadRequest(f"field label not supported: {req.field}")
        return text


def _json(obj: Any) -> bytes:
    return orjson.dumps(obj)


def _options_invalid(kind: str, causes: list[v.Cause]) -> errors.Invalid:
    return errors.invalid(kind, "meta.k8s.io", "", causes)


class Handlers:
    def __init__(self, catalogue: Catalogue, store: Store, admission: AdmissionClient | None,
                 auth: AuthClient | None = None) -> None:
        self.catalogue = catalogue
        self.store = store
        self.admission = admission
        self.auth = auth
        self._strategies = {r: strategy_for(r) for r in catalogue.resources}

    def strategy(self, info: ResourceInfo) -> Strategy:
        return self._strategies[info]

    # Entry point ---------------------------------------------------------------

    def request(self, req: rpb.APIRequest, verb: str) -> Request:
        info = self.catalogue.lookup(req.group, req.version, req.resource)
        if info is None:
            raise errors.NotFound(NOT_FOUND_MESSAGE)
        strategy = self.strategy(info)
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
        return Request(req, info, strategy)

    async def handle(self, req: rpb.APIRequest) -> tuple[Response, dict[str, float]]:
        verb = req.verb
        r = self.request(req, verb)
        fn: Callable[[Request], Awaitable[Response]] | None = {
            "get": self.get, "list": self.list, "create": self.create, "update": self.update,
            "patch": self.patch, "delete": self.delete, "deletecollection": self.delete_collection,
        }.get(verb)
        if r.info.virtual:
            fn = self.review if verb == "create" else None
        elif req.subresource == "token" and r.info.kind == "ServiceAccount" and not r.info.group:
            fn = self.token_request if verb == "create" else None
        if fn is None:
            raise errors.MethodNotAllowed("the server does not allow this method on the requested resource")
        self._check_options(r, verb)
        resp = await fn(r)
        resp.warnings = r.warnings + resp.warnings
        return resp, r.timing

    def _check_options(self, r: Request, verb: str) -> None:
        kind = {"create": "CreateOptions", "update": "UpdateOptions", "patch": "PatchOptions",
                "delete": "DeleteOptions", "deletecollection": "DeleteOptions"}.get(verb)
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
            raise _options_invalid(kind, causes)

    # Decoding ------------------------------------------------------------------

    async def decode(self, r: Request, body: bytes) -> Obj:
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

    def check_object(self, r: Request, obj: Obj, duplicates: list[str] | None = None) -> Obj:
        """GVK against the URL, schema (types, unknown and duplicate fields per fieldValidation), then
        canonicalize."""
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
        unknown, type_error = schemas.check(obj, r.strategy.schema_name, info.kind)
        if type_error:
            raise r.strategy.cannot_handle(type_error)
        if unknown or duplicates:
            mode = r.query.get("fieldValidation") or "Warn"
            problems = [f'duplicate field "{d}"' for d in duplicates or ()]
            problems += [f'unknown field "{u}"' for u in unknown]
            if mode == "Strict":
                raise BadRequest("strict decoding error: " + ", ".join(problems))
            if mode == "Warn":
                r.warnings.extend(problems)
            _drop_paths(obj, unknown)
        r.strategy.canonicalize(obj)
        return obj

    def _set_namespace(self, r: Request, obj: Obj) -> None:
        """rest.EnsureObjectNamespaceMatchesRequestNamespace."""
        meta = obj["metadata"]
        want = r.namespace
        have = meta.get("namespace") or ""
        if have == want:
            return
        if not have or not want:
            if want:
                meta["namespace"] = want
            else:
                meta.pop("namespace", None)
            return
        raise BadRequest("the namespace of the provided object does not match the namespace sent on the request")

    # Admission -----------------------------------------------------------------

    async def _admit(self, r: Request, op: str, obj: Obj | None, old: Obj | None, name: str,
                     options: Obj) -> Obj | None:
        if not r.admit or self.admission is None:
            return obj
        obj, r.no_validators = await self.admission.admit(
            r.info, r.req.subresource, op, r.namespace, name, obj, old, r.req.user, r.dry_run, options,
            timing=r.timing, warnings=r.warnings)
        return obj

    async def _validate_admission(self, r: Request, op: str, obj: Obj | None, old: Obj | None, name: str,
                                  options: Obj) -> None:
        if not r.admit or self.admission is None or r.no_validators:
            return
        await self.admission.validate(r.info, r.req.subresource, op, r.namespace, name, obj, old, r.req.user,
                                      r.dry_run, options, timing=r.timing, warnings=r.warnings)

    def _options(self, r: Request, kind: str) -> Obj:
        out: Obj = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
        if r.dry_run:
            out["dryRun"] = ["All"]
        if r.field_manager:
            out["fieldManager"] = r.field_manager
        if r.query.get("fieldValidation"):
            out["fieldValidation"] = r.query["fieldValidation"]
        return out

    # RBAC escalation, reviews, TokenRequest ---------------------------------------

    async def _check_escalation(self, r: Request, obj: Obj, old: Obj | None) -> None:
        """registry/rbac's policybased storage: a Role or binding write may not grant more than the caller
        holds, unless the caller may escalate/bind (the auth service decides). Dry-run writes are checked too."""
        if not r.strategy.escalation_checked:
            return
        user = r.req.user
        # rbacregistry.EscalationAllowed: system:masters (the server's own loopback identity) may do anything.
        if identity.SYSTEM_MASTERS in user.groups:
            return
        if old is not None and _only_gc_fields(obj, old):
            return
        if self.auth is None:
            raise errors.ServiceUnavailable("the RBAC escalation check is unavailable: no auth service")
        allowed = await self.auth.check_escalation(user, r.namespace, r.info.kind, obj, r.timing)
        if not allowed:
            groups = "[" + " ".join(f'"{g}"' for g in user.groups) + "]"
            raise errors.forbidden(r.info.plural, r.info.group, (obj.get("metadata") or {}).get("name") or "",
                                   f'user "{user.name}" (groups={groups}) is attempting to grant RBAC '
                                   "permissions not currently held")

    def _auth(self) -> AuthClient:
        if self.auth is None:
            raise errors.ServiceUnavailable("the auth service is not configured")
        return self.auth

    async def review(self, r: Request) -> Response:
        """TokenReview, SelfSubjectReview and the access reviews: decoded here, answered by the auth service,
        never stored; kube runs no admission for them."""
        if r.info.namespaced and not r.namespace:
            # LocalSubjectAccessReview is only served under /namespaces/<ns>/.
            raise errors.NotFound(NOT_FOUND_MESSAGE)
        obj = await self.decode(r, r.req.body)
        self._set_namespace(r, obj)
        body = await self._auth().review(r.info, r.namespace, obj, r.req.user, r.timing)
        return Response(201, body)

    async def token_request(self, r: Request) -> Response:
        """serviceaccounts/<name>/token (kube's TokenREST.Create): the ServiceAccount must exist; the auth
        service signs the token."""
        tr = Request(r.req, TOKEN_REQUEST, TokenRequestStrategy(), r.timing, r.warnings, admit=False)
        obj = await self.decode(tr, r.req.body)
        meta = obj["metadata"]
        name, namespace = r.req.name, r.req.namespace
        for key, want, what in (("name", name, "name"), ("namespace", namespace, "namespace")):
            if meta.get(key) and meta[key] != want:
                raise errors.invalid(TOKEN_REQUEST.kind, TOKEN_REQUEST.group, name, [
                    v.invalid(f"metadata.{key}", meta[key], f"must match the service account {what} if specified")])
        sa = self._fill_kind(r.info, await self.store.get(r.info, namespace, name, timing=r.timing))
        causes = tr.strategy.validate(obj)
        if causes:
            raise errors.invalid(TOKEN_REQUEST.kind, TOKEN_REQUEST.group, "", causes)
        meta["name"], meta["namespace"] = name, namespace
        body = await self._auth().request_token(namespace, name, obj, sa, r.req.user, r.timing)
        return Response(201, body)

    # Envelopes -------------------------------------------------------------------

    def to_envelope(self, r: Request, obj: Obj) -> pb.Object:
        env = envelope.to_envelope(obj)
        env.fields.update(r.strategy.selectable_fields(obj))
        return env

    def _fill_kind(self, info: ResourceInfo, env: pb.Object) -> pb.Object:
        if not env.kind:
            env.kind, env.api_version = info.kind, info.api_version
        return env

    def _invalid(self, r: Request, obj: Obj, causes: list[v.Cause]) -> errors.Invalid:
        name = (obj.get("metadata") or {}).get("name") or ""
        return errors.invalid(r.info.kind, r.info.group, name, causes)

    # Reads -----------------------------------------------------------------------

    async def get(self, r: Request) -> Response:
        env = self._fill_kind(r.info, await self.store.get(
            r.info, r.namespace, r.req.name, r.query.get("resourceVersion", ""), r.timing))
        if r.req.table:
            t = printers.table(r.info.group, r.info.plural, [env],
                               {"resourceVersion": env.metadata.resource_version},
                               r.query.get("includeObject", "Metadata"))
            return Response(200, _json(t))
        return Response(200, envelope.to_json(env))

    def list_request(self, r: Request) -> spb.ListRequest:
        q = r.query
        limit_n = parse_int64(q.get("limit", "") or "0")
        return spb.ListRequest(
            prefix=r.info.collection_prefix(r.namespace), resource_version=q.get("resourceVersion", ""),
            resource_version_match=q.get("resourceVersionMatch", ""), limit=max(limit_n, 0),
            label_selector=q.get("labelSelector", ""), field_selector=r.field_selector,
            **{"continue": q.get("continue", "")},
        )

    async def list(self, r: Request) -> Response:
        info = r.info
        if r.req.table:
            resp = await self.store.list(info, self.list_request(r), r.timing)
            items = [self._fill_kind(info, e) for e in resp.items]
            t = printers.table(info.group, info.plural, items, _list_meta(resp),
                               r.query.get("includeObject", "Metadata"))
            return Response(200, _json(t))
        # Storage answers with the items' JSON, rendered once per object version in its watch cache.
        req = self.list_request(r)
        req.json, req.kind, req.api_version = True, info.kind, info.api_version
        if not r.req.chunked:
            raw = await self.store.list_raw(info, req, r.timing)
            return Response(200, _splice_json_list(info, _list_meta(raw), raw.json_items))
        # In parts, passed on as they arrive: the next process starts on the first while the rest
        # is still on its way (mux.Streamed).
        req.chunked = True
        parts = self.store.list_parts(info, req, r.timing)
        first = await anext(parts)
        head = _list_head(info, _list_meta(first))
        return Response(200, head + first.json_items, more=_rest(parts, bool(first.json_items)))

    @staticmethod
    def list_json(info: ResourceInfo, meta: Obj, items: list[pb.Object]) -> bytes:
        """Splice the items' JSON into the list without decoding their bodies."""
        return _splice_json_list(info, meta, b",".join(envelope.to_json(e) for e in items))

    # Create ----------------------------------------------------------------------

    async def create(self, r: Request) -> Response:
        obj = await self.decode(r, r.req.body)
        env = await self.create_object(r, obj)
        return Response(201, envelope.to_json(env))

    async def create_object(self, r: Request, obj: Obj, operation: str = "Update",
                            applied: Obj | None = None) -> pb.Object:
        """admission (mutating) -> PrepareForCreate, name, system fields -> Validate -> admission -> write."""
        self._set_namespace(r, obj)
        options = self._options(r, "CreateOptions")
        name = obj["metadata"].get("name") or ""
        obj = await self._admit(r, "CREATE", obj, None, name, options) or obj
        meta = obj.setdefault("metadata", {})
        for k in ("uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink",
                  "generation"):
            meta.pop(k, None)
        r.strategy.prepare_for_create(obj)
        generated = bool(meta.get("generateName")) and not meta.get("name")
        if generated:
            meta["name"] = generate_name(meta["generateName"])
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        self._record_manager(r, obj, None, operation, applied)
        causes = r.strategy.validate(obj)
        if causes:
            raise self._invalid(r, obj, causes)
        await self._check_escalation(r, obj, None)
        await self._validate_admission(r, "CREATE", obj, None, meta["name"], options)
        finish = await r.strategy.begin_create(self.store, obj, r.dry_run)
        created = False
        try:
            env = self.to_envelope(r, obj)
            if r.dry_run:
                return env
            for attempt in range(GENERATE_NAME_ATTEMPTS):
                try:
                    env = await self.store.create(r.info, env, r.timing)
                    created = True
                    return env
                except errors.AlreadyExists:
                    if not generated or attempt == GENERATE_NAME_ATTEMPTS - 1:
                        raise
                    env.metadata.name = generate_name(meta["generateName"])
                    env.fields["metadata.name"] = env.metadata.name
            raise AssertionError("unreachable")
        finally:
            if finish is not None:
                await finish(created)

    def _record_manager(self, r: Request, obj: Obj, old: Obj | None, operation: str,
                        applied: Obj | None) -> None:
        """managedFields: one entry per (manager, operation, subresource) naming the fields it set."""
        manager = r.field_manager
        if not manager:
            return
        meta = obj["metadata"]
        entries = [e for e in meta.get("managedFields") or []
                   if not (e.get("manager") == manager and e.get("operation") == operation
                           and (e.get("subresource") or "") == r.req.subresource)]
        if applied is not None:
            source = applied
        else:
            plain = {k: val for k, val in obj.items() if k != "metadata"}
            plain["metadata"] = {k: val for k, val in meta.items() if k != "managedFields"}
            if old is None:
                source = plain
            else:
                prev = {k: val for k, val in old.items() if k != "metadata"}
                prev["metadata"] = {k: val for k, val in (old.get("metadata") or {}).items()
                                    if k != "managedFields"}
                source = _non_null(patches.create_merge_patch(prev, plain))
        fields = patches.fields_v1(source, r.strategy.merge_keys)
        if not fields and applied is None:
            meta["managedFields"] = entries or meta.get("managedFields") or []
            if not meta["managedFields"]:
                meta.pop("managedFields")
            return
        entry: Obj = {"manager": manager, "operation": operation, "apiVersion": r.info.api_version,
                      "time": now_rfc3339(), "fieldsType": "FieldsV1", "fieldsV1": fields}
        if r.req.subresource:
            entry["subresource"] = r.req.subresource
        meta["managedFields"] = entries + [entry]

    # Update and patch ------------------------------------------------------------------

    async def update(self, r: Request) -> Response:
        obj = await self.decode(r, r.req.body)
        self._set_namespace(r, obj)
        body_name = obj["metadata"].get("name") or ""
        if body_name != r.req.name:
            raise BadRequest(f"the name of the object ({body_name}) does not match the name on the URL "
                             f"({r.req.name})")

        def transform(current: Obj) -> Obj:
            return copy.deepcopy(obj)

        code, env = await self.guaranteed_update(r, transform)
        return Response(code, envelope.to_json(env))

    async def patch(self, r: Request) -> Response:
        ptype = patches.patch_type(r.req.content_type)
        causes: list[v.Cause] = []
        if ptype == patches.APPLY_PATCH and not r.field_manager:
            causes.append(v.required("fieldManager", "is required for apply patch"))
        if ptype != patches.APPLY_PATCH and r.query.get("force"):
            causes.append(v.forbidden("force", "may not be specified for non-apply patch"))
        if causes:
            raise _options_invalid("PatchOptions", causes)
        body = r.req.body
        if len(body) <= INLINE_DECODE_BYTES:
            doc = patches.decode_patch(body, ptype)
        else:
            doc = await asyncio.to_thread(patches.decode_patch, body, ptype)
        merge_keys = r.strategy.merge_keys
        applied: Obj | None = None
        if ptype == patches.APPLY_PATCH:
            if not isinstance(doc, dict):
                raise BadRequest("error decoding YAML: the applied configuration must be an object")
            applied = self.check_object(r, copy.deepcopy(doc))
            applied_name = applied["metadata"].get("name") or ""
            if applied_name and applied_name != r.req.name:
                raise BadRequest(f"the name of the object ({applied_name}) does not match the name on the URL "
                                 f"({r.req.name})")
            applied["metadata"]["name"] = r.req.name
            self._set_namespace(r, applied)
            applied_rv = applied["metadata"].get("resourceVersion")

        def transform(current: Obj) -> Obj:
            if ptype == patches.JSON_PATCH:
                new = patches.apply_json_patch(current, doc)
            elif ptype == patches.MERGE_PATCH:
                new = patches.apply_merge_patch(current, doc)
            elif ptype == patches.STRATEGIC_MERGE_PATCH:
                new = patches.apply_strategic_merge_patch(current, doc, merge_keys)
            else:
                assert applied is not None
                new = patches.apply_configuration(current, applied, merge_keys)
            if not isinstance(new, dict):
                raise BadRequest("the patched object is not a JSON object")
            return self.check_object(r, new)

        if applied is not None:
            try:
                code, env = await self.guaranteed_update(r, transform, operation="Apply", applied=applied)
            except errors.NotFound:
                if applied_rv:
                    raise errors.conflict(r.info.plural, r.info.group, r.req.name, errors.MODIFIED) from None
                env = await self.create_object(r, copy.deepcopy(applied), "Apply", applied)
                code = 201
        else:
            code, env = await self.guaranteed_update(r, transform)
        return Response(code, envelope.to_json(env))

    async def guaranteed_update(self, r: Request, transform: Callable[[Obj], Obj], operation: str = "Update",
                                applied: Obj | None = None) -> tuple[int, pb.Object]:
        """Read, transform, validate, CAS write; retry on a storage conflict unless the caller pinned the RV."""
        info = r.info
        options = self._options(r, "PatchOptions" if r.req.verb == "patch" else "UpdateOptions")
        for attempt in range(GUARANTEED_UPDATE_ATTEMPTS):
            current_env = self._fill_kind(info, await self.store.get(info, r.namespace, r.req.name,
                                                                     timing=r.timing))
            current = envelope.from_envelope(current_env)
            cur_meta = current["metadata"]
            new = transform(copy.deepcopy(current))
            meta = new.setdefault("metadata", {})
            pinned = meta.get("resourceVersion") or ""
            if pinned and pinned != cur_meta.get("resourceVersion"):
                raise errors.conflict(info.plural, info.group, r.req.name, errors.MODIFIED)
            uid = meta.get("uid") or ""
            if uid and uid != cur_meta.get("uid"):
                raise errors.conflict(info.plural, info.group, r.req.name,
                                      f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                                      f"{cur_meta.get('uid', '')}")
            new = await self._admit(r, "UPDATE", new, current, r.req.name, options) or new
            meta = new.setdefault("metadata", {})
            self._before_update(r, new, current)
            self._record_manager(r, new, current, operation, applied)
            causes = r.strategy.validate_update(new, current)
            if causes:
                raise self._invalid(r, new, causes)
            await self._check_escalation(r, new, current)
            await self._validate_admission(r, "UPDATE", new, current, r.req.name, options)
            meta["resourceVersion"] = cur_meta.get("resourceVersion", "")
            # Storage marks a value encrypted by an older provider or key: kube rewrites it even unchanged.
            if _same(new, current) and "apiary.storage/stale-encryption" not in current_env.fields:
                return 200, current_env
            if r.dry_run:
                return 200, current_env if _same(new, current) else self.to_envelope(r, new)
            finish = None if _same(new, current) else await r.strategy.begin_update(self.store, new, current)
            env = current_env if _same(new, current) else self.to_envelope(r, new)
            written = False
            try:
                if self._should_delete(r.info, new):
                    deleted = await self.store.delete(info, r.namespace, r.req.name, cur_meta.get("uid", ""),
                                                      cur_meta.get("resourceVersion", ""), r.timing)
                    await r.strategy.after_delete(self.store, current)
                    return 200, self._fill_kind(info, deleted)
                env.metadata.resource_version = ""
                updated = await self.store.update(info, env, cur_meta.get("resourceVersion", ""), r.timing)
                written = True
                return 200, updated
            except errors.Conflict:
                if pinned or attempt == GUARANTEED_UPDATE_ATTEMPTS - 1:
                    raise
                log.debug("conflict updating %s %s; retrying", info.plural, r.req.name)
            finally:
                if finish is not None:
                    await finish(written)
        raise AssertionError("unreachable")

    def _before_update(self, r: Request, new: Obj, old: Obj) -> None:
        """rest.BeforeUpdate: system fields come from the old object; the strategy prepares the rest."""
        meta, old_meta = new["metadata"], old["metadata"]
        self._set_namespace(r, new)
        for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        meta.pop("selfLink", None)
        r.strategy.prepare_for_update(new, old)

    @staticmethod
    def _should_delete(info: ResourceInfo, obj: Obj) -> bool:
        """An object being deleted goes once its last finalizer is gone (namespaces: spec ones too)."""
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp") or meta.get("finalizers"):
            return False
        if info.plural == "namespaces" and not info.group:
            return not (obj.get("spec") or {}).get("finalizers")
        return True

    # Delete ----------------------------------------------------------------------------

    def delete_options(self, r: Request) -> Obj:
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
            raise _options_invalid("DeleteOptions", causes)
        opts["kind"], opts["apiVersion"] = "DeleteOptions", "meta.k8s.io/v1"
        return opts

    async def delete(self, r: Request) -> Response:
        opts = self.delete_options(r)
        if "All" in (opts.get("dryRun") or []):
            r.req.query["dryRun"] = "All"
        env = await self.delete_object(r, r.req.name, opts)
        return Response(200, envelope.to_json(env))

    async def delete_object(self, r: Request, name: str, opts: Obj) -> pb.Object:
        info = r.info
        pre = opts.get("preconditions") or {}
        for attempt in range(GUARANTEED_UPDATE_ATTEMPTS):
            current_env = self._fill_kind(info, await self.store.get(info, r.namespace, name, timing=r.timing))
            current = envelope.from_envelope(current_env)
            meta = current["metadata"]
            if pre.get("uid") and pre["uid"] != meta.get("uid"):
                raise errors.conflict(info.plural, info.group, name,
                                      f"Precondition failed: UID in precondition: {pre['uid']}, UID in object "
                                      f"meta: {meta.get('uid', '')}")
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
                raise errors.conflict(info.plural, info.group, name,
                                      f"Precondition failed: ResourceVersion in precondition: "
                                      f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                      f"{meta.get('resourceVersion', '')}")
            is_namespace = info.plural == "namespaces" and not info.group
            if is_namespace and meta.get("deletionTimestamp") and (current.get("spec") or {}).get("finalizers"):
                raise errors.conflict(info.plural, info.group, name, NAMESPACE_TERMINATING)
            await self._admit(r, "DELETE", None, current, name, opts)
            await self._validate_admission(r, "DELETE", None, current, name, opts)
            rv = meta.get("resourceVersion", "")
            pending = bool(meta.get("finalizers")) or (is_namespace and (current.get("spec") or {})
                                                       .get("finalizers"))
            try:
                if pending:
                    if meta.get("deletionTimestamp") and not is_namespace:
                        return current_env
                    marked = copy.deepcopy(current)
                    mm = marked["metadata"]
                    mm.setdefault("deletionTimestamp", now_rfc3339())
                    mm["deletionGracePeriodSeconds"] = 0
                    if is_namespace:
                        status = marked.get("status") or {}
                        status["phase"] = "Terminating"
                        marked["status"] = status
                    env = self.to_envelope(r, marked)
                    if r.dry_run:
                        return env
                    env.metadata.resource_version = ""
                    return await self.store.update(info, env, rv, r.timing)
                if r.dry_run:
                    return current_env
                deleted = self._fill_kind(info, await self.store.delete(info, r.namespace, name,
                                                                        meta.get("uid", ""), rv, r.timing))
                await r.strategy.after_delete(self.store, current)
                return deleted
            except errors.Conflict:
                if attempt == GUARANTEED_UPDATE_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def delete_collection(self, r: Request) -> Response:
        opts = self.delete_options(r)
        if "All" in (opts.get("dryRun") or []):
            r.req.query["dryRun"] = "All"
        listed = await self.store.list_all(r.info, r.info.collection_prefix(r.namespace),
                                           r.query.get("labelSelector", ""), r.field_selector)
        deleted: list[pb.Object] = []
        for item in listed:
            sub = Request(r.req, r.info, r.strategy, r.timing, r.warnings, r.admit)
            ns = item.metadata.namespace
            if r.info.namespaced and not r.namespace and ns:
                sub = Request(_with_namespace(r.req, ns), r.info, r.strategy, r.timing, r.warnings, r.admit)
            try:
                deleted.append(await self.delete_object(sub, item.metadata.name, opts))
            except errors.NotFound:
                continue
        return Response(200, self.list_json(r.info, {"resourceVersion": ""}, deleted))


def _list_meta(resp: spb.ListResponse | spb.RawListResponse) -> Obj:
    meta: Obj = {"resourceVersion": resp.resource_version}
    token = getattr(resp, "continue")
    if token:
        meta["continue"] = token
    if resp.HasField("remaining_item_count"):
        meta["remainingItemCount"] = resp.remaining_item_count
    return meta


def _splice_json_list(info: ResourceInfo, meta: Obj, items: bytes) -> bytes:
    """The list object around its items' JSON (comma-separated)."""
    return b"".join((_list_head(info, meta), items, b"]}"))


def _list_head(info: ResourceInfo, meta: Obj) -> bytes:
    """The list object up to its first item: `{"kind":...,"metadata":{...},"items":[`."""
    return _json({"kind": info.list_kind, "apiVersion": info.api_version, "metadata": meta})[:-1] + b',"items":['


async def _rest(parts: AsyncIterator[spb.RawListResponse], started: bool) -> AsyncIterator[bytes]:
    """The items after the first part, then the end of the list."""
    async with contextlib.aclosing(parts):
        async for part in parts:
            if part.json_items:
                yield b"," + part.json_items if started else part.json_items
                started = True
    yield b"]}"


def _with_namespace(req: rpb.APIRequest, ns: str) -> rpb.APIRequest:
    out = rpb.APIRequest()
    out.CopyFrom(req)
    out.namespace = ns
    return out


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


def _non_null(patch: Any) -> Any:
    if isinstance(patch, dict):
        return {k: _non_null(val) for k, val in patch.items() if val is not None}
    return patch


_GC_FIELDS = ("ownerReferences", "finalizers", "selfLink", "managedFields", "resourceVersion")


def _only_gc_fields(new: Obj, old: Obj) -> bool:
    """rbacregistry.IsOnlyMutatingGCFields: finalizers and owner references change without a new grant."""
    def strip(o: Obj) -> Obj:
        return dict(o, metadata={k: val for k, val in (o.get("metadata") or {}).items() if k not in _GC_FIELDS})
    return strip(new) == strip(old)


def _same(new: Obj, old: Obj) -> bool:
    """A no-op update is not written (kube skips the etcd write when the bytes are equal)."""
    a = dict(new, metadata={k: val for k, val in new["metadata"].items() if k != "managedFields"})
    b = dict(old, metadata={k: val for k, val in old["metadata"].items() if k != "managedFields"})
    return a == b
