"""gRPC's socket polling chosen for a service process before grpc loads (services/common/grpcpolling.py)."""
from __future__ import annotations

import os
import subprocess
import sys

from services.cluster.stack import ROOT
from services.common import grpcpolling

# What a service's first import does, then a unary call over loopback on the grpc it loaded.
CALL = """
from services.common import loading
loading.start()
import asyncio, os
import grpc

async def main():
    async def echo(request, context):
        return request
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "t.T", {"Echo": grpc.unary_unary_rpc_method_handler(echo)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        assert await channel.unary_unary("/t.T/Echo")(b"ping") == b"ping"
    await server.stop(None)
    print(os.environ["GRPC_EXPERIMENTS"])

asyncio.run(main())
"""


def run(env_experiments: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    if env_experiments is not None:
        env["GRPC_EXPERIMENTS"] = env_experiments
    return subprocess.run([sys.executable, "-c", CALL], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60, check=True)


def test_a_service_process_runs_grpc_on_cores_epoll_poller_and_core_knows_each_experiment() -> None:
    done = run(None)
    assert done.stdout.strip() == grpcpolling.EXPERIMENTS
    # a grpc that no longer knows an experiment says so, and the choice would silently do nothing
    assert "Unknown experiment" not in done.stderr, done.stderr


def test_the_environments_choice_is_kept() -> None:
    assert run("-event_engine_client").stdout.strip() == "-event_engine_client"
