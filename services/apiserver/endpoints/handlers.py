"""The verbs (k8s.io/apiserver endpoints/handlers): one request in, JSON out.

Each verb decodes what it needs once (request.Decoder), hands the generic store its admission and
validation as functions, and renders the answer: objects by splicing their envelope's JSON, lists
through lists.py, Tables through printers.

What differs between servers is given at construction: the storage (the registry's gRPC client, the
kit's in-process backend), admission, the kinds' OpenAPI definitions, the checks after a strategy's
validation, the subresources served by REST objects of their own, registered by their kind
(`subresources`: pods/binding, serviceaccounts/token; /scale, ScaleREST, for every kind that lists it), and
the kinds whose storage is more than their strategy over the generic Store (installers: a Store with hooks
or, for a virtual kind such as a review, verbs of its own).
"""
from __future__ import annotations

import asyncio
import copy
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import orjson

from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from apiary_pb import storage_pb2 as spb
from services.common import envelope, errors, tracing
from services.common.decoding import parse_int64
from services.common.errors import BadRequest

from .. import fieldmanager, printers
from .. import patch as patches
from .. import validation as v
from ..catalogue import Catalogue
from ..registry.rest import Strategy, strategy_for
from ..registry.scope import Obj, Scope, ValidateFunc, ensure_namespace, options_invalid
from ..registry.store import Storage, Store
from ..resource import ResourceInfo
from ..typed import Parser
from . import lists
from .request import (
    INLINE_DECODE_BYTES,
    Decoder,
    Definitions,
    Request,
    Response,
    check_list_options,
    check_options,
    delete_options,
    go_value,
    resolve,
)
from .scale import ScaleREST


def deleted_status(info: ResourceInfo, deleted: pb.Object) -> bytes:
    """kube's Store.finalizeDelete: the Status that says an object is gone, naming it (the "kind" of
    its details is the resource, as kube sets it) so a client can tell it was not left waiting."""
    details = {"name": deleted.metadata.name, "group": info.group, "kind": info.plural,
               "uid": deleted.metadata.uid}
    return orjson.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                         "details": {k: v for k, v in details.items() if v}})


Verb = Callable[[Request], Awaitable[Response]]

# The handler's span, by verb: kube's endpoints handlers name theirs after the operation.
SPAN_NAMES = {"get": "Get", "list": "List", "create": "Create", "update": "Update", "patch": "Patch",
              "delete": "Delete", "deletecollection": "DeleteCollection"}


def span_attributes(req: rpb.APIRequest) -> dict[str, str]:
    """What a handler's span says of its request (kube's traceFields, and what the request names)."""
    attrs = {"audit-id": req.audit_id, "verb": req.verb, "resource": req.resource, "group": req.group,
             "version": req.version, "namespace": req.namespace, "name": req.name,
             "subresource": req.subresource, "client": req.user_agent}
    return {k: v for k, v in attrs.items() if v}


class ListStorage(Storage, Protocol):
    """What the verbs read besides the Store's storage: lists, whole, as JSON items, or in parts."""

    async def list(self, info: ResourceInfo, req: spb.ListRequest,
                   timing: dict[str, float] | None = None) -> spb.ListResponse: ...

    async def list_raw(self, info: ResourceInfo, req: spb.ListRequest,
                       timing: dict[str, float] | None = None) -> spb.RawListResponse: ...

    def list_parts(self, info: ResourceInfo, req: spb.ListRequest,
                   timing: dict[str, float] | None = None) -> AsyncIterator[bytes]:
        """A chunked list's parts as storage makes them (wire.ListParts): a serialized RawListResponse
        (the list's metadata; every item too when it is the only part), then the items' JSON itself,
        comma-led after the first items."""
        ...


S = TypeVar("S", bound=ListStorage)


class Admission(Protocol):
    """Admission of one write (kube's admission.Interface for one operation): the mutating phase before
    the store, the validating one passed down to it."""

    async def admit(self, r: Scope, name: str, obj: Obj | None, old: pb.Object | None) -> Obj | None: ...

    async def validate(self, r: Scope, name: str, obj: pb.Object | None, old: pb.Object | None) -> None: ...


# The admission of one write: (operation, its options as admission plugins see them) -> its phases.
AdmissionFactory = Callable[[str, Obj], Admission]
# A check after the strategy's validation, before validating admission: (scope, object, old, its envelope).
ObjectValidator = Callable[[Scope, Obj, Obj | None, pb.Object], Awaitable[None]]


class NoAdmission:
    """A server without admission plugins: every write admitted as it is."""

    async def admit(self, r: Scope, name: str, obj: Obj | None, old: pb.Object | None) -> Obj | None:
        return obj

    async def validate(self, r: Scope, name: str, obj: pb.Object | None, old: pb.Object | None) -> None:
        return None


def options_json(r: Scope, kind: str) -> Obj:
    """CreateOptions/UpdateOptions/PatchOptions as admission plugins see them."""
    out: Obj = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
    if r.dry_run:
        out["dryRun"] = ["All"]
    if r.field_manager:
        out["fieldManager"] = r.field_manager
    fv = r.req.query.get("fieldValidation")
    if fv:
        out["fieldValidation"] = fv
    return out


class SubresourceStorage(Protocol):
    """A subresource served by a REST object of its own (kube's storage map: "pods/binding": BindingREST):
    the verbs it serves."""

    verbs: Mapping[str, Verb]


@dataclass(frozen=True)
class KindStorage:
    """One kind's storage, assembled at install: its strategy, its Store (with the kind's hooks) and the
    subresources served by REST objects of their own, by name; the others (status, finalize,
    ephemeralcontainers) are the kind's own verbs under its subresource strategy. A virtual kind (a
    review) is served by its own verbs only."""
    strategy: Strategy
    store: Store
    subresources: dict[str, SubresourceStorage] = field(default_factory=dict)
    verbs: dict[str, Verb] = field(default_factory=dict)


Installer = Callable[[KindStorage], KindStorage]


class Handlers(Generic[S]):
    def __init__(self, catalogue: Catalogue, store: S, definitions: Definitions,
                 admission: AdmissionFactory | None = None, *, validators: Sequence[ObjectValidator] = (),
                 scale: Strategy | None = None) -> None:
        self.catalogue = catalogue
        self.store = store               # the storage: lists and watches read it directly
        self.definitions = definitions
        self.typed = Parser(definitions.ALL)
        self.generic = Store(store, self._manage_fields)  # kube's generic Store: the writes of kinds without hooks
        self.admission = admission
        self.validators = tuple(validators)
        self.scale = scale               # the Scale kind of /scale subresources (autoscaling/v1), if served
        self.decoder = Decoder(catalogue)
        self._storage: dict[ResourceInfo, KindStorage] = {}
        # the subresources served by REST objects of their own, by their kind's group and resource, then by name:
        # the server registers its own (the registry's pods/binding, pods/eviction, serviceaccounts/token)
        self.subresources: dict[tuple[str, str], dict[str, SubresourceStorage]] = {}
        # the kinds whose storage is more than their strategy over the generic Store, by group and resource: the
        # server adds its own (the registry's Services and reviews), which take these handlers
        self.installers: dict[tuple[str, str], Installer] = {}
        self.verbs: dict[str, Verb] = {
            "get": self.get, "list": self.list, "create": self.create, "update": self.update,
            "patch": self.patch, "delete": self.delete, "deletecollection": self.delete_collection,
        }
        catalogue.subscribe(self._catalogue_changed)

    # Entry point ---------------------------------------------------------------

    def storage(self, info: ResourceInfo) -> KindStorage:
        """The kind's storage, assembled on first use (the catalogue may grow while the server runs)."""
        storage = self._storage.get(info)
        if storage is None:
            storage = self._storage[info] = self._install(info)
        return storage

    def _install(self, info: ResourceInfo) -> KindStorage:
        """The kind's strategy over the generic Store, /scale served for every kind whose definition lists
        it (kube's ScaleREST), the subresources registered for the kind, then what its installer adds."""
        storage = KindStorage(strategy_for(info), self.generic)
        if info.subresource("scale") is not None and self.scale is not None:
            storage.subresources["scale"] = ScaleREST(self, self.scale)
        storage.subresources.update(self.subresources.get((info.group, info.plural), {}))
        install = self.installers.get((info.group, info.plural))
        return storage if install is None else install(storage)

    def _catalogue_changed(self, catalogue: Catalogue) -> None:
        """A kind no longer served keeps no storage."""
        served = set(catalogue.resources)
        self._storage = {info: s for info, s in self._storage.items() if info in served}

    def strategy(self, info: ResourceInfo) -> Strategy:
        return self.storage(info).strategy

    def _manage_fields(self, r: Scope, obj: Obj, old: Obj | None) -> None:
        """The field manager's record of an Update (the Store's ManageFields): what r's manager changed, other
        versions' entries read through the kind's conversions."""
        fieldmanager.for_resource(self.typed, r.schema_name, r.info, self.catalogue.field_paths(r.info)).update(
            old, obj, r.update_manager, r.req.subresource)

    def rest(self, r: Request) -> Store:
        """The Store of the request's kind."""
        return self.storage(r.info).store

    def request(self, req: rpb.APIRequest, verb: str) -> Request:
        return resolve(self.catalogue, self.definitions, self.strategy, req, verb)

    async def handle(self, req: rpb.APIRequest) -> tuple[Response, dict[str, float]]:
        """The request's verb, in a span named as kube's handlers name theirs ("Create", "List", ...)."""
        if not tracing.recording():
            return await self._handle(req)
        with tracing.span(SPAN_NAMES.get(req.verb, req.verb), span_attributes(req)) as span:
            try:
                resp, timing = await self._handle(req)
            except errors.APIError as e:
                if span is not None:
                    span.set_attribute("code", e.code)
                raise
            if span is not None:
                span.set_attribute("code", resp.code)
            return resp, timing

    async def _handle(self, req: rpb.APIRequest) -> tuple[Response, dict[str, float]]:
        verb = req.verb
        r = self.request(req, verb)
        strategy = self.strategy(r.info)
        if deprecated := strategy.deprecation_warning:
            r.warnings.append(deprecated)
        if not req.subresource:
            strategy.refuse(verb)
        fn: Verb | None = self.verbs.get(verb)
        if r.info.virtual:
            fn = self.storage(r.info).verbs.get(verb)
        elif req.subresource:
            own = self.storage(r.info).subresources.get(req.subresource)
            if own is not None:
                fn = own.verbs.get(verb)
        if fn is None:
            raise errors.MethodNotAllowed("the server does not allow this method on the requested resource")
        check_options(r, verb)
        try:
            resp = await fn(r)
        except errors.APIError as e:  # refused: the request's warnings and audit annotations go with it
            e.warnings, e.audit_annotations = r.warnings + e.warnings, {**r.audit_annotations,
                                                                        **e.audit_annotations}
            raise
        resp.warnings = r.warnings + resp.warnings
        resp.audit_annotations.update(r.audit_annotations)
        return resp, r.timing

    # Admission and the checks after the strategy's validation, passed down to the store ----------

    def admission_for(self, operation: str, options: Obj) -> Admission:
        return NoAdmission() if self.admission is None else self.admission(operation, options)

    def validation(self, admission: Admission) -> ValidateFunc:
        """The server's checks after the strategy's validation (the registry's RBAC escalation, as
        registry/rbac's policybased storage makes it), then validating admission."""
        async def validate(r: Scope, name: str, obj: Obj | None, old: Obj | None, env: pb.Object | None,
                           old_env: pb.Object | None) -> None:
            if obj is not None and env is not None:
                for check in self.validators:
                    await check(r, obj, old, env)
            await admission.validate(r, name, env, old_env)
        return validate

    # Reads -----------------------------------------------------------------------

    async def get(self, r: Request) -> Response:
        env = await self.rest(r).get(r, r.req.name, r.query.get("resourceVersion", ""))
        if r.req.table:
            t = printers.table(self.catalogue.convertor(r.info.group, r.info.plural), [env],
                               {"resourceVersion": env.metadata.resource_version},
                               r.query.get("includeObject", "Metadata"))
            return Response(200, orjson.dumps(t))
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
        check_list_options(r, watch=False)
        include = r.query.get("includeObject", "Metadata")
        if info.conversion is not None:
            # storage's pre-rendered JSON is the storage version's: a kind served in several versions (or
            # groups) has each item converted to this one (the storage client does)
            resp = await self.store.list(info, self.list_request(r), r.timing)
            items = list(resp.items)
            if not r.req.table:
                return Response(200, lists.from_envelopes(info, lists.list_meta(resp), items))
            t = printers.table(self.catalogue.convertor(info.group, info.plural), items, lists.list_meta(resp),
                               include)
            return Response(200, orjson.dumps(t))
        # Storage answers with the items' JSON, rendered once per object version in its watch cache; a
        # Table's rows are made from it, part by part.
        req = self.list_request(r)
        req.json, req.kind, req.api_version = True, info.kind, info.api_version
        render: Callable[[bytes], bytes] | None = None
        head: Callable[[Obj], bytes] = functools.partial(lists.head, info)
        if r.req.table:
            convertor = self.catalogue.convertor(info.group, info.plural)
            render = functools.partial(printers.json_rows, convertor, include_object=include)
            head = functools.partial(printers.table_head, convertor)
        if not r.req.chunked:
            raw = await self.store.list_raw(info, req, r.timing)
            items = raw.json_items if render is None else render(raw.json_items)
            return Response(200, b"".join((head(lists.list_meta(raw)), items, lists.END)))
        # In parts, passed on as they arrive: the next process starts on the first while the rest
        # is still on its way (mux.Streamed).
        req.chunked = True
        parts = self.store.list_parts(info, req, r.timing)
        first = spb.RawListResponse.FromString(await anext(parts))
        items = first.json_items if render is None else render(first.json_items)
        return Response(200, head(lists.list_meta(first)) + items, more=lists.rest_of(parts, render))

    # Create ----------------------------------------------------------------------

    async def create(self, r: Request) -> Response:
        obj = await self.decoder.decode(r, r.req.body)
        env = await self.create_object(r, obj)
        return Response(201, envelope.to_json(env))

    async def create_object(self, r: Request, obj: Obj, operation: str = fieldmanager.UPDATE) -> pb.Object:
        """Mutating admission (here, as kube's create handler runs it), then the store's create with
        validating admission passed down."""
        ensure_namespace(r, obj)
        admission = self.admission_for("CREATE", options_json(r, "CreateOptions"))
        obj = await admission.admit(r, obj["metadata"].get("name") or "", obj, None) or obj
        return await self.rest(r).create(r, obj, self.validation(admission), operation)

    # Update and patch ------------------------------------------------------------------

    async def update_object(self, r: Request, transform: Callable[[Obj], Obj],
                      operation: str = fieldmanager.UPDATE) -> tuple[int, pb.Object]:
        # a patch is admitted with UpdateOptions, as kube's patchToUpdateOptions gives its admission attributes
        options = options_json(r, "UpdateOptions")
        admission = self.admission_for("UPDATE", options)
        return await self.rest(r).update(r, transform, admission.admit, self.validation(admission), operation)

    async def update(self, r: Request) -> Response:
        obj = await self.decoder.decode(r, r.req.body)
        ensure_namespace(r, obj)
        body_name = obj["metadata"].get("name") or ""
        if body_name != r.req.name:
            raise BadRequest(f"the name of the object ({body_name}) does not match the name on the URL "
                             f"({r.req.name})")

        def transform(current: Obj) -> Obj:
            return copy.deepcopy(obj)

        code, env = await self.update_object(r, transform)
        return Response(code, envelope.to_json(env))

    async def patch(self, r: Request) -> Response:
        ptype = patches.patch_type(r.req.content_type)
        if ptype == patches.STRATEGIC_MERGE_PATCH and not r.strategy.strategic_merge_patch:
            # custom resources have no patch strategies (as kube's CR handler answers)
            raise errors.UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")
        causes: list[v.Cause] = []
        if ptype == patches.APPLY_PATCH and not r.field_manager:
            causes.append(v.required("fieldManager", "is required for apply patch"))
        if ptype != patches.APPLY_PATCH and r.query.get("force"):
            causes.append(v.forbidden("force", "may not be specified for non-apply patch"))
        if causes:
            raise options_invalid("PatchOptions", causes)
        schema_name = r.schema_name
        manager = fieldmanager.for_resource(self.typed, schema_name, r.info, self.catalogue.field_paths(r.info))
        force = r.query.get("force") == "true"
        applied: Obj | None = None
        with tracing.step("decode"):
            body = r.req.body
            if len(body) <= INLINE_DECODE_BYTES:
                doc = patches.decode_patch(body, ptype)
            else:
                doc = await asyncio.to_thread(patches.decode_patch, body, ptype)
            if ptype == patches.APPLY_PATCH:
                if not isinstance(doc, dict):
                    raise BadRequest("error decoding YAML: the applied configuration must be an object")
                applied = self.decoder.check_object(r, copy.deepcopy(doc), canonical=False)
                applied_name = applied["metadata"].get("name") or ""
                if applied_name and applied_name != r.req.name:
                    raise BadRequest(f"the name of the object ({applied_name}) does not match the name on the "
                                     f"URL ({r.req.name})")
                applied["metadata"]["name"] = r.req.name
                ensure_namespace(r, applied)
                if not r.req.subresource:
                    # the reset fields (status) of the main resource are nobody's to apply (IgnoredFields)
                    for f in r.strategy.status_fields:
                        applied.pop(f, None)
                applied_rv = applied["metadata"].get("resourceVersion")

        def apply(current: Obj | None) -> Obj:
            """Server-side apply: the field manager merges the applied configuration."""
            assert applied is not None
            with tracing.step("field manager", {"operation": fieldmanager.APPLY} if tracing.ENABLED else None):
                return manager.apply(current, applied, r.field_manager, r.req.subresource, force)

        def transform(current: Obj) -> Obj:
            if ptype == patches.JSON_PATCH:
                new = patches.apply_json_patch(current, doc)
            elif ptype == patches.MERGE_PATCH:
                new = patches.apply_merge_patch(current, doc)
            elif ptype == patches.STRATEGIC_MERGE_PATCH:
                new = patches.apply_strategic_merge_patch(current, doc, self.definitions.merge_keys(schema_name),
                                                          self.definitions.replaced_fields(schema_name))
            else:
                new = apply(current)
            if not isinstance(new, dict):
                raise BadRequest("the patched object is not a JSON object")
            if ptype == patches.STRATEGIC_MERGE_PATCH:
                return self.decoder.check_object(r, new, patch=lambda: go_value(doc))
            if ptype in (patches.MERGE_PATCH, patches.JSON_PATCH):
                return self.decoder.check_object(r, new, patch=lambda: orjson.dumps(new).decode())
            return self.decoder.check_object(r, new)

        if applied is not None:
            try:
                code, env = await self.update_object(r, transform, operation=fieldmanager.APPLY)
            except errors.NotFound:
                if applied_rv:
                    raise errors.conflict(r.info.plural, r.info.group, r.req.name, errors.MODIFIED) from None
                created = self.decoder.check_object(r, apply(None))
                env = await self.create_object(r, created, fieldmanager.APPLY)
                code = 201
        else:
            code, env = await self.update_object(r, transform)
        return Response(code, envelope.to_json(env))

    # Delete ----------------------------------------------------------------------------

    def _delete_admission(self, r: Request) -> tuple[Obj, Admission]:
        opts = delete_options(r)
        if "All" in (opts.get("dryRun") or []):
            r.req.query["dryRun"] = "All"
        return opts, self.admission_for("DELETE", opts)

    async def delete(self, r: Request) -> Response:
        opts, admission = self._delete_admission(r)
        env = await self.rest(r).delete(r, r.req.name, opts, admission.admit, self.validation(admission))
        if env.metadata.deletion_timestamp or r.info.return_deleted_object:
            # still there, marked for deletion (finalizers pending): kube answers the object
            return Response(200, envelope.to_json(env))
        return Response(200, deleted_status(r.info, env))

    async def delete_collection(self, r: Request) -> Response:
        opts, admission = self._delete_admission(r)
        deleted = await self.rest(r).delete_collection(r, opts, r.query.get("labelSelector", ""), r.field_selector,
                                                    admission.admit, self.validation(admission))
        return Response(200, lists.from_envelopes(r.info, {"resourceVersion": ""}, deleted))
