"""The ResourceQuota admission plug-in: what kube's plug-in does and no more. It reads status.hard and
status.used (the controller-manager's resource quota controller writes them) and charges a create with a
compare-and-swap on the quota's status, retried from the newest version on a conflict."""
from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from apiary_pb import admission_pb2 as adpb
from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from services.admission.attributes import Attributes
from services.admission.informers import InformerFactory
from services.admission.plugins.resource_quota import ResourceQuota
from services.apis.install import new_catalogue
from services.common.envelope import to_envelope
from services.common.errors import Forbidden

CATALOGUE = new_catalogue()

NS = "team"
Obj = dict[str, Any]


class Registry:
    """The registry's Handle for resourcequotas: get, and update of /status naming the stored resourceVersion."""

    def __init__(self) -> None:
        self.quotas: dict[str, Obj] = {}
        self.rv = 0
        self.writes: list[Obj] = []

    def store(self, q: Obj) -> Obj:
        self.rv += 1
        q = copy.deepcopy(q)
        q["metadata"]["resourceVersion"] = str(self.rv)
        self.quotas[q["metadata"]["name"]] = q
        return copy.deepcopy(q)

    async def _handle(self, req: rpb.APIRequest) -> rpb.APIResponse:
        current = self.quotas.get(req.name)
        if current is None:
            return rpb.APIResponse(code=404, body=b"{}")
        if req.verb == "get":
            return rpb.APIResponse(code=200, body=orjson.dumps(current))
        assert (req.verb, req.subresource) == ("update", "status")
        obj = orjson.loads(req.body)
        if obj["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            return rpb.APIResponse(code=409, body=b"{}")
        self.writes.append(obj["status"])
        return rpb.APIResponse(code=200, body=orjson.dumps(self.store({**current, "status": obj["status"]})))

    def Handle(self, req: rpb.APIRequest, timeout: float = 0) -> Any:  # the gRPC stub's name
        return self._handle(req)


def quota(name: str, hard: Obj, status: Obj | None = None) -> Obj:
    q: Obj = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": NS},
              "spec": {"hard": hard}}
    if status is not None:
        q["status"] = status
    return q


def plugin(registry: Registry, *quotas: Obj) -> ResourceQuota:
    p = ResourceQuota(InformerFactory(registry))  # type: ignore[arg-type]  # informers created, never started
    for q in quotas:
        stored = registry.store(q)
        p.quotas.store[f"{NS}/{q['metadata']['name']}"] = stored
    p.quotas.synced.set()
    return p


def create(resource: str = "configmaps", name: str = "c", dry_run: bool = False) -> Attributes:
    r = adpb.AdmissionRequest(operation="CREATE", dry_run=dry_run, attributes=pb.RequestAttributes(
        api_version="v1", resource=resource, namespace=NS, name=name))
    r.object.CopyFrom(to_envelope({"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": name, "namespace": NS}}))
    return Attributes(r, CATALOGUE)


async def test_a_quota_the_controller_has_not_synced_limits_nothing() -> None:
    registry = Registry()
    p = plugin(registry, quota("q", {"count/configmaps": "0"}))
    await p.validate(create())
    assert registry.writes == []


async def test_a_create_is_charged_then_refused_at_the_limit() -> None:
    registry = Registry()
    hard = {"count/configmaps": "2", "configmaps": "5", "secrets": "1"}
    p = plugin(registry, quota("q", hard, {"hard": hard, "used": {"count/configmaps": "1", "configmaps": "1",
                                                                  "secrets": "0"}}))
    await p.validate(create(name="one"))
    assert registry.writes == [{"hard": hard, "used": {"count/configmaps": "2", "configmaps": "2", "secrets": "0"}}]
    # the next create charges the plug-in's own write, which its informer has not seen yet
    with pytest.raises(Forbidden) as e:
        await p.validate(create(name="two"))
    assert e.value.message == ('configmaps "two" is forbidden: exceeded quota: q, requested: count/configmaps=1, '
                               "used: count/configmaps=2, limited: count/configmaps=2")
    await p.validate(create("pods", "p"))  # not limited by it
    assert len(registry.writes) == 1


async def test_usage_unknown_for_a_limited_resource_refuses() -> None:
    registry = Registry()
    hard = {"count/configmaps": "2", "configmaps": "5"}
    p = plugin(registry, quota("q", hard, {"hard": hard, "used": {"configmaps": "1"}}))
    with pytest.raises(Forbidden) as e:
        await p.validate(create())
    assert e.value.message == ('configmaps "c" is forbidden: status unknown for quota: q, '
                               "resources: configmaps,count/configmaps")
    assert registry.writes == []


async def test_every_quota_is_checked_before_any_is_charged() -> None:
    registry = Registry()
    roomy = {"hard": {"configmaps": "9"}, "used": {"configmaps": "0"}}
    full = {"hard": {"count/configmaps": "1"}, "used": {"count/configmaps": "1"}}
    p = plugin(registry, quota("a-roomy", roomy["hard"], roomy), quota("b-full", full["hard"], full))
    with pytest.raises(Forbidden, match="exceeded quota: b-full"):
        await p.validate(create())
    assert registry.writes == []


async def test_dry_run_is_checked_not_charged() -> None:
    registry = Registry()
    status = {"hard": {"configmaps": "1"}, "used": {"configmaps": "0"}}
    p = plugin(registry, quota("q", status["hard"], status))
    await p.validate(create(dry_run=True))
    assert registry.writes == []


async def test_a_conflict_charges_on_top_of_the_newer_usage() -> None:
    registry = Registry()
    status = {"hard": {"configmaps": "3"}, "used": {"configmaps": "1"}}
    p = plugin(registry, quota("q", status["hard"], status))
    # another API server's charge: the informer still holds the older version
    registry.store({**registry.quotas["q"], "status": {"hard": {"configmaps": "3"}, "used": {"configmaps": "2"}}})
    await p.validate(create())
    assert registry.writes == [{"hard": {"configmaps": "3"}, "used": {"configmaps": "3"}}]
    with pytest.raises(Forbidden, match="used: configmaps=3, limited: configmaps=3"):
        await p.validate(create(name="more"))
