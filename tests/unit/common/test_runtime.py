"""The service skeleton (services/common/runtime.py): one start and stop order for every service."""
from __future__ import annotations

import argparse
import asyncio
import gc

import pytest

from services.common import runtime
from tests.fakeclock import FakeClock
from tests.waiting import until


def args() -> argparse.Namespace:
    return argparse.Namespace(bind_address="127.0.0.1", health_port=0, grpc_port=0, insecure_internal=True, v=0)


class Listener:
    def __init__(self, log: list[str], service: runtime.Service, name: str = "listener") -> None:
        self.log, self.service, self.name = log, service, name
        self.ended = asyncio.Event()

    async def start(self) -> None:
        self.log.append(f"start {self.name}")

    async def shutdown(self) -> None:
        # kube's order: readiness fails before the listener stops accepting
        self.log.append(f"shutdown {self.name} (stopping={self.service.stopping})")

    async def done(self) -> None:
        await self.ended.wait()


def declare(service: runtime.Service, log: list[str]) -> Listener:
    service.client(lambda: log.append("close client a"))

    async def close_b() -> None:
        log.append("close client b")

    service.client(close_b)
    service.component(lambda: log.append("start x"), lambda: log.append("stop x"))

    async def start_y() -> None:
        log.append("start y")

    service.component(start_y, lambda: log.append("stop y"))

    async def loop() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            log.append("task cancelled")
            raise

    service.task(loop, "loop")
    listener = Listener(log, service)
    service.listener(listener)
    return listener


async def test_start_and_stop_order() -> None:
    log: list[str] = []
    service = runtime.Service("test", args())
    declare(service, log)
    stop = asyncio.Event()
    run = asyncio.create_task(service.run(stop))
    await until(lambda: "start listener" in log, what="the listener started")
    stop.set()
    await run
    assert log == [
        "start x", "start y", "start listener",
        "shutdown listener (stopping=True)",
        "task cancelled", "stop y", "stop x",
        "close client a", "close client b",
    ]


async def test_a_listener_that_ends_stops_the_service() -> None:
    log: list[str] = []
    service = runtime.Service("test", args())
    listener = declare(service, log)
    run = asyncio.create_task(service.run(asyncio.Event()))
    await until(lambda: "start listener" in log, what="the listener started")
    listener.ended.set()
    await run
    assert log[-3:] == ["stop x", "close client a", "close client b"]


async def test_a_component_that_fails_to_start_stops_those_started_before_it() -> None:
    log: list[str] = []
    service = runtime.Service("test", args())
    declare(service, log)

    def broken() -> None:
        raise RuntimeError("cannot start")

    service.component(broken, lambda: log.append("stop broken"))
    with pytest.raises(RuntimeError, match="cannot start"):
        await service.run(asyncio.Event())
    assert "stop broken" not in log and "start listener" not in log
    assert not any(line.startswith("shutdown listener") for line in log)
    assert log[-4:] == ["stop y", "stop x", "close client a", "close client b"]


async def test_a_failing_stop_step_does_not_skip_the_others() -> None:
    log: list[str] = []
    service = runtime.Service("test", args())
    declare(service, log)

    def broken() -> None:
        raise RuntimeError("cannot stop")

    service.component(stop=broken)
    stop = asyncio.Event()
    stop.set()
    await service.run(stop)
    assert log[-5:] == ["task cancelled", "stop y", "stop x", "close client a", "close client b"]


async def test_readyz_fails_once_the_service_stops() -> None:
    from services.common.health import HealthServer

    health = HealthServer("127.0.0.1", 0, {})
    assert (await health.ready())[0]
    health.shutting_down = True
    ok, text = await health.ready()
    assert not ok and "[-]shutdown failed" in text


def _counted_trims(monkeypatch: pytest.MonkeyPatch, delay: float) -> list[int]:
    """No trim pending, nothing counted, TRIM_DELAY = delay; the bytes counted at each trim, in order."""
    trims: list[int] = []
    monkeypatch.setattr(runtime, "TRIM_DELAY", delay)
    monkeypatch.setattr(runtime, "TRIM_MAX_WAIT", 60.0)
    monkeypatch.setattr(runtime, "_trim", None)
    monkeypatch.setattr(runtime, "_freed", 0)
    real = runtime._malloc_trim
    monkeypatch.setattr(runtime, "_malloc_trim", lambda: (trims.append(runtime._freed), real()))
    return trims


async def test_freed_memory_is_trimmed_once_per_burst(monkeypatch: pytest.MonkeyPatch) -> None:
    trims = _counted_trims(monkeypatch, delay=0.05)
    # closed connections count up to the threshold: nothing until then, then one trim for the burst
    for _ in range(runtime.TRIM_AFTER_BYTES // (256 << 10) - 1):
        runtime.released(256 << 10)
    assert runtime._trim is None
    for _ in range(10):
        runtime.released(256 << 10)
    assert runtime._trim is not None
    await until(lambda: runtime._trim is None, what="the trim")
    assert trims == [runtime.TRIM_AFTER_BYTES + 9 * (256 << 10)]
    assert runtime._freed == 0
    # a small answer is not counted; a large one is trimmed after on its own
    runtime.after_large_answer(1 << 20)
    assert runtime._freed == 0 and runtime._trim is None
    runtime.after_large_answer(runtime.TRIM_AFTER_BYTES)
    assert runtime._trim is not None
    await until(lambda: runtime._trim is None, what="the trim")
    assert len(trims) == 2


async def test_postponing_the_trim_moves_it_and_counts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request that ends with its connection lost postpones the pending trim (its buffers were counted when
    the connection was lost): the trim moves to TRIM_DELAY from then, no byte is counted again, and with no
    trim pending (or one due at the burst's TRIM_MAX_WAIT) nothing changes."""
    trims = _counted_trims(monkeypatch, delay=0.2)
    clock = FakeClock(asyncio.get_running_loop().time())
    monkeypatch.setattr(runtime, "trim_clock", clock)
    runtime.released(256 << 10)
    runtime.postpone_trim()
    assert runtime._trim is None and runtime._freed == 256 << 10
    runtime.released(runtime.TRIM_AFTER_BYTES)
    first = runtime._trim
    assert first is not None
    clock.advance(0.05)
    runtime.postpone_trim()
    assert first.cancelled() and runtime._trim is not None and runtime._trim.when() > first.when()
    assert runtime._freed == runtime.TRIM_AFTER_BYTES + (256 << 10)
    await until(lambda: runtime._trim is None, what="the trim")
    assert trims == [runtime.TRIM_AFTER_BYTES + (256 << 10)] and runtime._freed == 0
    # past the burst's TRIM_MAX_WAIT the trim already scheduled comes first
    monkeypatch.setattr(runtime, "TRIM_MAX_WAIT", runtime.TRIM_DELAY)
    runtime.released(runtime.TRIM_AFTER_BYTES)
    first = runtime._trim
    clock.advance(0.05)
    runtime.postpone_trim()
    assert runtime._trim is first and not first.cancelled()
    await until(lambda: runtime._trim is None, what="the trim")
    assert trims[1:] == [runtime.TRIM_AFTER_BYTES]


def test_settle_freezes_what_the_start_left_and_trims(monkeypatch):
    """What survives a service's start leaves the collector's walks; the heap is trimmed after."""
    trims: list[int] = []
    monkeypatch.setattr(runtime, "_malloc_trim", lambda: trims.append(gc.get_freeze_count()))
    gc.unfreeze()
    try:
        runtime.settle()
        assert trims and trims[0] > 0 and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
