"""The OTLP/gRPC trace receiver, as `python -m tools.otlpreceiver` and for the tests: it lives in
services/cluster/otlpreceiver.py, since `apiary up --tracing` runs it from an installed wheel (which holds
no tools/)."""
from __future__ import annotations

from services.cluster.otlpreceiver import Receiver, main, spans_of, tree

__all__ = ["Receiver", "main", "spans_of", "tree"]

if __name__ == "__main__":
    main()
