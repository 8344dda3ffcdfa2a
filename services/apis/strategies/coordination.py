"""Strategies of coordination.k8s.io: Lease."""
from __future__ import annotations

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy


class LeaseStrategy(Strategy):
    def validate(self, obj: Obj) -> list[v.Cause]:
        """kube's ValidateLeaseSpec: a positive duration, transitions never negative."""
        causes = super().validate(obj)
        spec = obj.get("spec") or {}
        duration, transitions = spec.get("leaseDurationSeconds"), spec.get("leaseTransitions")
        if isinstance(duration, int) and duration <= 0:
            causes.append(v.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
        if isinstance(transitions, int) and transitions < 0:
            causes.append(v.invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0"))
        return causes

