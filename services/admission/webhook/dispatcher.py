"""MutatingAdmissionWebhook and ValidatingAdmissionWebhook: the webhooks of every configuration, in
kube's order (configurations by name, webhooks in their order), matched, called and answered as
kube's generic webhook dispatchers do.

Mutating webhooks run one after another, each seeing the object as the previous one left it; a
webhook with reinvocationPolicy IfNeeded is called once more when a later webhook or a plugin (a
mutating policy) changed the object after it (reinvocation.py: the chain's second pass). Validating webhooks are called in parallel. A webhook that cannot be called follows its
failurePolicy: Fail answers 500 `Internal error occurred: failed calling webhook "<name>": ...`,
Ignore lets the request through (counted in apiserver_admission_webhook_fail_open_count).
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
import uuid
from typing import Any

import jsonpatch
import orjson
from prometheus_client import Counter, Histogram

from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver.resource import ResourceInfo
from services.common import cel, tracing
from services.common.errors import APIError, BadRequest, InternalError
from services.common.identity import user_dict
from services.common.informer import Informer
from services.common.metrics import KubeCounter
from services.common.serviceresolver import ServiceResolver

from .. import authz
from ..attributes import Attributes, in_version
from ..namespaces import InformerNamespaceLister
from ..plugin import Plugin, PluginConfig
from .caller import CallError, WebhookCaller
from .matching import Webhook

log = logging.getLogger(__name__)
GROUP = "admissionregistration.k8s.io"
_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10, 25)

WEBHOOK_DURATION = Histogram(
    "apiserver_admission_webhook_admission_duration_seconds",
    "Admission webhook latency histogram in seconds, identified by name and broken out for each operation "
    "and API resource and type (validate or admit).", ["name", "type", "operation", "rejected"],
    buckets=_BUCKETS)
# kube's names end in _count, not _total: KubeCounter serves them as kube does (services/common/metrics.py)
WEBHOOK_REJECTIONS = KubeCounter(
    "apiserver_admission_webhook_rejection_count",
    "Admission webhook rejection count, identified by name and broken out for each admission type (validating "
    "or admit) and operation. Additional labels specify an error type (calling_webhook_error or "
    "apiserver_internal_error if an error occurred; no_error otherwise) and optionally a non-zero rejection "
    "code if the webhook rejects the request with an HTTP status code (honored by the apiserver when the code "
    "is greater or equal to 400). Codes greater than 600 are truncated to 600, to keep the metrics "
    "cardinality bounded.", ["name", "type", "operation", "error_type", "rejection_code"])
WEBHOOK_REQUESTS = Counter(
    "apiserver_admission_webhook_request_total",
    "Admission webhook request total, identified by name and broken out for each admission type (validating "
    "or mutating) and operation. Additional labels specify whether the request was rejected or not and an "
    "HTTP status code. Codes greater than 600 are truncated to 600, to keep the metrics cardinality bounded.",
    ["name", "type", "operation", "code", "rejected"])
WEBHOOK_FAIL_OPEN = KubeCounter(
    "apiserver_admission_webhook_fail_open_count",
    "Admission webhook fail open count, identified by name and broken out for each admission type "
    "(validating or admit).", ["name", "type"])


class Sources:
    """What both webhook plugins read, shared by them: the configurations, namespaces (labels for the
    namespace selector) and Services with their endpoints (clientConfig.service)."""

    def __init__(self, registry: rgrpc.RegistryStub) -> None:
        self.mutating = Informer(registry, GROUP, "v1", "mutatingwebhookconfigurations")
        self.validating = Informer(registry, GROUP, "v1", "validatingwebhookconfigurations")
        self.namespaces = InformerNamespaceLister(registry)
        services = Informer(registry, "", "v1", "services")
        endpoints = Informer(registry, "", "v1", "endpoints")
        slices = Informer(registry, "discovery.k8s.io", "v1", "endpointslices")
        self._service_informers = (services, endpoints, slices)
        self.caller = WebhookCaller(ServiceResolver(services, endpoints, slices))
        self._hooks: dict[bool, list[Webhook] | None] = {True: None, False: None}
        self.mutating.add_handler(lambda *_: self._hooks.__setitem__(True, None))
        self.validating.add_handler(lambda *_: self._hooks.__setitem__(False, None))
        self._users = 0

    def hooks(self, mutating: bool) -> list[Webhook]:
        """Every webhook of one kind, prepared (selectors parsed, conditions compiled) once per change."""
        hooks = self._hooks[mutating]
        if hooks is None:
            informer = self.mutating if mutating else self.validating
            hooks = []
            for cfg in sorted(informer.store.values(), key=lambda o: o["metadata"].get("name") or ""):
                cfg_name = cfg["metadata"].get("name") or ""
                hooks += [Webhook.build(spec, cfg_name, mutating) for spec in cfg.get("webhooks") or []]
            self._hooks[mutating] = hooks
        return hooks

    def synced(self) -> bool:
        return self.mutating.synced.is_set() and self.validating.synced.is_set() and self.namespaces.synced()

    async def start(self) -> None:
        self._users += 1
        if self._users > 1:
            return
        for inf in (self.mutating, self.validating, *self._service_informers):
            inf.start()
        await self.namespaces.start()

    async def stop(self) -> None:
        self._users -= 1
        if self._users > 0:
            return
        for inf in (self.mutating, self.validating, *self._service_informers):
            await inf.stop()
        await self.namespaces.stop()
        await self.caller.clients.aclose()


_SOURCES: dict[int, Sources] = {}


def sources_for(registry: rgrpc.RegistryStub) -> Sources:
    s = _SOURCES.get(id(registry))
    if s is None:
        s = _SOURCES[id(registry)] = Sources(registry)
    return s


class Invocation:
    """One request as the webhooks matched in one version see it: the AdmissionReview request and the CEL
    variables, each built once (again only when a mutating webhook changed the object). target: the definition
    of another version or group sharing the request's storage that the webhooks' rules named (matchPolicy
    Equivalent): kind, resource and objects are given in its version, requestKind and requestResource stay
    the request's (kube's VersionedAttributes)."""

    def __init__(self, a: Attributes, target: ResourceInfo | None = None) -> None:
        self.a = a
        self.v = in_version(a, target)  # what the webhooks see: kind, resource and objects in their version
        self._activations: dict[bool, Any] = {}
        self._options: Any = None
        self.checks: authz.Checks | None = None  # the user's authorization checks, made for every webhook

    @property
    def object(self) -> dict[str, Any] | None:
        return self.v.object

    def set_object(self, obj: dict[str, Any]) -> None:
        """A webhook's patched object (in this invocation's version) becomes the request's."""
        self.v.set_object(obj)

    def request(self) -> dict[str, Any]:
        a, v = self.a, self.v
        kind = {"group": v.group, "version": v.version, "kind": v.kind}
        resource = {"group": v.group, "version": v.version, "resource": v.resource}
        obj = v.object
        name = a.name or ((obj or {}).get("metadata") or {}).get("name") or ""
        if self._options is None:
            self._options = orjson.loads(a.request.options) if a.request.options else None
        req: dict[str, Any] = {
            "uid": str(uuid.uuid4()), "kind": kind, "resource": resource,
            "requestKind": {"group": a.group, "version": a.version, "kind": a.kind},
            "requestResource": {"group": a.group, "version": a.version, "resource": a.resource}, "name": name,
            "namespace": a.namespace, "operation": a.operation, "userInfo": user_dict(a.user), "object": obj,
            "oldObject": v.old_object, "dryRun": a.dry_run, "options": self._options}
        if a.subresource:
            req["subResource"] = req["requestSubResource"] = a.subresource
        return req

    def activation(self, authorizer: bool = False) -> Any:
        """The matchConditions' variables (object, oldObject, request, and authorizer when asked for)
        with kube's CEL libraries."""
        act = self._activations.get(authorizer)
        if act is None:
            values = {"object": self.v.object, "oldObject": self.v.old_object, "request": self.request()}
            functions = cel.KUBE_LIBRARY
            if authorizer:
                if self.checks is None:
                    self.checks = authz.Checks(self.a.user)
                functions = authz.bind(values, functions, self.a, self.checks)
            act = self._activations[authorizer] = cel.activation(values, functions)
        return act

    def object_changed(self) -> None:
        self._activations.clear()


class Invocations:
    """The request's invocations, one per version its webhooks are called in (the request's own first)."""

    def __init__(self, a: Attributes) -> None:
        self.a = a
        self._by_target: dict[int, Invocation] = {}

    def get(self, target: ResourceInfo | None) -> Invocation:
        key = id(target)
        inv = self._by_target.get(key)
        if inv is None:
            inv = self._by_target[key] = Invocation(self.a, target)
        return inv

    def object_changed(self) -> None:
        for inv in self._by_target.values():
            inv.object_changed()


class WebhookPlugin(Plugin):
    mutating = False
    step = "validating"
    step_name = "validating"  # as kube's span names say it

    def __init__(self, sources: Sources) -> None:
        self.sources = sources

    async def start(self) -> None:
        await self.sources.start()

    async def stop(self) -> None:
        await self.sources.stop()

    def ready(self) -> bool:
        return self.sources.synced()

    def handles(self, operation: str) -> bool:
        return any(operation in h.operations or "*" in h.operations for h in self.sources.hooks(self.mutating))

    async def _namespace_labels(self, a: Attributes) -> dict[str, str] | None:
        if a.group == "" and a.resource == "namespaces":
            obj = a.object if a.object is not None else a.old_object
            return ((obj or {}).get("metadata") or {}).get("labels") or {}
        if not a.namespace:
            return None
        ns = self.sources.namespaces.get(a.namespace)
        if ns is None:
            try:
                ns = await self.sources.namespaces.live_get(a.namespace)
            except APIError as e:
                raise InternalError(f"Internal error occurred: {e.message}") from None
            if ns is None:
                raise InternalError(f'Internal error occurred: namespaces "{a.namespace}" not found')
        return (ns.get("metadata") or {}).get("labels") or {}

    async def matching(self, a: Attributes, invs: Invocations) -> list[tuple[Webhook, Invocation]]:
        """The webhooks this request goes to, each with the invocation of the version it is called in; a match
        condition's error follows the failure policy."""
        out: list[tuple[Webhook, Invocation]] = []
        ns_labels: Any = ...
        for h in self.sources.hooks(self.mutating):
            if h.rules_match(a):
                inv = invs.get(None)
            else:
                target = h.equivalent(a)
                if target is None:
                    continue
                inv = invs.get(target)
            if not h.object_matches(a):
                continue
            if not h.namespace_selector.empty:
                if ns_labels is ...:
                    ns_labels = await self._namespace_labels(a)
                if not h.namespace_matches(a, ns_labels):
                    continue
            if h.conditions:
                if h.uses_authorizer:
                    act = inv.activation(authorizer=True)
                    matched, error = await authz.settle(inv.checks, lambda h=h, act=act: h.conditions_match(act))
                else:
                    matched, error = h.conditions_match(inv.activation())
                if error:
                    self._failed(h, a, CallError(h.name, f"failed to evaluate match condition: {error}"))
                    continue
                if not matched:
                    continue
            out.append((h, inv))
        return out

    def _failed(self, h: Webhook, a: Attributes, err: CallError) -> None:
        """A webhook that could not be called: Ignore goes on (counted), Fail rejects with 500."""
        WEBHOOK_REJECTIONS.labels(h.name, self.step, a.operation, "calling_webhook_error", "0").inc()
        if h.failure_policy == "Ignore":
            log.warning("%s; failurePolicy Ignore, request goes on", err)
            WEBHOOK_FAIL_OPEN.labels(h.name, self.step).inc()
            return
        raise InternalError(f"Internal error occurred: {err}", details={"causes": [{"message": str(err)}]})

    async def call(self, h: Webhook, a: Attributes, inv: Invocation) -> dict[str, Any] | None:
        """The webhook's response when it allowed the request; None when it could not be called and the
        failure policy ignores that. Raises the rejection or the call's failure. In a span of its own, named
        as kube's dispatchers name theirs (the HTTP call's span is its child)."""
        if not tracing.recording():
            return await self._call(h, a, inv)
        with tracing.span(f"Call {self.step_name} webhook", {
                "configuration": h.configuration, "webhook": h.name, "resource": a.resource,
                "subresource": a.subresource, "operation": a.operation}):
            return await self._call(h, a, inv)

    async def _call(self, h: Webhook, a: Attributes, inv: Invocation) -> dict[str, Any] | None:
        if a.dry_run and h.spec.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise BadRequest(f'admission webhook "{h.name}" does not support dry run')
        t0 = time.perf_counter()
        rejected = "false"
        code = "0"
        try:
            try:
                response = await self.sources.caller.call(h.spec, inv.request())
            except CallError as e:
                code = str(min(e.code, 600)) if e.code else "0"
                rejected = "true" if h.failure_policy == "Fail" else "false"
                self._failed(h, a, e)
                return None
            code = "200"
            for w in response.get("warnings") or []:
                if isinstance(w, str) and w:
                    a.warnings.append(w)
            for k, v in (response.get("auditAnnotations") or {}).items():
                a.audit_annotations.setdefault(f"{h.name}/{k}", str(v))
            if response.get("allowed") is not True:
                rejected = "true"
                err = rejection(h.name, response.get("status"))
                WEBHOOK_REJECTIONS.labels(h.name, self.step, a.operation, "no_error", str(min(err.code, 600))).inc()
                raise err
            return response
        finally:
            WEBHOOK_DURATION.labels(h.name, self.step, a.operation, rejected).observe(time.perf_counter() - t0)
            WEBHOOK_REQUESTS.labels(h.name, self.step, a.operation, code, rejected).inc()


def rejection(webhook: str, status: Any) -> APIError:
    """kube's webhookerrors.ToStatusErr: the webhook's Status with at least 400 and the webhook named."""
    st = dict(status) if isinstance(status, dict) else {}
    code = st.get("code") if isinstance(st.get("code"), int) else 0
    code = max(code, 400)
    denied = f'admission webhook "{webhook}" denied the request'
    if st.get("message"):
        message = f"{denied}: {st['message']}"
    elif st.get("reason"):
        message = f"{denied}: {st['reason']}"
    else:
        message = f"{denied} without explanation"
    details = st.get("details") if isinstance(st.get("details"), dict) else None
    return APIError(message, code=code, reason=st.get("reason") or "", details=details)


class MutatingAdmissionWebhook(WebhookPlugin):
    name = "MutatingAdmissionWebhook"
    mutating = True
    step = "admit"
    step_name = "mutating"

    async def admit(self, a: Attributes) -> None:
        if not self.sources.hooks(True):
            return
        invs = Invocations(a)
        hooks = await self.matching(a, invs)
        if not hooks:
            return
        rc = a.reinvocation
        mine = rc.plugin(self.name)
        mine.begin(rc, a.object)
        round_ = 1 if rc.is_reinvoke else 0
        try:
            for i, (h, inv) in enumerate(hooks):
                key = (h.configuration, h.name)  # names are unique within a configuration
                if not mine.should_call(rc, key):
                    continue
                changed = await self._mutate(h, a, inv, round_, i)
                if changed:
                    invs.object_changed()
                mine.called(rc, key, changed, h.spec.get("reinvocationPolicy") == "IfNeeded")
        finally:
            mine.end(a.object)

    async def _mutate(self, h: Webhook, a: Attributes, inv: Invocation, round_: int, index: int) -> bool:
        """Call one mutating webhook and apply its patch; whether the object changed (recorded for the audit
        event as kube's mutation.webhook.admission.k8s.io/round_<round>_index_<index> annotation)."""
        response = await self.call(h, a, inv)
        if response is None:
            return False
        changed = await self._apply(h, a, inv, response)
        a.audit_annotations[f"mutation.webhook.admission.k8s.io/round_{round_}_index_{index}"] = orjson.dumps(
            {"configuration": h.configuration, "webhook": h.name, "mutated": changed}).decode()
        return changed

    async def _apply(self, h: Webhook, a: Attributes, inv: Invocation, response: dict[str, Any]) -> bool:
        if not response.get("patch"):
            return False
        if response.get("patchType") != "JSONPatch":
            pt = response.get("patchType")
            why = ("webhook returned response.patch but not response.patchType" if not pt
                   else f"webhook returned invalid response.patchType of {pt!r}")
            raise InternalError(f"Internal error occurred: {why}")
        obj = inv.object  # in the version the webhook was called in
        if obj is None:
            return False
        try:
            ops = orjson.loads(base64.b64decode(response["patch"], validate=True))
            patched = jsonpatch.JsonPatch(ops).apply(obj, in_place=False)
        except (binascii.Error, ValueError, TypeError, jsonpatch.JsonPatchException,
                jsonpatch.JsonPointerException) as e:
            raise InternalError(f"Internal error occurred: {e}") from None
        problem = invalid_result(obj, patched)
        if problem:
            raise InternalError(f"Internal error occurred: {problem}")
        if patched == obj:
            return False
        inv.set_object(patched)
        return True


def invalid_result(before: dict[str, Any], after: Any) -> str:
    """Why a patched object cannot be decoded as the request's kind ("" when it can)."""
    if not isinstance(after, dict):
        return "the patched object is not a JSON object"
    for key in ("apiVersion", "kind"):
        if after.get(key) != before.get(key):
            return f"the patch changed {key} from {before.get(key)!r} to {after.get(key)!r}"
    meta = after.get("metadata")
    if not isinstance(meta, dict):
        return "the patched object has no metadata"
    for key in ("labels", "annotations"):
        m = meta.get(key)
        if m is not None and (not isinstance(m, dict) or not all(isinstance(v, str) for v in m.values())):
            return f"json: cannot unmarshal metadata.{key}: expected a map of strings"
    return ""


class ValidatingAdmissionWebhook(WebhookPlugin):
    name = "ValidatingAdmissionWebhook"
    step = "validating"

    async def validate(self, a: Attributes) -> None:
        if not self.sources.hooks(False):
            return
        hooks = await self.matching(a, Invocations(a))
        if not hooks:
            return
        results = await asyncio.gather(*(self.call(h, a, inv) for h, inv in hooks), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r


def mutating_factory(config: PluginConfig, registry: rgrpc.RegistryStub | None) -> MutatingAdmissionWebhook:
    if registry is None:
        raise ValueError("MutatingAdmissionWebhook needs the registry (--registry-address)")
    return MutatingAdmissionWebhook(sources_for(registry))


def validating_factory(config: PluginConfig, registry: rgrpc.RegistryStub | None) -> ValidatingAdmissionWebhook:
    if registry is None:
        raise ValueError("ValidatingAdmissionWebhook needs the registry (--registry-address)")
    return ValidatingAdmissionWebhook(sources_for(registry))
