"""The audit backends' machinery without a stack: batch mode (batches by size and wait, a full buffer
drops and counts, stop delivers everything in order), truncation, the flags' defaults and checks."""
from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import orjson
import pytest

from services.apiserver.audit import IgnoreErrors, Union, metrics, options
from services.apiserver.audit.buffered import BatchConfig, BufferedBackend
from services.apiserver.audit.log import LogBackend
from services.apiserver.audit.truncate import TruncateBackend
from tests.waiting import until


class Recorder:
    name = "recorder"

    def __init__(self, ok: bool = True) -> None:
        self.batches: list[list[dict]] = []
        self.ok = ok
        self.stopped = False

    def process(self, events: list[dict]) -> bool:
        self.batches.append(list(events))
        return self.ok

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True


def events(n: int, start: int = 0) -> list[dict]:
    return [{"auditID": f"id-{i}", "stage": "ResponseComplete"} for i in range(start, start + n)]


async def test_batches_by_size_then_flushed_in_order_at_stop() -> None:
    rec = Recorder()
    b = BufferedBackend(rec, BatchConfig(100, max_batch_size=10, max_batch_wait=3600))
    await b.start()
    for ev in events(25):
        assert b.process([ev])
    # two full batches go without waiting for max_batch_wait
    await until(lambda: len(rec.batches) == 2, what="two batches")
    assert [len(x) for x in rec.batches] == [10, 10]
    await b.stop()  # the five left are not lost
    assert [len(x) for x in rec.batches] == [10, 10, 5]
    assert [e["auditID"] for x in rec.batches for e in x] == [f"id-{i}" for i in range(25)]
    assert rec.stopped


async def test_batch_sent_after_max_wait() -> None:
    rec = Recorder()
    b = BufferedBackend(rec, BatchConfig(100, max_batch_size=10, max_batch_wait=0.05))
    await b.start()
    await asyncio.sleep(0.01)  # the collector waiting for a first event
    b.process(events(3))
    await until(lambda: rec.batches, what="a batch")
    assert rec.batches == [events(3)]
    await b.stop()


async def test_full_buffer_drops_and_counts() -> None:
    rec = Recorder()
    b = BufferedBackend(rec, BatchConfig(5, max_batch_size=100, max_batch_wait=3600))
    before = metrics.ERRORS.value("buffered")
    await b.start()
    assert b.process(events(8))  # kube's buffered backend never fails the request
    assert metrics.ERRORS.value("buffered") == before + 3
    await b.stop()
    assert [e["auditID"] for x in rec.batches for e in x] == [f"id-{i}" for i in range(5)]
    assert b.process(events(1))  # after stop: dropped and counted, not queued forever
    assert metrics.ERRORS.value("buffered") == before + 4


async def test_throttle_still_delivers_everything() -> None:
    rec = Recorder()
    b = BufferedBackend(rec, BatchConfig(100, max_batch_size=1, throttle_enable=True, throttle_qps=1000,
                                         throttle_burst=2))
    await b.start()
    b.process(events(6))
    await b.stop()
    assert [x[0]["auditID"] for x in rec.batches] == [f"id-{i}" for i in range(6)]


def test_truncate_drops_objects_then_events_and_splits_batches() -> None:
    rec = Recorder()
    t = TruncateBackend(rec, max_event_size=100, max_batch_size=120)
    big = {"auditID": "a", "requestObject": {"data": "x" * 500}, "annotations": {"k": "v"}}
    huge = {"auditID": "b", "annotations": {"k": "x" * 500}}
    before = metrics.ERRORS.value("truncate")
    assert t.process([big, huge, *events(2)])
    assert metrics.ERRORS.value("truncate") == before + 1
    sent = [e for x in rec.batches for e in x]
    assert [e["auditID"] for e in sent] == ["a", "id-0", "id-1"]
    assert "requestObject" not in sent[0] and sent[0]["annotations"] == {"k": "v", "audit.k8s.io/truncated": "true"}
    assert all(sum(len(orjson.dumps(e)) for e in x) <= 120 for x in rec.batches) and len(rec.batches) >= 2


def test_ignore_errors_and_union() -> None:
    bad, good = Recorder(ok=False), Recorder()
    assert not Union([bad, good]).process(events(1))
    assert IgnoreErrors(bad).process(events(1))
    assert good.batches == [events(1)]


async def test_log_write_failure_counted(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    backend = LogBackend(str(tmp_path / "dir"))  # a directory cannot be opened as the log
    before = metrics.ERRORS.value("log")
    assert not backend.process(events(2))
    assert metrics.ERRORS.value("log") == before + 2


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    options.add_flags(p)
    return p.parse_args(list(argv))


def test_flag_defaults_as_kube() -> None:
    a = parse()
    assert (a.audit_log_mode, a.audit_log_batch_buffer_size, a.audit_log_batch_max_size, a.audit_log_batch_max_wait,
            a.audit_log_batch_throttle_enable) == ("blocking", 10000, 1, 0.0, False)
    assert (a.audit_webhook_mode, a.audit_webhook_batch_buffer_size, a.audit_webhook_batch_max_size,
            a.audit_webhook_batch_max_wait, a.audit_webhook_batch_throttle_enable, a.audit_webhook_batch_throttle_qps,
            a.audit_webhook_batch_throttle_burst, a.audit_webhook_initial_backoff) == ("batch", 10000, 400, 30.0,
                                                                                      True, 10, 15, 10.0)
    assert (a.audit_log_truncate_enabled, a.audit_log_truncate_max_event_size,
            a.audit_log_truncate_max_batch_size) == (False, 102400, 10485760)
    assert options.build(a) is None


@pytest.mark.parametrize(("argv", "message"), [
    (["--audit-log-mode", "fast"], 'invalid audit log mode fast, allowed modes are "batch,blocking,blocking-strict"'),
    (["--audit-log-mode", "batch", "--audit-log-batch-buffer-size", "0"],
     "invalid audit batch log buffer size 0, must be a positive number"),
    (["--audit-log-mode", "batch", "--audit-log-batch-max-size", "-1"],
     "invalid audit batch log max batch size -1, must be a positive number"),
    (["--audit-log-mode", "batch", "--audit-log-batch-throttle-enable", "--audit-log-batch-throttle-qps", "0"],
     "invalid audit batch log throttle QPS 0, must be a positive number"),
    (["--audit-log-truncate-enabled", "--audit-log-truncate-max-event-size", "0"],
     "invalid audit truncate log max event size 0, must be a positive number"),
    (["--audit-log-version", "audit.k8s.io/v1beta1"],
     "invalid audit log version audit.k8s.io/v1beta1, supported versions are audit.k8s.io/v1"),
])
def test_flag_checks(argv: list[str], message: str) -> None:
    assert message in options.validate(parse("--audit-log-path", "/tmp/x.log", *argv))


async def test_chain_by_mode(tmp_path: Path) -> None:
    a = parse("--audit-log-path", str(tmp_path / "a.log"), "--audit-log-mode", "batch", "--audit-log-truncate-enabled")
    b = options.build(a)
    assert b is not None and b.name == "truncate<buffered<log>>"
    strict = options.build(parse("--audit-log-path", str(tmp_path / "a.log"), "--audit-log-mode", "blocking-strict"))
    assert strict is not None and strict.name == "log"
    await b.start()
    b.process(events(3))
    await b.stop()
    assert [orjson.loads(x)["auditID"] for x in (tmp_path / "a.log").read_bytes().splitlines()] == \
        ["id-0", "id-1", "id-2"]


async def test_stop_ends_a_throttled_wait() -> None:
    rec = Recorder()
    b = BufferedBackend(rec, BatchConfig(100, max_batch_size=1, throttle_enable=True, throttle_qps=0.001,
                                         throttle_burst=1))
    await b.start()
    b.process(events(3))
    await until(lambda: rec.batches, what="the burst")
    assert len(rec.batches) == 1  # the burst; the next batch waits ~1000 s for a token
    await asyncio.wait_for(b.stop(), 30)
    assert [x[0]["auditID"] for x in rec.batches] == ["id-0", "id-1", "id-2"]


async def test_batched_lines_rotate_between_lines(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    backend = LogBackend(str(log), max_size_mb=1, max_backups=0)
    batch = [{"auditID": f"id-{i}", "requestObject": "x" * 20_000} for i in range(100)]  # ~2 MB in one batch
    assert backend.process(batch)
    await backend.stop()
    files = [*tmp_path.glob("audit-*.log"), log]
    assert len(files) == 2 and all(f.stat().st_size <= 1024 * 1024 for f in files)
    ids = sorted((orjson.loads(line)["auditID"] for f in files for line in f.read_bytes().splitlines()),
                 key=lambda i: int(i[3:]))
    assert ids == [f"id-{i}" for i in range(100)]
