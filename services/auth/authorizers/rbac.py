"""RBAC: rule matching, an index of bindings by subject, and rule coverage for escalation checks.

Semantics follow k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac: a request is
allowed when any rule of any role bound to one of the caller's subjects matches
it; there are no deny rules. Bindings are indexed by subject (user, group, and
service account user name) so a decision never scans every binding.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from services.apiserver.fielderrors import quote_list

ALL = "*"
SA_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True)
class Attributes:
    user: str
    groups: tuple[str, ...] = ()
    verb: str = "get"
    resource_request: bool = True
    namespace: str = ""
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    path: str = ""


@dataclass(frozen=True)
class Rule:
    verbs: tuple[str, ...] = ()
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Rule":
        return Rule(
            verbs=tuple(d.get("verbs") or ()),
            api_groups=tuple(d.get("apiGroups") or ()),
            resources=tuple(d.get("resources") or ()),
            resource_names=tuple(d.get("resourceNames") or ()),
            non_resource_urls=tuple(d.get("nonResourceURLs") or ()),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"verbs": list(self.verbs)}
        if self.api_groups or self.resources:
            out["apiGroups"] = list(self.api_groups)
            out["resources"] = list(self.resources)
        if self.resource_names:
            out["resourceNames"] = list(self.resource_names)
        if self.non_resource_urls:
            out["nonResourceURLs"] = list(self.non_resource_urls)
        return out


# Matching (one function per rule field, as kube's rbac/v1 helpers) -------------


def verb_matches(rule: Rule, verb: str) -> bool:
    return ALL in rule.verbs or verb in rule.verbs


def api_group_matches(rule: Rule, group: str) -> bool:
    return ALL in rule.api_groups or group in rule.api_groups


def resource_matches(rule: Rule, combined: str, subresource: str) -> bool:
    for r in rule.resources:
        if r == ALL or r == combined:
            return True
        # "*/scale" matches the scale subresource of every resource
        if subresource and r.startswith("*/") and r[2:] == subresource:
            return True
    return False


def resource_name_matches(rule: Rule, name: str) -> bool:
    return not rule.resource_names or name in rule.resource_names


def non_resource_url_matches(rule: Rule, path: str) -> bool:
    for u in rule.non_resource_urls:
        if u == ALL or u == path or (u.endswith("*") and path.startswith(u[:-1])):
            return True
    return False


def rule_allows(rule: Rule, a: Attributes) -> bool:
    if a.resource_request:
        combined = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
        return (verb_matches(rule, a.verb) and api_group_matches(rule, a.api_group)
                and resource_matches(rule, combined, a.subresource) and resource_name_matches(rule, a.name))
    return verb_matches(rule, a.verb) and non_resource_url_matches(rule, a.path)


# Coverage: does a set of rules grant at least what another rule grants? --------


def _covers_one(owner: Rule, wanted: Rule) -> bool:
    """owner grants everything `wanted` grants (wanted already broken down to single values)."""
    if not all(verb_matches(owner, v) for v in wanted.verbs):
        return False
    if wanted.non_resource_urls:
        return all(non_resource_url_matches(owner, u) or (ALL in owner.non_resource_urls) or
                   any(o.endswith("*") and u.endswith("*") and u.startswith(o[:-1]) for o in owner.non_resource_urls)
                   for u in wanted.non_resource_urls)
    if not all(api_group_matches(owner, g) for g in wanted.api_groups):
        return False
    for r in wanted.resources:
        sub = r.split("/", 1)[1] if "/" in r else ""
        if not resource_matches(owner, r, sub):
            return False
    if owner.resource_names:
        return bool(wanted.resource_names) and all(n in owner.resource_names for n in wanted.resource_names)
    return True


def _break_down(rule: Rule) -> Iterable[Rule]:
    """One rule per (verb, group, resource) or (verb, url), as kube's validation.BreakdownRule."""
    for verb in rule.verbs:
        for group in rule.api_groups:
            for res in rule.resources:
                yield Rule((verb,), (group,), (res,), rule.resource_names)
        for url in rule.non_resource_urls:
            yield Rule((verb,), non_resource_urls=(url,))


def covers(owner_rules: Iterable[Rule], wanted_rules: Iterable[Rule]) -> tuple[bool, list[Rule]]:
    """(True, []) when owner_rules grant every permission in wanted_rules; else the uncovered pieces."""
    owned = list(owner_rules)
    missing = [piece for rule in wanted_rules for piece in _break_down(rule)
               if not any(_covers_one(o, piece) for o in owned)]
    return not missing, missing


# The index ----------------------------------------------------------------------


@dataclass
class Binding:
    namespace: str          # "" for a ClusterRoleBinding
    name: str
    role_kind: str          # Role or ClusterRole
    role_name: str
    subjects: tuple[tuple[str, str, str], ...]  # (kind, name, namespace)


def subject_keys(kind: str, name: str, namespace: str, binding_namespace: str) -> str | None:
    if kind == "User":
        return f"u:{name}"
    if kind == "Group":
        return f"g:{name}"
    if kind == "ServiceAccount":
        ns = namespace or binding_namespace
        return f"u:{SA_PREFIX}{ns}:{name}" if ns else None
    return None


@dataclass
class RBACIndex:
    """Roles, ClusterRoles and their bindings, indexed for decisions by subject."""

    roles: dict[tuple[str, str], tuple[Rule, ...]] = field(default_factory=dict)          # (ns, name)
    cluster_roles: dict[str, tuple[Rule, ...]] = field(default_factory=dict)
    bindings: dict[tuple[str, str], Binding] = field(default_factory=dict)                 # (ns, name)
    by_subject: dict[str, set[tuple[str, str]]] = field(default_factory=lambda: defaultdict(set))

    # mutation, from informer events

    def set_role(self, namespace: str, name: str, rules: Iterable[dict[str, Any]]) -> None:
        self.roles[(namespace, name)] = tuple(Rule.from_dict(r) for r in rules)

    def delete_role(self, namespace: str, name: str) -> None:
        self.roles.pop((namespace, name), None)

    def set_cluster_role(self, name: str, rules: Iterable[dict[str, Any]]) -> None:
        self.cluster_roles[name] = tuple(Rule.from_dict(r) for r in rules)

    def delete_cluster_role(self, name: str) -> None:
        self.cluster_roles.pop(name, None)

    def set_binding(self, namespace: str, name: str, role_ref: dict[str, Any],
                    subjects: Iterable[dict[str, Any]]) -> None:
        self.delete_binding(namespace, name)
        b = Binding(namespace, name, role_ref.get("kind", ""), role_ref.get("name", ""),
                    tuple((s.get("kind", ""), s.get("name", ""), s.get("namespace", "")) for s in subjects))
        self.bindings[(namespace, name)] = b
        for kind, sname, sns in b.subjects:
            key = subject_keys(kind, sname, sns, namespace)
            if key:
                self.by_subject[key].add((namespace, name))

    def delete_binding(self, namespace: str, name: str) -> None:
        old = self.bindings.pop((namespace, name), None)
        if old is None:
            return
        for kind, sname, sns in old.subjects:
            key = subject_keys(kind, sname, sns, namespace)
            if key and key in self.by_subject:
                self.by_subject[key].discard((namespace, name))
                if not self.by_subject[key]:
                    del self.by_subject[key]

    # queries

    def _binding_keys(self, user: str, groups: Iterable[str]) -> Iterable[tuple[str, tuple[str, str]]]:
        """(subject key, binding key) for every binding naming the user or one of its groups."""
        for b in self.by_subject.get("u:" + user, ()):
            yield "u:" + user, b
        for g in groups:
            for b in self.by_subject.get("g:" + g, ()):
                yield "g:" + g, b

    def _rules_of(self, b: Binding) -> tuple[Rule, ...]:
        if b.role_kind == "ClusterRole":
            return self.cluster_roles.get(b.role_name, ())
        if b.role_kind == "Role" and b.namespace:
            return self.roles.get((b.namespace, b.role_name), ())
        return ()

    def rules_for(self, user: str, groups: Iterable[str], namespace: str) -> list[Rule]:
        """Every rule that applies to the subject in `namespace` ("" = cluster scope only), as kube's RulesFor:
        ClusterRoleBindings first, then the namespace's RoleBindings; each binding once."""
        seen: set[tuple[str, str]] = set()
        cluster: list[Rule] = []
        local: list[Rule] = []
        for _, key in self._binding_keys(user, groups):
            if key in seen:
                continue
            seen.add(key)
            b = self.bindings[key]
            if b.namespace == "":
                cluster.extend(self._rules_of(b))
            elif namespace and b.namespace == namespace:
                local.extend(self._rules_of(b))
        return cluster + local

    def authorize(self, a: Attributes) -> tuple[bool, str]:
        """(allowed, reason), reason naming the binding that allowed, as kube's RBAC reason does."""
        by_subject = self.by_subject
        keys = ["u:" + a.user]
        keys.extend("g:" + g for g in a.groups)
        resource_request = a.resource_request
        if resource_request:
            combined = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
            verb, group, sub, name, namespace = a.verb, a.api_group, a.subresource, a.name, a.namespace
        for skey in keys:
            found = by_subject.get(skey)
            if not found:
                continue
            for key in found:
                b = self.bindings[key]
                if b.namespace and (not resource_request or b.namespace != namespace):
                    continue
                for rule in self._rules_of(b):
                    if resource_request:
                        if ((verb in rule.verbs or ALL in rule.verbs)
                                and (group in rule.api_groups or ALL in rule.api_groups)
                                and resource_matches(rule, combined, sub)
                                and (not rule.resource_names or name in rule.resource_names)):
                            return True, self._reason(b, skey)
                    elif verb_matches(rule, a.verb) and non_resource_url_matches(rule, a.path):
                        return True, self._reason(b, skey)
        return False, ""

    @staticmethod
    def _reason(b: Binding, skey: str) -> str:
        """kube's authorizingVisitor reason: the binding, its role and the subject that matched."""
        subject = ""
        for kind, sname, sns in b.subjects:
            if subject_keys(kind, sname, sns, b.namespace) == skey:
                if kind == "ServiceAccount":
                    subject = f'ServiceAccount "{sname}/{sns or b.namespace}"'
                else:
                    subject = f'{kind} "{sname}"'
                break
        if b.namespace:
            return (f'RBAC: allowed by RoleBinding "{b.name}/{b.namespace}" of {b.role_kind} "{b.role_name}" '
                    f"to {subject}")
        return f'RBAC: allowed by ClusterRoleBinding "{b.name}" of ClusterRole "{b.role_name}" to {subject}'

    # loading, from whole objects (informer events and benchmarks)

    def apply(self, kind: str, obj: dict[str, Any], deleted: bool = False) -> None:
        meta = obj.get("metadata") or {}
        ns, name = meta.get("namespace") or "", meta.get("name") or ""
        if kind == "Role":
            self.delete_role(ns, name) if deleted else self.set_role(ns, name, obj.get("rules") or [])
        elif kind == "ClusterRole":
            self.delete_cluster_role(name) if deleted else self.set_cluster_role(name, obj.get("rules") or [])
        elif kind in ("RoleBinding", "ClusterRoleBinding"):
            ns = ns if kind == "RoleBinding" else ""
            if deleted:
                self.delete_binding(ns, name)
            else:
                self.set_binding(ns, name, obj.get("roleRef") or {}, obj.get("subjects") or [])


def compact_string(rule: Rule) -> str:
    """kube's PolicyRule.CompactString, as escalation errors print missing rules."""
    parts = []
    if rule.api_groups:
        parts.append("APIGroups:" + quote_list(rule.api_groups))
    if rule.resources:
        parts.append("Resources:" + quote_list(rule.resources))
    if rule.non_resource_urls:
        parts.append("NonResourceURLs:" + quote_list(rule.non_resource_urls))
    if rule.resource_names:
        parts.append("ResourceNames:" + quote_list(rule.resource_names))
    if rule.verbs:
        parts.append("Verbs:" + quote_list(rule.verbs))
    return "{" + ", ".join(parts) + "}"


def compact_rules(rules: Iterable[Rule]) -> list[Rule]:
    """kube's CompactRules: single group/resource rules without names merge their verbs."""
    simple: dict[tuple[str, str], list[str]] = {}
    out: list[Rule] = []
    for r in rules:
        if len(r.api_groups) == 1 and len(r.resources) == 1 and not r.resource_names and not r.non_resource_urls:
            verbs = simple.setdefault((r.api_groups[0], r.resources[0]), [])
            verbs.extend(v for v in r.verbs if v not in verbs)
        else:
            out.append(r)
    return [Rule(tuple(v), (g,), (res,)) for (g, res), v in simple.items()] + out


def aggregate(cluster_roles: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """For every ClusterRole with an aggregationRule, the rules it should hold now.

    cluster_roles maps name -> the ClusterRole object; selectors are matchLabels /
    matchExpressions label selectors over the other ClusterRoles' labels.
    """
    from services.common.selectors import label_selector_from_dict  # noqa: PLC0415 - avoid a cycle at import

    out: dict[str, list[dict[str, Any]]] = {}
    for name, role in cluster_roles.items():
        rule = role.get("aggregationRule")
        if not rule:
            continue
        selectors = [label_selector_from_dict(s) for s in rule.get("clusterRoleSelectors") or []]
        rules: list[dict[str, Any]] = []
        for other_name in sorted(cluster_roles):
            if other_name == name:
                continue
            labels = (cluster_roles[other_name].get("metadata") or {}).get("labels") or {}
            if any(sel.matches(labels) for sel in selectors):
                for r in cluster_roles[other_name].get("rules") or []:
                    if r not in rules:
                        rules.append(r)
        out[name] = rules
    return out
