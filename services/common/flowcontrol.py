"""What the proxy and the apf service both know of API Priority and Fairness: stable uids for
configuration objects not read from the cluster (the proxy's exempt decisions, the apf service's
imagined mandatory objects), and kube's mandatory exempt FlowSchema (precedence 1, group
system:masters, priority level exempt), which no other FlowSchema can take precedence over, so the
proxy classifies those requests itself and they never depend on the apf service."""
from __future__ import annotations

import uuid
from collections.abc import Iterable

from .identity import SYSTEM_MASTERS

_UID_NAMESPACE = uuid.UUID("6f1c3a5e-8f43-5b4f-9f0e-1d1e8a2a7c11")


def stable_uid(kind: str, name: str) -> str:
    """A uid that stays the same across restarts and replicas (uuid5 of kind and name)."""
    return str(uuid.uuid5(_UID_NAMESPACE, f"{kind}/{name}"))


EXEMPT = "exempt"  # the mandatory FlowSchema and its priority level have the same name
EXEMPT_FLOW_SCHEMA_UID = stable_uid("flowschemas", EXEMPT)
EXEMPT_PRIORITY_LEVEL_UID = stable_uid("prioritylevelconfigurations", EXEMPT)


def is_exempt(groups: Iterable[str]) -> bool:
    """The request matches the mandatory exempt FlowSchema (every request of system:masters)."""
    return SYSTEM_MASTERS in groups
