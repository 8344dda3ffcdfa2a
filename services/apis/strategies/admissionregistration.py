"""Strategies of admissionregistration.k8s.io (kube's pkg/apis/admissionregistration/validation and
registry/validatingadmissionpolicy*, registry/mutatingadmissionpolicy*)."""
from __future__ import annotations

from typing import Any

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy
from services.apiserver.webhook.validation import validate_client_config
from services.common import cel

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
            causes.append(v.duplicate(f"{path}[{i}].{key}", name))
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
            causes.append(v.duplicate(f"spec.auditAnnotations[{i}].key", key))
        seen.add(key)
        _expression((a or {}).get("valueExpression"), f"spec.auditAnnotations[{i}].valueExpression", causes)


class AdmissionPolicyStrategy(Strategy):
    """ValidatingAdmissionPolicy (mutating=False) and MutatingAdmissionPolicy: defaults, validation,
    generation bumped on spec changes, status owned by the type checker (the admission service)."""
    status_fields = ("status",)
    spec_fields = ("spec",)
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

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return causes + [v.required("spec")]
        validate_policy_spec(spec, causes, self.mutating)
        return causes

    status_subresource = True


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
                causes.append(v.duplicate(f"spec.validationActions[{i}]", a))
            seen.add(a)
        if {"Deny", "Warn"} <= seen:
            causes.append(v.invalid("spec.validationActions", actions,
                                    "must not contain both Deny and Warn (repeating the same validation failure "
                                    "information in the API response and headers serves no purpose)"))
        return causes


class MutatingAdmissionPolicyBindingStrategy(AdmissionPolicyBindingStrategy):
    mutating = True


# --- webhooks: MutatingWebhookConfiguration, ValidatingWebhookConfiguration -------------------------

WEBHOOK_OPERATIONS = ("*", "CONNECT", "CREATE", "DELETE", "UPDATE")
SCOPES = ("*", "Cluster", "Namespaced")
REVIEW_VERSIONS = ("v1", "v1beta1")
MAX_MATCH_CONDITIONS = 64


def _too_many(field: str, n: int, limit: int) -> v.Cause:
    return {"reason": "FieldValueTooMany", "message": f"Too many: {n}: must have at most {limit} items",
            "field": field}


def default_webhook(hook: Obj, mutating: bool) -> None:
    """SetDefaults_*Webhook and SetDefaults_Rule, ServiceReference of v1."""
    hook.setdefault("failurePolicy", "Fail")
    hook.setdefault("matchPolicy", "Equivalent")
    if hook.get("namespaceSelector") is None:
        hook["namespaceSelector"] = {}
    if hook.get("objectSelector") is None:
        hook["objectSelector"] = {}
    if hook.get("timeoutSeconds") is None:
        hook["timeoutSeconds"] = 10
    if mutating:
        hook.setdefault("reinvocationPolicy", "Never")
    for rule in hook.get("rules") or []:
        if isinstance(rule, dict) and not rule.get("scope"):
            rule["scope"] = "*"
    service = (hook.get("clientConfig") or {}).get("service")
    if isinstance(service, dict) and not service.get("port"):
        service["port"] = 443


def _validate_list(values: Any, field: str, allowed: tuple[str, ...] | None = None) -> list[v.Cause]:
    causes: list[v.Cause] = []
    if not values:
        return [v.required(field)]
    if "*" in values and len(values) > 1:
        causes.append(v.invalid(field, values, "if '*' is present, must not specify other values"))
    if allowed is not None:
        causes += [v.not_supported(f"{field}[{i}]", x, list(allowed))
                   for i, x in enumerate(values) if x not in allowed]
    return causes


def validate_rule(rule: Obj, field: str) -> list[v.Cause]:
    causes = _validate_list(rule.get("operations"), f"{field}.operations", WEBHOOK_OPERATIONS)
    causes += _validate_list(rule.get("apiGroups"), f"{field}.apiGroups")
    causes += _validate_list(rule.get("apiVersions"), f"{field}.apiVersions")
    for i, ver in enumerate(rule.get("apiVersions") or []):
        if not ver:
            causes.append(v.required(f"{field}.apiVersions[{i}]", "resource cannot be empty"))
    resources = rule.get("resources") or []
    if not resources:
        causes.append(v.required(f"{field}.resources"))
    seen_sub: set[str] = set()
    has_all = False
    for i, res in enumerate(resources):
        if not res:
            causes.append(v.required(f"{field}.resources[{i}]"))
            continue
        if res == "*/*" or res == "*":
            has_all = True
        parts = res.split("/", 1)
        if len(parts) == 2 and parts[0] == "*":
            seen_sub.add(parts[1])
    if has_all and len(resources) > 1:
        causes.append(v.invalid(f"{field}.resources", resources,
                                "if '*' is present, must not specify other resources"))
    scope = rule.get("scope")
    if scope is not None and scope not in SCOPES:
        causes.append(v.not_supported(f"{field}.scope", scope, list(SCOPES)))
    return causes


def validate_match_conditions(conditions: Any, field: str) -> list[v.Cause]:
    from services.common import cel  # the registry compiles only to validate

    causes: list[v.Cause] = []
    conditions = conditions or []
    if len(conditions) > MAX_MATCH_CONDITIONS:
        causes.append(_too_many(field, len(conditions), MAX_MATCH_CONDITIONS))
    names: set[str] = set()
    for i, mc in enumerate(conditions):
        f = f"{field}[{i}]"
        causes += v.unique_name(f"{f}.name", (mc or {}).get("name") or "", names, v.is_qualified_name)
        expr = (mc or {}).get("expression") or ""
        if not expr:
            causes.append(v.required(f"{f}.expression"))
            continue
        try:
            cel.compile_expression(expr, MATCH_CONDITION_VARIABLES)
        except cel.CELCompileError as e:
            causes.append(v.invalid(f"{f}.expression", expr, f"compilation failed: {e}"))
    return causes


MATCH_CONDITION_VARIABLES = ("object", "oldObject", "request", "authorizer")


def validate_webhook(hook: Obj, field: str, mutating: bool) -> list[v.Cause]:
    causes: list[v.Cause] = []
    name = hook.get("name") or ""
    if not name:
        causes.append(v.required(f"{field}.name"))
    else:
        errs = v.is_dns1123_subdomain(name)
        if not errs and len(name.split(".")) < 3:
            errs = ["should be a domain with at least three segments separated by dots"]
        causes += [v.invalid(f"{field}.name", name, m) for m in errs]
    for j, rule in enumerate(hook.get("rules") or []):
        causes += validate_rule(rule or {}, f"{field}.rules[{j}]")
    fp = hook.get("failurePolicy")
    if fp not in ("Fail", "Ignore"):
        causes.append(v.not_supported(f"{field}.failurePolicy", fp, ["Fail", "Ignore"]))
    mp = hook.get("matchPolicy")
    if mp not in ("Equivalent", "Exact"):
        causes.append(v.not_supported(f"{field}.matchPolicy", mp, ["Equivalent", "Exact"]))
    se = hook.get("sideEffects")
    if se is None:
        causes.append(v.required(f"{field}.sideEffects", "must specify one of None, NoneOnDryRun"))
    elif se not in ("None", "NoneOnDryRun"):
        causes.append(v.not_supported(f"{field}.sideEffects", se, ["None", "NoneOnDryRun"]))
    versions = hook.get("admissionReviewVersions")
    if not versions:
        causes.append(v.required(f"{field}.admissionReviewVersions",
                                 "must specify one of v1, v1beta1"))
    else:
        seen: set[str] = set()
        for i, ver in enumerate(versions):
            if ver in seen:
                causes.append(v.duplicate(f"{field}.admissionReviewVersions[{i}]", ver))
            seen.add(ver)
            causes += [v.invalid(f"{field}.admissionReviewVersions[{i}]", ver, m) for m in v.is_dns1035_label(ver)]
        if not seen & set(REVIEW_VERSIONS):
            causes.append(v.invalid(f"{field}.admissionReviewVersions", versions,
                                    "must include at least one of v1, v1beta1"))
    timeout = hook.get("timeoutSeconds")
    if not isinstance(timeout, int) or not 1 <= timeout <= 30:
        causes.append(v.invalid(f"{field}.timeoutSeconds", timeout,
                                "the timeout value must be between 1 and 30 seconds"))
    for sel in ("namespaceSelector", "objectSelector"):
        causes += validate_label_selector(hook.get(sel) or {}, f"{field}.{sel}")
    if mutating:
        rp = hook.get("reinvocationPolicy")
        if rp not in ("Never", "IfNeeded"):
            causes.append(v.not_supported(f"{field}.reinvocationPolicy", rp, ["IfNeeded", "Never"]))
    causes += validate_client_config(hook.get("clientConfig"), f"{field}.clientConfig")
    causes += validate_match_conditions(hook.get("matchConditions"), f"{field}.matchConditions")
    return causes


def validate_label_selector(sel: Obj, field: str) -> list[v.Cause]:
    causes: list[v.Cause] = []
    causes += v.validate_labels(sel.get("matchLabels") or {}, f"{field}.matchLabels")
    for i, req in enumerate(sel.get("matchExpressions") or []):
        f = f"{field}.matchExpressions[{i}]"
        op = (req or {}).get("operator")
        values = (req or {}).get("values") or []
        if op in ("In", "NotIn"):
            if not values:
                causes.append(v.required(f"{f}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                causes.append(v.forbidden(f"{f}.values",
                                          "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        else:
            causes.append(v.invalid(f"{f}.operator", op, "not a valid selector operator"))
        causes += [v.invalid(f"{f}.key", req.get("key"), m) for m in v.is_qualified_name((req or {}).get("key") or "")]
    return causes


class WebhookConfigurationStrategy(Strategy):
    """Mutating- and ValidatingWebhookConfiguration: cluster-scoped, no status; names unique within one."""

    mutating = False

    def canonicalize(self, obj: Obj) -> None:
        for hook in obj.get("webhooks") or []:
            if isinstance(hook, dict):
                default_webhook(hook, self.mutating)

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        names: set[str] = set()
        for i, hook in enumerate(obj.get("webhooks") or []):
            hook = hook or {}
            causes += validate_webhook(hook, f"webhooks[{i}]", self.mutating)
            name = hook.get("name") or ""
            if name and name in names:
                causes.append(v.duplicate(f"webhooks[{i}].name", name))
            names.add(name)
        return causes


class MutatingWebhookConfigurationStrategy(WebhookConfigurationStrategy):
    mutating = True


class ValidatingWebhookConfigurationStrategy(WebhookConfigurationStrategy):
    mutating = False

# --- end of webhooks ---------------------------------------------------------------------------------
