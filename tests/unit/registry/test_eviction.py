"""pods/eviction honouring PodDisruptionBudgets as kube's EvictionREST: which pods skip the budget, the 429
when it allows no disruption, the decrement, and the rules' edge cases."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.common import errors
from services.registry import eviction

from .conftest import Client


@pytest.fixture
def api(status_api: Client) -> Client:
    """This module's calls read errors as Status bodies."""
    return status_api


EVICTION = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}}


async def running_pod(api, name: str = "p", labels: dict | None = None, ready: bool = True) -> dict:
    code, body = await api("create", "pods", "default", body={
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
    assert code == 201, body
    body["status"] = {"phase": "Running",
                      "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    code, body = await api("update", "pods", "default", name, subresource="status", body=body)
    assert code == 200, body
    return body


async def budget(api, name: str = "b", allowed: int = 0, current: int = 2, desired: int = 2,
                 selector: dict | None = None, **spec: Any) -> dict:
    code, body = await api("create", "poddisruptionbudgets", "default", body={
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
        "spec": {"minAvailable": 1, "selector": selector if selector is not None else {"matchLabels": {"app": "web"}},
                 **spec}})
    assert code == 201, body
    body["status"] = {"observedGeneration": body["metadata"]["generation"], "disruptionsAllowed": allowed,
                      "currentHealthy": current, "desiredHealthy": desired, "expectedPods": current}
    code, body = await api("update", "poddisruptionbudgets", "default", name, subresource="status", body=body)
    assert code == 200, body
    return body


async def evict(api, name: str = "p", **kwargs: Any) -> tuple[int, Any]:
    return await api("create", "pods", "default", name, subresource="eviction",
                     body={**EVICTION, "metadata": {"name": name}}, **kwargs)


async def test_budget_with_no_disruption_allowed_refuses_with_429(api) -> None:
    await running_pod(api)
    await budget(api, allowed=0)
    code, body = await evict(api)
    assert code == 429 and body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"] == [{"reason": "DisruptionBudget",
                                          "message": "The disruption budget b needs 2 healthy pods and has 2 "
                                                     "currently"}]
    assert (await api("get", "pods", "default", "p"))[0] == 200


async def test_eviction_decrements_the_budget(api) -> None:
    await running_pod(api, "p")
    await running_pod(api, "q")
    await budget(api, allowed=1, current=3)
    code, body = await evict(api, "p")
    assert code == 201 and body["status"] == "Success"
    assert (await api("get", "pods", "default", "p"))[0] == 404
    _, pdb = await api("get", "poddisruptionbudgets", "default", "b")
    status = pdb["status"]
    assert status["disruptionsAllowed"] == 0 and list(status["disruptedPods"]) == ["p"]
    cond = status["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"]) == ("DisruptionAllowed", "False", "InsufficientPods")
    code, _ = await evict(api, "q")
    assert code == 429


async def test_concurrent_evictions_each_take_one_disruption(api) -> None:
    for name in ("p", "q", "r"):
        await running_pod(api, name)
    await budget(api, allowed=2, current=3)
    answers = await asyncio.gather(*(evict(api, n) for n in ("p", "q", "r")))
    codes = sorted(code for code, _ in answers)
    assert codes == [201, 201, 429]
    _, pdb = await api("get", "poddisruptionbudgets", "default", "b")
    assert pdb["status"]["disruptionsAllowed"] == 0 and len(pdb["status"]["disruptedPods"]) == 2


async def test_dry_run_checks_without_writing(api) -> None:
    await running_pod(api)
    await budget(api, allowed=1, current=3)
    code, _ = await evict(api, query={"dryRun": "All"})
    assert code == 201
    assert (await api("get", "pods", "default", "p"))[0] == 200
    _, pdb = await api("get", "poddisruptionbudgets", "default", "b")
    assert pdb["status"]["disruptionsAllowed"] == 1


async def test_pending_pods_and_unmatched_budgets_are_not_asked(api) -> None:
    code, _ = await api("create", "pods", "default", body={
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
    assert code == 201
    await budget(api, allowed=0)
    assert (await evict(api))[0] == 201  # Pending: canIgnorePDB
    await running_pod(api, "other", labels={"app": "db"})
    assert (await evict(api, "other"))[0] == 201  # no budget selects it


async def test_observed_generation_behind_is_still_processing(api) -> None:
    await running_pod(api)
    pdb = await budget(api, allowed=5, current=6)
    pdb["spec"]["minAvailable"] = 2  # a spec change moves metadata.generation past status.observedGeneration
    code, pdb = await api("update", "poddisruptionbudgets", "default", "b", body=pdb)
    assert code == 200 and pdb["metadata"]["generation"] == 2
    code, body = await evict(api)
    assert code == 429 and body["details"]["retryAfterSeconds"] == 10
    assert body["details"]["causes"][0]["message"] == "The disruption budget b is still being processed by the server."


async def test_more_than_one_budget_is_500(api) -> None:
    await running_pod(api)
    await budget(api, "b1", allowed=1)
    await budget(api, "b2", allowed=1)
    code, body = await evict(api)
    assert code == 500 and body["message"] == ("This pod has more than one PodDisruptionBudget, which the eviction "
                                               "subresource does not support.")


async def test_unready_pod_goes_when_the_budget_is_healthy(api) -> None:
    await running_pod(api, ready=False)
    await budget(api, allowed=0, current=2, desired=2)
    assert (await evict(api))[0] == 201
    _, pdb = await api("get", "poddisruptionbudgets", "default", "b")
    assert pdb["status"]["disruptionsAllowed"] == 0 and "disruptedPods" not in pdb["status"]


def test_budget_rules() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}}, "status": {"phase": "Running"}}
    sel = {"matchLabels": {"app": "web"}}
    pdbs = [{"metadata": {"name": "empty", "namespace": "ns"}, "spec": {"selector": {}}},
            {"metadata": {"name": "other-ns", "namespace": "x"}, "spec": {"selector": sel}},
            {"metadata": {"name": "yes", "namespace": "ns"}, "spec": {"selector": sel}}]
    assert [b["metadata"]["name"] for b in eviction.matching_budgets(pod, pdbs)] == ["yes"]
    assert not eviction.can_ignore_budget(pod)
    for phase in ("Pending", "Succeeded", "Failed"):
        assert eviction.can_ignore_budget({"status": {"phase": phase}})
    assert eviction.can_ignore_budget({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
                                       "status": {"phase": "Running"}})
    unready = {**pod, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}}
    always = {"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}, "status": {"desiredHealthy": 5}}
    assert eviction.unhealthy_may_go(unready, always)
    assert not eviction.unhealthy_may_go(unready, {"status": {"currentHealthy": 1, "desiredHealthy": 2}})
    assert not eviction.unhealthy_may_go(unready, {"status": {"currentHealthy": 0, "desiredHealthy": 0}})
    with pytest.raises(errors.Forbidden, match="pdb disruptions allowed is negative"):
        eviction.check_and_decrement({"metadata": {"name": "b"}, "status": {"disruptionsAllowed": -1}}, "p")
