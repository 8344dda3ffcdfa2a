"""The compact profile's host: several apiary services in one Python process (`apiary up --profile compact`).

    python -m services.cluster.host -- SERVICE FLAGS... -- SERVICE FLAGS...

Each SERVICE runs as its own `python -m services.SERVICE FLAGS...` would (its __main__'s parse_args and
assemble, runtime.serve): its own gRPC server and port, its own health port, its peers reached over gRPC
with internal mTLS as in separate processes. They share what a process has once: the interpreter and
the modules it imported (grpc, protobuf, the API catalogue's code: most of a service's 40-48 MB at rest),
the event loop (uvloop), logging (one log, each line naming the module that wrote it), the default
prometheus registry (each health port's /metrics shows the whole process) and the C heap's trims.

Only a test cluster runs so: `make run`, compose and the manifests keep one process per service. The host
imports each service's entry point by name at run time, as `python -m` does, and nothing else of them.

SIGTERM or SIGINT stops the API's clients (the controller-manager, which releases its lease through the
proxy) first, then every other service at once; each stops as its own process would.
"""
from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from services.common.config import API_CLIENTS

# services.common.runtime (grpc, prometheus) is imported by the host process only: the launcher
# imports this module for `command`, and `apiary up` should not pay for grpc's import.

SEPARATOR = "--"


@dataclass(frozen=True)
class Member:
    """One service of the host and its command line (what follows `python -m services.<name>`)."""

    name: str
    argv: list[str]


def entry_point(service: str) -> str:
    """The module `python -m services.<service>` runs."""
    return f"services.{service}.__main__"


def command(members: Sequence[Member]) -> list[str]:
    """The host's command line (after the interpreter) for these members."""
    out = ["-m", __name__]
    for m in members:
        if SEPARATOR in m.argv:
            raise ValueError(f"{m.name}: a flag may not be {SEPARATOR!r}")
        out += [SEPARATOR, m.name, *m.argv]
    return out


def parse(argv: Sequence[str]) -> list[Member]:
    """The members of a host command line: `-- NAME FLAGS...` groups."""
    if not argv or argv[0] != SEPARATOR:
        raise SystemExit(f"usage: python -m {__name__} -- SERVICE FLAGS... [-- SERVICE FLAGS...]")
    members: list[Member] = []
    for token in argv:
        if token == SEPARATOR:
            members.append(Member("", []))
        elif not members[-1].name:
            members[-1] = Member(token, [])
        else:
            members[-1].argv.append(token)
    if any(not m.name for m in members):
        raise SystemExit(f"{__name__}: `{SEPARATOR}` must be followed by a service name")
    if len({m.name for m in members}) != len(members):
        raise SystemExit(f"{__name__}: a service is named twice")
    return members


class MemberExit(Exception):
    """A member's SystemExit (bad flags, a peer it cannot reach), carried as an ordinary exception:
    asyncio would let a SystemExit out of the loop at once, before the other members stopped."""

    def __init__(self, exit: SystemExit) -> None:
        super().__init__(exit.code)
        self.exit = exit


async def _member(name: str, module: ModuleType, args: object, stop: asyncio.Event) -> None:
    from services.common import runtime

    try:
        await runtime.serve(name, args, module.assemble, stop)  # type: ignore[arg-type]
    except SystemExit as e:
        raise MemberExit(e) from None


async def serve(loaded: Sequence[tuple[Member, ModuleType, object]], stop: asyncio.Event) -> None:
    """Every member in this loop until `stop`; then the API's clients first, the others together.
    One member that cannot start or ends stops the host (as one process of a stack would end)."""
    stops = {m.name: asyncio.Event() for m, _, _ in loaded}
    tasks = {m.name: asyncio.create_task(_member(m.name, module, args, stops[m.name]), name=f"service {m.name}")
             for m, module, args in loaded}
    waiter = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait([waiter, *tasks.values()], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    first = [n for n in tasks if n in API_CLIENTS]
    for group in (first, [n for n in tasks if n not in first]):
        for n in group:
            stops[n].set()
        if group:
            await asyncio.wait([tasks[n] for n in group])
    failed = [e for t in tasks.values() if not t.cancelled() and (e := t.exception()) is not None]
    if failed:
        raise failed[0].exit if isinstance(failed[0], MemberExit) else failed[0]
    if waiter not in done:
        raise SystemExit(f"{__name__}: a service stopped by itself")


def main(argv: Sequence[str] | None = None) -> None:
    from services.common import grpcpolling
    grpcpolling.choose()  # before runtime loads grpc
    from services.common import runtime, tracing

    members = parse(sys.argv[1:] if argv is None else argv)
    loaded = []
    for m in members:
        module = importlib.import_module(entry_point(m.name))
        loaded.append((m, module, module.parse_args(m.argv)))
    runtime.setup_logging("compact", max(args.v for _, _, args in loaded))
    # one tracer per process: its spans are the compact host's (the members' own setup() then does nothing)
    tracing.setup("compact", next((a.tracing_config_file for _, _, a in loaded if a.tracing_config_file), ""))

    async def run(stop: asyncio.Event) -> None:
        await serve(loaded, stop)

    runtime.run(run)
    tracing.shutdown()


if __name__ == "__main__":
    main()
