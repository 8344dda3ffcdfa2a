"""Where an APIService's requests go: an endpoint of its Service (kube-aggregator's ServiceResolver,
on the shared services/common/serviceresolver.py)."""
from __future__ import annotations

from typing import Any

from services.common import serviceresolver
from services.common.serviceresolver import ResolveError, Target

__all__ = ["ResolveError", "ServiceResolver", "Target", "service_ref"]

Obj = dict[str, Any]


def service_ref(apiservice: Obj) -> Obj | None:
    return (apiservice.get("spec") or {}).get("service") or None


class ServiceResolver(serviceresolver.ServiceResolver):
    def resolve(self, apiservice: Obj) -> Target:
        """One endpoint of the APIService's Service, in turn."""
        ref = service_ref(apiservice) or {}
        return self.pick(ref.get("namespace") or "", ref.get("name") or "", int(ref.get("port") or 443))
