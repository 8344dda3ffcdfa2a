"""python -m services.pizza: the restaurant.programming-kubernetes.info aggregated API server."""
from __future__ import annotations

import sys

from . import server

if __name__ == "__main__":
    server().main(sys.argv[1:])
