"""Concurrency borrowing between priority levels in the real apf process (kube's lendablePercent,
borrowingLimitPercent and the periodic re-adjustment of current limits by seat demand).

Two new levels on the shared stack: a lender (lendablePercent 100, borrowingLimitPercent 0) and a
borrower (lendablePercent 0, borrowingLimitPercent 300). The seat demand is made on the apf service's
own Seats stream, with the proxy's certificate, as the proxy makes it: requests acquired and held,
never released, so that a level's demand is what the test says and not what the machine's load lets a
flood of HTTP requests reach. The current limits are read from the process's
apiserver_flowcontrol_current_limit_seats, and the lender's seats coming back are seen as its held
requests being granted. Nothing is timed: the test waits for each adjustment (every 10 s).
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from apiary_pb import apf_pb2 as fpb
from apiary_pb import apf_pb2_grpc as fgrpc
from apiary_pb import envelope_pb2 as pb
from services.cluster.stack import Stack
from services.common import grpcutil
from services.common.config import TLSFiles
from services.common.identity import user_pb
from tests.waiting import until

LENDER, BORROWER = "apf-test-lender", "apf-test-borrower"
SHARES = {LENDER: 12, BORROWER: 4}
WAIT = {"timeout": 60.0, "interval": 0.5}   # the limits move every 10 s (kube's borrowing period)


def _level(name: str, lendable: int, borrowing: int) -> dict:
    return {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name},
            "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": SHARES[name], "lendablePercent": lendable,
                "borrowingLimitPercent": borrowing,
                "limitResponse": {"type": "Queue",
                                  "queuing": {"queues": 16, "handSize": 8, "queueLengthLimit": 50}}}}}


def _schema(name: str) -> dict:
    return {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": name},
            "spec": {"priorityLevelConfiguration": {"name": name}, "matchingPrecedence": 300,
                     "distinguisherMethod": {"type": "ByUser"},
                     "rules": [{"subjects": [{"kind": "Group", "group": {"name": name}}],
                                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                   "namespaces": ["*"]}]}]}}


def _attributes(level: str, user: str) -> pb.RequestAttributes:
    return pb.RequestAttributes(user=user_pb(user, [level, "system:authenticated"]), verb="get",
                                resource_request=True, resource="configmaps", namespace="default", name="x")


class Seats:
    """One Seats stream to the apf service: acquires held until the stream ends; who got an answer."""

    def __init__(self, stack: Stack) -> None:
        pki = stack.state / "pki"
        self.channel = grpcutil.make_channel(TLSFiles(str(pki / "proxy.crt"), str(pki / "proxy.key"),
                                                      str(pki / "internal-ca.crt")), stack.addresses("apf"))
        self.outbox: asyncio.Queue[fpb.SeatRequests | None] = asyncio.Queue()
        self.sent: dict[int, pb.RequestAttributes] = {}
        self.granted: dict[int, str] = {}    # id: its priority level
        self.rejected = 0
        self._ids = 0
        self._reader: asyncio.Task[None] | None = None

    async def _requests(self) -> AsyncIterator[fpb.SeatRequests]:
        while (msg := await self.outbox.get()) is not None:
            yield msg

    async def _read(self) -> None:
        async for batch in fgrpc.FlowControlStub(self.channel).Seats(self._requests()):
            for r in batch.responses:
                attrs = self.sent.pop(r.id)
                if r.granted:
                    self.granted[r.id] = r.priority_level
                else:
                    # timed out in its queue: ask again, so the level's demand stays what the test made it
                    self.rejected += 1
                    self.acquire(attrs)

    def start(self) -> None:
        self._reader = asyncio.create_task(self._read())

    def acquire(self, attrs: pb.RequestAttributes) -> None:
        self._ids += 1
        self.sent[self._ids] = attrs
        self.outbox.put_nowait(fpb.SeatRequests(requests=[fpb.SeatRequest(id=self._ids, acquire=attrs)]))

    def granted_in(self, level: str) -> int:
        return sum(1 for pl in self.granted.values() if pl == level)

    async def close(self) -> None:
        """Ending the stream frees every seat it holds and withdraws what it queued."""
        self.outbox.put_nowait(None)
        if self._reader is not None:
            await asyncio.wait_for(self._reader, 30)
        await self.channel.close()


def _limits(stack: Stack) -> dict[str, dict[str, float]]:
    """apiserver_flowcontrol_{nominal,current,lower,upper}_limit_seats of the test's levels."""
    text = httpx.get(f"http://127.0.0.1:{stack.health_port('apf')}/metrics", timeout=10).text
    out: dict[str, dict[str, float]] = {LENDER: {}, BORROWER: {}}
    for line in text.splitlines():
        for kind in ("nominal", "current", "lower", "upper"):
            if line.startswith(f"apiserver_flowcontrol_{kind}_limit_seats{{"):
                name = line.split('priority_level="', 1)[1].split('"', 1)[0]
                if name in out:
                    out[name][kind] = float(line.rsplit(" ", 1)[1])
    return out


@pytest.fixture(scope="module")
def levels(stack: Stack, admin: httpx.Client) -> Iterator[None]:
    """The lender and the borrower, each with a FlowSchema for the group of its name."""
    for name, lendable, borrowing in ((LENDER, 100, 0), (BORROWER, 0, 300)):
        r = admin.post("/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
                       json=_level(name, lendable, borrowing))
        assert r.status_code == 201, r.text
        r = admin.post("/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas", json=_schema(name))
        assert r.status_code == 201, r.text
    try:
        yield
    finally:
        for name in (LENDER, BORROWER):
            admin.delete(f"/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/{name}")
            admin.delete(f"/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/{name}")


async def _lend_and_take_back(stack: Stack) -> tuple[dict, dict, dict, int]:
    """The limits with both levels idle, with the borrower busy, then with the lender busy too; and
    how many of the lender's requests were granted."""
    probe = Seats(stack)
    probe.start()
    try:
        # the apf service classifies by the new schemas (its informer applies them in order: the
        # borrower's, written last, in effect means the lender's is too); the borrower never lends, so
        # its probe gets a seat at once
        async def classified() -> bool:
            probe.acquire(_attributes(BORROWER, f"{BORROWER}-probe"))
            await asyncio.sleep(0.3)
            return probe.granted_in(BORROWER) > 0
        deadline = asyncio.get_running_loop().time() + 60
        while not await classified():
            assert asyncio.get_running_loop().time() < deadline, "the borrower's schema never took effect"
    finally:
        await probe.close()  # its seats back

    idle = await until(lambda: (x := _limits(stack))[LENDER].get("nominal") and x[BORROWER].get("nominal") and x,
                       what="the test's levels in the metrics")
    lender_nominal, borrower_nominal = int(idle[LENDER]["nominal"]), int(idle[BORROWER]["nominal"])
    seats = Seats(stack)
    seats.start()
    try:
        # the borrower wants 4 times its nominal seats, from 8 flows
        for i in range(4 * borrower_nominal):
            seats.acquire(_attributes(BORROWER, f"{BORROWER}-{i % 8}"))
        busy = await until(lambda: (x := _limits(stack))[BORROWER]["current"] > max(
            borrower_nominal, idle[BORROWER]["current"]) and x,
            what="the busy borrower's current limit above its nominal and idle ones", **WAIT)
        # the lender wants twice its nominal seats: the next adjustment gives it its nominal limit back
        for i in range(2 * lender_nominal):
            seats.acquire(_attributes(LENDER, f"{LENDER}-{i % 8}"))
        back = await until(lambda: (x := _limits(stack))[LENDER]["current"] >= lender_nominal and x,
                           what="the lender's current limit back at its nominal one", **WAIT)
        await until(lambda: seats.granted_in(LENDER) >= lender_nominal, what="the lender's requests granted",
                    **WAIT)
        return idle, busy, back, seats.granted_in(LENDER)
    finally:
        await seats.close()


def test_an_idle_level_lends_its_seats_and_gets_them_back_when_busy(stack: Stack, levels: None) -> None:
    idle, busy, back, lender_granted = asyncio.run(_lend_and_take_back(stack))
    # idle, the lender keeps none of what it may lend (its lower bound: 100 % lendable is 0 seats)...
    assert busy[LENDER]["lower"] == 0 and busy[LENDER]["current"] < busy[LENDER]["nominal"]
    # ...and the busy borrower holds more than its nominal seats and than it held idle, within its
    # borrowing limit (300 %)
    assert max(busy[BORROWER]["nominal"], idle[BORROWER]["current"]) < busy[BORROWER]["current"] \
        <= busy[BORROWER]["upper"]
    assert busy[BORROWER]["upper"] == 4 * busy[BORROWER]["nominal"]
    # busy, the lender has its nominal seats again (borrowingLimitPercent 0: never more) and uses them all
    assert back[LENDER]["current"] == back[LENDER]["nominal"] == back[LENDER]["upper"]
    assert lender_granted == back[LENDER]["nominal"]
