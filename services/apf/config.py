"""The flow-control configuration: FlowSchemas and PriorityLevelConfigurations as the classifier and the
QueueSets use them, digested from the flowcontrol.apiserver.k8s.io/v1 objects (kube's apf_controller
digestConfigObjects).

As kube does: a FlowSchema whose priority level does not exist (Dangling) is left out, and a missing
mandatory object (the `exempt` and `catch-all` FlowSchemas and priority levels) is imagined from kube's
bootstrap configuration, so requests always have somewhere to go. BOOTSTRAP, the digest of kube's
mandatory and suggested objects, serves until the service has read the cluster's own.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from services.apis.flowcontrol_bootstrap import (
    MANDATORY_FLOW_SCHEMAS,
    MANDATORY_PRIORITY_LEVELS,
    SUGGESTED_FLOW_SCHEMAS,
    SUGGESTED_PRIORITY_LEVELS,
)
from services.common.flowcontrol import stable_uid

from .borrowing import Limits, level_limits

Obj = dict[str, Any]


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
    uid: str = ""                    # the object's metadata.uid ("" : a stable one, see stable_uid)
    borrowing_limit_percent: int | None = None  # None: may borrow up to the server's seats (exempt: always)

    def __post_init__(self) -> None:
        if not self.uid:
            object.__setattr__(self, "uid", stable_uid("prioritylevelconfigurations", self.name))


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
    uid: str = ""                    # the object's metadata.uid ("" : a stable one, see stable_uid)

    def __post_init__(self) -> None:
        if not self.uid:
            object.__setattr__(self, "uid", stable_uid("flowschemas", self.name))


@dataclass(frozen=True)
class Configuration:
    priority_levels: tuple[PriorityLevel, ...]
    flow_schemas: tuple[FlowSchema, ...]

    def level(self, name: str) -> PriorityLevel:
        for pl in self.priority_levels:
            if pl.name == name:
                return pl
        raise KeyError(name)


def concurrency_limits(levels: tuple[PriorityLevel, ...], server_seats: int) -> dict[str, Limits]:
    """kube's nominal, lower and upper concurrency limits of every level, the exempt one included: its
    nominalConcurrencyShares (0 unless an administrator set them) count in the sum of shares."""
    total = sum(pl.shares for pl in levels)
    return {pl.name: level_limits(server_seats, pl.shares, total, pl.lendable_percent, pl.borrowing_limit_percent)
            for pl in levels}


# From the API objects -------------------------------------------------------------------------------

def _strings(values: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in values or ())


def _subject(s: Obj) -> Subject:
    kind = s.get("kind", "")
    if kind == "ServiceAccount":
        sa = s.get("serviceAccount") or {}
        return Subject(kind, sa.get("name", ""), sa.get("namespace", ""))
    return Subject(kind, (s.get({"Group": "group", "User": "user"}.get(kind, "")) or {}).get("name", ""))


def _policy_rules(r: Obj) -> PolicyRules:
    return PolicyRules(
        tuple(_subject(s) for s in r.get("subjects") or ()),
        tuple(ResourceRule(_strings(rr.get("verbs")), _strings(rr.get("apiGroups")), _strings(rr.get("resources")),
                           _strings(rr.get("namespaces")), bool(rr.get("clusterScope")))
              for rr in r.get("resourceRules") or ()),
        tuple(NonResourceRule(_strings(nr.get("verbs")), _strings(nr.get("nonResourceURLs")))
              for nr in r.get("nonResourceRules") or ()))


def flow_schema(obj: Obj) -> FlowSchema:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    return FlowSchema(meta.get("name", ""), (spec.get("priorityLevelConfiguration") or {}).get("name", ""),
                      int(spec.get("matchingPrecedence") or 0), (spec.get("distinguisherMethod") or {}).get("type", ""),
                      tuple(_policy_rules(r) for r in spec.get("rules") or ()), meta.get("uid", ""))


def priority_level(obj: Obj) -> PriorityLevel:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    if spec.get("type") == "Exempt":
        exempt = spec.get("exempt") or {}
        return PriorityLevel(meta.get("name", ""), True, int(exempt.get("nominalConcurrencyShares") or 0),
                             int(exempt.get("lendablePercent") or 0), uid=meta.get("uid", ""))
    limited = spec.get("limited") or {}
    q = (limited.get("limitResponse") or {}).get("queuing")
    queuing = Queuing(int(q.get("queues") or 1), int(q.get("handSize") or 1), int(q.get("queueLengthLimit") or 1)) \
        if q is not None else None
    borrowing = limited.get("borrowingLimitPercent")
    return PriorityLevel(meta.get("name", ""), False, int(limited.get("nominalConcurrencyShares") or 0),
                         int(limited.get("lendablePercent") or 0), queuing, meta.get("uid", ""),
                         None if borrowing is None else int(borrowing))


def digest(flow_schemas: Iterable[Obj], priority_levels: Iterable[Obj]) -> Configuration:
    """The configuration the objects make: dangling FlowSchemas out, missing mandatory objects imagined."""
    levels = {pl.name: pl for pl in map(priority_level, priority_levels)}
    for obj in MANDATORY_PRIORITY_LEVELS:
        levels.setdefault(obj["metadata"]["name"], priority_level(obj))
    schemas = {fs.name: fs for fs in map(flow_schema, flow_schemas) if fs.priority_level in levels}
    for obj in MANDATORY_FLOW_SCHEMAS:
        schemas.setdefault(obj["metadata"]["name"], flow_schema(obj))
    return Configuration(tuple(levels.values()), tuple(schemas.values()))


BOOTSTRAP = digest(MANDATORY_FLOW_SCHEMAS + SUGGESTED_FLOW_SCHEMAS,
                   MANDATORY_PRIORITY_LEVELS + SUGGESTED_PRIORITY_LEVELS)
