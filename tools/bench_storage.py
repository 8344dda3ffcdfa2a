"""Storage-scale figures against a running bench stack (services.cluster.stack.Stack), each bounded to seconds.

  list_10k        LIST of 10,000 configmaps (resourceVersion=0, served from the watch cache) through
                  the proxy over HTTPS, each beside the HTTPS floor: the same bytes sent by a bare
                  handler on the proxy's HTTP stack and TLS (tools.bench hello-server). ratio = the
                  median of the per-pair times' ratios (goal <= 2), with the CPU ms per LIST of
                  proxy, registry and storage and of the bare handler. Also: orjson-encoding the
                  same objects in this process, and the storage service's List alone, called as
                  the registry calls it (on its Calls stream, JSON items, in parts).
  watch_fanout    1,000 concurrent watches on one namespace while 100 configmaps/s are written for
                  10 s: delivery delay (receipt time - timestamp embedded in the object before the
                  write) p50/p99 (goal p99 <= 100 ms) and the storage service's CPU seconds. The
                  watches are opened on the storage service the way the registry opens them: on
                  Watches streams (4 connections, 250 watches each), where each event crosses a
                  stream once with the ids of the watches it goes to ("via": "grpc-storage-watches");
                  the delay is taken when the batch reaches the stream's reader. Writes go through
                  the storage service's Create.
  watch_fanout_single_100
                  the same with 100 watches, each its own Storage.Watch server stream (a gRPC
                  message per watch whenever it has events queued; "via": "grpc-storage-watch"), for
                  comparison.
  watch_https_200 the whole path: 200 HTTPS watches through the proxy (each its own TLS connection,
                  as kubectl's), registry and storage, 100 configmaps/s for 10 s; delay p50/p99 (goal
                  p99 <= 100 ms), % delivered, the CPU of proxy, registry and storage per delivery. The
                  clients are tools.bench_watchers processes (uvloop, raw TLS bytes, only the embedded
                  timestamp looked for), their own CPU per delivery reported beside.
  watch_https_1000
                  the same with 1,000 watches at 20 configmaps/s (20,000 deliveries/s; goal p99 <= 150 ms,
                  100 % delivered).
  storage_memory  storage service RSS growth after its watch cache holds 100,000 small configmaps,
                  against the objects' total JSON size (goal ratio <= 2).

Objects are written straight into etcd (batched transactions) in the exact stored format
(services/apiserver/storage/codec.py: magic + apiary.Object, configmaps are not encrypted), the way the
registry creates them: uid, creationTimestamp, fields metadata.name / metadata.namespace.

    python -m tools.bench_storage [--state .apiary/bench-dev] [--port-offset 5000]
        starts a fresh stack there, runs them all (or those named), prints the JSON, stops the stack
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import json
import os
import re
import statistics
import sys
import time
import tracemalloc
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import grpc
import orjson

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from apiary_pb import storage_pb2_grpc as sgrpc
from services.common import mux
from services.common.envelope import to_json
from services.common.grpcutil import CHANNEL_OPTIONS
from services.common.runtime import tune_malloc
from services.apiserver.storage.codec import decode as codec_decode
from services.apiserver.storage.codec import encode as codec_encode
from services.apiserver.storage.etcd import op_put
from tools.bench import HELLO_PORT, Conn, client_ctx, cpu_seconds, start_hello, stop_hello, wait_hello
from services.cluster.stack import ROOT, Stack

TXN_OPS = 128          # etcd's default --max-txn-ops
TXN_CONCURRENCY = 8
JSON_HDR = {"Content-Type": "application/json", "Accept": "application/json"}


# helpers ---------------------------------------------------------------------------------------

def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def percentiles(values: list[float]) -> tuple[float | None, float | None]:
    """(p50, p99) in ms of values in seconds."""
    if not values:
        return None, None
    values = sorted(values)
    p50, p99 = values[len(values) // 2], values[min(len(values) - 1, int(len(values) * 0.99))]
    # None: beyond the measurement window (the value was never delivered or acknowledged).
    return (round(p50 * 1000, 2) if p50 != float("inf") else None,
            round(p99 * 1000, 2) if p99 != float("inf") else None)


def proxy_conn(stack: Stack) -> Conn:
    return Conn("127.0.0.1", int(stack.server.rsplit(":", 1)[1]), client_ctx(stack))


async def ensure_namespace(conn: Conn, ns: str) -> None:
    body = orjson.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    s, data = await conn.request("POST", "/api/v1/namespaces", body, JSON_HDR)
    if s not in (201, 409):
        raise RuntimeError(f"create namespace {ns}: {s} {data[:200]!r}")


def configmap(ns: str, name: str, data: dict[str, str], created: str) -> pb.Object:
    """A configmap as the registry stores it (no resourceVersion)."""
    obj = pb.Object(api_version="v1", kind="ConfigMap", body=orjson.dumps({"data": data}))
    m = obj.metadata
    m.name, m.namespace, m.uid, m.creation_timestamp = name, ns, str(uuid.uuid4()), created
    obj.fields["metadata.name"] = name
    obj.fields["metadata.namespace"] = ns
    return obj


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def key_of(obj: pb.Object) -> str:
    return f"/registry/configmaps/{obj.metadata.namespace}/{obj.metadata.name}"


async def write_etcd(stack: Stack, objs: list[pb.Object]) -> int:
    """Put every object into etcd in transactions of 128 puts; returns the last revision written."""
    import aetcd
    from aetcd import rpc

    host, port = stack.etcd_client_url("etcd").removeprefix("http://").split(":")
    client = aetcd.Client(host=host, port=int(port),
                          options={"grpc.max_send_message_length": 64 << 20})
    await client.connect()
    batches = [objs[i:i + TXN_OPS] for i in range(0, len(objs), TXN_OPS)]
    it = iter(batches)
    last = 0

    async def worker() -> None:
        nonlocal last
        for batch in it:
            req = rpc.TxnRequest(success=[op_put(key_of(o).encode(), codec_encode(o)) for o in batch])
            resp = await client.kvstub.Txn(req, timeout=30)
            last = max(last, resp.header.revision)

    try:
        await asyncio.gather(*(worker() for _ in range(TXN_CONCURRENCY)))
    finally:
        await client.close()
    return last


def storage_channel(stack: Stack, own_connection: bool = False) -> grpc.aio.Channel:
    """mTLS to the storage service with the proxy's internal client certificate."""
    pki = stack.state / "pki"
    creds = grpc.ssl_channel_credentials(
        root_certificates=(pki / "internal-ca.crt").read_bytes(),
        private_key=(pki / "proxy.key").read_bytes(),
        certificate_chain=(pki / "proxy.crt").read_bytes())
    options = list(CHANNEL_OPTIONS)
    if own_connection:
        options.append(("grpc.use_local_subchannel_pool", 1))
    return grpc.aio.secure_channel(f"127.0.0.1:{stack.grpc_port('storage')}", creds, options=options)


def storage_metric(stack: Stack, name: str, resource: str = "configmaps") -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.health_port('storage')}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(rf'^{name}\{{resource="{resource}"\}} ([0-9.e+-]+)$', text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def heap_trim_pending(stack: Stack) -> bool:
    """Whether the storage service has a trim of its C heap scheduled (runtime.released)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.health_port('storage')}/metrics", timeout=5) as r:
        return re.search(r"^apiary_heap_trim_pending 1(\.0)?$", r.read().decode(), re.MULTILINE) is not None


def figure(value_key: str, value: float, p50: float | None, p99: float | None, baseline: str, baseline_value: float,
           ratio: float, **extra: Any) -> dict[str, Any]:
    """A figure whose ratio is a cost (a time, a size or a latency over its floor or goal: lower is better)."""
    return {value_key: value, "p50_ms": p50, "p99_ms": p99, "baseline": baseline,
            "baseline_rate": baseline_value, "ratio": ratio, "ratio_is_cost": True, **extra}


# 1. LIST of 10,000 ------------------------------------------------------------------------------

def _ours(items: list[dict[str, Any]]) -> int:
    """How many of the listed items the bench wrote (the controller-manager adds kube-root-ca.crt)."""
    return sum(1 for i in items if i["metadata"]["name"].startswith("cm-"))


async def _list_10k(stack: Stack, n: int, reps: int) -> dict[str, Any]:
    ns = "bench-list10k"
    conn = proxy_conn(stack)
    await ensure_namespace(conn, ns)
    created = now_rfc3339()
    objs = [configmap(ns, f"cm-{i:05d}", {"key": f"value-{i}", "other": "x" * 40}, created) for i in range(n)]
    t = time.perf_counter()
    await write_etcd(stack, objs)
    write_s = time.perf_counter() - t
    path = f"/api/v1/namespaces/{ns}/configmaps?resourceVersion=0"
    hdr = {"Accept": "application/json"}

    # The watch cache may still be applying the writes: wait until a LIST at "any" version has them all.
    deadline = time.monotonic() + 30
    t = time.perf_counter()
    while True:
        s, body = await conn.request("GET", path, headers=hdr)
        if s != 200:
            raise RuntimeError(f"list: {s} {body[:200]!r}")
        got = _ours(orjson.loads(body)["items"])
        if got == n:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"list: {got} of {n} items after 30 s")
        await asyncio.sleep(0.2)

    catch_up_s = time.perf_counter() - t
    listed = orjson.loads(body)
    size = len(body)
    if _ours(listed["items"]) != n:
        raise RuntimeError(f"list: {_ours(listed['items'])} items, wanted {n}")

    # Each LIST through the proxy beside the HTTPS floor: the same HTTP stack and TLS sending a constant
    # body of the same size from a bare handler (tools.bench hello-server), one after the other.
    pids = {name: stack.pid(name) for name in ("proxy", "registry", "storage")}
    t = time.perf_counter()
    hello = start_hello(stack)
    try:
        ctx = client_ctx(stack)
        await wait_hello(ctx)
        hc = Conn("127.0.0.1", HELLO_PORT, ctx)
        await hc.request("GET", f"/blob?bytes={size}")  # warm: the handshake, the body made once
        floor_start_s = time.perf_counter() - t
        times, floor_times = [], []
        cpu = dict.fromkeys(pids, 0.0)
        floor_cpu = 0.0
        for _ in range(reps):
            before = {k: cpu_seconds(p) for k, p in pids.items() if p}
            t = time.perf_counter()
            s, body = await conn.request("GET", path, headers=hdr)
            times.append(time.perf_counter() - t)
            for k, v in before.items():
                cpu[k] += cpu_seconds(pids[k]) - v  # type: ignore[arg-type]
            if s != 200:
                raise RuntimeError(f"list: {s} {body[:200]!r}")
            c0 = cpu_seconds(hello.pid)
            t = time.perf_counter()
            s, blob = await hc.request("GET", f"/blob?bytes={size}")
            floor_times.append(time.perf_counter() - t)
            floor_cpu += cpu_seconds(hello.pid) - c0
            if s != 200 or len(blob) != size:
                raise RuntimeError(f"blob: {s}, {len(blob)} bytes")
    finally:
        stop_hello(hello)
    apiary_s, floor_s = statistics.median(times), statistics.median(floor_times)
    ratio = statistics.median(a / f for a, f in zip(times, floor_times))
    p50, p99 = percentiles(times)

    # For reference: the same objects (as served, with resourceVersion) encoded as one ConfigMapList.
    dicts = listed["items"]
    rv = listed["metadata"]["resourceVersion"]
    base_times = []
    for _ in range(reps):
        t = time.perf_counter()
        out = orjson.dumps({"kind": "ConfigMapList", "apiVersion": "v1",
                            "metadata": {"resourceVersion": rv}, "items": dicts})
        base_times.append(time.perf_counter() - t)
    encode_s = statistics.median(base_times)

    # The storage service alone, called as the registry calls it: List on the Calls stream (mTLS
    # gRPC), the items' JSON from the watch cache, in parts, read until the last part is in.
    chan = storage_channel(stack)
    calls = mux.MuxClient(sgrpc.StorageStub(chan).Calls, "storage", {"List": spb.RawListResponse})
    lreq = spb.ListRequest(prefix=f"/registry/configmaps/{ns}/", resource_version="0", json=True,
                           kind="ConfigMap", api_version="v1", chunked=True)
    storage_times = []
    for _ in range(reps + 1):
        t = time.perf_counter()
        pieces = [p async for p, _ in calls.call_stream("List", lreq)]
        storage_times.append(time.perf_counter() - t)
    await chan.close()
    # (wire.ListParts: a RawListResponse, then the items' JSON itself)
    items = spb.RawListResponse.FromString(pieces[0]).json_items + b"".join(pieces[1:])
    if _ours(orjson.loads(b"[" + items + b"]")) != n:
        raise RuntimeError("storage list: wrong item count")
    storage_s = statistics.median(storage_times[1:])
    # seconds: the median LIST; baseline_rate: the median floor's seconds; ratio: the median of the
    # per-pair ratios (goal <= 2).
    return figure("seconds", round(apiary_s, 4), p50, p99, "https_floor_seconds", round(floor_s, 4),
                  round(ratio, 2), objects=n, repetitions=reps, response_bytes=size,
                  cpu_ms_per_request={k: round(v / reps * 1000, 1) for k, v in cpu.items()},
                  baseline_cpu_ms_per_request={"hello": round(floor_cpu / reps * 1000, 1)},
                  encode_seconds=round(encode_s, 5), baseline_bytes=len(out),
                  storage_seconds=round(storage_s, 4), storage_ratio=round(storage_s / floor_s, 2),
                  etcd_write_seconds=round(write_s, 2), cache_catch_up_seconds=round(catch_up_s, 2),
                  floor_start_seconds=round(floor_start_s, 2), goal_ratio=2.0)


def list_10k(stack: Stack, n: int = 10_000, reps: int = 10) -> dict[str, Any]:
    """LIST of 10,000 configmaps through the proxy vs the same bytes from a bare HTTPS handler."""
    return asyncio.run(_list_10k(stack, n, reps))


# 2. watch fan-out -------------------------------------------------------------------------------

async def settle(pid: int, limit: float = 20.0) -> float:
    """Wait (at most limit seconds) until the process uses under 20 % of a core; the time waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        c0 = cpu_seconds(pid)
        await asyncio.sleep(0.5)
        if cpu_seconds(pid) - c0 < 0.1:
            break
    return round(time.perf_counter() - t0, 1)


async def read_stream(call: Any, on_message: Any) -> None:
    """Read a gRPC stream until it ends; its cancellation (by us) is not an error."""
    try:
        async for message in call:
            on_message(message)
    except grpc.aio.AioRpcError as e:
        if e.code() != grpc.StatusCode.CANCELLED:
            raise
    except asyncio.CancelledError:
        call.cancel()
        raise


async def write_paced(stub: sgrpc.StorageStub, ns: str, total: int, rate: float, drain: float,
                      done: asyncio.Event, ack: list[float], write_errors: list[str]) -> float:
    """Create `total` configmaps in ns at `rate` per second, each carrying the time of its write
    (data.t), then wait for the writes and for `done`, bounded: whatever has not arrived `drain`
    seconds after the last write counts as missing. The seconds the writes took to send."""
    created = now_rfc3339()
    run = uuid.uuid4().hex[:6]  # names unique per run, so the bench can be repeated on one stack
    inflight: set[asyncio.Task] = set()

    async def write(i: int) -> None:
        ts = time.time()
        obj = configmap(ns, f"w-{run}-{i:05d}", {"t": repr(ts), "pad": "x" * 60}, created)
        try:
            await stub.Create(spb.CreateRequest(key=key_of(obj), object=obj), timeout=drain)
        except grpc.aio.AioRpcError as e:
            write_errors.append(e.code().name)
            return
        ack.append(time.time() - ts)

    t0 = time.perf_counter()
    try:
        for i in range(total):
            await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
            task = asyncio.create_task(write(i))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        write_elapsed = time.perf_counter() - t0
        end = time.perf_counter() + drain
        if inflight:
            await asyncio.wait(set(inflight), timeout=drain)
        try:
            await asyncio.wait_for(done.wait(), max(0.1, end - time.perf_counter()))
        except TimeoutError:
            pass
    finally:
        for t in list(inflight):
            t.cancel()
        await asyncio.gather(*inflight, return_exceptions=True)
    return write_elapsed


async def _watch_fanout(stack: Stack, watchers: int, rate: float, seconds: float,
                        channels: int, drain: float, multiplexed: bool) -> dict[str, Any]:
    ns = "bench-watch"
    prefix = f"/registry/configmaps/{ns}/"
    conn = proxy_conn(stack)
    await ensure_namespace(conn, ns)
    storage_pid = stack.pid("storage")
    assert storage_pid is not None
    chans = [storage_channel(stack, own_connection=True) for _ in range(channels)]
    writer_chan = storage_channel(stack, own_connection=True)
    stub = sgrpc.StorageStub(writer_chan)
    start_rv = (await stub.List(spb.ListRequest(prefix=prefix), timeout=30)).resource_version
    base_watchers = storage_metric(stack, "apiserver_registered_watchers")

    req = spb.WatchRequest(prefix=prefix, resource_version=start_rv)
    delays: list[float] = []
    received = [0] * watchers
    total = int(rate * seconds)
    done = asyncio.Event()
    delivered = 0
    expected = total * watchers
    marker = b'"t":"'

    def record(raw: bytes, now: float, ids: Any) -> None:
        """Every event in raw (one WatchEvent, or a WatchEvents message of several) goes to ids."""
        nonlocal delivered
        i = raw.find(marker)
        while i >= 0:
            j = raw.index(b'"', i + 5)
            delay = now - float(raw[i + 5:j])
            delays.extend([delay] * len(ids))
            for k in ids:
                received[k] += 1
            delivered += len(ids)
            i = raw.find(marker, j)
        if delivered >= expected:
            done.set()

    if multiplexed:
        # As registries hold them: every watch of a connection on one Watches stream, each event
        # crossing it once with the ids it goes to (services/common/watchmux.py). Watch k has id k.
        opens = [c.stream_stream("/apiary.Storage/Watches", request_serializer=pb.WatchControl.SerializeToString,
                                 response_deserializer=pb.WatchBatch.FromString) for c in chans]
        raw_req = req.SerializeToString()

        async def stream(c: int) -> None:
            mine = [k for k in range(watchers) if k % channels == c]
            ctl = pb.WatchControl(open=[pb.WatchOpen(id=k, request=raw_req) for k in mine])
            quit_ = asyncio.Event()

            async def controls() -> Any:
                yield ctl
                await quit_.wait()

            def on_batch(batch: pb.WatchBatch) -> None:
                now = time.time()
                for d in batch.deliveries:
                    record(d.event, now, d.ids)
                if batch.ended:
                    raise RuntimeError(f"{len(batch.ended)} watches ended by the server")

            try:
                await read_stream(opens[c](controls()), on_batch)
            finally:
                quit_.set()

        tasks = [asyncio.create_task(stream(c)) for c in range(channels)]
    else:
        # One server stream per watch (Storage.Watch: each message the events queued for it, WatchEvents).
        # Raw bytes out (no deserializer): the client only looks for the embedded timestamps, so that
        # it spends less CPU than the server.
        method = "/apiary.Storage/Watch"
        singles = [c.unary_stream(method, request_serializer=spb.WatchRequest.SerializeToString,
                                  response_deserializer=None) for c in chans]

        async def watch(k: int) -> None:
            await read_stream(singles[k % channels](req), lambda raw: record(raw, time.time(), (k,)))

        tasks = [asyncio.create_task(watch(k)) for k in range(watchers)]
    deadline = time.monotonic() + 30
    while storage_metric(stack, "apiserver_registered_watchers") < base_watchers + watchers:
        if time.monotonic() > deadline:
            raise RuntimeError("watchers did not register within 30 s")
        for t in tasks:
            if t.done():
                t.result()
        await asyncio.sleep(0.2)

    ack: list[float] = []
    write_errors: list[str] = []
    cpu0, client0, t0 = cpu_seconds(storage_pid), time.process_time(), time.perf_counter()
    write_elapsed = await write_paced(stub, ns, total, rate, drain, done, ack, write_errors)
    elapsed = time.perf_counter() - t0
    cpu = cpu_seconds(storage_pid) - cpu0
    client_cpu = time.process_time() - client0
    terminated = storage_metric(stack, "apiserver_terminated_watchers_total")
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in chans + [writer_chan]:
        await c.close()
    # Leave the storage service as found: its watchers gone and its CPU idle (bounded).
    gone_by = time.monotonic() + 10
    while storage_metric(stack, "apiserver_registered_watchers") > base_watchers and time.monotonic() < gone_by:
        await asyncio.sleep(0.2)
    settle_s = await settle(storage_pid)

    # Deliveries still missing after the drain count as later than anything measured.
    p50, p99 = percentiles(delays + [float("inf")] * (expected - delivered))
    ack50, ack99 = percentiles(ack + [float("inf")] * (total - len(ack)))
    # Baseline: the goal (p99 <= 100 ms); ratio = p99 / goal.
    return figure("deliveries_per_s", round(delivered / elapsed, 1), p50, p99, "goal_p99_ms", 100.0,
                  round(p99 / 100.0, 2) if p99 is not None else None,
                  via="grpc-storage-watches" if multiplexed else "grpc-storage-watch",
                  window_s=round(seconds + drain, 1), watchers=watchers, writes=total,
                  write_rate=round(total / write_elapsed, 1), seconds=round(elapsed, 2),
                  delivered=delivered, expected=expected, missing=expected - delivered,
                  watchers_complete=sum(1 for r in received if r == total),
                  terminated_watchers_total=terminated,
                  write_ack_p50_ms=ack50, write_ack_p99_ms=ack99,
                  storage_cpu_s=round(cpu, 2), storage_cpu_share=round(cpu / elapsed, 2),
                  storage_cpu_us_per_delivery=round(cpu / max(1, delivered) * 1e6, 1),
                  client_cpu_s=round(client_cpu, 2), channels=channels,
                  write_errors=len(write_errors), write_error_codes=sorted(set(write_errors)),
                  storage_settle_seconds=settle_s)


def watch_fanout(stack: Stack, watchers: int = 1000, rate: float = 100.0, seconds: float = 10.0,
                 channels: int = 4, drain: float = 10.0, multiplexed: bool = True) -> dict[str, Any]:
    """1,000 watches on the storage service while 100 objects/s are written: delivery delay."""
    return asyncio.run(_watch_fanout(stack, watchers, rate, seconds, channels, drain, multiplexed))


# 2b. watch fan-out end to end ------------------------------------------------------------------

def _split(watchers: int, per_process: int) -> list[int]:
    """Watchers per generator process: as even as possible, none over per_process."""
    procs = -(-watchers // per_process)
    return [watchers // procs + (1 if k < watchers % procs else 0) for k in range(procs)]


async def _watch_fanout_https(stack: Stack, watchers: int, rate: float, seconds: float,
                              drain: float, per_process: int) -> dict[str, Any]:
    ns = f"bench-watch-https-{watchers}"
    prefix = f"/registry/configmaps/{ns}/"
    conn = proxy_conn(stack)
    await ensure_namespace(conn, ns)
    pids = {name: stack.pid(name) for name in ("proxy", "registry", "storage")}
    writer_chan = storage_channel(stack, own_connection=True)
    stub = sgrpc.StorageStub(writer_chan)
    start_rv = (await stub.List(spb.ListRequest(prefix=prefix), timeout=30)).resource_version
    base_watchers = storage_metric(stack, "apiserver_registered_watchers")
    total = int(rate * seconds)
    expected = total * watchers
    pki = stack.state / "pki"
    path = f"/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={start_rv}"
    # The watch clients: tools.bench_watchers processes (uvloop, raw TLS bytes, no JSON parse), so
    # that they cost less than what they measure and their CPU is their own.
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tools.bench_watchers", "127.0.0.1", stack.server.rsplit(":", 1)[1],
        str(pki / "ca.crt"), str(pki / "admin.crt"), str(pki / "admin.key"), path, str(count),
        str(count * total), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=ROOT,
        limit=1 << 30) for count in _split(watchers, per_process)]
    try:
        for p in procs:
            assert p.stdout is not None
            ready = (await asyncio.wait_for(p.stdout.readline(), 120)).split()
            if len(ready) != 3 or ready[2] != b"-":
                raise RuntimeError(f"watch refused: {ready!r}")
        deadline = time.monotonic() + 60
        while storage_metric(stack, "apiserver_registered_watchers") < base_watchers + watchers:
            if time.monotonic() > deadline:
                raise RuntimeError("HTTPS watchers did not register within 60 s")
            await asyncio.sleep(0.2)

        async def reports() -> list[dict[str, Any]]:
            return [orjson.loads(await p.stdout.readline()) for p in procs]  # type: ignore[union-attr]

        finished = asyncio.Event()
        collected = asyncio.create_task(reports())
        collected.add_done_callback(lambda _: finished.set())
        cpu0 = {n: cpu_seconds(p) for n, p in pids.items() if p}
        t0 = time.perf_counter()
        errors_: list[str] = []
        write_elapsed = await write_paced(stub, ns, total, rate, drain, finished, [], errors_)
        elapsed = time.perf_counter() - t0
        cpu = {n: round(cpu_seconds(p) - cpu0[n], 2) for n, p in pids.items() if p}
        for p in procs:
            if p.returncode is None and p.stdin is not None:
                p.stdin.write(b"stop\n")
        got = await asyncio.wait_for(collected, 60)
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
            await p.wait()
        await writer_chan.close()
    delays = [d for r in got for d in r["delays"]]
    client_cpu = sum(r["cpu_s"] for r in got)
    delivered = len(delays)
    gone_by = time.monotonic() + 10
    while storage_metric(stack, "apiserver_registered_watchers") > base_watchers and time.monotonic() < gone_by:
        await asyncio.sleep(0.2)
    for pid in pids.values():
        if pid:
            await settle(pid)
    p50, p99 = percentiles(delays + [float("inf")] * (expected - delivered))
    goal = 100.0 if watchers <= 200 else 150.0
    per_delivery = max(1, delivered)
    return figure("deliveries_per_s", round(delivered / elapsed, 1), p50, p99, "goal_p99_ms", goal,
                  round(p99 / goal, 2) if p99 is not None else None, via="https-proxy",
                  window_s=round(seconds + drain, 1), watchers=watchers, writes=total,
                  write_rate=round(total / write_elapsed, 1), seconds=round(elapsed, 2),
                  delivered=delivered, expected=expected, missing=expected - delivered,
                  delivered_pct=round(100 * delivered / expected, 2),
                  storage_cpu_s=cpu.get("storage"), registry_cpu_s=cpu.get("registry"),
                  proxy_cpu_s=cpu.get("proxy"),
                  proxy_cpu_us_per_delivery=round(cpu.get("proxy", 0.0) / per_delivery * 1e6, 1),
                  registry_cpu_us_per_delivery=round(cpu.get("registry", 0.0) / per_delivery * 1e6, 1),
                  storage_cpu_us_per_delivery=round(cpu.get("storage", 0.0) / per_delivery * 1e6, 1),
                  generator_cpu_s=round(client_cpu, 2),
                  generator_cpu_us_per_delivery=round(client_cpu / per_delivery * 1e6, 1),
                  generator_processes=len(procs), closed_by_server=sum(r["closed"] for r in got),
                  write_errors=len(errors_))


def watch_fanout_https(stack: Stack, watchers: int = 200, rate: float = 100.0, seconds: float = 10.0,
                       drain: float = 10.0, per_process: int = 500) -> dict[str, Any]:
    """HTTPS watches through the proxy (the whole path) while objects are written at `rate`; the
    clients are tools.bench_watchers processes of up to per_process watches each."""
    return asyncio.run(_watch_fanout_https(stack, watchers, rate, seconds, drain, per_process))


# 3. watch-cache memory --------------------------------------------------------------------------

def cache_bytes_per_object(prefix: str, kvs: list[tuple[bytes, bytes]], first_rev: int) -> float:
    """What a watch cache's structures hold per object, whatever malloc does with them: a WatchCache
    in this process fed these keys and values as etcd watch responses of TXN_OPS events (the storage
    service's path), with tracemalloc counting what stays allocated once its latest events' renderings
    are gone."""
    from aetcd import rpc

    from services.apiserver.storage.codec import Codec
    from services.apiserver.storage.json_cache import JSONBudget
    from services.apiserver.storage.watch_cache import WatchCache

    resps = []
    for i in range(0, len(kvs), TXN_OPS):
        resp = rpc.WatchResponse()
        for j, (k, v) in enumerate(kvs[i:i + TXN_OPS], start=i):
            e = resp.events.add()
            e.kv.key, e.kv.value, e.kv.mod_revision = k, v, first_rev + j
        resps.append(resp)

    async def fill() -> float:  # a WatchCache's Event needs a running loop
        cache = WatchCache(prefix, codec=Codec(), json_budget=JSONBudget())
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for resp in resps:
                cache.apply(resp)
            cache.history.forget_renderings()
            cache.keys(prefix)  # the sorted keys a LIST makes
            gc.collect()
            return (tracemalloc.get_traced_memory()[0] - before) / len(kvs)
        finally:
            tracemalloc.stop()
    return asyncio.run(fill())


async def steady_rss(pid: int, within: float = 5.0) -> int:
    """pid's RSS once two reads 0.5 s apart agree within 256 KiB (a service just started is still
    taking in its peers' first lists), or after `within` seconds."""
    deadline, rss = time.monotonic() + within, rss_bytes(pid)
    while True:
        await asyncio.sleep(0.5)
        prev, rss = rss, rss_bytes(pid)
        if abs(rss - prev) <= 256 << 10 or time.monotonic() > deadline:
            return rss


async def _storage_memory(stack: Stack, n: int) -> dict[str, Any]:
    ns = "bench-mem"
    prefix = f"/registry/configmaps/{ns}/"
    conn = proxy_conn(stack)
    await ensure_namespace(conn, ns)
    pid = stack.pid("storage")
    assert pid is not None
    chan = storage_channel(stack)
    stub = sgrpc.StorageStub(chan)
    # Make sure the configmaps cache exists before measuring, so the figure is the objects alone.
    await stub.List(spb.ListRequest(prefix=prefix, resource_version="0"), timeout=30)
    rss0 = await steady_rss(pid)

    created = now_rfc3339()
    objs = [configmap(ns, f"cm-{i:06d}", {"key": f"value-{i}", "other": "x" * 40}, created) for i in range(n)]
    t = time.perf_counter()
    last_rev = await write_etcd(stack, objs)
    write_s = time.perf_counter() - t
    # JSON as clients see it (with a resourceVersion of the same width).
    json_bytes = 0
    for o in objs:
        o.metadata.resource_version = str(last_rev)
        json_bytes += len(to_json(o))
    # Reference: what the same objects cost decoded in this process (apiary.Object, upb), per object.
    sample = [codec_encode(o) for o in objs[:20_000]]
    del objs
    gc.collect()
    r0 = rss_bytes(os.getpid())
    decoded = [codec_decode(v, last_rev) for v in sample]
    inprocess_per_object = (rss_bytes(os.getpid()) - r0) / len(decoded)
    del decoded
    gc.collect()
    # (asyncio.run cannot nest: the probe runs in a thread of its own)
    kvs = [(f"{prefix}cm-{i:06d}".encode(), v) for i, v in enumerate(sample)]
    cache_per_object = await asyncio.to_thread(cache_bytes_per_object, prefix, kvs, last_rev)
    del sample, kvs
    gc.collect()

    # Prime: wait until the cache has applied every write (a LIST at "any" version that matches the
    # last object, so the answer stays small and the RSS figure is the cache, not a response).
    last = f"cm-{n - 1:06d}"
    deadline = time.monotonic() + 60
    t = time.perf_counter()
    while True:
        resp = await stub.List(spb.ListRequest(prefix=prefix, resource_version="0",
                                               field_selector=f"metadata.name={last}"), timeout=30)
        if len(resp.items) == 1 and int(resp.resource_version) >= last_rev:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"watch cache did not reach revision {last_rev} within 60 s")
        await asyncio.sleep(0.25)
    prime_s = time.perf_counter() - t
    count = storage_metric(stack, "apiserver_storage_objects")
    await asyncio.sleep(1.0)
    # the burst's freed C heap given back first (a second after its last write), as the service
    # does after every burst: otherwise the figure reads whether the trim came before it or not
    settled = time.monotonic() + 10
    while heap_trim_pending(stack) and time.monotonic() < settled:
        await asyncio.sleep(0.2)
    rss1 = rss_bytes(pid)
    await chan.close()
    delta = rss1 - rss0
    return figure("rss_delta_mb", round(delta / 2**20, 1), None, None, "json_mb",
                  round(json_bytes / 2**20, 1), round(delta / json_bytes, 2), objects=n,
                  rss_before_mb=round(rss0 / 2**20, 1), rss_after_mb=round(rss1 / 2**20, 1),
                  bytes_per_object=round(delta / n), json_bytes_per_object=round(json_bytes / n),
                  inprocess_decoded_bytes_per_object=round(inprocess_per_object),
                  inprocess_cache_bytes_per_object=round(cache_per_object), cached_configmaps=count, etcd_write_seconds=round(write_s, 2),
                  cache_catch_up_seconds=round(prime_s, 2), goal_ratio=2.0)


def storage_memory(stack: Stack, n: int = 100_000) -> dict[str, Any]:
    """Storage service RSS growth for 100,000 cached configmaps vs their JSON size."""
    return asyncio.run(_storage_memory(stack, n))


def run(stack: Stack, quick: bool = False, memory: bool = True) -> dict[str, dict[str, Any]]:
    """All figures, about three minutes in all (quick: smaller sizes and shorter writes, under one).
    Memory runs before the other figures here: after them, their freed buffers are reused for the
    cache (an RSS delta that reads too low); `make bench` measures it on a fresh stack of its own
    (memory=False here). The fan-out also runs with 100 watches on streams of their own, as a
    reference point."""
    seconds, drain = (3.0, 5.0) if quick else (10.0, 10.0)
    figures: dict[str, Any] = {
        "storage_memory": lambda s: storage_memory(s, n=20_000 if quick else 100_000),
        "list_10k": lambda s: list_10k(s, reps=5 if quick else 10),
        "watch_fanout": lambda s: watch_fanout(s, seconds=seconds, drain=drain),
        "watch_fanout_single_100": lambda s: watch_fanout(s, watchers=100, seconds=seconds / 2, channels=2,
                                                          drain=drain, multiplexed=False),
        "watch_https_200": lambda s: watch_fanout_https(s, seconds=seconds, drain=drain),
        "watch_https_1000": lambda s: watch_fanout_https(s, watchers=1000, rate=20.0, seconds=seconds,
                                                         drain=drain),
    }
    if quick:
        del figures["watch_fanout"]
    if not memory:
        del figures["storage_memory"]
    out: dict[str, dict[str, Any]] = {}
    for name, fn in figures.items():
        t = time.perf_counter()
        out[name] = fn(stack)
        out[name]["bench_seconds"] = round(time.perf_counter() - t, 1)
    return out


def main() -> None:
    # The load generator reads multi-MB answers like the services do (services/common/runtime.py).
    tune_malloc()
    p = argparse.ArgumentParser(prog="python -m tools.bench_storage")
    p.add_argument("--state", default=str(Path(__file__).resolve().parent.parent / ".apiary" / "bench-dev"))
    p.add_argument("--port-offset", type=int, default=5000)
    p.add_argument("only", nargs="*",
                   help="list_10k, watch_fanout, watch_fanout_https and/or storage_memory (default: all)")
    p.add_argument("--quick", action="store_true", help="all figures at the sizes of `make bench QUICK=1`")
    args = p.parse_args()
    if bad := set(args.only) - {"list_10k", "storage_memory", "watch_fanout", "watch_fanout_https"}:
        p.error(f"unknown figure(s): {', '.join(sorted(bad))}")
    stack = Stack(Path(args.state).resolve(), args.port_offset)
    stack.start(fresh=True)
    try:
        if args.only:
            res = {name: globals()[name](stack) for name in args.only}
        else:
            res = run(stack, quick=args.quick)
    finally:
        stack.stop(quiet=True)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
