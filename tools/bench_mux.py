"""Micro-benchmark: one unary gRPC call vs the same call multiplexed on a stream (services/common/mux/).

    python -m tools.bench_mux

Client and server run in this one process on loopback; the CPU per call covers both sides.
"""
from __future__ import annotations

import asyncio
import os
import socket
import time

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import grpcutil, mux


class Echo(rgrpc.RegistryServicer):
    @grpcutil.api_method
    async def Handle(self, request, context):  # type: ignore[no-untyped-def]
        return rpb.APIResponse(code=200, body=request.name.encode())

    async def Calls(self, request_iterator, context):  # type: ignore[no-untyped-def]
        async for batch in mux.serve_mux(request_iterator, context, mux.unary_methods(self, {"Handle": rpb.APIRequest})):
            yield batch


async def run(n: int = 6000, in_flight: int = 64) -> dict[str, dict[str, float]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = grpcutil.make_server(None, f"127.0.0.1:{port}")
    mux.add_servicer(rgrpc.add_RegistryServicer_to_server, Echo(), server)
    await server.start()
    channel = grpcutil.make_channel(None, f"127.0.0.1:{port}")
    stub = rgrpc.RegistryStub(channel)
    client = mux.MuxClient(stub.Calls, "echo", {"Handle": rpb.APIResponse})
    req = rpb.APIRequest(name="x", verb="get", resource="configmaps", namespace="default")
    out = {}
    try:
        for label, fn in (("unary", lambda: grpcutil.call(stub.Handle(req))),
                          ("mux", lambda: client.call("Handle", req))):
            sem = asyncio.Semaphore(in_flight)

            async def one() -> None:
                async with sem:
                    await fn()

            await asyncio.gather(*(one() for _ in range(500)))
            t, c0 = time.perf_counter(), os.times()
            await asyncio.gather(*(one() for _ in range(n)))
            dt, c1 = time.perf_counter() - t, os.times()
            cpu = (c1.user + c1.system - c0.user - c0.system) / n
            out[label] = {"rate": round(n / dt), "cpu_us_per_call": round(cpu * 1e6)}
    finally:
        await channel.close()
        await server.stop(None)
    return out


if __name__ == "__main__":
    import uvloop

    uvloop.install()
    for k, v in asyncio.run(run()).items():
        print(f"{k:6} {v['rate']:>7} calls/s  {v['cpu_us_per_call']:>5} us CPU per call")
