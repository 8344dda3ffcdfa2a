"""Which requests an admission extension applies to (k8s.io/apiserver/pkg/admission/plugin/webhook/predicates
and policy/matching): rules with operations, groups, versions, resources and scope; namespaceSelector;
objectSelector. Parsed once per configuration object; a request costs a few set lookups."""
from __future__ import annotations

from typing import Any

from services.apiserver.resource import ResourceInfo
from services.common.errors import APIError
from services.common.selectors import LabelSelector, label_selector_from_dict

from .attributes import Attributes, equivalent_resources

Obj = dict[str, Any]


class Rule:
    """A RuleWithOperations or NamedRuleWithOperations."""

    __slots__ = ("groups", "names", "operations", "resources", "scope", "versions")

    def __init__(self, r: Obj) -> None:
        self.operations = frozenset(r.get("operations") or ())
        self.groups = frozenset(r.get("apiGroups") or ())
        self.versions = frozenset(r.get("apiVersions") or ())
        self.resources = tuple(r.get("resources") or ())
        self.scope = r.get("scope") or "*"
        self.names = frozenset(r.get("resourceNames") or ())

    def _resource_matches(self, resource: str, subresource: str) -> bool:
        for want in self.resources:
            if want == "*/*":
                return True
            res, _, sub = want.partition("/")
            if (res == "*" or res == resource) and (sub == subresource or (sub == "*" and subresource)):
                return True
            if not sub and not subresource and res in ("*", resource):
                return True
        return False

    def matches(self, a: Attributes, as_resource: ResourceInfo | None = None) -> bool:
        """Whether the rule names the request (or as_resource: an equivalent of the request's resource)."""
        group, version, resource = ((a.group, a.version, a.resource) if as_resource is None else
                                    (as_resource.group, as_resource.version, as_resource.plural))
        if "*" not in self.operations and a.operation not in self.operations:
            return False
        if "*" not in self.groups and group not in self.groups:
            return False
        if "*" not in self.versions and version not in self.versions:
            return False
        if not self._resource_matches(resource, a.subresource):
            return False
        if self.scope == "Cluster" and a.namespace:
            return False
        if self.scope == "Namespaced" and not a.namespace:
            return False
        return not self.names or a.name_for_errors() in self.names


def _selector(s: Any) -> LabelSelector | None:
    """None for an empty (match-everything) selector."""
    if not s:
        return None
    try:
        sel = label_selector_from_dict(s)
    except APIError:
        return LabelSelector.parse("!apiary.invalid/selector-matches-nothing")  # an invalid one matches nothing
    return None if sel.empty else sel


def _labels(obj: Obj | None) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


class MatchResources:
    """matchConstraints of a policy / matchResources of a binding (webhooks: rules + selectors)."""

    def __init__(self, m: Obj | None) -> None:
        m = m or {}
        self.rules = tuple(Rule(r) for r in m.get("resourceRules") or ())
        self.exclude = tuple(Rule(r) for r in m.get("excludeResourceRules") or ())
        self.namespace_selector = _selector(m.get("namespaceSelector"))
        self.object_selector = _selector(m.get("objectSelector"))
        self.empty = not m  # a binding without matchResources matches what its policy does
        self.equivalent = (m.get("matchPolicy") or "Equivalent") == "Equivalent"

    def _rules_match(self, a: Attributes, as_resource: ResourceInfo | None = None) -> bool:
        if self.rules and not any(r.matches(a, as_resource) for r in self.rules):
            return False
        return not any(r.matches(a, as_resource) for r in self.exclude)

    def matched_resource(self, a: Attributes) -> tuple[bool, ResourceInfo | None]:
        """Whether the rules match the request, and through which equivalent resource when it is not the
        request's own (matchPolicy Equivalent: another version or group of the same storage; None: exact)."""
        if self._rules_match(a):
            return True, None
        if self.equivalent and self.rules:
            for other in equivalent_resources(a):
                if self._rules_match(a, other):
                    return True, other
        return False, None

    def matches_rules(self, a: Attributes) -> bool:
        return self.matched_resource(a)[0]

    def matches_namespace(self, a: Attributes, namespace: Obj | None) -> bool:
        """namespaceSelector: the request's namespace's labels; a Namespace matches itself; other cluster-scoped
        objects always match."""
        if self.namespace_selector is None:
            return True
        if a.group == "" and a.resource == "namespaces" and not a.subresource:
            return self.namespace_selector.matches(_labels(a.object or a.old_object))
        if not a.namespace:
            return True
        return self.namespace_selector.matches(_labels(namespace))

    def matches_object(self, a: Attributes) -> bool:
        if self.object_selector is None:
            return True
        return any(self.object_selector.matches(_labels(o)) for o in (a.object, a.old_object) if o is not None)

    def matches(self, a: Attributes, namespace: Obj | None) -> bool:
        return self.matches_rules(a) and self.matches_namespace(a, namespace) and self.matches_object(a)
