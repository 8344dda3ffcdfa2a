"""The proxy on every core: `--workers N` runs N proxy processes on one HTTPS port.

This process is worker 0; it starts workers 1..N-1 with its own command line, and every one binds
the port with SO_REUSEPORT, so the kernel spreads new connections over them. A worker is a whole
proxy (its own streams to auth, apf and registry, its own informers and caches), as a replica is,
so what holds for replicas holds here: priority and fairness is decided by the apf service for all
of them (a seat is held there, whichever worker asked), and each worker's authorization cache is
invalidated by its own watch of the RBAC objects. Only the fallback limits used while apf is
unreachable (--max-requests-inflight) are per process, so each worker takes its share of them.

Worker 0 serves the health port, its /readyz failing until every worker's is ready (theirs are on
ports the OS chose); each worker writes its own audit log (the path with -w<i> before the suffix). A worker that exits is started again; the
workers get SIGTERM when worker 0 dies (PR_SET_PDEATHSIG) and share its process group, so a stop
of the group reaches them all.
"""
from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import socket
import sys
from pathlib import Path

from services.common.background import cancel_and_wait

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
RESTART_DELAY = 1.0


def share(limit: int, workers: int) -> int:
    """One worker's share of a per-process limit (0: no limit stays none)."""
    return -(-limit // workers) if limit else 0


def worker_audit_path(path: str, index: int) -> str:
    """Worker index's audit log: its own file beside worker 0's (- and "" stay as they are)."""
    if index == 0 or path in ("", "-"):
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}-w{index}{p.suffix}"))


def free_ports(host: str, count: int) -> list[int]:
    """count distinct ports the OS says are free now, for the workers' health servers (every socket
    stays bound until all are chosen, so no port is handed out twice)."""
    socks = [socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) for _ in range(count)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def die_with_parent() -> None:
    """In a worker: SIGTERM when worker 0 dies (and at once if it already has)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:
        os.kill(os.getpid(), signal.SIGTERM)


class Workers:
    """Workers 1..count-1 of this proxy: started with the service, started again if one exits,
    stopped (SIGTERM, then waited for) with it."""

    def __init__(self, argv: list[str], count: int, audit_log_path: str, host: str) -> None:
        self.argv, self.count, self.audit_log_path, self.host = argv, count, audit_log_path, host
        self.health_ports = dict(zip(range(1, count), free_ports(host, count - 1), strict=True))
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    def command(self, index: int) -> list[str]:
        """Worker index's command line: this one's, the last occurrence of a flag winning."""
        cmd = [sys.executable, "-m", "services.proxy", *self.argv, "--worker-index", str(index),
               "--health-port", str(self.health_ports[index])]
        if self.audit_log_path:
            cmd += ["--audit-log-path", worker_audit_path(self.audit_log_path, index)]
        return cmd

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._keep(i), name=f"proxy-worker-{i}") for i in range(1, self.count)]

    async def _keep(self, index: int) -> None:
        while not self._stopping:
            proc = await asyncio.create_subprocess_exec(*self.command(index))
            self.procs[index] = proc
            code = await proc.wait()
            if self._stopping:
                return
            log.warning("proxy worker %d (pid %d) exited with %s; starting it again", index, proc.pid, code)
            await asyncio.sleep(RESTART_DELAY)

    async def ready(self) -> bool:
        """Readiness: every worker is running and ready (its /readyz)."""
        if len(self.procs) < self.count - 1 or any(p.returncode is not None for p in self.procs.values()):
            return False
        return all(await asyncio.gather(*(self._ready(port) for port in self.health_ports.values())))

    async def _ready(self, port: int) -> bool:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, port), 1.0)
        except (OSError, TimeoutError):
            return False
        try:
            writer.write(b"GET /readyz HTTP/1.0\r\n\r\n")
            status = await asyncio.wait_for(reader.readline(), 1.0)
            return status.split(b" ")[1:2] == [b"200"]
        except (OSError, TimeoutError):
            return False
        finally:
            writer.close()

    async def stop(self) -> None:
        """No worker is started again from now on; those running get SIGTERM and are waited for."""
        self._stopping = True
        for task in self._tasks:
            await cancel_and_wait(task)
        for proc in self.procs.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        await asyncio.gather(*(p.wait() for p in self.procs.values()))
