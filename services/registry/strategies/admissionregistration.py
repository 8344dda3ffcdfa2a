"""Strategies of admissionregistration.k8s.io/v1 (kube's pkg/apis/admissionregistration defaulting and
validation)."""
from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from .. import validation as v
from . import Obj, Strategy

# --- webhooks: MutatingWebhookConfiguration, ValidatingWebhookConfiguration -------------------------

WEBHOOK_OPERATIONS = ("*", "CONNECT", "CREATE", "DELETE", "UPDATE")
SCOPES = ("*", "Cluster", "Namespaced")
REVIEW_VERSIONS = ("v1", "v1beta1")
MAX_MATCH_CONDITIONS = 64


def _dup(field: str, value: Any) -> v.Cause:
    return {"reason": "FieldValueDuplicate", "message": f"Duplicate value: {v._quote(value)}", "field": field}


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


def validate_client_config(cc: Any, field: str) -> list[v.Cause]:
    if not isinstance(cc, dict):
        return [v.required(field, "exactly one of url or service is required")]
    url, service = cc.get("url"), cc.get("service")
    if (url is None) == (service is None):
        return [v.required(field, "exactly one of url or service is required")]
    causes: list[v.Cause] = []
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme != "https":
            causes.append(v.invalid(f"{field}.url", url, "'https' is the only allowed URL scheme"))
        if not parts.hostname:
            causes.append(v.invalid(f"{field}.url", url, "host must be specified"))
        if parts.username or parts.password:
            causes.append(v.invalid(f"{field}.url", url, "user information is not permitted in the URL"))
        if parts.fragment:
            causes.append(v.invalid(f"{field}.url", url, "fragments are not permitted in the URL"))
        if parts.query:
            causes.append(v.invalid(f"{field}.url", url, "query parameters are not permitted in the URL"))
        return causes
    if not service.get("name"):
        causes.append(v.required(f"{field}.service.name", "service name is required"))
    if not service.get("namespace"):
        causes.append(v.required(f"{field}.service.namespace", "service namespace is required"))
    port = service.get("port")
    if not isinstance(port, int) or not 1 <= port <= 65535:
        causes.append(v.invalid(f"{field}.service.port", port, "port is not valid: must be between 1 and 65535, "
                                "inclusive"))
    path = service.get("path")
    if path is not None and not str(path).startswith("/"):
        causes.append(v.invalid(f"{field}.service.path", path, "must start with a '/'"))
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
        name = (mc or {}).get("name") or ""
        if not name:
            causes.append(v.required(f"{f}.name"))
        else:
            causes += [v.invalid(f"{f}.name", name, m) for m in v.is_qualified_name(name)]
            if name in names:
                causes.append(_dup(f"{f}.name", name))
            names.add(name)
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
                causes.append(_dup(f"{field}.admissionReviewVersions[{i}]", ver))
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
                causes.append(_dup(f"webhooks[{i}].name", name))
            names.add(name)
        return causes


class MutatingWebhookConfigurationStrategy(WebhookConfigurationStrategy):
    mutating = True


class ValidatingWebhookConfigurationStrategy(WebhookConfigurationStrategy):
    mutating = False

# --- end of webhooks ---------------------------------------------------------------------------------
