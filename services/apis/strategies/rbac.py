"""Strategies of rbac.authorization.k8s.io/v1 (kube's pkg/apis/rbac/validation and registry/rbac)."""
from __future__ import annotations

from typing import Any

import orjson

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy

GROUP = "rbac.authorization.k8s.io"
SERVICE_ACCOUNT, USER, GROUP_KIND = "ServiceAccount", "User", "Group"
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class GoValue:
    """A value shown as Go's %#v shows it in field errors (structs and slices have no plain form)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


def _go_str(s: Any) -> str:
    return orjson.dumps(s if isinstance(s, str) else "").decode()


def go_strings(values: list[Any]) -> GoValue:
    return GoValue("[]string{" + ", ".join(_go_str(x) for x in values) + "}")


def go_role_ref(ref: Obj) -> GoValue:
    return GoValue(f"rbac.RoleRef{{APIGroup:{_go_str(ref.get('apiGroup'))}, Kind:{_go_str(ref.get('kind'))}, "
                   f"Name:{_go_str(ref.get('name'))}}}")


def validate_rbac_name(name: str) -> list[str]:
    """ValidateRBACName: a path segment name, so "system:discovery" is fine."""
    return v.is_valid_path_segment_name(name)


def validate_policy_rule(rule: Obj, namespaced: bool, path: str) -> list[v.Cause]:
    causes: list[v.Cause] = []
    if not rule.get("verbs"):
        causes.append(v.required(f"{path}.verbs", "verbs must contain at least one value"))
    urls = rule.get("nonResourceURLs") or []
    if urls:
        if namespaced:
            causes.append(v.invalid(f"{path}.nonResourceURLs", go_strings(urls),
                                    "namespaced rules cannot apply to non-resource URLs"))
        if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
            causes.append(v.invalid(f"{path}.nonResourceURLs", go_strings(urls),
                                    "rules cannot apply to both regular resources and non-resource URLs"))
        return causes
    if not rule.get("apiGroups"):
        causes.append(v.required(f"{path}.apiGroups", "resource rules must supply at least one api group"))
    if not rule.get("resources"):
        causes.append(v.required(f"{path}.resources", "resource rules must supply at least one resource"))
    return causes


def validate_label_selector(selector: Obj, path: str) -> list[v.Cause]:
    causes = v.validate_labels(selector.get("matchLabels") or {}, f"{path}.matchLabels")
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        p = f"{path}.matchExpressions[{i}]"
        op, values = expr.get("operator") or "", expr.get("values") or []
        if op in ("In", "NotIn"):
            if not values:
                causes.append(v.required(f"{p}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                causes.append(v.forbidden(f"{p}.values",
                                          "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        else:
            causes.append(v.invalid(f"{p}.operator", op, "not a valid selector operator"))
        key = expr.get("key") or ""
        causes += [v.invalid(f"{p}.key", key, m) for m in v.is_qualified_name(key)]
    return causes


def validate_subject(subject: Obj, namespaced: bool, path: str) -> list[v.Cause]:
    causes: list[v.Cause] = []
    name, kind, group = subject.get("name") or "", subject.get("kind") or "", subject.get("apiGroup") or ""
    if not name:
        causes.append(v.required(f"{path}.name"))
    if kind == SERVICE_ACCOUNT:
        if name:
            causes += [v.invalid(f"{path}.name", name, m) for m in v.is_dns1123_subdomain(name)]
        if group:
            causes.append(v.not_supported(f"{path}.apiGroup", group, [""]))
        if not namespaced and not subject.get("namespace"):
            causes.append(v.required(f"{path}.namespace"))
    elif kind in (USER, GROUP_KIND):
        if group != GROUP:
            causes.append(v.not_supported(f"{path}.apiGroup", group, [GROUP]))
    else:
        causes.append(v.not_supported(f"{path}.kind", kind, [SERVICE_ACCOUNT, USER, GROUP_KIND]))
    return causes


class _RBACStrategy(Strategy):
    # Writes of these kinds go through the auth service's escalation check.
    escalation_checked = True

    def validate_name(self, obj: Obj, name: str) -> list[str]:
        return validate_rbac_name(name)


class RoleStrategy(_RBACStrategy):
    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        for i, rule in enumerate(obj.get("rules") or []):
            causes += validate_policy_rule(rule or {}, True, f"rules[{i}]")
        return causes


class ClusterRoleStrategy(_RBACStrategy):
    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        for i, rule in enumerate(obj.get("rules") or []):
            causes += validate_policy_rule(rule or {}, False, f"rules[{i}]")
        aggregation = obj.get("aggregationRule")
        if aggregation is not None:
            selectors = aggregation.get("clusterRoleSelectors") or []
            if not selectors:
                causes.append(v.required("aggregationRule.clusterRoleSelectors",
                                         "at least one clusterRoleSelector required if aggregationRule is non-nil"))
            for i, selector in enumerate(selectors):
                causes += validate_label_selector(selector or {}, f"aggregationRule.clusterRoleSelectors[{i}]")
        return causes


class RoleBindingStrategy(_RBACStrategy):
    role_kinds: tuple[str, ...] = ("Role", "ClusterRole")

    def canonicalize(self, obj: Obj) -> None:
        """SetDefaults_RoleBinding and SetDefaults_Subject: the API groups a client may leave out."""
        ref = obj.get("roleRef")
        if isinstance(ref, dict) and not ref.get("apiGroup"):
            ref["apiGroup"] = GROUP
        for s in obj.get("subjects") or []:
            if isinstance(s, dict) and not s.get("apiGroup") and s.get("kind") in (USER, GROUP_KIND):
                s["apiGroup"] = GROUP

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        ref = obj.get("roleRef") or {}
        group, kind, name = ref.get("apiGroup") or "", ref.get("kind") or "", ref.get("name") or ""
        if group != GROUP:
            causes.append(v.not_supported("roleRef.apiGroup", group, [GROUP]))
        if kind not in self.role_kinds:
            causes.append(v.not_supported("roleRef.kind", kind, list(self.role_kinds)))
        if not name:
            causes.append(v.required("roleRef.name"))
        else:
            causes += [v.invalid("roleRef.name", name, m) for m in validate_rbac_name(name)]
        for i, subject in enumerate(obj.get("subjects") or []):
            causes += validate_subject(subject or {}, self.info.namespaced, f"subjects[{i}]")
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        ref, old_ref = obj.get("roleRef") or {}, old.get("roleRef") or {}
        if any((ref.get(k) or "") != (old_ref.get(k) or "") for k in ("apiGroup", "kind", "name")):
            causes.append(v.invalid("roleRef", go_role_ref(ref), "cannot change roleRef"))
        return causes


class ClusterRoleBindingStrategy(RoleBindingStrategy):
    role_kinds = ("ClusterRole",)
