"""admissionregistration.k8s.io/v1: the kinds that extend admission."""
from __future__ import annotations

from typing import Any

from ..printers import column, name_age
from ..strategies.admissionregistration import (
    MutatingWebhookConfigurationStrategy,
    ValidatingWebhookConfigurationStrategy,
)
from . import GroupVersion, ResourceInfo

Obj = dict[str, Any]
GROUP = "admissionregistration.k8s.io"

# --- webhooks: MutatingWebhookConfiguration, ValidatingWebhookConfiguration -------------------------


def _webhook_count(obj: Obj) -> list[Any]:
    return [len(obj.get("webhooks") or [])]


_WEBHOOKS_TABLE = name_age([column("Webhooks", "integer", "Webhooks indicates the number of webhooks.")],
                           _webhook_count)

WEBHOOK_KINDS = (
    ResourceInfo(
        group=GROUP, version="v1", kind="MutatingWebhookConfiguration",
        plural="mutatingwebhookconfigurations", singular="mutatingwebhookconfiguration",
        namespaced=False, key_prefix="/registry/mutatingwebhookconfigurations/",
        categories=("api-extensions",), strategy=MutatingWebhookConfigurationStrategy, table=_WEBHOOKS_TABLE,
    ),
    ResourceInfo(
        group=GROUP, version="v1", kind="ValidatingWebhookConfiguration",
        plural="validatingwebhookconfigurations", singular="validatingwebhookconfiguration",
        namespaced=False, key_prefix="/registry/validatingwebhookconfigurations/",
        categories=("api-extensions",), strategy=ValidatingWebhookConfigurationStrategy, table=_WEBHOOKS_TABLE,
    ),
)

# --- end of webhooks ---------------------------------------------------------------------------------

V1 = GroupVersion(GROUP, "v1", 16700, 15, WEBHOOK_KINDS)

GROUP_VERSIONS = (V1,)
