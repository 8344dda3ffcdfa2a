"""The storage service as a real process against the real etcd fixture."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from apiary_pb import storage_pb2_grpc as sgrpc
from tests.integration.procs import free_port, wait_http_ok

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Storage:
    address: str
    health: str
    proc: subprocess.Popen[bytes]


@contextmanager
def run_storage(etcd_url: str, log_dir: Path, *extra: str) -> Iterator[Storage]:
    grpc_port, health_port = free_port(), free_port()
    log = open(log_dir / f"storage-{grpc_port}.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.storage",
            "--insecure-internal",
            "--grpc-port",
            str(grpc_port),
            "--health-port",
            str(health_port),
            "--etcd-servers",
            etcd_url,
            *extra,
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    health = f"http://127.0.0.1:{health_port}"
    try:
        wait_http_ok(proc, f"{health}/healthz", log, "storage")
        yield Storage(f"127.0.0.1:{grpc_port}", health, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def storage(etcd: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storage]:
    with run_storage(etcd, tmp_path_factory.mktemp("storage"), "--watch-bookmark-interval", "1") as s:
        yield s


@pytest.fixture
async def stub(storage: Storage) -> AsyncIterator[sgrpc.StorageStub]:
    async with grpc.aio.insecure_channel(storage.address) as ch:
        yield sgrpc.StorageStub(ch)


@pytest.fixture(scope="session")
def spawn_storage():
    """run_storage, for tests that need a storage process of their own."""
    return run_storage


@pytest.fixture
def unused_port() -> int:
    return free_port()
