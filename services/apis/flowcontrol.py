"""flowcontrol.apiserver.k8s.io/v1: FlowSchema and PriorityLevelConfiguration, the configuration of API
Priority and Fairness (read by the apf service, kept by the controller-manager's
priority-and-fairness-config controller)."""
from __future__ import annotations

from typing import Any

from services.apiserver.printers import AGE, NAME, TableConvertor, age, column
from services.apiserver.resource import GroupVersion, ResourceInfo

from .kinds import status
from .schemas import ALL
from .strategies.flowcontrol import FlowSchemaStrategy, PriorityLevelConfigurationStrategy

Obj = dict[str, Any]
GROUP = "flowcontrol.apiserver.k8s.io"
_DEF = "io.k8s.api.flowcontrol.v1."


def _doc(definition: str, field: str) -> str:
    """The field's description in kube's OpenAPI definitions (what kube's printers take from SwaggerDoc)."""
    return str(ALL[_DEF + definition]["properties"][field].get("description", ""))


def _flow_schema_row(o: Obj) -> list[Any]:
    """printFlowSchema: `*` for no distinguisher; MissingPL is the Dangling condition's status, `?` without one."""
    spec = o.get("spec") or {}
    method = (spec.get("distinguisherMethod") or {}).get("type") or "*"
    missing = next((c.get("status", "") for c in (o.get("status") or {}).get("conditions") or []
                    if c.get("type") == "Dangling"), "?")
    return [(o.get("metadata") or {}).get("name", ""), (spec.get("priorityLevelConfiguration") or {}).get("name", ""),
            spec.get("matchingPrecedence", 0), method, age(o), missing]


def _priority_level_row(o: Obj) -> list[Any]:
    """printPriorityLevelConfiguration: <none> where a level has no limit or no queues."""
    spec = o.get("spec") or {}
    shares: Any = "<none>"
    queues: Any = "<none>"
    hand: Any = "<none>"
    length: Any = "<none>"
    limited = spec.get("limited")
    if limited is not None:
        shares = limited.get("nominalConcurrencyShares", 0)
        queuing = (limited.get("limitResponse") or {}).get("queuing")
        if queuing is not None:
            queues, hand, length = queuing.get("queues", 0), queuing.get("handSize", 0), queuing.get("queueLengthLimit", 0)
    return [(o.get("metadata") or {}).get("name", ""), spec.get("type", ""), shares, queues, hand, length, age(o)]


FLOW_SCHEMA_TABLE = TableConvertor((
    NAME,
    column("PriorityLevel", "string", _doc("PriorityLevelConfigurationReference", "name")),
    column("MatchingPrecedence", "string", _doc("FlowSchemaSpec", "matchingPrecedence")),
    column("DistinguisherMethod", "string", _doc("FlowSchemaSpec", "distinguisherMethod")),
    AGE,
    column("MissingPL", "string", "references a broken or non-existent PriorityLevelConfiguration"),
), _flow_schema_row)

PRIORITY_LEVEL_TABLE = TableConvertor((
    NAME,
    column("Type", "string", _doc("PriorityLevelConfigurationSpec", "type")),
    column("NominalConcurrencyShares", "string", _doc("LimitedPriorityLevelConfiguration", "nominalConcurrencyShares")),
    column("Queues", "string", _doc("QueuingConfiguration", "queues")),
    column("HandSize", "string", _doc("QueuingConfiguration", "handSize")),
    column("QueueLengthLimit", "string", _doc("QueuingConfiguration", "queueLengthLimit")),
    AGE,
), _priority_level_row)

V1 = GroupVersion(GROUP, "v1", 16100, 21, (
    ResourceInfo(
        group=GROUP, version="v1", kind="FlowSchema", plural="flowschemas", singular="flowschema",
        namespaced=False, key_prefix="/registry/flowschemas/", subresources=(status("FlowSchema"),),
        strategy=FlowSchemaStrategy, table=FLOW_SCHEMA_TABLE,
    ),
    ResourceInfo(
        group=GROUP, version="v1", kind="PriorityLevelConfiguration", plural="prioritylevelconfigurations",
        singular="prioritylevelconfiguration", namespaced=False, key_prefix="/registry/prioritylevelconfigurations/",
        subresources=(status("PriorityLevelConfiguration"),), strategy=PriorityLevelConfigurationStrategy,
        table=PRIORITY_LEVEL_TABLE,
    ),
))

GROUP_VERSIONS = (V1,)
