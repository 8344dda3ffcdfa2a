"""Small helpers for integration tests that start real processes."""
from __future__ import annotations

import socket
import subprocess
import time
from typing import BinaryIO

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http_ok(proc: subprocess.Popen[bytes], url: str, log: BinaryIO, what: str, timeout: float = 20) -> None:
    """Until GET url answers 200; fails early when the process exits."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}; see {log.name}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not become healthy; see {log.name}")
        time.sleep(0.05)
