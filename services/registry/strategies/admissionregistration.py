"""Strategies of admissionregistration.k8s.io (kube's pkg/apis/admissionregistration/validation and
registry/validatingadmissionpolicy*, registry/mutatingadmissionpolicy*)."""
from __future__ import annotations

from typing import Any

from services.common import cel

from .. import validation as v
from . import Obj, Strategy, SubresourceStrategy

# ---------------------------------------------------------------------------------------------------------
# Admission policies (ValidatingAdmissionPolicy, MutatingAdmissionPolicy and their bindings)
# ---------------------------------------------------------------------------------------------------------

# The variables a policy's expressions may name (kube's admission policy CEL environment).
POLICY_VARIABLES = ("object", "oldObject", "request", "params", "namespaceObject", "variables", "authorizer")
OPERATIONS = ("*", "CONNECT", "CREATE", "DELETE", "UPDATE")
REASONS = ("Forbidden", "Invalid", "RequestEntityTooLarge", "Unauthorized")
FAILURE_POLICIES = ("Fail", "Ignore")
MATCH_POLICIES = ("Equivalent", "Exact")
VALIDATION_ACTIONS = ("Audit", "Deny", "Warn")
PARAM_NOT_FOUND_ACTIONS = ("Allow", "Deny")
PATCH_TYPES = ("ApplyConfiguration", "JSONPatch")
REINVOCATION_POLICIES = ("IfNeeded", "Never")


def compile_error(expression: str, mutation: bool = False) -> str | None:
    """kube's "compilation failed: ..." detail for an expression that does not compile, else None. A mutation
    is compiled as the admission service runs it (typed literals as maps)."""
    try:
        cel.compile_expression(cel.struct_literals_as_maps(expression) if mutation else expression,
                               POLICY_VARIABLES)
    except cel.CELCompileError as e:
        return f"compilation failed: {e}"
    return None


def _expression(e: Any, path: str, causes: list[v.Cause], mutation: bool = False) -> None:
    if not isinstance(e, str) or not e.strip():
        causes.append(v.required(path))
        return
    if len(e) > 5 * 1024:
        causes.append(v.too_long(path, 5 * 1024))
        return
    if err := compile_error(e, mutation):
        causes.append(v.invalid(path, e, err))


def _default_match_resources(m: Obj) -> None:
    m.setdefault("matchPolicy", "Equivalent")
    m.setdefault("namespaceSelector", {})
    m.setdefault("objectSelector", {})
    for key in ("resourceRules", "excludeResourceRules"):
        for rule in m.get(key) or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")


def _rules(rules: Any, path: str, causes: list[v.Cause]) -> None:
    for i, r in enumerate(rules or []):
        p = f"{path}[{i}]"
        if not isinstance(r, dict):
            causes.append(v.invalid(p, r, "must be an object"))
            continue
        ops = r.get("operations") or []
        if not ops:
            causes.append(v.required(f"{p}.operations"))
        for j, op in enumerate(ops):
            if op not in OPERATIONS:
                causes.append(v.not_supported(f"{p}.operations[{j}]", op, list(OPERATIONS)))
        if "*" in ops and len(ops) > 1:
            causes.append(v.invalid(f"{p}.operations", ops, "if '*' is present, must not specify other operations"))
        for f in ("apiGroups", "apiVersions", "resources"):
            if not r.get(f):
                causes.append(v.required(f"{p}.{f}"))
        scope = r.get("scope", "*")
        if scope not in ("*", "Cluster", "Namespaced"):
            causes.append(v.not_supported(f"{p}.scope", scope, ["*", "Cluster", "Namespaced"]))


def _match_resources(m: Any, path: str, causes: list[v.Cause], require_rules: bool) -> None:
    if m is None:
        if require_rules:
            causes.append(v.required(path))
        return
    if not isinstance(m, dict):
        causes.append(v.invalid(path, m, "must be an object"))
        return
    if require_rules and not m.get("resourceRules"):
        causes.append(v.required(f"{path}.resourceRules"))
    if m.get("matchPolicy") not in MATCH_POLICIES:
        causes.append(v.not_supported(f"{path}.matchPolicy", m.get("matchPolicy"), list(MATCH_POLICIES)))
    _rules(m.get("resourceRules"), f"{path}.resourceRules", causes)
    _rules(m.get("excludeResourceRules"), f"{path}.excludeResourceRules", causes)


def _named_expressions(items: Any, path: str, key: str, causes: list[v.Cause]) -> None:
    seen: set[str] = set()
    for i, item in enumerate(items or []):
        name = (item or {}).get(key)
        if not name:
            causes.append(v.required(f"{path}[{i}].{key}"))
        elif name in seen:
            causes.append({"reason": "FieldValueDuplicate", "message": f"Duplicate value: {v._quote(name)}",
                           "field": f"{path}[{i}].{key}"})
        seen.add(name or "")
        _expression((item or {}).get("expression" if key == "name" else "valueExpression"),
                    f"{path}[{i}].{'expression' if key == 'name' else 'valueExpression'}", causes)


def validate_policy_spec(spec: Obj, causes: list[v.Cause], mutating: bool) -> None:
    if spec.get("failurePolicy") not in FAILURE_POLICIES:
        causes.append(v.not_supported("spec.failurePolicy", spec.get("failurePolicy"), list(FAILURE_POLICIES)))
    pk = spec.get("paramKind")
    if pk is not None:
        if not (pk or {}).get("apiVersion"):
            causes.append(v.required("spec.paramKind.apiVersion"))
        if not (pk or {}).get("kind"):
            causes.append(v.required("spec.paramKind.kind"))
    _match_resources(spec.get("matchConstraints"), "spec.matchConstraints", causes, require_rules=True)
    if len(spec.get("matchConditions") or []) > 64:
        causes.append(v.too_long("spec.matchConditions", 64))
    _named_expressions(spec.get("matchConditions"), "spec.matchConditions", "name", causes)
    _named_expressions(spec.get("variables"), "spec.variables", "name", causes)
    if mutating:
        muts = spec.get("mutations") or []
        if not muts:
            causes.append(v.required("spec.mutations", "mutations must contain at least one item"))
        for i, m in enumerate(muts):
            p = f"spec.mutations[{i}]"
            pt = (m or {}).get("patchType")
            if pt not in PATCH_TYPES:
                causes.append(v.not_supported(f"{p}.patchType", pt, list(PATCH_TYPES)))
            elif pt == "JSONPatch":
                _expression(((m or {}).get("jsonPatch") or {}).get("expression"), f"{p}.jsonPatch.expression", causes, True)
            else:
                _expression(((m or {}).get("applyConfiguration") or {}).get("expression"),
                            f"{p}.applyConfiguration.expression", causes, True)
        rp = spec.get("reinvocationPolicy")
        if rp not in REINVOCATION_POLICIES:
            causes.append(v.not_supported("spec.reinvocationPolicy", rp, list(REINVOCATION_POLICIES)))
        return
    validations, audits = spec.get("validations") or [], spec.get("auditAnnotations") or []
    if not validations and not audits:
        causes.append(v.required("spec.validations", "validations or auditAnnotations must contain at least one item"))
    for i, val in enumerate(validations):
        p = f"spec.validations[{i}]"
        _expression((val or {}).get("expression"), f"{p}.expression", causes)
        if (val or {}).get("messageExpression"):
            _expression(val["messageExpression"], f"{p}.messageExpression", causes)
        msg = (val or {}).get("message")
        if isinstance(msg, str) and msg and not msg.strip():
            causes.append(v.invalid(f"{p}.message", msg, "message must be non-empty if specified"))
        reason = (val or {}).get("reason")
        if reason is not None and reason not in REASONS:
            causes.append(v.not_supported(f"{p}.reason", reason, list(REASONS)))
    seen: set[str] = set()
    for i, a in enumerate(audits):
        key = (a or {}).get("key") or ""
        if not key:
            causes.append(v.required(f"spec.auditAnnotations[{i}].key"))
        elif key in seen:
            causes.append({"reason": "FieldValueDuplicate", "message": f"Duplicate value: {v._quote(key)}",
                           "field": f"spec.auditAnnotations[{i}].key"})
        seen.add(key)
        _expression((a or {}).get("valueExpression"), f"spec.auditAnnotations[{i}].valueExpression", causes)


class AdmissionPolicyStrategy(Strategy):
    """ValidatingAdmissionPolicy (mutating=False) and MutatingAdmissionPolicy: defaults, validation,
    generation bumped on spec changes, status owned by the type checker (the admission service)."""
    status_fields = ("status",)
    mutating = False

    def canonicalize(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        spec.setdefault("failurePolicy", "Fail")
        if self.mutating:
            spec.setdefault("reinvocationPolicy", "Never")
        if isinstance(spec.get("matchConstraints"), dict):
            _default_match_resources(spec["matchConstraints"])

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)
        obj.setdefault("metadata", {})["generation"] = 1

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        super().prepare_for_update(obj, old)
        meta, old_meta = obj.setdefault("metadata", {}), old.get("metadata") or {}
        gen = old_meta.get("generation") or 1
        meta["generation"] = gen + 1 if obj.get("spec") != old.get("spec") else gen

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return causes + [v.required("spec")]
        validate_policy_spec(spec, causes, self.mutating)
        return causes

    def for_subresource(self, subresource: str) -> Strategy:
        if subresource == "status":
            return SubresourceStrategy(self, ("status",))
        return self


class MutatingAdmissionPolicyStrategy(AdmissionPolicyStrategy):
    mutating = True


class AdmissionPolicyBindingStrategy(Strategy):
    """ValidatingAdmissionPolicyBinding (mutating=False) and MutatingAdmissionPolicyBinding."""
    mutating = False

    def canonicalize(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("matchResources"), dict):
            _default_match_resources(spec["matchResources"])

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return causes + [v.required("spec")]
        if not spec.get("policyName"):
            causes.append(v.required("spec.policyName"))
        ref = spec.get("paramRef")
        if ref is not None:
            ref = ref or {}
            if ref.get("name") and ref.get("selector") is not None:
                causes.append(v.forbidden("spec.paramRef.name", "name and selector are mutually exclusive"))
            if not ref.get("name") and ref.get("selector") is None:
                causes.append(v.required("spec.paramRef", "one of name or selector must be set"))
            action = ref.get("parameterNotFoundAction")
            if action is None:
                causes.append(v.required("spec.paramRef.parameterNotFoundAction"))
            elif action not in PARAM_NOT_FOUND_ACTIONS:
                causes.append(v.not_supported("spec.paramRef.parameterNotFoundAction", action,
                                              list(PARAM_NOT_FOUND_ACTIONS)))
        _match_resources(spec.get("matchResources"), "spec.matchResources", causes, require_rules=False)
        if self.mutating:
            return causes
        actions = spec.get("validationActions") or []
        if not actions:
            causes.append(v.required("spec.validationActions"))
        seen: set[str] = set()
        for i, a in enumerate(actions):
            if a not in VALIDATION_ACTIONS:
                causes.append(v.not_supported(f"spec.validationActions[{i}]", a, list(VALIDATION_ACTIONS)))
            elif a in seen:
                causes.append({"reason": "FieldValueDuplicate", "message": f"Duplicate value: {v._quote(a)}",
                               "field": f"spec.validationActions[{i}]"})
            seen.add(a)
        if {"Deny", "Warn"} <= seen:
            causes.append(v.invalid("spec.validationActions", actions,
                                    "must not contain both Deny and Warn (repeating the same validation failure "
                                    "information in the API response and headers serves no purpose)"))
        return causes


class MutatingAdmissionPolicyBindingStrategy(AdmissionPolicyBindingStrategy):
    mutating = True
