"""Imported first by every service's __main__: while a service's modules load, the cyclic collector rests;
and gRPC's socket polling is chosen before grpc loads (grpcpolling.py, in any process that imports this).

Loading a service creates a few hundred thousand objects that all live (classes, functions, the
catalogue's tables, protobuf descriptors), and each 700 of them started a collection that walked the
young ones and, every hundred or so, all of them: about a fifth of the proxy's import CPU, paid on
every start and so in every restart's outage. runtime.run resumes the collector (with its thresholds)
before the service assembles. Imported any other way (tests, tools, the compact host), it does nothing.
"""
from __future__ import annotations

import gc
import sys

from . import grpcpolling  # noqa: F401 - before grpc loads


def _loading_a_service() -> bool:
    """Whether the program is `python -m services.<name>` (its __main__ is the module being loaded)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", "") or ""
    return name.startswith("services.") and name.endswith(".__main__")


if _loading_a_service():
    gc.disable()
