"""MutatingAdmissionPolicy: CEL mutations of admissionregistration.k8s.io/v1 policies (also served as v1beta1
and v1alpha1), applied through their bindings (kube's admission/plugin/policy/mutating), in the mutating
phase before webhooks.

A mutation is a JSONPatch expression (a list of JSONPatch{op, path, value}, applied in order) or an
ApplyConfiguration expression (an Object{...} merged into the object: maps merged key by key, everything
else replaced, as server-side apply treats atomic lists). Each policy sees the object as the ones before
it left it. An expression that fails, or a patch that does not apply, follows failurePolicy. A policy with
reinvocationPolicy IfNeeded is applied once more when a later policy or webhook changed the object
(reinvocation.py), keyed by policy, binding and param object as kube keys its invocations."""
from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver.catalogue import Catalogue
from services.common import cel
from services.common.errors import APIError, forbidden

from ..attributes import Attributes
from ..informers import InformerFactory, shared_informers
from ..plugin import ALL_OPERATIONS, Plugin, PluginConfig
from ..policy import (
    CompiledPolicy,
    EvalError,
    Expression,
    PolicySource,
    context,
    evaluate_variables,
    match_conditions,
    policy_span,
)


class Mutation:
    __slots__ = ("expression", "patch_type")

    def __init__(self, m: dict[str, Any]) -> None:
        self.patch_type = m.get("patchType") or ""
        field = "jsonPatch" if self.patch_type == "JSONPatch" else "applyConfiguration"
        self.expression = Expression(cel.struct_literals_as_maps((m.get(field) or {}).get("expression") or ""))

    def apply(self, obj: dict[str, Any], ctx: Any) -> dict[str, Any]:
        value = self.expression.evaluate(ctx)
        if self.patch_type == "JSONPatch":
            if not isinstance(value, list):
                raise EvalError(f"JSONPatch expression must return a list, got {type(value).__name__}")
            try:
                return jsonpatch.apply_patch(obj, value)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError) as e:
                raise EvalError(f"JSON Patch: {e}") from None
        if not isinstance(value, dict):
            raise EvalError(f"ApplyConfiguration expression must return an Object, got {type(value).__name__}")
        return merge(copy.deepcopy(obj), value)


def merge(obj: dict[str, Any], applied: dict[str, Any]) -> dict[str, Any]:
    for k, v in applied.items():
        if isinstance(v, dict) and isinstance(obj.get(k), dict):
            merge(obj[k], v)
        else:
            obj[k] = copy.deepcopy(v)
    return obj


def body_expressions(spec: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(Mutation(m or {}) for m in spec.get("mutations") or ())


class MutatingAdmissionPolicy(Plugin):
    name = "MutatingAdmissionPolicy"
    operations = ALL_OPERATIONS

    def __init__(self, informers: InformerFactory) -> None:
        self.informers = informers
        self.source = PolicySource(informers, "v1", "MutatingAdmissionPolicy", body_expressions)

    def set_catalogue(self, catalogue: Catalogue) -> None:
        """The server's kinds: paramKind (kube's plug-in initializer gives a RESTMapper)."""
        self.source.catalogue = catalogue

    async def start(self) -> None:
        self.informers.start()

    async def stop(self) -> None:
        await self.informers.stop()

    def ready(self) -> bool:
        return self.source.synced()

    def handles(self, operation: str) -> bool:
        return operation in self.operations and bool(self.source.bindings.store)

    async def admit(self, a: Attributes) -> None:
        if a.object is None:
            return  # DELETE and CONNECT carry no object to mutate
        rc = a.reinvocation
        mine = rc.plugin(self.name)
        mine.begin(rc, a.object)
        try:
            for cp, b, namespace, seen in self.source.matching(a):
                with policy_span(self.name, cp.name, b.name):
                    try:
                        for params in await self.source.params(cp, b, a):
                            key = (cp.name, b.name, param_key(params))
                            if not mine.should_call(rc, key):
                                continue
                            changed = self._mutate(cp, seen, namespace, params)
                            mine.called(rc, key, changed, cp.reinvocation_policy == "IfNeeded")
                    except EvalError as e:
                        if cp.failure_policy == "Fail":
                            raise denial(a, cp, b.name, str(e)) from None
        finally:
            mine.end(a.object)

    @staticmethod
    def _mutate(cp: CompiledPolicy, a: Attributes, namespace: Any, params: Any) -> bool:
        """Apply the policy's mutations; whether they changed the object."""
        ctx = context(a, namespace, params, cp.needs)
        if not match_conditions(cp, ctx):
            return False
        evaluate_variables(cp, ctx)
        before = obj = a.object
        for m in cp.body:
            assert obj is not None
            obj = m.apply(obj, ctx)
            ctx.update({"object": cp.needs.prune("object", obj)})
        if obj is before or obj is None or obj == before:
            return False
        a.set_object(obj)
        return True


def param_key(params: Any) -> tuple[str, str]:
    """Which param object a call used (kube keys a policy's invocations by policy, binding and param)."""
    meta = (params or {}).get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def denial(a: Attributes, cp: CompiledPolicy, binding: str, why: str) -> APIError:
    return forbidden(a.resource, a.group, a.name_for_errors(),
                     f"policy '{cp.name}' with binding '{binding}' denied request: {why}")


def factory(config: PluginConfig, registry: rgrpc.RegistryStub | None) -> MutatingAdmissionPolicy:
    return MutatingAdmissionPolicy(shared_informers(registry))
