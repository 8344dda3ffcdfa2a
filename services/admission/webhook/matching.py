"""Which webhooks a request goes to: rules (operations, groups, versions, resources and subresources,
scope), the namespace and object selectors, and the match conditions (CEL), as kube's webhook
predicates.

matchPolicy: a rule that names the request's group, version and resource matches it; with Equivalent (the
default), a rule naming another version or group of the same storage (MutatingAdmissionPolicy v1 for a
v1alpha1 request, core/v1 events for an events.k8s.io/v1 one) matches too, and the webhook is called with the
object converted to that version (kube's EquivalentResourceMapper and ConvertToGVK; the dispatcher converts).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.apiserver.resource import ResourceInfo
from services.common import cel
from services.common.errors import BadRequest
from services.common.selectors import LabelSelector, label_selector_from_dict

from ..attributes import Attributes, equivalent_resources
from ..policy import Needs

Obj = dict[str, Any]
MATCH_CONDITION_VARIABLES = ("object", "oldObject", "request", "authorizer")


def _split(resource: str) -> tuple[str, str]:
    res, _, sub = resource.partition("/")
    return res, sub


def rule_matches(rule: Obj, a: Attributes, as_resource: ResourceInfo | None = None) -> bool:
    """kube's rules.Matcher: operation, group, version, resource/subresource and scope (of the request, or
    as_resource's group, version and resource: an equivalent one)."""
    group, version, resource = ((a.group, a.version, a.resource) if as_resource is None else
                                (as_resource.group, as_resource.version, as_resource.plural))
    ops = rule.get("operations") or []
    if "*" not in ops and a.operation not in ops:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and group not in groups:
        return False
    versions = rule.get("apiVersions") or []
    if "*" not in versions and version not in versions:
        return False
    for res in rule.get("resources") or []:
        r, s = _split(res)
        if (r == "*" or r == resource) and (s == "*" or s == a.subresource):
            break
    else:
        return False
    scope = rule.get("scope") or "*"
    if scope == "*":
        return True
    cluster = not a.namespace or (group == "" and resource == "namespaces")
    return cluster if scope == "Cluster" else not cluster


def _labels(obj: Obj | None) -> dict[str, str] | None:
    if obj is None:
        return None
    return (obj.get("metadata") or {}).get("labels") or {}


@dataclass
class Webhook:
    """One webhook of a configuration, with what matching needs prepared once per configuration version."""
    spec: Obj
    configuration: str
    mutating: bool
    namespace_selector: LabelSelector
    object_selector: LabelSelector
    conditions: tuple[tuple[str, cel.Program | cel.CELCompileError], ...]
    uses_authorizer: bool = False  # a condition reads `authorizer`: evaluated until its checks are answered

    @property
    def name(self) -> str:
        return self.spec.get("name") or ""

    @property
    def failure_policy(self) -> str:
        return self.spec.get("failurePolicy") or "Fail"

    @property
    def operations(self) -> frozenset[str]:
        out: set[str] = set()
        for rule in self.spec.get("rules") or []:
            out.update(rule.get("operations") or [])
        return frozenset(out)

    @classmethod
    def build(cls, spec: Obj, configuration: str, mutating: bool) -> "Webhook":
        def selector(key: str) -> LabelSelector:
            try:
                return label_selector_from_dict(spec.get(key) or {})
            except BadRequest:  # validated on write; never matches if it got in anyway
                return LabelSelector.parse("!__invalid__,__invalid__")

        conditions: list[tuple[str, cel.Program | cel.CELCompileError]] = []
        for mc in spec.get("matchConditions") or []:
            try:
                program: cel.Program | cel.CELCompileError = cel.compile_expression(
                    mc.get("expression") or "", MATCH_CONDITION_VARIABLES)
            except cel.CELCompileError as e:
                program = e
            conditions.append((mc.get("name") or "", program))
        texts = [mc.get("expression") or "" for mc in spec.get("matchConditions") or []]
        return cls(spec, configuration, mutating, selector("namespaceSelector"), selector("objectSelector"),
                   tuple(conditions), "authorizer" in Needs(texts).variables)

    def rules_match(self, a: Attributes) -> bool:
        return any(rule_matches(r, a) for r in self.spec.get("rules") or [])

    def equivalent(self, a: Attributes) -> ResourceInfo | None:
        """matchPolicy Equivalent, when no rule names the request's resource: the first definition of another
        version or group sharing its storage that a rule names (the webhook is called in its version)."""
        if (self.spec.get("matchPolicy") or "Equivalent") != "Equivalent":
            return None
        rules = self.spec.get("rules") or []
        return next((o for o in equivalent_resources(a) if any(rule_matches(r, a, o) for r in rules)), None)

    def object_matches(self, a: Attributes) -> bool:
        """Either the new or the old object's labels match (a missing object never does)."""
        if self.object_selector.empty:
            return True
        return any(labels is not None and self.object_selector.matches(labels)
                   for labels in (_labels(a.object), _labels(a.old_object)))

    def namespace_matches(self, a: Attributes, namespace_labels: dict[str, str] | None) -> bool:
        """namespace_labels: the labels of the request's namespace (of the namespace object itself for a
        request on namespaces); None for other cluster-scoped requests, which the selector never skips."""
        if self.namespace_selector.empty or namespace_labels is None:
            return True
        return self.namespace_selector.matches(namespace_labels)

    def conditions_match(self, activation: Any) -> tuple[bool, str]:
        """(matched, error): any false skips the webhook; an error (with none false) is returned for the
        failure policy to decide."""
        error = ""
        for name, program in self.conditions:
            if isinstance(program, cel.CELCompileError):
                error = error or f"compilation failed: {program}"
                continue
            try:
                result = program.evaluate(activation)
            except cel.CELEvalError as e:
                error = error or f"matchCondition {name!r}: {e}"
                continue
            if result is False:
                return False, ""
            if result is not True:
                error = error or f"matchCondition {name!r} evaluated to {type(result).__name__}, not bool"
        return (not error), error
