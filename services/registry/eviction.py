"""pods/eviction's rules (kube's pkg/registry/core/pod/storage/eviction.go, EvictionREST): when an eviction
deletes the pod at once, when it asks the pod's PodDisruptionBudget, and the budget's check and decrement.
The handler (services/registry/pods.py, EvictionREST) reads and writes; this module decides.

- A pod that is Pending, Succeeded or Failed, or already being deleted, is deleted without asking a budget
  (a Pending pod under the resourceVersion it was read at, so it cannot become Running unnoticed).
- The budgets of the pod's namespace whose selector matches its labels (an empty selector matches none):
  none, the pod is deleted; more than one, 500 "This pod has more than one PodDisruptionBudget, which the
  eviction subresource does not support.".
- A pod that is not Ready does not count as healthy: it is deleted without decrementing when the budget's
  unhealthyPodEvictionPolicy is AlwaysAllow, or when currentHealthy >= desiredHealthy > 0.
- Otherwise the budget's status decides: observedGeneration behind metadata.generation is 429 ("still
  being processed"), disruptionsAllowed 0 is 429 "Cannot evict pod as it would violate the pod's disruption
  budget." with a DisruptionBudget cause; else disruptionsAllowed goes down by one, the pod is recorded in
  status.disruptedPods (the DisruptionAllowed condition turns False at 0) and the pod is deleted.

What the status means here: in kube the disruption controller computes it from the running pods; apiary
has no such controller (no kubelet runs pods), so a budget's status is what its owner writes through
poddisruptionbudgets/status (a new budget's zero status allows no disruption, as in kube before the
controller's first pass), and evictions decrement it as kube's do.
"""
from __future__ import annotations

import copy
from typing import Any

from services.apis.strategies.workload import selector_matches
from services.apiserver.registry.rest import now_rfc3339
from services.common import errors

Obj = dict[str, Any]
MAX_DISRUPTED_POD_SIZE = 2000
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
MORE_THAN_ONE = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."


def _phase(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase") or ""


def can_ignore_budget(pod: Obj) -> bool:
    """canIgnorePDB: a terminal or Pending pod, or one being deleted."""
    return _phase(pod) in ("Succeeded", "Failed", "Pending") or bool((pod.get("metadata") or {})
                                                                     .get("deletionTimestamp"))


def should_enforce_resource_version(pod: Obj) -> bool:
    """shouldEnforceResourceVersion: not for terminal pods or ones being deleted."""
    return _phase(pod) not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get("deletionTimestamp")


def is_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [] if isinstance(c, dict))


def matching_budgets(pod: Obj, budgets: list[Obj]) -> list[Obj]:
    """getPodDisruptionBudgets: the namespace's budgets whose (non-empty) selector matches the pod's labels."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    out = []
    for pdb in budgets:
        if (pdb.get("metadata") or {}).get("namespace") != meta.get("namespace"):
            continue
        sel = (pdb.get("spec") or {}).get("selector")
        if not sel or not (sel.get("matchLabels") or sel.get("matchExpressions")):
            continue
        if selector_matches(sel, labels):
            out.append(pdb)
    return out


def more_than_one() -> errors.APIError:
    return errors.APIError(MORE_THAN_ONE, code=500, reason="")


def unhealthy_may_go(pod: Obj, pdb: Obj) -> bool:
    """An unready pod the budget lets go without a decrement (the delete then pins the pod's resourceVersion)."""
    if is_ready(pod):
        return False
    if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    status = pdb.get("status") or {}
    desired = status.get("desiredHealthy", 0)
    return status.get("currentHealthy", 0) >= desired > 0


def _too_many_requests(cause: str, retry_after: int) -> errors.TooManyRequests:
    details: Obj = {"causes": [{"reason": DISRUPTION_BUDGET_CAUSE, "message": cause}]}
    headers = {}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
        headers["Retry-After"] = str(retry_after)
    return errors.TooManyRequests(VIOLATION, details=details, headers=headers)


def still_processing(name: str) -> errors.TooManyRequests:
    """createTooManyRequestsError: the budget's status has not caught up with it (or the pod changed)."""
    return _too_many_requests(f"The disruption budget {name} is still being processed by the server.", 10)


def check_and_decrement(pdb: Obj, pod_name: str) -> Obj:
    """checkAndDecrement on a copy of the budget: the budget to write, or the refusal."""
    pdb = copy.deepcopy(pdb)
    meta, status = pdb.get("metadata") or {}, pdb.setdefault("status", {})
    name = meta.get("name") or ""
    if status.get("observedGeneration", 0) < meta.get("generation", 0):
        raise still_processing(name)
    allowed = status.get("disruptionsAllowed", 0)
    if allowed < 0:
        raise errors.forbidden("poddisruptionbudget", "policy", name, "pdb disruptions allowed is negative")
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_POD_SIZE:
        raise errors.forbidden("poddisruptionbudget", "policy", name,
                               "DisruptedPods map too big - too many evictions not confirmed by PDB controller")
    if allowed == 0:
        raise _too_many_requests(f"The disruption budget {name} needs {status.get('desiredHealthy', 0)} healthy "
                                 f"pods and has {status.get('currentHealthy', 0)} currently", 0)
    status["disruptionsAllowed"] = allowed - 1
    if status["disruptionsAllowed"] == 0:
        _set_condition(status, {"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods",
                                "message": "", "observedGeneration": status.get("observedGeneration", 0)})
    status["disruptedPods"] = {**(status.get("disruptedPods") or {}), pod_name: now_rfc3339()}
    return pdb


def _set_condition(status: Obj, cond: Obj) -> None:
    """meta.SetStatusCondition: lastTransitionTime moves only when the condition's status changes."""
    conds = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    for i, c in enumerate(conds):
        if c.get("type") == cond["type"]:
            moved = c.get("status") != cond["status"]
            conds[i] = {**c, **cond, "lastTransitionTime": now_rfc3339() if moved else c.get("lastTransitionTime")}
            break
    else:
        conds.append({**cond, "lastTransitionTime": now_rfc3339()})
    status["conditions"] = conds
