"""kube-apiserver 1.33's API Priority and Fairness configuration (k8s.io/apiserver's
apis/flowcontrol/bootstrap, flowcontrol.apiserver.k8s.io/v1): the mandatory objects, which every cluster
must hold as they are, and the suggested ones, which an administrator may change or delete.

The strategies check the mandatory specs against these; the controller-manager's
priority-and-fairness-config controller keeps them in the cluster; the apf service falls back on them
until it has read the cluster's own objects."""
from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]

API_VERSION = "flowcontrol.apiserver.k8s.io/v1"
# Whether the ensurer may overwrite the spec (kube's flowcontrolv1.AutoUpdateAnnotationKey).
AUTOUPDATE_ANNOTATION = "apf.kubernetes.io/autoupdate-spec"
EXEMPT = "exempt"
CATCH_ALL = "catch-all"

_ALL_RESOURCES = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": True, "namespaces": ["*"]}
_ALL_NON_RESOURCES = {"verbs": ["*"], "nonResourceURLs": ["*"]}
_GET_CREATE_UPDATE = ["get", "create", "update"]


def _group(name: str) -> Obj:
    return {"kind": "Group", "group": {"name": name}}


def _user(name: str) -> Obj:
    return {"kind": "User", "user": {"name": name}}


def _kube_system_sa(name: str) -> Obj:
    return {"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": name}}


def _rule(verbs: list[str], groups: list[str], resources: list[str], namespaces: list[str],
          cluster_scope: bool = False) -> Obj:
    r: Obj = {"verbs": verbs, "apiGroups": groups, "resources": resources, "namespaces": namespaces}
    if cluster_scope:
        r["clusterScope"] = True
    return r


def _plc(name: str, spec: Obj) -> Obj:
    return {"apiVersion": API_VERSION, "kind": "PriorityLevelConfiguration", "metadata": {"name": name},
            "spec": spec}


def _limited(shares: int, lendable: int, queuing: tuple[int, int, int] | None) -> Obj:
    response: Obj = {"type": "Reject"}
    if queuing is not None:
        queues, hand, length = queuing
        response = {"type": "Queue", "queuing": {"queues": queues, "handSize": hand, "queueLengthLimit": length}}
    return {"type": "Limited", "limited": {"nominalConcurrencyShares": shares, "lendablePercent": lendable,
                                           "limitResponse": response}}


def _fs(name: str, level: str, precedence: int, distinguisher: str, *rules: Obj) -> Obj:
    spec: Obj = {"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": precedence,
                 "rules": list(rules)}
    if distinguisher:
        spec["distinguisherMethod"] = {"type": distinguisher}
    return {"apiVersion": API_VERSION, "kind": "FlowSchema", "metadata": {"name": name}, "spec": spec}


def _everything(*subjects: Obj) -> Obj:
    return {"subjects": list(subjects), "resourceRules": [dict(_ALL_RESOURCES)],
            "nonResourceRules": [dict(_ALL_NON_RESOURCES)]}


_EVERYONE = (_group("system:unauthenticated"), _group("system:authenticated"))

MANDATORY_PRIORITY_LEVELS: tuple[Obj, ...] = (
    _plc(EXEMPT, {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}}),
    _plc(CATCH_ALL, _limited(5, 0, None)),
)
MANDATORY_FLOW_SCHEMAS: tuple[Obj, ...] = (
    _fs(EXEMPT, EXEMPT, 1, "", _everything(_group("system:masters"))),
    _fs(CATCH_ALL, CATCH_ALL, 10000, "ByUser", _everything(*_EVERYONE)),
)
SUGGESTED_PRIORITY_LEVELS: tuple[Obj, ...] = (
    _plc("system", _limited(30, 33, (64, 6, 50))),
    _plc("node-high", _limited(40, 25, (64, 6, 50))),
    _plc("leader-election", _limited(10, 0, (16, 4, 50))),
    _plc("workload-high", _limited(40, 50, (128, 6, 50))),
    _plc("workload-low", _limited(100, 90, (128, 6, 50))),
    _plc("global-default", _limited(20, 50, (128, 6, 50))),
)
SUGGESTED_FLOW_SCHEMAS: tuple[Obj, ...] = (
    _fs("system-nodes", "system", 500, "ByUser", _everything(_group("system:nodes"))),
    _fs("system-node-high", "node-high", 400, "ByUser", {
        "subjects": [_group("system:nodes")],
        "resourceRules": [_rule(["*"], [""], ["nodes", "nodes/status"], ["*"], True),
                          _rule(["*"], ["coordination.k8s.io"], ["leases"], ["*"])]}),
    _fs("probes", EXEMPT, 2, "", {
        "subjects": list(_EVERYONE),
        "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}]}),
    _fs("system-leader-election", "leader-election", 100, "ByUser", {
        "subjects": [_user("system:kube-controller-manager"), _user("system:kube-scheduler"),
                     _kube_system_sa("*")],
        "resourceRules": [_rule(_GET_CREATE_UPDATE, [""], ["endpoints", "configmaps"], ["kube-system"]),
                          _rule(_GET_CREATE_UPDATE, ["coordination.k8s.io"], ["leases"], ["*"])]}),
    _fs("endpoint-controller", "workload-high", 150, "ByUser", {
        "subjects": [_user("system:kube-controller-manager"), _kube_system_sa("endpoint-controller"),
                     _kube_system_sa("endpointslicemirroring-controller")],
        "resourceRules": [_rule(_GET_CREATE_UPDATE, [""], ["endpoints"], ["*"])]}),
    _fs("workload-leader-election", "leader-election", 200, "ByUser", {
        "subjects": [_kube_system_sa("*")],
        "resourceRules": [_rule(_GET_CREATE_UPDATE, [""], ["endpoints", "configmaps"], ["*"]),
                          _rule(_GET_CREATE_UPDATE, ["coordination.k8s.io"], ["leases"], ["*"])]}),
    _fs("kube-controller-manager", "workload-high", 800, "ByNamespace",
        _everything(_user("system:kube-controller-manager"))),
    _fs("kube-scheduler", "workload-high", 800, "ByNamespace", _everything(_user("system:kube-scheduler"))),
    _fs("kube-system-service-accounts", "workload-high", 900, "ByNamespace", _everything(_kube_system_sa("*"))),
    _fs("service-accounts", "workload-low", 9000, "ByUser", _everything(_group("system:serviceaccounts"))),
    _fs("global-default", "global-default", 9900, "ByUser", _everything(*_EVERYONE)),
)

MANDATORY_SPECS: dict[tuple[str, str], Obj] = {
    (o["kind"], o["metadata"]["name"]): o["spec"] for o in MANDATORY_PRIORITY_LEVELS + MANDATORY_FLOW_SCHEMAS}


# The member of a mandatory object's spec that administrators may change: the exempt level's
# ExemptPriorityLevelConfiguration (its nominalConcurrencyShares and lendablePercent).
CONFIGURABLE: dict[tuple[str, str], str] = {("PriorityLevelConfiguration", EXEMPT): "exempt"}


def fixed_part(kind: str, name: str, spec: Obj) -> Obj:
    """A mandatory object's spec without its configurable member: what the apiserver holds fixed."""
    member = CONFIGURABLE.get((kind, name))
    return {k: v for k, v in spec.items() if k != member}


def mandatory_spec(kind: str, name: str) -> Obj | None:
    """The fixed spec of a mandatory object (a copy), or None for any other name."""
    spec = MANDATORY_SPECS.get((kind, name))
    return copy.deepcopy(spec) if spec is not None else None
