"""The start of a service's program: while its modules load, the cyclic collector rests, and gRPC's
socket polling is chosen before grpc loads (grpcpolling.py).

Loading a service creates a few hundred thousand objects that all live (classes, functions, the
catalogue's tables, protobuf descriptors), and each 700 of them started a collection that walked the
young ones and, every hundred or so, all of them: about a fifth of the proxy's import CPU, paid on
every start and so in every restart's outage. Every service's __main__ calls start() when it runs as
the program, before its other imports; runtime.run resumes the collector (with runtime.GC_THRESHOLDS)
before the service assembles. This module imports nothing heavy, so that nothing loads before the call.
"""
from __future__ import annotations

import gc

from . import grpcpolling


def start() -> None:
    """The program's modules begin to load: gRPC's polling is chosen, and the cyclic collector rests
    until runtime.run resumes it."""
    grpcpolling.choose()
    gc.disable()
