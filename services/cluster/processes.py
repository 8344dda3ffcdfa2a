"""The processes of a local stack: each runs in its own process group (its own children, such as the
proxy's decoder workers, go with it), and a stop signals them all at once.

A stop sends SIGTERM to every group together (the API's clients a moment before), gives the quick
ones a short grace and kills what is left; the data processes (storage, then etcd once storage is
gone) keep a graceful stop, as they finish the writes in flight.
"""
from __future__ import annotations

import os
import signal
import time
from collections.abc import Collection, Mapping, Sequence

# How long a process that holds no data gets to exit after SIGTERM before SIGKILL: a test cluster's
# teardown need not drain anything.
QUICK_GRACE = 0.3
# How long storage and etcd get to finish what is in flight.
DATA_GRACE = 10.0
POLL = 0.02


def reap(pid: int) -> None:
    """Collect a child of this process that exited, so that it does not look alive as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None if no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()
    except OSError:
        return None


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks after boot): with its pid, it names one process, as
    a pid alone does not once the pid is used again."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def alive(pid: int, started: int | None = None) -> bool:
    """Whether process `pid` runs and is not a zombie; with `started`, whether it is the process
    that started then (not another that got the pid since, after a crash or a reboot)."""
    reap(pid)
    fields = _stat(pid)
    if fields is None or fields[0] == b"Z":
        return False
    return started is None or int(fields[19]) == started


def live_groups(groups: Collection[int]) -> set[int]:
    """The process groups among `groups` that still hold a process that is not a zombie.

    A process whose parent is gone is reaped by whoever adopted it, maybe only a second later:
    a zombie is counted as gone, as it holds no port and no file.
    """
    for g in groups:
        reap(g)
    wanted, alive = set(groups), set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rpartition(b")")[2].split()
        if fields[0] != b"Z" and (pgid := int(fields[2])) in wanted:
            alive.add(pgid)
    return alive


def signal_groups(groups: Collection[int], sig: signal.Signals) -> None:
    for g in groups:
        try:
            os.killpg(g, sig)
        except (ProcessLookupError, PermissionError):
            pass


def wait_gone(groups: Collection[int], timeout: float) -> set[int]:
    """Wait until no process of `groups` is alive, up to `timeout` seconds; what is still alive."""
    deadline = time.monotonic() + timeout
    alive = live_groups(groups)
    while alive and time.monotonic() < deadline:
        time.sleep(POLL)
        alive = live_groups(alive)
    return alive


def stop_group(group: int, sig: signal.Signals, grace: float) -> None:
    """`sig` to a process group, SIGKILL after `grace` seconds if some of it is still alive."""
    signal_groups([group], sig)
    if wait_gone([group], grace):
        signal_groups([group], signal.SIGKILL)
        wait_gone([group], 5)


def stop_all(groups: Mapping[str, int], first: Collection[str] = (), data: Collection[str] = (),
             last: Sequence[Collection[str]] = ()) -> None:
    """Stop every process group of `groups` (name -> group), as much at once as can be.

    Those named in `first` go before the others, with QUICK_GRACE (the API's clients: the
    controller-manager releases its leader lease through the API on the way out, so that the next
    start need not wait for the lease to expire). Then all the others get SIGTERM together: those in
    `data` stop gracefully (SIGKILL after DATA_GRACE), the rest get QUICK_GRACE, then SIGKILL; those
    in `last` stop gracefully once everything else is gone (etcd outlives its clients): `last` is a
    sequence of stages, each stopped together after the one before it.
    """
    early = [g for n, g in groups.items() if n in first]
    quick = [g for n, g in groups.items() if n not in first and n not in data and n not in last]
    careful = [g for n, g in groups.items() if n in data]
    final = [[groups[n] for n in stage if n in groups] for stage in last]
    signal_groups(early, signal.SIGTERM)
    if left := wait_gone(early, QUICK_GRACE):
        signal_groups(left, signal.SIGKILL)
    signal_groups([*quick, *careful], signal.SIGTERM)
    if left := wait_gone(quick, QUICK_GRACE):
        signal_groups(left, signal.SIGKILL)
    if left := wait_gone(careful, DATA_GRACE):
        signal_groups(left, signal.SIGKILL)
    wait_gone([*early, *quick, *careful], 5)
    for stage in final:
        signal_groups(stage, signal.SIGTERM)
        if left := wait_gone(stage, DATA_GRACE):
            signal_groups(left, signal.SIGKILL)
            wait_gone(left, 5)
