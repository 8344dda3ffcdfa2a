"""API Priority and Fairness' seats on the shared stack (real processes): fair queuing between two users
of one level under overload, watches giving their seats back once initialized, system:masters never
queued, and a LIST of 5,000 objects charged more seats than a GET from the storage service's counts.

The test's levels neither lend nor borrow (lendablePercent 0, borrowingLimitPercent 0), so their
current limit is their nominal one: 1 share of the bootstrap levels' 245 at 600 seats, 3 seats.
Requests are the admin's, impersonating the test's users (APF classifies the impersonated user, as
kube's handler chain does). No timing is asserted: counts of answers by code.
"""
from __future__ import annotations

import asyncio
import functools
import json
import ssl
from collections.abc import Iterator

import httpx
import pytest

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2_grpc as sgrpc
from services.apf.queueset import deal, flow_hash
from services.apf.storagestats import StorageStats
from services.apf.workestimator import WorkEstimator
from services.cluster.stack import Stack
from services.common import grpcutil
from services.common.config import TLSFiles
from services.common.identity import user_pb
from tests.waiting import wait_for
from tools.bench_fairness import stages, write_objects

NS = "apf-seats"
QUEUED, REJECTING = "apf-test-queued", "apf-test-reject"
QUEUES, HAND, QUEUE_LENGTH = 8, 2, 4
FLOW_SCHEMA_HEADER = "X-Kubernetes-PF-FlowSchema-UID"
eventually = functools.partial(wait_for, timeout=60.0, interval=0.2)


def _disjoint_users() -> tuple[str, str]:
    """Two user names whose hands of queues share none (shuffle sharding makes it likely, not certain)."""
    def hand(user: str) -> set[int]:
        return set(deal(flow_hash(f"{QUEUED}/{user}"), QUEUES, HAND))
    noisy = "apf-noisy"
    quiet = next(u for u in (f"apf-quiet-{i}" for i in range(50)) if not hand(u) & hand(noisy))
    return quiet, noisy


QUIET, NOISY = _disjoint_users()
WATCHER = "apf-watcher"


def _level(name: str, queuing: bool) -> dict:
    response = {"type": "Queue", "queuing": {"queues": QUEUES, "handSize": HAND, "queueLengthLimit": QUEUE_LENGTH}} \
        if queuing else {"type": "Reject"}
    return {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 1, "lendablePercent": 0,
                                                    "borrowingLimitPercent": 0, "limitResponse": response}}}


def _schema(name: str, users: list[str]) -> dict:
    return {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": name},
            "spec": {"priorityLevelConfiguration": {"name": name}, "matchingPrecedence": 300,
                     "distinguisherMethod": {"type": "ByUser"},
                     "rules": [{"subjects": [{"kind": "User", "user": {"name": u}} for u in users],
                                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                   "namespaces": ["*"], "clusterScope": True}]}]}}


def _as(user: str) -> dict[str, str]:
    return {"Impersonate-User": user}


@pytest.fixture(scope="module")
def levels(stack: Stack, admin: httpx.Client) -> Iterator[dict[str, str]]:
    """The two test levels and schemas, the users' rights, and a configmap to GET; the schemas' uids once
    the apf service classifies by them."""
    admin.post("/api/v1/namespaces", json={"metadata": {"name": NS}})
    admin.post(f"/api/v1/namespaces/{NS}/configmaps", json={"metadata": {"name": "one"}, "data": {"a": "b"}})
    admin.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", json={
        "metadata": {"name": "apf-seats-reader"},
        "rules": [{"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["configmaps"]}]})
    admin.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json={
        "metadata": {"name": "apf-seats-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "apf-seats-reader"},
        "subjects": [{"kind": "User", "name": u, "apiGroup": "rbac.authorization.k8s.io"}
                     for u in (QUIET, NOISY, WATCHER)]})
    uids = {}
    for name, queuing, users in ((QUEUED, True, [QUIET, NOISY]), (REJECTING, False, [WATCHER])):
        r = admin.post("/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations", json=_level(name, queuing))
        assert r.status_code == 201, r.text
        r = admin.post("/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas", json=_schema(name, users))
        assert r.status_code == 201, r.text
        uids[name] = r.json()["metadata"]["uid"]
    for user, name in ((QUIET, QUEUED), (WATCHER, REJECTING)):
        eventually(lambda user=user, name=name: admin.get(f"/api/v1/namespaces/{NS}/configmaps/one", headers=_as(
            user)).headers.get(FLOW_SCHEMA_HEADER) == uids[name], what=f"{user} classified into {name}")
    try:
        yield uids
    finally:
        for name in (QUEUED, REJECTING):
            admin.delete(f"/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/{name}")
            admin.delete(f"/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/{name}")
        admin.delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/apf-seats-reader")
        admin.delete("/apis/rbac.authorization.k8s.io/v1/clusterroles/apf-seats-reader")


def _async_admin(stack: Stack) -> httpx.AsyncClient:
    pki = stack.state / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return httpx.AsyncClient(base_url=stack.server, verify=ctx, timeout=60,
                             limits=httpx.Limits(max_connections=80, max_keepalive_connections=80))


async def _overload(stack: Stack, quiet_requests: int) -> dict[str, list]:
    """The noisy user keeps 30 GETs in flight (3 seats, and 2 queues of 4 for its flow: far beyond the
    level), the quiet one sends one at a time, the admin too; each answer's code and APF wait."""
    path = f"/api/v1/namespaces/{NS}/configmaps/one"
    out: dict[str, list] = {"quiet": [], "noisy": [], "admin": []}
    done = asyncio.Event()
    async with _async_admin(stack) as c:
        async def one(who: str, headers: dict[str, str]) -> None:
            r = await c.get(path, headers=headers)
            out[who].append((r.status_code, stages(r.headers.get("server-timing", "")).get("apf", 0.0)))

        async def noisy() -> None:
            while not done.is_set():
                await one("noisy", _as(NOISY))

        flood = [asyncio.create_task(noisy()) for _ in range(30)]
        await asyncio.sleep(1.0)  # the flood is on before the quiet user starts
        for _ in range(quiet_requests):
            await one("quiet", _as(QUIET))
            await one("admin", {})
            await asyncio.sleep(0.05)
        done.set()
        await asyncio.gather(*flood)
    return out


def test_the_quiet_user_keeps_completing_while_the_noisy_one_is_rejected(stack, levels) -> None:
    out = asyncio.run(_overload(stack, 60))
    quiet_codes = [code for code, _ in out["quiet"]]
    noisy_codes = [code for code, _ in out["noisy"]]
    assert quiet_codes == [200] * len(quiet_codes), sorted(set(quiet_codes))
    assert 429 in noisy_codes and 200 in noisy_codes, sorted(set(noisy_codes))
    assert all(code == 200 for code, _ in out["admin"])  # system:masters: exempt, never queued nor rejected
    # (how long each waited is tools/bench_apf.py's figure: waits compared here failed on a loaded machine)


def test_watches_give_their_seats_back_once_initialized(stack, admin, levels) -> None:
    """The Reject level has 3 seats: 6 open watches of its user still leave room for a GET."""
    async def run() -> list[int]:
        codes = []
        async with _async_admin(stack) as c:
            streams = []
            for i in range(6):
                cm = c.stream("GET", f"/api/v1/namespaces/{NS}/configmaps",
                              params={"watch": "true", "timeoutSeconds": "60"} | ({"sendInitialEvents": "true",
                              "resourceVersionMatch": "NotOlderThan", "allowWatchBookmarks": "true"} if i % 2 else {}),
                              headers=_as(WATCHER))
                r = await cm.__aenter__()
                codes.append(r.status_code)
                it = r.aiter_lines()
                first = json.loads(await it.__anext__())   # its initial events come: it is initialized
                assert first["type"] in ("ADDED", "BOOKMARK")
                streams.append(cm)
            r = await c.get(f"/api/v1/namespaces/{NS}/configmaps/one", headers=_as(WATCHER))
            codes.append(r.status_code)
            for cm in streams:
                await cm.__aexit__(None, None, None)
        return codes

    assert asyncio.run(run()) == [200] * 7


def test_a_list_of_5000_objects_is_charged_more_seats_than_a_get(stack, admin) -> None:
    """The work estimate from the storage service's own counts (apiary.Storage/Stats over mTLS)."""
    asyncio.run(write_objects(stack, 5000, 1))  # bench-fair/cm-*: straight into etcd
    # the configmaps' watch cache starts on a read from the cache, if nothing started it yet
    assert admin.get("/api/v1/namespaces/bench-fair/configmaps/cm-000000",
                     params={"resourceVersion": "0"}).status_code == 200

    async def estimates() -> tuple[int, int, int]:
        pki = stack.state / "pki"
        channel = grpcutil.make_channel(TLSFiles(str(pki / "apf.crt"), str(pki / "apf.key"),
                                                 str(pki / "internal-ca.crt")), stack.addresses("storage"))
        try:
            stats = StorageStats(sgrpc.StorageStub(channel))
            await stats.poll()
            count = stats.object_count("", "configmaps") or 0
            e = WorkEstimator(stats.object_count, stats.watch_count)
            alice = user_pb("alice", ["system:authenticated"])
            lst = pb.RequestAttributes(user=alice, verb="list", resource_request=True, resource="configmaps",
                                       namespace="bench-fair")
            get = pb.RequestAttributes(user=alice, verb="get", resource_request=True, resource="configmaps",
                                       namespace="bench-fair", name="cm-000001")
            return count, e.estimate(lst, max_seats=8).max_seats, e.estimate(get, max_seats=8).max_seats
        finally:
            await channel.close()

    _, list_seats, get_seats = eventually(lambda: (x := asyncio.run(estimates()))[0] >= 5000 and x,
                                              what="the watch cache holding the 5,000 configmaps")
    assert (list_seats, get_seats) == (8, 1)  # global-default's max seats at 600: min(ceil(49 x 15 %), 49 // 6)


def test_two_levels_get_seats_in_proportion_to_their_shares(stack, admin, levels) -> None:
    """kube's nominal limits of two new levels (2 and 1 shares beside the test's two levels of 1 and the
    bootstrap's 245, at 600 seats), as the apf process reports them (apiserver_flowcontrol_nominal_limit_seats)."""
    names = {"apf-test-two": 2, "apf-test-one": 1}
    for name, shares in names.items():
        level = _level(name, True)
        level["spec"]["limited"]["nominalConcurrencyShares"] = shares
        r = admin.post("/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations", json=level)
        assert r.status_code == 201, r.text
    try:
        def nominal() -> dict[str, float] | None:
            text = httpx.get(f"http://127.0.0.1:{stack.health_port('apf')}/metrics", timeout=10).text
            out = {}
            for line in text.splitlines():
                if line.startswith("apiserver_flowcontrol_nominal_limit_seats{"):
                    name = line.split('priority_level="', 1)[1].split('"', 1)[0]
                    out[name] = float(line.rsplit(" ", 1)[1])
            return out if names.keys() <= out.keys() else None
        seats = eventually(nominal, what="the new levels in the apf service")
        # ceil(600 x 2 / 250) = 5 and ceil(600 x 1 / 250) = 3
        assert (seats["apf-test-two"], seats["apf-test-one"]) == (5, 3)
        assert seats["global-default"] == 48  # ceil(600 x 20 / 250)
    finally:
        for name in names:
            admin.delete(f"/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/{name}")
