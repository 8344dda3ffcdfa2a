"""Many watches on one long-lived gRPC stream, each event sent once per stream.

A watch as its own server stream costs one gRPC message per event per watcher (about 50 µs of CPU
each in grpc.aio), so 1,000 watchers of a resource written 100 times a second would need five
cores. Here a peer (the registry) opens all its watches on one `Watches` stream: the server sends
each event once per stream, with the ids of every watch it goes to (WatchDelivery), and everything
waiting when the previous write finished goes in one WatchBatch, as services/common/mux/ does
for unary calls.

Server side: `serve` runs `start(id, request, sink)` for every WatchOpen; the watch delivers its
events with `sink.send(id, event)`, which costs a dictionary lookup and an append, and the stream's
writer turns what is pending into one WatchBatch. The watch cache calls `send` straight from its
event dispatch (services/apiserver/storage/cacher.py), so a live event costs no task switch per watcher.

Client side: `WatchMuxClient.watch(request)` is an async iterator of serialized events, like
iterating a single-watch call; a stream failure ends every watch on it with the error.
`WatchMuxClient.relay(request, on_event, on_end)` hands each event to a callback as the batch is
read instead: the registry relays its watches from storage to the proxy this way, each event
turned into a frame once and sent on to every watch it goes to without a task switch per watch, and
the proxy hands each event to its clients' connections (services/proxy/handlers/watch.py).
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from apiary_pb import envelope_pb2 as pb

from . import tracing
from .errors import APIError, InternalError
from .grpcutil import batches
from .mux.streams import StreamClient

log = logging.getLogger(__name__)

# Deliveries one watch may have waiting on a stream that does not drain (as kube's per-watcher
# buffer): past it the watch is ended, and its client resumes from its last resourceVersion.
WATCH_CAPACITY = 10_000


class Sink:
    """What one Watches stream has to send: deliveries grouped per event, and ended watches.

    Events are grouped by identity (the watch cache serializes an event once and hands every
    watcher the same bytes). A watch's events keep their order: an event joins an existing
    delivery only when that delivery comes after the watch's previous one in this batch.
    """

    def __init__(self, capacity: int = WATCH_CAPACITY) -> None:
        self.capacity = capacity
        self._deliveries: list[tuple[bytes, list[int], bool]] = []  # (event, ids, initial)
        self._index: dict[int, int] = {}   # id(event) -> its latest delivery in this batch
        self._last: dict[int, int] = {}    # watch id -> index of its latest delivery
        self._count: dict[int, int] = {}   # watch id -> deliveries waiting
        self._ended: list[pb.WatchEnd] = []
        self._ready = asyncio.Event()
        self._taken = asyncio.Event()
        self.closed = False

    def send(self, wid: int, event: bytes, force: bool = False) -> bool:
        """Queue event for watch wid; False (nothing queued) when it already has `capacity` live
        events waiting (force: queue anyway and do not count it, for a watch's initial events)."""
        if force:  # initial events are this watch's own: a delivery of their own, marked
            self._last[wid] = len(self._deliveries)
            self._deliveries.append((event, [wid], True))
            self._ready.set()
            return True
        n = self._count.get(wid, 0)
        if n >= self.capacity:
            return False
        self._count[wid] = n + 1
        key = id(event)
        i = self._index.get(key)
        if i is None or i < self._last.get(wid, -1):
            i = len(self._deliveries)
            self._deliveries.append((event, [wid], False))
            self._index[key] = i
        else:
            self._deliveries[i][1].append(wid)
        self._last[wid] = i
        self._ready.set()
        return True

    def end(self, wid: int, error: APIError | None = None) -> None:
        self._ended.append(pb.WatchEnd(id=wid, error=error.to_pb()) if error is not None else pb.WatchEnd(id=wid))
        self._ready.set()

    def close(self) -> None:
        self.closed = True
        self._ready.set()

    async def next_batch(self) -> pb.WatchBatch | None:
        """Everything pending, once there is something; None once closed."""
        while not (self._deliveries or self._ended):
            if self.closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        batch = pb.WatchBatch(deliveries=[pb.WatchDelivery(event=e, ids=ids, initial=initial)
                                          for e, ids, initial in self._deliveries], ended=self._ended)
        self._deliveries, self._index, self._last, self._count, self._ended = [], {}, {}, {}, []
        self._taken.set()
        self._taken = asyncio.Event()
        return batch

    async def taken(self) -> None:
        """Wait until what is pending has been taken for sending (room again for every watch)."""
        await self._taken.wait()


Start = Callable[[int, bytes, Sink], Awaitable[None]]


async def serve(requests: AsyncIterator[pb.WatchControl], start: Start,
                capacity: int = WATCH_CAPACITY) -> AsyncIterator[pb.WatchBatch]:
    """The server side of a Watches stream: start(id, request, sink) runs each watch until it ends
    (then the client is told, with the error an APIError carries); a cancel cancels it."""
    sink = Sink(capacity)
    tasks: dict[int, asyncio.Task[None]] = {}

    async def run(wid: int, request: bytes, traceparent: str) -> None:
        tracing.attach(traceparent)  # the watch's own task: its setup goes on in the opener's trace
        try:
            await start(wid, request, sink)
            sink.end(wid)
        except APIError as e:
            sink.end(wid, e)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - one failing watch ends with a 500, the stream lives on
            log.exception("watch %d failed", wid)
            sink.end(wid, InternalError(f"{type(e).__name__}: {e}"))
        finally:
            tasks.pop(wid, None)

    async def pump() -> None:
        try:
            async for control in requests:
                for o in control.open:
                    tasks[o.id] = asyncio.create_task(run(o.id, o.request, o.traceparent), name=f"watch {o.id}")
                for wid in control.cancel:
                    t = tasks.pop(wid, None)
                    if t is not None:
                        t.cancel()
        finally:
            sink.close()

    reader = asyncio.create_task(pump())
    try:
        while (batch := await sink.next_batch()) is not None:
            yield batch
    finally:
        reader.cancel()
        for t in list(tasks.values()):
            t.cancel()
        await asyncio.gather(reader, *tasks.values(), return_exceptions=True)


class _Watch:
    __slots__ = ("buf", "wake", "done", "error", "stream", "on_event", "on_end", "allowance")

    def __init__(self, stream: _Stream, on_event: Callable[[bytes, bool], bool] | None = None,
                 on_end: Callable[[APIError | None], None] | None = None) -> None:
        self.buf: deque[bytes] = deque()
        self.allowance = 0  # initial events received: room on top of the capacity
        self.wake = asyncio.Event()
        self.done = False
        self.error: APIError | None = None
        self.stream = stream
        self.on_event, self.on_end = on_event, on_end

    def finish(self, error: APIError | None) -> None:
        if not self.done:
            self.done, self.error = True, error
            self.wake.set()
            if self.on_end is not None:
                self.on_end(error)


class Relay:
    """A watch whose events go to callbacks as each batch is read (WatchMuxClient.relay)."""

    def __init__(self, client: WatchMuxClient, wid: int, w: _Watch) -> None:
        self._client, self._wid, self._w = client, wid, w

    def cancel(self) -> None:
        """Stop it (the peer is told); on_end is not called for a watch stopped this way."""
        w = self._w
        w.on_end = None
        self._client._watches.pop(self._wid, None)
        if not w.done:
            w.done = True
            if w.stream.alive:
                w.stream.queue.put_nowait(pb.WatchControl(cancel=[self._wid]))


class _Stream:
    """One open Watches stream: its control queue and the gRPC call reading its batches."""

    def __init__(self, open_stream: Callable[[Any], Any]) -> None:
        self.queue: asyncio.Queue[pb.WatchControl | None] = asyncio.Queue()
        self.call = open_stream(batches(self.queue, _control))
        self.alive = True


def _control(controls: list[pb.WatchControl]) -> pb.WatchControl:
    """Every open and cancel queued since the last write, as one message."""
    if len(controls) == 1:
        return controls[0]
    out = pb.WatchControl()
    for c in controls:
        out.MergeFrom(c)
    return out


class WatchMuxClient(StreamClient):
    """Watches on a peer over one shared stream opened by `open_stream(controls)` (e.g. stub.Watches);
    with replicas, new watches go to each replica in turn (mux.streams.Spread)."""

    stream_type = _Stream
    what = "watch stream"
    task_name = "watchmux-read"

    def __init__(self, open_stream: Callable[[Any], Any], peer: str, capacity: int = WATCH_CAPACITY,
                 replicas: int = 1) -> None:
        super().__init__(open_stream, peer, replicas)
        self.capacity = capacity
        self._ids = itertools.count(1)
        self._watches: dict[int, _Watch] = {}

    def _on_message(self, stream: _Stream) -> Callable[[pb.WatchBatch], None]:
        watches = self._watches

        def on_batch(batch: pb.WatchBatch) -> None:
            for d in batch.deliveries:
                event = d.event  # one bytes object, shared by every watch it goes to
                initial = d.initial
                for wid in d.ids:
                    w = watches.get(wid)
                    if w is None or w.done:
                        continue
                    if w.on_event is not None:
                        if not w.on_event(event, initial):  # the relay has had enough: stop it
                            w.finish(None)
                            watches.pop(wid, None)
                            stream.queue.put_nowait(pb.WatchControl(cancel=[wid]))
                        continue
                    if initial:
                        w.allowance += 1
                    elif len(w.buf) >= self.capacity + w.allowance:
                        # A consumer that cannot keep up: ended, as kube ends a slow watcher.
                        w.finish(None)
                        stream.queue.put_nowait(pb.WatchControl(cancel=[wid]))
                        continue
                    w.buf.append(event)
                    w.wake.set()
            for e in batch.ended:
                w = watches.get(e.id)
                if w is not None:
                    if w.on_event is not None:
                        watches.pop(e.id, None)
                    w.finish(APIError.from_pb(e.error) if e.HasField("error") else None)
        return on_batch

    def _fail(self, stream: _Stream, failed: APIError) -> None:
        watches = self._watches
        for wid, w in list(watches.items()):
            if w.stream is stream:
                if w.on_event is not None:
                    watches.pop(wid, None)
                w.finish(failed)

    async def watch(self, request: Any) -> AsyncIterator[bytes]:
        """The watch's serialized events; raises the APIError it ended with (or its stream's failure)."""
        async for events in self.watch_batches(request):
            for event in events:
                yield event

    async def watch_batches(self, request: Any) -> AsyncIterator[list[bytes]]:
        """watch, with every event already received at each step in one list (a consumer that
        writes them out pays once for several when it is behind)."""
        stream = self._ensure()
        wid = next(self._ids)
        w = self._watches[wid] = _Watch(stream)
        stream.queue.put_nowait(pb.WatchControl(open=[pb.WatchOpen(id=wid, request=request.SerializeToString(),
                                                                   traceparent=tracing.traceparent())]))
        try:
            buf = w.buf
            while True:
                if buf:
                    events = list(buf)
                    buf.clear()
                    yield events
                    continue
                if w.done:
                    if w.error is not None:
                        raise w.error
                    return
                w.wake.clear()
                await w.wake.wait()
        finally:
            self._watches.pop(wid, None)
            if not w.done and stream.alive:
                stream.queue.put_nowait(pb.WatchControl(cancel=[wid]))

    def relay(self, request: Any, on_event: Callable[[bytes, bool], bool],
              on_end: Callable[[APIError | None], None]) -> Relay:
        """A watch whose events are handed to on_event(event, initial) as each batch is read, with
        no task and no buffer of its own (for a peer that only passes them on: initial tells it to
        pass the event on as initial too); on_event returning False stops it. on_end gets how it
        ended: None (closed by the peer, or stopped by on_event) or the error (the peer's, or its
        stream's failure)."""
        stream = self._ensure()
        wid = next(self._ids)
        w = self._watches[wid] = _Watch(stream, on_event, on_end)
        stream.queue.put_nowait(pb.WatchControl(open=[pb.WatchOpen(id=wid, request=request.SerializeToString(),
                                                                   traceparent=tracing.traceparent())]))
        return Relay(self, wid, w)

    async def close(self) -> None:
        for stream in self._spread.pool if self._spread is not None else [self._stream]:
            if stream is not None and stream.alive:
                stream.queue.put_nowait(None)
                stream.call.cancel()
