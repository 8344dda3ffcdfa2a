"""Micro-benchmark of the services' gRPC hop: unary calls, calls multiplexed on one stream
(services/common/mux/), and a bare stream of messages (one message each way per call, no mux), with
client and server in two processes on loopback, as two services are.

    python -m tools.bench_mux [--concurrency 1,32] [--seconds 3] [--modes unary,mux,stream] [--gap SECONDS]
    GRPC_EXPERIMENTS= python -m tools.bench_mux    # gRPC's own defaults (EventEngine) instead of grpcpolling's

For each mode and concurrency: calls/s, the CPU µs per call of each process and of each of its threads (the
event loop's "main", grpc.aio's "poller", core's "event_engine" threads), the stream messages per call each
way and the frames per message (how much the mux batches), and the context switches per call. A stream
message and its answer is one call of `stream`: its CPU is the floor of the per-message cost that every
mux call pays when no other call shares its message. --gap sleeps between a worker's calls (a lightly
loaded peer: every message wakes both processes from idle).
"""
from __future__ import annotations

from services.common import grpcpolling

grpcpolling.choose()  # first, before grpc loads: gRPC's polling as in a service

# isort: split
import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import grpc

from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from services.common import grpcutil, mux
from services.common.mux.server import passthrough

CLK = os.sysconf("SC_CLK_TCK")
# About a GET's answer: a configmap's JSON
ANSWER = rpb.APIResponse(code=200, body=b'{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm-0","namespace":'
                         b'"bench","uid":"6b0c"},"data":{"key":"' + b"value-" * 40 + b'"}}').SerializeToString()
REQUEST = rpb.APIRequest(verb="get", version="v1", resource="configmaps", namespace="bench", name="cm-0",
                         user=pb.UserInfo(name="admin", groups=["system:masters", "system:authenticated"]))


def threads_cpu() -> dict[str, float]:
    """CPU seconds of each of this process's threads so far, by role."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        name = "main" if int(tid) == os.getpid() else names.get(int(tid), comm)
        name = "poller" if "poll" in name else name  # grpc.aio's poller is a Python thread
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / CLK
    return out


def switches() -> int:
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                n += sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
        except OSError:
            continue
    return n


class Counts:
    """The server's side of a phase: messages each way, frames in them, its CPU and switches."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.msgs_in = self.msgs_out = self.frames_in = self.frames_out = 0
        self.cpu, self.switches = threads_cpu(), switches()

    def report(self) -> bytes:
        now = threads_cpu()
        return json.dumps({"msgs_in": self.msgs_in, "msgs_out": self.msgs_out, "frames_in": self.frames_in,
                           "frames_out": self.frames_out, "switches": switches() - self.switches,
                           "cpu": {k: v - self.cpu.get(k, 0.0) for k, v in now.items()}}).encode()


async def serve(port: int) -> None:
    c = Counts()

    async def handle(request: rpb.APIRequest, context: Any) -> bytes:
        return ANSWER

    methods = {"Handle": (rpb.APIRequest, handle)}

    async def unary(request: rpb.APIRequest, context: Any) -> bytes:
        c.msgs_in += 1
        c.msgs_out += 1
        return ANSWER

    async def calls(requests: Any, context: Any) -> Any:
        async def counted() -> Any:
            async for batch in requests:
                c.msgs_in += 1
                c.frames_in += len(batch.frames)
                yield batch
        async for batch in mux.serve_mux(counted(), context, methods):
            c.msgs_out += 1
            # serve_mux yields each message serialized; counting its frames parses it again (~1 us)
            c.frames_out += len(pb.Frames.FromString(batch).frames)
            yield batch

    async def stream(requests: Any, context: Any) -> Any:
        async for _ in requests:
            c.msgs_in += 1
            c.msgs_out += 1
            yield ANSWER

    async def counts(request: bytes, context: Any) -> bytes:
        if request == b"reset":
            c.reset()
            return b""
        return c.report()

    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary, request_deserializer=rpb.APIRequest.FromString),
        "Calls": grpc.stream_stream_rpc_method_handler(calls, request_deserializer=pb.Frames.FromString,
                                                       response_serializer=passthrough),
        "Stream": grpc.stream_stream_rpc_method_handler(stream, request_deserializer=rpb.APIRequest.FromString),
        "Counts": grpc.unary_unary_rpc_method_handler(counts),
    }
    server = grpcutil.make_server(None, f"127.0.0.1:{port}")
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Mux", handlers),))
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


class Stream:
    """One bare stream: each call writes one message and takes the next answer (the server answers in order)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.call = channel.stream_stream("/bench.Mux/Stream", request_serializer=rpb.APIRequest.SerializeToString)()
        self.waiting: list[asyncio.Future[bytes]] = []
        self.queue: asyncio.Queue[rpb.APIRequest] = asyncio.Queue()
        self.tasks = [asyncio.create_task(self.read()), asyncio.create_task(self.write())]

    async def read(self) -> None:
        async for answer in self.call:
            self.waiting.pop(0).set_result(answer)

    async def write(self) -> None:  # one write at a time, as grpc.aio allows
        while True:
            await self.call.write(await self.queue.get())

    async def one(self) -> bytes:
        fut = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        self.queue.put_nowait(REQUEST)
        return await fut


async def measure(port: int, modes: list[str], concurrency: list[int], seconds: float,
                  gap: float) -> list[dict[str, Any]]:
    channel = grpcutil.make_channel(None, f"127.0.0.1:{port}")
    counts = channel.unary_unary("/bench.Mux/Counts")
    unary = channel.unary_unary("/bench.Mux/Unary", request_serializer=rpb.APIRequest.SerializeToString)
    client = mux.MuxClient(channel.stream_stream("/bench.Mux/Calls", request_serializer=pb.Frames.SerializeToString,
                                                 response_deserializer=pb.Frames.FromString),
                           "bench", {"Handle": rpb.APIResponse})
    stream = Stream(channel)
    calls = {"unary": lambda: unary(REQUEST), "mux": lambda: client.call("Handle", REQUEST), "stream": stream.one}
    out = []
    for mode in modes:
        call = calls[mode]
        for conc in concurrency:
            made = [0]

            async def worker(until: float, call: Any = call, made: list[int] = made) -> None:
                while time.perf_counter() < until:
                    if gap:
                        await asyncio.sleep(gap)
                    await call()
                    made[0] += 1

            await asyncio.gather(*(worker(time.perf_counter() + 0.3) for _ in range(conc)))
            await counts(b"reset")
            made[0] = 0
            cpu, switched, t0 = threads_cpu(), switches(), time.perf_counter()
            await asyncio.gather(*(worker(t0 + seconds) for _ in range(conc)))
            elapsed, n = time.perf_counter() - t0, made[0]
            mine = {k: v - cpu.get(k, 0.0) for k, v in threads_cpu().items()}
            switched = switches() - switched
            theirs = json.loads(await counts(b""))

            def us(cpu: dict[str, float], n: int = n) -> dict[str, float]:
                return {k: round(v / n * 1e6, 1) for k, v in cpu.items() if v > 0}

            r = {"mode": mode, "concurrency": conc, "rate": round(n / elapsed),
                 "client_us": round(sum(mine.values()) / n * 1e6, 1),
                 "server_us": round(sum(theirs["cpu"].values()) / n * 1e6, 1),
                 "client_threads_us": us(mine), "server_threads_us": us(theirs["cpu"]),
                 "messages_per_call": [round(theirs["msgs_in"] / n, 3), round(theirs["msgs_out"] / n, 3)],
                 "switches_per_call": [round(switched / n, 1), round(theirs["switches"] / n, 1)]}
            if mode == "mux":
                r["frames_per_message"] = [round(theirs["frames_in"] / max(1, theirs["msgs_in"]), 1),
                                           round(theirs["frames_out"] / max(1, theirs["msgs_out"]), 1)]
            out.append(r)
    for task in stream.tasks:
        task.cancel()
    await channel.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tools.bench_mux")
    p.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the server process
    p.add_argument("--concurrency", default="1,32", help="calls in flight, comma-separated (default 1,32)")
    p.add_argument("--seconds", type=float, default=3.0, help="seconds of calls per mode and concurrency")
    p.add_argument("--modes", default="unary,mux,stream")
    p.add_argument("--gap", type=float, default=0.0, help="seconds each worker sleeps before each call")
    args = p.parse_args()
    import uvloop

    uvloop.install()
    if args.serve:
        asyncio.run(serve(args.serve))
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "tools.bench_mux", "--serve", str(port)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        print(f"GRPC_EXPERIMENTS={os.environ.get('GRPC_EXPERIMENTS', '')!r}, load average {os.getloadavg()[0]:.2f}")
        for r in asyncio.run(measure(port, args.modes.split(","), [int(c) for c in args.concurrency.split(",")],
                                     args.seconds, args.gap)):
            print(json.dumps(r))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
