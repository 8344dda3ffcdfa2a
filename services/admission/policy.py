"""What validating and mutating admission policies share (kube's admission/plugin/policy/generic): the
policies and bindings from informers, each policy compiled once per generation, which (policy, binding,
params) apply to a request, and the CEL variables they are evaluated with.

A request that no binding's policy matches costs the rule checks only (no CEL, no object decoding
beyond what a selector needs)."""
from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from services.apiserver.catalogue import Catalogue
from services.common import cel, tracing
from services.common.informer import Informer
from services.common.selectors import label_selector_from_dict

from . import authz
from .attributes import Attributes, in_version
from .informers import InformerFactory
from .matching import MatchResources

Obj = dict[str, Any]
GROUP = "admissionregistration.k8s.io"
PARAMS_SYNC_WAIT = 10.0  # seconds a request waits for a new paramKind's informer (kube's admission.Handler wait)
VARIABLES = ("object", "oldObject", "request", "params", "namespaceObject", "variables", "authorizer")


def policy_span(kind: str, policy: str, binding: str) -> contextlib.AbstractContextManager[Any]:
    """One (policy, binding)'s evaluation in a span of its own, a child of its plug-in's."""
    return tracing.span("admission policy",
                        {"kind": kind, "policy": policy, "binding": binding} if tracing.ENABLED else None)


class Expression:
    """One compiled expression, or its compile error (kube keeps both and fails at evaluation)."""

    __slots__ = ("error", "program", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.program: cel.Program | None = None
        self.error = ""
        try:
            self.program = cel.compile_expression(text, VARIABLES)
        except cel.CELCompileError as e:
            self.error = f"compilation failed: {e}"

    def evaluate(self, ctx: Any) -> Any:
        """The value; raises EvalError with kube's text."""
        if self.program is None:
            raise EvalError(self.error)
        try:
            return self.program.evaluate(ctx)
        except cel.CELEvalError as e:
            raise EvalError(f"expression '{self.text}' resulted in error: {e}") from None


class EvalError(Exception):
    pass


def resource_for_kind(catalogue: Catalogue, api_version: str, kind: str) -> tuple[str, str, str] | None:
    """(group, version, plural) of a served kind (the RESTMapper's role for paramKind)."""
    group, _, version = api_version.rpartition("/")
    info = catalogue.lookup_kind(group, version, kind)
    return None if info is None else (info.group, info.version, info.plural)


class CompiledPolicy:
    """A policy's spec, compiled: built once per (uid, generation)."""

    def __init__(self, policy: Obj, body_expressions: Any) -> None:
        spec = policy.get("spec") or {}
        self.name = (policy.get("metadata") or {}).get("name", "")
        self.failure_policy = spec.get("failurePolicy") or "Fail"
        self.reinvocation_policy = spec.get("reinvocationPolicy") or "Never"  # mutating policies
        self.match = MatchResources(spec.get("matchConstraints"))
        self.param_kind = spec.get("paramKind")
        self.match_conditions = tuple((c.get("name", ""), Expression(c.get("expression", "")))
                                      for c in spec.get("matchConditions") or ())
        self.variables = tuple((vr.get("name", ""), Expression(vr.get("expression", "")))
                               for vr in spec.get("variables") or ())
        self.body = body_expressions(spec)
        self.needs = Needs([e.text for e in self.all_expressions()])

    def all_expressions(self) -> Iterator[Expression]:
        yield from (e for _, e in self.match_conditions)
        yield from (e for _, e in self.variables)
        yield from self.body_expressions()

    def body_expressions(self) -> Iterator[Expression]:
        for item in self.body:
            for x in item if isinstance(item, tuple) else (item,):
                if isinstance(x, Expression):
                    yield x
                for attr in ("expression", "message_expression"):  # validations, mutations
                    if isinstance(e := getattr(x, attr, None), Expression):
                        yield e


@dataclass
class Binding:
    name: str
    policy_name: str
    match: MatchResources
    param_ref: Obj | None
    spec: Obj


@dataclass
class Evaluation:
    """One (policy, binding, params) that applies to the request, with its CEL context ready."""
    policy: CompiledPolicy
    binding: Binding
    params: Obj | None
    ctx: Any


class PolicyNotApplicable(Exception):
    pass


class PolicySource:
    """Policies and bindings of one kind family (validating or mutating) and what applies to a request."""

    def __init__(self, informers: InformerFactory, version: str, kind: str,
                 body_expressions: Any) -> None:
        plural = kind.lower()[:-1] + "ies"
        self.informers = informers
        self.policies: Informer = informers.informer(GROUP, version, plural)
        self.bindings: Informer = informers.informer(GROUP, version, kind.lower() + "bindings")
        self.namespaces: Informer = informers.informer("", "v1", "namespaces")
        self.kind = kind
        # the server's kinds (set_catalogue, as kube's plug-in initializer gives its RESTMapper): paramKind
        self.catalogue = Catalogue()
        self._body_expressions = body_expressions
        self._compiled: dict[str, tuple[tuple[str, Any], CompiledPolicy]] = {}
        self._bindings: dict[str, tuple[str, Binding]] = {}
        self.policies.add_handler(self._on_policy)

    def _on_policy(self, event: str, obj: Obj, old: Obj | None) -> None:
        """Compile each new policy generation as it arrives, before a request needs it."""
        if event == "DELETED":
            self._compiled.pop((obj.get("metadata") or {}).get("name", ""), None)
        else:
            self.compiled(obj)

    def synced(self) -> bool:
        return self.policies.synced.is_set() and self.bindings.synced.is_set()

    def compiled(self, policy: Obj) -> CompiledPolicy:
        meta = policy.get("metadata") or {}
        version = (meta.get("uid"), meta.get("generation") or meta.get("resourceVersion"))
        hit = self._compiled.get(meta.get("name", ""))
        if hit is not None and hit[0] == version:
            return hit[1]
        cp = CompiledPolicy(policy, self._body_expressions)
        if cp.param_kind:  # start watching the params now, not at the first request that needs them
            gvr = resource_for_kind(self.catalogue, cp.param_kind.get("apiVersion", ""),
                                    cp.param_kind.get("kind", ""))
            if gvr is not None:
                self.informers.informer(*gvr)
        self._compiled[meta.get("name", "")] = (version, cp)
        return cp

    def _binding(self, obj: Obj) -> Binding:
        meta = obj.get("metadata") or {}
        hit = self._bindings.get(meta.get("name", ""))
        if hit is not None and hit[0] == meta.get("resourceVersion"):
            return hit[1]
        spec = obj.get("spec") or {}
        b = Binding(meta.get("name", ""), spec.get("policyName", ""), MatchResources(spec.get("matchResources")),
                    spec.get("paramRef"), spec)
        self._bindings[b.name] = (meta.get("resourceVersion"), b)
        return b

    def matching(self, a: Attributes) -> Iterator[tuple[CompiledPolicy, Binding, Obj | None, Attributes]]:
        """(policy, binding, namespace, the request as the policy sees it) for each binding whose policy and
        binding match the request; a policy matched through another version or group of the request's storage
        (matchPolicy Equivalent) sees it in that version (attributes.VersionedAttributes)."""
        if not self.bindings.store:
            return
        namespace = self.namespaces.store.get(a.namespace) if a.namespace else None
        for bobj in list(self.bindings.store.values()):
            b = self._binding(bobj)
            pobj = self.policies.store.get(b.policy_name)
            if pobj is None:
                continue
            cp = self.compiled(pobj)
            matched, target = cp.match.matched_resource(a)
            if not matched or not cp.match.matches_namespace(a, namespace) or not cp.match.matches_object(a):
                continue
            if not b.match.empty and not b.match.matches(a, namespace):
                continue
            yield cp, b, namespace, in_version(a, target)

    async def params(self, cp: CompiledPolicy, b: Binding, a: Attributes) -> list[Obj | None]:
        """The param objects the binding selects ([None] when the policy takes none). Raises EvalError for a
        misconfiguration or (parameterNotFoundAction Deny) missing params; [] means: skip, allowed."""
        if not cp.param_kind:
            return [None]
        ref = b.param_ref
        if not ref:
            raise EvalError(f"policy '{cp.name}' has paramKind but binding '{b.name}' has no paramRef")
        gvr = resource_for_kind(self.catalogue, cp.param_kind.get("apiVersion", ""), cp.param_kind.get("kind", ""))
        if gvr is None:
            raise EvalError(f"failed to find resource referenced by paramKind: "
                            f"'{cp.param_kind.get('apiVersion', '')}, Kind={cp.param_kind.get('kind', '')}'")
        inf = self.informers.informer(*gvr)
        if not inf.synced.is_set():
            try:
                await asyncio.wait_for(inf.synced.wait(), PARAMS_SYNC_WAIT)
            except TimeoutError:
                pass
        ns = ref.get("namespace") or a.namespace
        found: list[Obj | None] = []
        if ref.get("name"):
            key = f"{ns}/{ref['name']}" if ns else ref["name"]
            obj = inf.store.get(key) or inf.store.get(ref["name"])
            if obj is not None:
                found.append(obj)
        else:
            sel = label_selector_from_dict(ref.get("selector"))
            for obj in inf.store.values():
                meta = obj.get("metadata") or {}
                if ns and meta.get("namespace", "") != ns:
                    continue
                if sel.matches(meta.get("labels") or {}):
                    found.append(obj)
        if found:
            return found
        if not inf.synced.is_set():
            raise EvalError(f"paramKind kind `{cp.param_kind.get('kind', '')}` not yet synced to use for admission")
        if ref.get("parameterNotFoundAction") == "Deny":
            raise EvalError("no params found for policy binding with `Deny` parameterNotFoundAction")
        return []


def request_variable(a: Attributes) -> Obj:
    """The `request` CEL variable: the AdmissionRequest as kube shows it to expressions."""
    u, r = a.user, a.requested
    kind = {"group": a.group, "version": a.version, "kind": a.kind}
    resource = {"group": a.group, "version": a.version, "resource": a.resource}
    out: Obj = {
        "uid": a.request.uid, "kind": kind, "resource": resource,
        "requestKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "requestResource": {"group": r.group, "version": r.version, "resource": r.resource}, "name": a.name or ((a.object or {}).get("metadata") or {}).get("name", ""),
        "namespace": a.namespace,
        "operation": a.operation, "userInfo": {"username": u.name, "uid": u.uid, "groups": list(u.groups),
                                               "extra": {k: list(v.values) for k, v in u.extra.items()}},
        "dryRun": a.dry_run,
    }
    if a.subresource:
        out["subResource"] = out["requestSubResource"] = a.subresource
    return out


_NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\b")
_SEGMENT = re.compile(r"\s*\.\s*([A-Za-z_]\w*)")
_CALL = re.compile(r"([A-Za-z_]\w*)\s*\(")
PRUNED = ("object", "oldObject", "params", "namespaceObject")


class Needs:
    """What a policy's expressions read, found once at compile time so that a request converts only that into
    CEL values (cel-rust converts a Python dict at some 10 µs per entry: a whole object with its managedFields
    would cost more than the rest of the request): the variables named, and for object, oldObject, params and
    namespaceObject the field paths (two levels deep) read from them, or None when one is used whole."""

    def __init__(self, texts: list[str]) -> None:
        self.variables: set[str] = set()
        self.paths: dict[str, set[tuple[str, ...]] | None] = {}
        self.functions = {name: fn for t in texts for name in _CALL.findall(t)
                          if (fn := cel.KUBE_LIBRARY.get(name)) is not None}
        for text in texts:
            for m in _NAME.finditer(text):
                name = m.group(1)
                if name not in VARIABLES:
                    continue
                self.variables.add(name)
                if name not in PRUNED:
                    continue
                path: list[str] = []
                pos = m.end()
                while len(path) < 2 and (seg := _SEGMENT.match(text, pos)):
                    if text[seg.end():].lstrip().startswith("("):
                        break  # a method call on what came before
                    path.append(seg.group(1))
                    pos = seg.end()
                if not path:
                    self.paths[name] = None
                elif self.paths.get(name, set()) is not None:
                    self.paths.setdefault(name, set()).add(tuple(path))  # type: ignore[union-attr]
        if "jsonpatchEscapeKey" in " ".join(texts):
            self.functions["jsonpatchEscapeKey"] = cel.KUBE_LIBRARY["jsonpatchEscapeKey"]

    def prune(self, name: str, value: Any) -> Any:
        """The parts of value the expressions read (value itself when used whole)."""
        paths = self.paths.get(name)
        if paths is None or not isinstance(value, dict):
            return value
        out: Obj = {}
        for path in sorted(paths, key=len):
            head = path[0]
            if head not in value:
                continue
            if len(path) == 1 or not isinstance(value[head], dict):
                out[head] = value[head]
                continue
            sub = out.get(head)
            if sub is value[head]:
                continue  # already whole
            if sub is None:
                sub = out[head] = {}
            if path[1] in value[head]:
                sub[path[1]] = value[head][path[1]]
        return out


def context(a: Attributes, namespace: Obj | None, params: Obj | None, needs: Needs | None = None,
            checks: authz.Checks | None = None) -> Any:
    """The CEL activation of one evaluation: object, oldObject, request, params, namespaceObject, and kube's
    libraries; `variables` is added as the policy's variables are evaluated. With needs, only what the
    policy's expressions read is converted."""
    if needs is None:
        return cel.activation({"object": a.object, "oldObject": a.old_object, "request": request_variable(a),
                               "params": params, "namespaceObject": namespace, "variables": {}},
                              cel.KUBE_LIBRARY)
    values: Obj = {"variables": {}}
    for name in needs.variables:
        if name == "object":
            values[name] = needs.prune(name, a.object)
        elif name == "oldObject":
            values[name] = needs.prune(name, a.old_object)
        elif name == "params":
            values[name] = needs.prune(name, params)
        elif name == "namespaceObject":
            values[name] = needs.prune(name, namespace)
        elif name == "request":
            values[name] = request_variable(a)
    if checks is not None and "authorizer" in needs.variables:
        return cel.activation(values, authz.bind(values, needs.functions, a, checks))
    return cel.activation(values, needs.functions)


def evaluate_variables(cp: CompiledPolicy, ctx: Any) -> None:
    """spec.variables in order, each seeing the ones before it. A variable's error is kept and raised only
    when an expression names the variable (kube evaluates them lazily)."""
    if not cp.variables:
        return
    values: Obj = {}
    for name, expr in cp.variables:
        try:
            values[name] = expr.evaluate(ctx)
        except EvalError:
            continue  # left out: an expression that names it fails with "no such key"
        ctx.update({"variables": values})


def match_conditions(cp: CompiledPolicy, ctx: Any) -> bool:
    """kube's matchConditions: any false skips the policy; an error (when none is false) raises EvalError."""
    error: EvalError | None = None
    for name, expr in cp.match_conditions:
        try:
            value = expr.evaluate(ctx)
        except EvalError as e:
            error = error or EvalError(f"failed to evaluate match condition '{name}': {e}")
            continue
        if value is False:
            return False
        if not isinstance(value, bool):
            error = error or EvalError(f"failed to evaluate match condition '{name}': "
                                       f"expected bool, got {type(value).__name__}")
    if error is not None:
        raise error
    return True
