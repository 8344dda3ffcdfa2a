"""gRPC core's socket polling for a service process, chosen before grpc loads (core reads GRPC_EXPERIMENTS
once, when grpc is imported): choose() is called by loading.start(), first in every service's program,
and by the compact host's main.

By default grpc 1.85 reads and writes its sockets on EventEngine threads of its own, which hand each
completed operation to grpc.aio's poller thread, which wakes the event loop: three threads and about ten
context switches per stream message and its answer. Without EventEngine for channels, listeners and
their connections, core's epoll poller does the socket I/O on the poller thread itself (the one that
waits on the completion queue): four to five switches, and about half the CPU per message on loopback
(`python -m tools.bench_mux`). Every service's calls, streams and etcd reads
are such messages. A GRPC_EXPERIMENTS of the environment is kept as it is.
"""
from __future__ import annotations

import os

EXPERIMENTS = "-event_engine_client,-event_engine_listener,-event_engine_for_all_other_endpoints"



def choose() -> None:
    """Core's epoll poller for this process and its children, unless the environment chose already."""
    os.environ.setdefault("GRPC_EXPERIMENTS", EXPERIMENTS)
