"""API Priority and Fairness client: seats acquired and released as messages on one long-lived stream.

One bidirectional apiary.FlowControl/Seats stream per proxy process multiplexes every request. When
the stream breaks the apf service frees every seat it held, so seats of an old stream are forgotten
here too.

Requests of the mandatory exempt FlowSchema (system:masters) are classified here and never wait for
the apf service; their response headers name the `exempt` objects' uids as the proxy's informers last
saw them (ExemptObjects). While no stream is up, the other requests are limited as kube-apiserver limits them
without priority and fairness (its max-in-flight filter: --max-requests-inflight read-only and
--max-mutating-requests-inflight mutating requests at a time, long-running ones not counted, 429
beyond), instead of all being refused; the proxy logs when it falls back and when it stops, and
apiary_apf_fallback says which is in force. The stream is opened again as soon as the apf service's
channel is connected (readiness-driven, with a small capped and jittered backoff between tries).

With --enable-priority-and-fairness=false (kube's flag) the apf service is never called: the max-in-flight
limits alone apply, no response names a FlowSchema, and the debug dumps are not served, as in kube.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from prometheus_client import Counter, Gauge

from apiary_pb import apf_pb2 as fpb
from apiary_pb import apf_pb2_grpc as fgrpc
from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import auditid, grpcutil, tracing
from services.common.background import cancel_and_wait
from services.common.backoff import Backoff
from services.common.errors import ServiceUnavailable, TooManyRequests
from services.common.flowcontrol import EXEMPT, EXEMPT_FLOW_SCHEMA_UID, EXEMPT_PRIORITY_LEVEL_UID, is_exempt
from services.common.informer import Informer

log = logging.getLogger(__name__)

# The apf service times queued requests out itself; this only guards against a stalled peer.
ACQUIRE_TIMEOUT = 60.0
FLOW_SCHEMA_HEADER = "X-Kubernetes-PF-FlowSchema-UID"
PRIORITY_LEVEL_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"
# kube-apiserver's defaults for --max-requests-inflight and --max-mutating-requests-inflight
MAX_REQUESTS_INFLIGHT = 400
MAX_MUTATING_REQUESTS_INFLIGHT = 200
# the verbs kube's max-in-flight filter counts as read-only (everything else is mutating) ...
_READ_ONLY_VERBS = frozenset(("get", "list", "watch"))
# ... and the long-running ones it does not limit at all
_LONG_RUNNING_VERBS = frozenset(("watch", "proxy"))

FALLBACK = Gauge("apiary_apf_fallback",
                 "1 while the apf service is unreachable and the proxy applies kube's max-in-flight limits "
                 "(--max-requests-inflight, --max-mutating-requests-inflight) instead of priority and "
                 "fairness.")
FALLBACK_REQUESTS = Counter("apiary_apf_fallback_requests_total",
                            "Requests admitted or rejected by the max-in-flight limits while the apf service "
                            "was unreachable.", ["request_kind", "decision"])

# Seat.kind: where the seat came from, so that release() frees it in the right place
SEAT_APF, SEAT_EXEMPT, SEAT_READ_ONLY, SEAT_MUTATING, SEAT_LONG_RUNNING = range(5)


@dataclass(slots=True)
class Seat:
    id: int
    generation: int
    flow_schema_uid: str
    priority_level_uid: str
    released: bool = False
    kind: int = SEAT_APF
    flow_schema: str = ""  # the names, for the request's trace
    priority_level: str = ""

    def headers(self) -> list[tuple[bytes, bytes]]:
        if not self.flow_schema_uid:  # granted by the max-in-flight fallback: no FlowSchema
            return []
        return [(b"x-kubernetes-pf-flowschema-uid", self.flow_schema_uid.encode()),
                (b"x-kubernetes-pf-prioritylevel-uid", self.priority_level_uid.encode())]


def _unavailable(why: str) -> ServiceUnavailable:
    return ServiceUnavailable(f"priority and fairness is unavailable: {why}", headers={"Retry-After": "1"},
                              details={"retryAfterSeconds": 1})


class _StreamBroke(Exception):
    """The seat stream ended before the apf service answered: the request falls back."""


class _NoAnswer(Exception):
    """The apf service did not answer a seat request within the acquire timeout."""


def _too_many(retry: int = 1, headers: dict[str, str] | None = None) -> TooManyRequests:
    return TooManyRequests("Too many requests, please try again later.", details={"retryAfterSeconds": retry},
                           headers={"Retry-After": str(retry), **(headers or {})})


class MaxInFlight:
    """kube's max-in-flight filter (WithMaxInFlightLimit): two counters, no queueing. `counted`: its
    decisions go to apiary_apf_fallback_requests_total (the fallback, not the filter configured alone)."""

    def __init__(self, read_only: int = MAX_REQUESTS_INFLIGHT,
                 mutating: int = MAX_MUTATING_REQUESTS_INFLIGHT, counted: bool = True) -> None:
        self.limits = {SEAT_READ_ONLY: read_only, SEAT_MUTATING: mutating}
        self.inflight = {SEAT_READ_ONLY: 0, SEAT_MUTATING: 0}
        self.counted = counted

    def acquire(self, verb: str) -> Seat:
        if verb in _LONG_RUNNING_VERBS:
            return Seat(0, 0, "", "", kind=SEAT_LONG_RUNNING)
        kind = SEAT_READ_ONLY if verb in _READ_ONLY_VERBS else SEAT_MUTATING
        label = "readOnly" if kind == SEAT_READ_ONLY else "mutating"
        limit = self.limits[kind]
        if limit and self.inflight[kind] >= limit:  # 0: unlimited, as in kube
            if self.counted:
                FALLBACK_REQUESTS.labels(label, "rejected").inc()
            raise _too_many()
        self.inflight[kind] += 1
        if self.counted:
            FALLBACK_REQUESTS.labels(label, "admitted").inc()
        return Seat(0, 0, "", "", kind=kind)

    def release(self, seat: Seat) -> None:
        self.inflight[seat.kind] -= 1


class ExemptObjects:
    """The uids of the `exempt` FlowSchema and PriorityLevelConfiguration, for the requests the proxy
    classifies itself: stable stand-ins until the objects are read (or while they are missing)."""

    def __init__(self, registry: rgrpc.RegistryStub) -> None:
        self.flow_schema_uid, self.priority_level_uid = EXEMPT_FLOW_SCHEMA_UID, EXEMPT_PRIORITY_LEVEL_UID
        group = "flowcontrol.apiserver.k8s.io"
        self.informers = (Informer(registry, group, "v1", "flowschemas"),
                          Informer(registry, group, "v1", "prioritylevelconfigurations"))
        self.informers[0].add_handler(lambda typ, obj, _old: self._seen(typ, obj, "flow_schema_uid",
                                                                        EXEMPT_FLOW_SCHEMA_UID))
        self.informers[1].add_handler(lambda typ, obj, _old: self._seen(typ, obj, "priority_level_uid",
                                                                        EXEMPT_PRIORITY_LEVEL_UID))

    def _seen(self, typ: str, obj: dict[str, object], attr: str, stand_in: str) -> None:
        meta = obj.get("metadata") or {}
        if isinstance(meta, dict) and meta.get("name") == EXEMPT:
            setattr(self, attr, stand_in if typ == "DELETED" else str(meta.get("uid") or stand_in))

    def start(self) -> None:
        for inf in self.informers:
            inf.start()

    async def stop(self) -> None:
        for inf in self.informers:
            await inf.stop()


def _requests(requests: list[fpb.SeatRequest]) -> fpb.SeatRequests:
    return fpb.SeatRequests(requests=requests)



# kube's hard cap on any request's wait in a queue (getRequestWaitContext)
MAX_QUEUE_WAIT = 60.0


def queue_wait_limit(deadline: float | None) -> float:
    """kube's getRequestWaitContext: a quarter of the time the request has left, at most a minute (0:
    no deadline, the apf service's own limit)."""
    if deadline is None:
        return 0.0
    return max(0.001, min((deadline - asyncio.get_running_loop().time()) / 4, MAX_QUEUE_WAIT))


class SeatClient:
    def __init__(self, stub: fgrpc.FlowControlStub, channel: grpc.aio.Channel | None = None,
                 acquire_timeout: float = ACQUIRE_TIMEOUT, max_requests_inflight: int = MAX_REQUESTS_INFLIGHT,
                 max_mutating_requests_inflight: int = MAX_MUTATING_REQUESTS_INFLIGHT,
                 exempt: ExemptObjects | None = None, enabled: bool = True,
                 deadline: Callable[[], float | None] = lambda: None) -> None:
        self.stub = stub
        self.deadline = deadline  # the current request's deadline (loop time), for its queue wait limit
        self.exempt = exempt
        self.channel = channel
        self.enabled = enabled  # --enable-priority-and-fairness
        self.acquire_timeout = acquire_timeout
        self.fallback = MaxInFlight(max_requests_inflight, max_mutating_requests_inflight, counted=enabled)
        self._ids = itertools.count(1)
        # the seat requests waiting for an answer, oldest first, with the loop time they give up at
        self._pending: dict[int, tuple[asyncio.Future[fpb.SeatResponse], float]] = {}
        self._queue: asyncio.Queue[fpb.SeatRequest | None] | None = None
        self._generation = 0
        self._task: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.falling_back = False

    def start(self) -> None:
        if self.enabled:
            self._task = asyncio.create_task(self._run(), name="apf-seats")
            self._sweeper = asyncio.create_task(self._sweep(), name="apf-seat-timeouts")

    async def stop(self) -> None:
        await cancel_and_wait(self._sweeper)
        await cancel_and_wait(self._task)

    async def _sweep(self) -> None:
        """Fail the seat requests left unanswered past the acquire timeout: one timer for all of them
        (a timer per request cost the proxy more than the rest of its seat's work). Every request waits
        the same timeout, so the oldest come first and a sweep stops at the first one still in time."""
        period = min(1.0, self.acquire_timeout / 4)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            expired = []
            for seat_id, (_fut, give_up) in self._pending.items():
                if give_up > now:
                    break
                expired.append(seat_id)
            for seat_id in expired:
                fut, _ = self._pending.pop(seat_id)
                if not fut.done():
                    fut.set_exception(_NoAnswer())

    def ready(self) -> bool:
        """The proxy can serve: with the apf service, or (the fallback) without it."""
        return not self.enabled or (self._task is not None and not self._task.done())

    def _fall_back(self, why: str) -> None:
        if not self.falling_back:
            self.falling_back = True
            FALLBACK.set(1)
            log.warning("apf: %s; falling back to max-in-flight limits (%d read-only, %d mutating requests; "
                        "system:masters exempt) until the seat stream is back", why,
                        self.fallback.limits[SEAT_READ_ONLY], self.fallback.limits[SEAT_MUTATING])

    def _stream_up(self) -> None:
        if self.falling_back:
            self.falling_back = False
            FALLBACK.set(0)
            log.info("apf: seat stream is back; priority and fairness in force again")

    async def _run(self) -> None:
        backoff = Backoff()
        while True:
            queue: asyncio.Queue[fpb.SeatRequest | None] = asyncio.Queue()
            # one stream message per wake-up, with every acquire and release queued meanwhile
            call = self.stub.Seats(grpcutil.batches(queue, _requests, one_turn=True))
            self._generation += 1
            self._queue = queue
            why = "the seat stream ended"
            try:
                async for answers in call:
                    self._stream_up()
                    backoff.reset()
                    for resp in answers.responses:
                        waiting = self._pending.pop(resp.id, None)
                        if waiting is not None and not waiting[0].done():
                            waiting[0].set_result(resp)
                        elif resp.granted:  # its requester gave up meanwhile
                            queue.put_nowait(fpb.SeatRequest(id=resp.id, release=True))
            except asyncio.CancelledError:
                call.cancel()
                raise
            except grpc.aio.AioRpcError as e:
                why = f"the seat stream failed ({e.code().name})"
            except Exception:  # noqa: BLE001 - the stream must come back whatever happened
                log.exception("apf: seat stream failed")
                why = "the seat stream failed"
            finally:
                self._queue = None
                queue.put_nowait(None)
                call.cancel()
                pending, self._pending = self._pending, {}
                for fut, _ in pending.values():
                    if not fut.done():
                        fut.set_exception(_StreamBroke())
            self._fall_back(why)
            await asyncio.sleep(backoff.delay())
            if self.channel is not None:
                # Readiness-driven: the next stream opens once the channel is connected again; gRPC
                # retries the connection on its own capped backoff (grpcutil.CHANNEL_OPTIONS).
                await self.channel.channel_ready()

    def seats_here(self, digest: pb.RequestAttributes) -> bool:
        """Whether acquire() answers without the apf service (exempt, or its fallback's limits)."""
        return not self.enabled or is_exempt(digest.user.groups) or self._queue is None

    def exempt_seat(self, user: pb.UserInfo) -> Seat | None:
        """The seat of a request of the mandatory exempt FlowSchema (system:masters), given here before the
        request's digest is made; None for any other request."""
        if not is_exempt(user.groups):
            return None
        if not self.enabled:  # kube's max-in-flight filter never rejects system:masters
            return Seat(0, 0, "", "", kind=SEAT_EXEMPT)
        if self.exempt is not None:
            return Seat(0, 0, self.exempt.flow_schema_uid, self.exempt.priority_level_uid, kind=SEAT_EXEMPT,
                        flow_schema=EXEMPT, priority_level=EXEMPT)
        return Seat(0, 0, EXEMPT_FLOW_SCHEMA_UID, EXEMPT_PRIORITY_LEVEL_UID, kind=SEAT_EXEMPT,
                    flow_schema=EXEMPT, priority_level=EXEMPT)

    async def acquire(self, digest: pb.RequestAttributes) -> Seat:
        """Wait for a seat. TooManyRequests when rejected (by the apf service, or by the max-in-flight
        limits while it is unreachable); ServiceUnavailable when it stops answering."""
        seat = self.exempt_seat(digest.user)
        if seat is not None:
            return seat
        if not self.enabled:
            return self.fallback.acquire(digest.verb)
        queue = self._queue
        if queue is None:
            return self.fallback.acquire(digest.verb)
        seat_id = next(self._ids)
        generation = self._generation
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[fpb.SeatResponse] = loop.create_future()
        self._pending[seat_id] = (fut, loop.time() + self.acquire_timeout)
        queue.put_nowait(fpb.SeatRequest(id=seat_id, acquire=digest, audit_id=auditid.AUDIT_ID.get(),
                                         wait_limit=queue_wait_limit(self.deadline()),
                                         traceparent=tracing.traceparent()))
        try:
            resp = await fut
        except _NoAnswer:
            raise _unavailable("no answer in time") from None
        except _StreamBroke:
            return self.fallback.acquire(digest.verb)
        except asyncio.CancelledError:
            self._pending.pop(seat_id, None)
            if fut.done() and not fut.cancelled() and fut.exception() is None and fut.result().granted:
                self.release(Seat(seat_id, generation, "", ""))
            raise
        if not resp.granted:
            raise _too_many(resp.retry_after_seconds or 1, {FLOW_SCHEMA_HEADER: resp.flow_schema_uid,
                                                            PRIORITY_LEVEL_HEADER: resp.priority_level_uid})
        return Seat(seat_id, generation, resp.flow_schema_uid, resp.priority_level_uid,
                    flow_schema=resp.flow_schema, priority_level=resp.priority_level)

    async def dump(self, what: str, include_request_details: bool) -> str:
        """/debug/api_priority_and_fairness/<what>, as the apf service prints it."""
        resp = await grpcutil.call(self.stub.Dump(fpb.DumpRequest(
            what=what, include_request_details=include_request_details), timeout=10), "apf")
        return resp.text

    def release(self, seat: Seat) -> None:
        """Idempotent; a seat of a broken stream was already freed by the apf service."""
        if seat.released:
            return
        seat.released = True
        if seat.kind != SEAT_APF:
            if seat.kind in (SEAT_READ_ONLY, SEAT_MUTATING):
                self.fallback.release(seat)
            return
        queue = self._queue
        if queue is not None and seat.generation == self._generation:
            queue.put_nowait(fpb.SeatRequest(id=seat.id, release=True))
