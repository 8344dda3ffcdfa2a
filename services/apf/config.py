"""The flow-control configuration: FlowSchemas and PriorityLevelConfigurations.

Hard-coded for now as kube-apiserver's mandatory objects plus the suggested ones
(k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap, flowcontrol/v1); the issue that
serves the flowcontrol.apiserver.k8s.io objects replaces BOOTSTRAP with what it
watches. The suggested schemas that need finer resource rules (leader election,
node-high) are left out; their priority levels stay, so that every level's share
of the server's seats is the one kube computes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from services.common.flowcontrol import EXEMPT, stable_uid
from services.common.identity import AUTHENTICATED, SYSTEM_MASTERS, UNAUTHENTICATED


@dataclass(frozen=True)
class Queuing:
    queues: int
    hand_size: int
    queue_length_limit: int


@dataclass(frozen=True)
class PriorityLevel:
    name: str
    exempt: bool = False
    shares: int = 0                  # nominalConcurrencyShares
    lendable_percent: int = 0
    queuing: Queuing | None = None   # None: limitResponse Reject

    @property
    def uid(self) -> str:
        return stable_uid("prioritylevelconfigurations", self.name)


@dataclass(frozen=True)
class Subject:
    kind: str                        # Group, User or ServiceAccount
    name: str                        # "*" matches any
    namespace: str = ""              # ServiceAccount only


@dataclass(frozen=True)
class ResourceRule:
    verbs: tuple[str, ...]
    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    namespaces: tuple[str, ...] = ()
    cluster_scope: bool = False


@dataclass(frozen=True)
class NonResourceRule:
    verbs: tuple[str, ...]
    urls: tuple[str, ...]


@dataclass(frozen=True)
class PolicyRules:
    subjects: tuple[Subject, ...]
    resource_rules: tuple[ResourceRule, ...] = ()
    non_resource_rules: tuple[NonResourceRule, ...] = ()


@dataclass(frozen=True)
class FlowSchema:
    name: str
    priority_level: str
    precedence: int
    distinguisher: str = ""          # ByUser, ByNamespace or "" (one flow)
    rules: tuple[PolicyRules, ...] = field(default_factory=tuple)

    @property
    def uid(self) -> str:
        return stable_uid("flowschemas", self.name)


@dataclass(frozen=True)
class Configuration:
    priority_levels: tuple[PriorityLevel, ...]
    flow_schemas: tuple[FlowSchema, ...]

    def level(self, name: str) -> PriorityLevel:
        for pl in self.priority_levels:
            if pl.name == name:
                return pl
        raise KeyError(name)


def nominal_concurrency(levels: tuple[PriorityLevel, ...], server_seats: int) -> dict[str, int]:
    """kube's nominal concurrency limit per limited level: ceil(seats * shares / sum of shares), >= 1."""
    total = sum(pl.shares for pl in levels if not pl.exempt)
    return {pl.name: max(1, math.ceil(server_seats * pl.shares / total)) if total else 1
            for pl in levels if not pl.exempt}


def _groups(*names: str) -> tuple[Subject, ...]:
    return tuple(Subject("Group", n) for n in names)


_ALL_RESOURCES = (ResourceRule(("*",), ("*",), ("*",), ("*",), True),)
_ALL_NON_RESOURCES = (NonResourceRule(("*",), ("*",)),)


def _all(subjects: tuple[Subject, ...]) -> tuple[PolicyRules, ...]:
    return (PolicyRules(subjects, _ALL_RESOURCES, _ALL_NON_RESOURCES),)


def _q(queues: int, hand: int, length: int) -> Queuing:
    return Queuing(queues, hand, length)


BOOTSTRAP = Configuration(
    priority_levels=(
        PriorityLevel(EXEMPT, exempt=True),
        PriorityLevel("system", shares=30, lendable_percent=33, queuing=_q(64, 6, 50)),
        PriorityLevel("node-high", shares=40, lendable_percent=25, queuing=_q(64, 6, 50)),
        PriorityLevel("leader-election", shares=10, lendable_percent=0, queuing=_q(16, 4, 50)),
        PriorityLevel("workload-high", shares=40, lendable_percent=50, queuing=_q(128, 6, 50)),
        PriorityLevel("workload-low", shares=100, lendable_percent=90, queuing=_q(128, 6, 50)),
        PriorityLevel("global-default", shares=20, lendable_percent=50, queuing=_q(128, 6, 50)),
        PriorityLevel("catch-all", shares=5, lendable_percent=0, queuing=None),
    ),
    flow_schemas=(
        # mandatory: the proxy classifies these itself (services.common.flowcontrol.is_exempt)
        FlowSchema(EXEMPT, EXEMPT, 1, "", _all(_groups(SYSTEM_MASTERS))),
        FlowSchema("probes", "exempt", 2, "", (PolicyRules(
            _groups(UNAUTHENTICATED, AUTHENTICATED),
            non_resource_rules=(NonResourceRule(("get",), ("/healthz", "/readyz", "/livez")),)),)),
        FlowSchema("system-nodes", "system", 500, "ByUser", _all(_groups("system:nodes"))),
        FlowSchema("kube-controller-manager", "workload-high", 800, "ByNamespace",
                   _all((Subject("User", "system:kube-controller-manager"),))),
        FlowSchema("kube-scheduler", "workload-high", 800, "ByNamespace",
                   _all((Subject("User", "system:kube-scheduler"),))),
        FlowSchema("kube-system-service-accounts", "workload-high", 900, "ByNamespace",
                   _all((Subject("ServiceAccount", "*", "kube-system"),))),
        FlowSchema("service-accounts", "workload-low", 9000, "ByUser",
                   _all(_groups("system:serviceaccounts"))),
        FlowSchema("global-default", "global-default", 9900, "ByUser",
                   _all(_groups(UNAUTHENTICATED, AUTHENTICATED))),
        FlowSchema("catch-all", "catch-all", 10000, "ByUser", _all(_groups(UNAUTHENTICATED, AUTHENTICATED))),
    ),
)
