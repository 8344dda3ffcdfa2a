"""Strategies of flowcontrol.apiserver.k8s.io/v1: FlowSchema and PriorityLevelConfiguration (kube's
pkg/registry/flowcontrol and pkg/apis/flowcontrol/{v1 defaults, validation}).

Covered: v1's SetDefaults (matchingPrecedence 1000; a limited level's nominalConcurrencyShares 30 and
lendablePercent 0; queuing's queues 64, handSize 8, queueLengthLimit 50; an exempt level's shares and
lendablePercent 0), ValidateFlowSchema and ValidatePriorityLevelConfiguration with kube's messages (names,
precedence 1..10000 and 1 for `exempt` only, distinguisher methods, subjects, resource and non-resource
rules, Exempt iff named `exempt`, queuing iff limitResponse Queue, the shuffle-sharding entropy bound, the
mandatory objects' fixed specs) and the status rules (condition types set and unique). Status is cleared
on create and kept on update; a spec change bumps metadata.generation.
"""
from __future__ import annotations

import math
from typing import Any

from services.apiserver import validation as v
from services.apiserver.fielderrors import quote
from services.apiserver.registry.rest import Obj, Strategy

from ..flowcontrol_bootstrap import EXEMPT, fixed_part, mandatory_spec

MAX_MATCHING_PRECEDENCE = 10000
DEFAULT_MATCHING_PRECEDENCE = 1000
DEFAULT_NOMINAL_CONCURRENCY_SHARES = 30
DEFAULT_QUEUES, DEFAULT_HAND_SIZE, DEFAULT_QUEUE_LENGTH_LIMIT = 64, 8, 50
MAX_QUEUES = 10 * 1000 * 1000
MAX_HASH_BITS = 60  # shufflesharding.MaxHashBits
DISTINGUISHER_METHODS = ["ByNamespace", "ByUser"]
VERBS = sorted(["get", "list", "create", "update", "delete", "deletecollection", "patch", "watch", "proxy"])
SUBJECT_KINDS = ["Group", "ServiceAccount", "User"]
PRIORITY_LEVEL_TYPES = ["Exempt", "Limited"]
LIMIT_RESPONSE_TYPES = ["Queue", "Reject"]
NS_ERR_INTRO = "each member of this list must be '*' or a DNS-1123 label; "


def _go_strings(values: list[Any]) -> str:
    """A []string as field.Error prints it (%#v)."""
    return "[]string{" + ", ".join(quote(str(x)) for x in values) + "}"


def _not_supported_go(field: str, rendered: str, allowed: list[str]) -> v.Cause:
    opts = ", ".join(quote(a) for a in allowed)
    return {"reason": "FieldValueNotSupported", "message": f"Unsupported value: {rendered}: supported values: {opts}",
            "field": field}


def required_entropy_bits(deck: int, hand: int) -> int:
    """shufflesharding.RequiredEntropyBits: the hash bits dealing `hand` cards from `deck` needs."""
    return math.ceil(math.log2(deck) * hand)


# Defaulting (flowcontrol/v1 SetDefaults_*) --------------------------------------------------------

def default_flow_schema(obj: Obj) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict) and not spec.get("matchingPrecedence"):
        spec["matchingPrecedence"] = DEFAULT_MATCHING_PRECEDENCE


def default_priority_level(obj: Obj) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    exempt = spec.get("exempt")
    if isinstance(exempt, dict):
        exempt.setdefault("nominalConcurrencyShares", 0)
        exempt.setdefault("lendablePercent", 0)
    limited = spec.get("limited")
    if isinstance(limited, dict):
        if limited.get("nominalConcurrencyShares") is None:
            limited["nominalConcurrencyShares"] = DEFAULT_NOMINAL_CONCURRENCY_SHARES
        if limited.get("lendablePercent") is None:
            limited["lendablePercent"] = 0
        queuing = (limited.get("limitResponse") or {}).get("queuing")
        if isinstance(queuing, dict):
            for key, default in (("handSize", DEFAULT_HAND_SIZE), ("queues", DEFAULT_QUEUES),
                                 ("queueLengthLimit", DEFAULT_QUEUE_LENGTH_LIMIT)):
                if not queuing.get(key):
                    queuing[key] = default


# FlowSchema validation ----------------------------------------------------------------------------

def _validate_verbs(verbs: list[str], path: str) -> list[v.Cause]:
    if not verbs:
        return [v.required(f"{path}.verbs", "verbs must contain at least one value")]
    if "*" in verbs:
        if len(verbs) > 1:
            return [v.invalid_go(f"{path}.verbs", _go_strings(verbs), "if '*' is present, must not specify other verbs")]
        return []
    if not set(verbs) <= set(VERBS):
        return [_not_supported_go(f"{path}.verbs", _go_strings(verbs), VERBS)]
    return []


def validate_non_resource_url_path(url: str, path: str) -> v.Cause | None:
    if not url:
        return v.invalid(path, url, "must not be empty")
    if url == "/":
        return None
    if not url.startswith("/"):
        return v.invalid(path, url, "must start with slash")
    if " " in url:
        return v.invalid(path, url, "must not contain white-space")
    if "//" in url:
        return v.invalid(path, url, "must not contain double slash")
    wildcards = url.count("*")
    if wildcards > 1 or (wildcards == 1 and not url.endswith("/*")):
        return v.invalid(path, url, "wildcard can only do suffix matching")
    return None


def _validate_non_resource_rule(rule: Obj, path: str) -> list[v.Cause]:
    causes = _validate_verbs(rule.get("verbs") or [], path)
    urls = rule.get("nonResourceURLs") or []
    if not urls:
        causes.append(v.required(f"{path}.nonResourceURLs", "nonResourceURLs must contain at least one value"))
    elif "*" in urls:
        if len(urls) > 1:
            causes.append(v.invalid_go(f"{path}.nonResourceURLs", _go_strings(urls),
                                       "if '*' is present, must not specify other non-resource URLs"))
    else:
        for i, url in enumerate(urls):
            err = validate_non_resource_url_path(url, f"{path}.nonResourceURLs[{i}]")
            if err is not None:
                causes.append(err)
    return causes


def _validate_resource_rule(rule: Obj, path: str) -> list[v.Cause]:
    causes = _validate_verbs(rule.get("verbs") or [], path)
    for key, what in (("apiGroups", "api group"), ("resources", "resource")):
        values = rule.get(key) or []
        if not values:
            causes.append(v.required(f"{path}.{key}", f"resource rules must supply at least one {what}"))
        elif len(values) > 1 and "*" in values:
            causes.append(v.invalid_go(f"{path}.{key}", _go_strings(values),
                                       f"if '*' is present, must not specify other {what}s"))
    namespaces = rule.get("namespaces") or []
    if not namespaces and not rule.get("clusterScope"):
        causes.append(v.required(f"{path}.namespaces",
                                 "resource rules that are not cluster scoped must supply at least one namespace"))
    elif "*" in namespaces:
        if len(namespaces) > 1:
            causes.append(v.invalid_go(f"{path}.namespaces", _go_strings(namespaces),
                                       "if '*' is present, must not specify other namespaces"))
    else:
        for i, ns in enumerate(namespaces):
            causes += [v.invalid(f"{path}.namespaces[{i}]", ns, NS_ERR_INTRO + msg) for msg in v.is_dns1123_label(ns)]
    return causes


def _validate_subject(subject: Obj, path: str) -> list[v.Cause]:
    kind = subject.get("kind")
    if kind not in SUBJECT_KINDS:
        return [v.not_supported(f"{path}.kind", kind or "", SUBJECT_KINDS)]
    member = {"ServiceAccount": "serviceAccount", "User": "user", "Group": "group"}[kind]
    causes: list[v.Cause] = []
    body = subject.get(member)
    if body is None:
        causes.append(v.required(f"{path}.{member}", f"{member} is required when subject kind is '{kind}'"))
    elif kind == "ServiceAccount":
        name, ns = body.get("name") or "", body.get("namespace") or ""
        if not name:
            causes.append(v.required(f"{path}.serviceAccount.name"))
        elif name != "*":
            causes += [v.invalid(f"{path}.serviceAccount.name", name, m) for m in v.is_dns1123_subdomain(name)]
        if ns:
            causes += [v.invalid(f"{path}.serviceAccount.namespace", ns, m) for m in v.is_dns1123_label(ns)]
        else:
            causes.append(v.required(f"{path}.serviceAccount.namespace", "must specify namespace for service account"))
    elif not body.get("name"):
        causes.append(v.required(f"{path}.{member}.name"))
    for other, other_kind in (("user", "User"), ("group", "Group"), ("serviceAccount", "ServiceAccount")):
        if other != member and subject.get(other) is not None:
            causes.append(v.forbidden(f"{path}.{other}", f"{other} is forbidden when subject kind is not '{other_kind}'"))
    return causes


def _validate_policy_rules(rule: Obj, path: str) -> list[v.Cause]:
    causes: list[v.Cause] = []
    subjects = rule.get("subjects") or []
    if not subjects:
        causes.append(v.required(f"{path}.subjects", "subjects must contain at least one value"))
    for i, s in enumerate(subjects):
        causes += _validate_subject(s, f"{path}.subjects[{i}]")
    resource_rules, non_resource_rules = rule.get("resourceRules") or [], rule.get("nonResourceRules") or []
    if not resource_rules and not non_resource_rules:
        causes.append(v.required(path, "at least one of resourceRules and nonResourceRules has to be non-empty"))
    for i, r in enumerate(resource_rules):
        causes += _validate_resource_rule(r, f"{path}.resourceRules[{i}]")
    for i, r in enumerate(non_resource_rules):
        causes += _validate_non_resource_rule(r, f"{path}.nonResourceRules[{i}]")
    return causes


def validate_flow_schema_spec(name: str, spec: Obj) -> list[v.Cause]:
    causes: list[v.Cause] = []
    precedence = spec.get("matchingPrecedence") or 0
    if precedence <= 0:
        causes.append(v.invalid("spec.matchingPrecedence", precedence, "must be a positive value"))
    if precedence > MAX_MATCHING_PRECEDENCE:
        causes.append(v.invalid("spec.matchingPrecedence", precedence,
                                f"must not be greater than {MAX_MATCHING_PRECEDENCE}"))
    if precedence == 1 and name != EXEMPT:
        causes.append(v.invalid("spec.matchingPrecedence", precedence,
                                "only the schema named 'exempt' may have matchingPrecedence 1"))
    method = spec.get("distinguisherMethod")
    if method is not None and method.get("type") not in DISTINGUISHER_METHODS:
        rendered = f"flowcontrol.FlowDistinguisherMethod{{Type:{quote(str(method.get('type') or ''))}}}"
        causes.append(_not_supported_go("spec.distinguisherMethod.type", rendered, DISTINGUISHER_METHODS))
    level = (spec.get("priorityLevelConfiguration") or {}).get("name") or ""
    if level:
        causes += [v.invalid("spec.priorityLevelConfiguration.name", level, m) for m in v.is_dns1123_subdomain(level)]
    else:
        causes.append(v.required("spec.priorityLevelConfiguration.name", "must reference a priority level"))
    for i, rule in enumerate(spec.get("rules") or []):
        causes += _validate_policy_rules(rule, f"spec.rules[{i}]")
    return causes


def validate_conditions(status: Obj) -> list[v.Cause]:
    """ValidateFlowSchemaStatus / ValidatePriorityLevelConfigurationStatus: each condition typed, types unique."""
    causes: list[v.Cause] = []
    seen: set[str] = set()
    for i, cond in enumerate(status.get("conditions") or []):
        typ = cond.get("type") or ""
        if typ in seen:
            causes.append(v.duplicate(f"status.conditions[{i}].type", typ))
        seen.add(typ)
        if not typ:
            causes.append(v.required(f"status.conditions[{i}].type", "must not be empty"))
    return causes


def _mandatory(kind: str, name: str, spec: Obj) -> list[v.Cause]:
    fixed = mandatory_spec(kind, name)
    if fixed is not None and fixed_part(kind, name, spec) != fixed_part(kind, name, fixed):
        return [v.invalid_go("spec", f"flowcontrol.{kind}Spec{{...}}", f"spec of '{name}' must equal the fixed value")]
    return []


# PriorityLevelConfiguration validation ------------------------------------------------------------

def _validate_queuing(q: Obj, path: str) -> list[v.Cause]:
    causes: list[v.Cause] = []
    length, queues, hand = q.get("queueLengthLimit") or 0, q.get("queues") or 0, q.get("handSize") or 0
    if length <= 0:
        causes.append(v.invalid(f"{path}.queueLengthLimit", length, "must be positive"))
    if queues <= 0:
        causes.append(v.invalid(f"{path}.queues", queues, "must be positive"))
    elif queues > MAX_QUEUES:
        causes.append(v.invalid(f"{path}.queues", queues, f"must not be greater than {MAX_QUEUES}"))
    if hand <= 0:
        causes.append(v.invalid(f"{path}.handSize", hand, "must be positive"))
    elif hand > queues:
        causes.append(v.invalid(f"{path}.handSize", hand, f"should not be greater than queues ({queues})"))
    elif required_entropy_bits(queues, hand) > MAX_HASH_BITS:
        causes.append(v.invalid(f"{path}.handSize", hand, f"required entropy bits of deckSize {queues} and handSize "
                                                          f"{hand} should not be greater than {MAX_HASH_BITS}"))
    return causes


def _validate_limit_response(lr: Obj, path: str) -> list[v.Cause]:
    typ = lr.get("type") or ""
    if typ == "Reject":
        if lr.get("queuing") is not None:
            return [v.forbidden(f"{path}.queuing", "must be nil if limited.limitResponse.type is not Limited")]
        return []
    if typ == "Queue":
        if lr.get("queuing") is None:
            return [v.required(f"{path}.queuing", "must not be empty if limited.limitResponse.type is Limited")]
        return _validate_queuing(lr["queuing"], f"{path}.queuing")
    return [v.not_supported(f"{path}.type", typ, LIMIT_RESPONSE_TYPES)]


def _validate_limited(limited: Obj, path: str) -> list[v.Cause]:
    causes: list[v.Cause] = []
    shares = limited.get("nominalConcurrencyShares") or 0
    if shares < 0:  # v1 allows zero shares
        causes.append(v.invalid(f"{path}.nominalConcurrencyShares", shares, "must be a non-negative integer"))
    causes += _validate_limit_response(limited.get("limitResponse") or {}, f"{path}.limitResponse")
    lendable = limited.get("lendablePercent")
    if lendable is not None and not 0 <= lendable <= 100:
        causes.append(v.invalid(f"{path}.lendablePercent", lendable, "must be between 0 and 100, inclusive"))
    borrowing = limited.get("borrowingLimitPercent")
    if borrowing is not None and borrowing < 0:
        causes.append(v.invalid(f"{path}.borrowingLimitPercent", borrowing, "if specified, must be a non-negative integer"))
    return causes


def _validate_exempt(exempt: Obj, path: str) -> list[v.Cause]:
    causes: list[v.Cause] = []
    shares = exempt.get("nominalConcurrencyShares")
    if shares is not None and shares < 0:
        causes.append(v.invalid(f"{path}.nominalConcurrencyShares", shares, "must be a non-negative integer"))
    lendable = exempt.get("lendablePercent")
    if lendable is not None and not 0 <= lendable <= 100:
        causes.append(v.invalid(f"{path}.lendablePercent", lendable, "must be between 0 and 100, inclusive"))
    return causes


def validate_priority_level_spec(name: str, spec: Obj) -> list[v.Cause]:
    causes: list[v.Cause] = []
    typ = spec.get("type") or ""
    if (name == EXEMPT) != (typ == "Exempt"):
        causes.append(v.invalid("spec.type", typ, "type must be 'Exempt' if and only if name is 'exempt'"))
    if typ == "Exempt":
        if spec.get("limited") is not None:
            causes.append(v.forbidden("spec.limited", "must be nil if the type is not Limited"))
        if spec.get("exempt") is not None:
            causes += _validate_exempt(spec["exempt"], "spec.exempt")
    elif typ == "Limited":
        if spec.get("exempt") is not None:
            causes.append(v.forbidden("spec.exempt", "must be nil if the type is Limited"))
        if spec.get("limited") is None:
            causes.append(v.required("spec.limited", "must not be empty when type is Limited"))
        else:
            causes += _validate_limited(spec["limited"], "spec.limited")
    else:
        causes.append(v.not_supported("spec.type", typ, PRIORITY_LEVEL_TYPES))
    return causes


# Strategies ---------------------------------------------------------------------------------------

class _FlowControlStrategy(Strategy):
    """What both kinds share: status kept apart from spec, the mandatory objects' fixed specs."""

    status_fields = ("status",)
    spec_fields = ("spec",)
    status_subresource = True

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)

    def validate_spec(self, name: str, spec: Obj) -> list[v.Cause]:
        """The kind's own spec rules (each subclass has them)."""
        return []

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        name = (obj.get("metadata") or {}).get("name") or ""
        spec = obj.get("spec") or {}
        causes += self.validate_spec(name, spec)
        causes += _mandatory(self.info.kind, name, spec)
        return causes + validate_conditions(obj.get("status") or {})


class FlowSchemaStrategy(_FlowControlStrategy):
    def canonicalize(self, obj: Obj) -> None:
        default_flow_schema(obj)

    def validate_spec(self, name: str, spec: Obj) -> list[v.Cause]:
        return validate_flow_schema_spec(name, spec)


class PriorityLevelConfigurationStrategy(_FlowControlStrategy):
    def canonicalize(self, obj: Obj) -> None:
        default_priority_level(obj)

    def validate_spec(self, name: str, spec: Obj) -> list[v.Cause]:
        return validate_priority_level_spec(name, spec)

