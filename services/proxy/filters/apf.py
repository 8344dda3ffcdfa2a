"""API Priority and Fairness client: seats acquired and released as messages on one long-lived stream.

One bidirectional apiary.FlowControl/Seats stream per proxy process multiplexes every request. When
the stream breaks the apf service frees every seat it held, so seats of an old stream are forgotten
here too; while no stream is up, requests are answered 503 at once instead of waiting.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc

from apiary_pb import apf_pb2 as fpb
from apiary_pb import apf_pb2_grpc as fgrpc
from services.common.errors import ServiceUnavailable, TooManyRequests
from services.common.background import cancel_and_wait

log = logging.getLogger(__name__)

# The apf service times queued requests out itself; this only guards against a stalled peer.
ACQUIRE_TIMEOUT = 60.0
FLOW_SCHEMA_HEADER = "X-Kubernetes-PF-FlowSchema-UID"
PRIORITY_LEVEL_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"


@dataclass(slots=True)
class Seat:
    id: int
    generation: int
    flow_schema_uid: str
    priority_level_uid: str
    released: bool = False

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"x-kubernetes-pf-flowschema-uid", self.flow_schema_uid.encode()),
                (b"x-kubernetes-pf-prioritylevel-uid", self.priority_level_uid.encode())]


def _unavailable(why: str) -> ServiceUnavailable:
    return ServiceUnavailable(f"priority and fairness is unavailable: {why}", headers={"Retry-After": "1"},
                              details={"retryAfterSeconds": 1})


class SeatClient:
    def __init__(self, stub: fgrpc.FlowControlStub, channel: grpc.aio.Channel | None = None,
                 acquire_timeout: float = ACQUIRE_TIMEOUT) -> None:
        self.stub = stub
        self.channel = channel
        self.acquire_timeout = acquire_timeout
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[fpb.SeatResponse]] = {}
        self._queue: asyncio.Queue[fpb.SeatRequest] | None = None
        self._generation = 0
        self._task: asyncio.Task[None] | None = None
        self.connected = False
        self.answered = False  # the current stream has delivered at least one answer

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="apf-seats")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    def ready(self) -> bool:
        if not self.connected:
            return False
        if self.answered or self.channel is None:
            return True
        return self.channel.get_state(try_to_connect=True) == grpc.ChannelConnectivity.READY

    @staticmethod
    async def _requests(queue: asyncio.Queue[fpb.SeatRequest]) -> AsyncIterator[fpb.SeatRequests]:
        """One stream message per wake-up, carrying every acquire and release queued meanwhile."""
        while True:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            yield fpb.SeatRequests(requests=batch)

    async def _run(self) -> None:
        delay = 0.2
        while True:
            queue: asyncio.Queue[fpb.SeatRequest] = asyncio.Queue()
            call = self.stub.Seats(self._requests(queue))
            self._generation += 1
            self._queue, self.connected, self.answered = queue, True, False
            try:
                async for answers in call:
                    self.answered = True
                    delay = 0.2
                    for resp in answers.responses:
                        fut = self._pending.pop(resp.id, None)
                        if fut is not None and not fut.done():
                            fut.set_result(resp)
                        elif resp.granted:  # its requester gave up meanwhile
                            queue.put_nowait(fpb.SeatRequest(id=resp.id, release=True))
                log.warning("apf: seat stream ended; reconnecting")
            except asyncio.CancelledError:
                call.cancel()
                raise
            except grpc.aio.AioRpcError as e:
                log.warning("apf: seat stream failed: %s %s", e.code().name, e.details())
            except Exception:  # noqa: BLE001 - the stream must come back whatever happened
                log.exception("apf: seat stream failed")
            finally:
                self.connected = False
                self._queue = None
                call.cancel()
                pending, self._pending = self._pending, {}
                for fut in pending.values():
                    if not fut.done():
                        fut.set_exception(_unavailable("the seat stream broke"))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def acquire(self, digest: fpb.RequestDigest) -> Seat:
        """Wait for a seat. TooManyRequests when rejected; ServiceUnavailable when apf cannot answer."""
        queue = self._queue
        if queue is None:
            raise _unavailable("no seat stream")
        seat_id = next(self._ids)
        generation = self._generation
        fut: asyncio.Future[fpb.SeatResponse] = asyncio.get_running_loop().create_future()
        self._pending[seat_id] = fut
        queue.put_nowait(fpb.SeatRequest(id=seat_id, acquire=digest))
        try:
            async with asyncio.timeout(self.acquire_timeout):
                resp = await fut
        except TimeoutError:
            self._pending.pop(seat_id, None)
            raise _unavailable("no answer in time") from None
        except asyncio.CancelledError:
            self._pending.pop(seat_id, None)
            if fut.done() and not fut.cancelled() and fut.exception() is None and fut.result().granted:
                self.release(Seat(seat_id, generation, "", ""))
            raise
        if not resp.granted:
            retry = resp.retry_after_seconds or 1
            raise TooManyRequests(
                "Too many requests, please try again later.",
                details={"retryAfterSeconds": retry},
                headers={"Retry-After": str(retry), FLOW_SCHEMA_HEADER: resp.flow_schema_uid,
                         PRIORITY_LEVEL_HEADER: resp.priority_level_uid},
            )
        return Seat(seat_id, generation, resp.flow_schema_uid, resp.priority_level_uid)

    def release(self, seat: Seat) -> None:
        """Idempotent; a seat of a broken stream was already freed by the apf service."""
        if seat.released:
            return
        seat.released = True
        queue = self._queue
        if queue is not None and seat.generation == self._generation:
            queue.put_nowait(fpb.SeatRequest(id=seat.id, release=True))
