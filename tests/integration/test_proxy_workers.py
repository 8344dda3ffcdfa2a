"""The proxy's --workers: a second proxy, started beside the shared stack's with --workers 2 against the
same services, serves its HTTPS port from two processes, each taking connections of its own."""
from __future__ import annotations

import os
import signal
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.cluster.stack import ROOT, Stack
from tests.integration.procs import free_port, wait_http_ok
from tests.waiting import wait_for

CONNECTIONS = 32


def _flag(cmd: list[str], name: str, value: str) -> list[str]:
    """cmd with flag name set to value (replaced where it is, else appended)."""
    if name in cmd:
        i = cmd.index(name)
        return [*cmd[:i + 1], value, *cmd[i + 2:]]
    return [*cmd, name, value]


def _established(pid: int, port: int) -> int:
    """Established TCP connections process pid holds on its local port `port`."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "01" and f[9] in inodes:
                count += 1
    return count


def _children(pid: int) -> list[int]:
    """The worker processes proxy pid started (not its other children, such as multiprocessing's
    resource tracker)."""
    out = subprocess.run(["ps", "--ppid", str(pid), "-o", "pid="], capture_output=True, text=True)
    workers = []
    for child in map(int, out.stdout.split()):
        try:
            if b"--worker-index" in Path(f"/proc/{child}/cmdline").read_bytes():
                workers.append(child)
        except OSError:  # exited meanwhile
            pass
    return workers


@pytest.fixture(scope="module")
def two_workers(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    tmp = tmp_path_factory.mktemp("workers")
    https, health = free_port(), free_port()
    cmd = stack.command("proxy")
    for name, value in (("--secure-port", str(https)), ("--health-port", str(health)),
                        ("--audit-log-path", str(tmp / "audit.log")), ("--workers", "2")):
        cmd = _flag(cmd, name, value)
    log = (tmp / "proxy.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http_ok(proc, f"http://127.0.0.1:{health}/readyz", log, "proxy --workers 2", timeout=60)
        yield proc, https
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        log.close()


def test_both_workers_serve_the_port(stack: Stack, two_workers: tuple[subprocess.Popen[bytes], int]) -> None:
    proc, port = two_workers
    workers = [proc.pid, *_children(proc.pid)]
    assert len(workers) == 2, workers
    pki = stack.state / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    clients = [httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=ctx, timeout=30) for _ in range(CONNECTIONS)]
    try:
        # each client's one keep-alive connection: the kernel hands each to one worker's socket
        for c in clients:
            r = c.get("/api/v1/namespaces/default")
            assert r.status_code == 200, r.text
        held = wait_for(lambda: [_established(pid, port) for pid in workers] if
                        sum(_established(pid, port) for pid in workers) == CONNECTIONS else None,
                        timeout=10, what="every connection established in a worker")
        assert all(n > 0 for n in held), f"connections per worker {held}"
    finally:
        for c in clients:
            c.close()


def test_a_worker_that_dies_is_started_again(two_workers: tuple[subprocess.Popen[bytes], int]) -> None:
    proc, port = two_workers
    (child,) = _children(proc.pid)
    os.kill(child, signal.SIGKILL)
    again = wait_for(lambda: [p for p in _children(proc.pid) if p != child], timeout=30,
                     what="the worker started again")
    assert len(again) == 1 and proc.poll() is None
