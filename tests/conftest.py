"""Shared fixtures. Tests that need the whole stack share one per session.

The test stack runs from .apiary/test with every port moved by 1000
(proxy 7443, etcd 3379, ...) so it never collides with a developer's `make run`.
It runs what `make run` runs, the pizza server too (services.cluster.aggregated.AGGREGATED_SERVERS): the
book's session (tests/e2e/test_pizza_book.py) goes through the proxy to it.
"""
from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, settings

from services.cluster.certs import read_tokens
from services.cluster.otlpreceiver import Receiver
from services.cluster.stack import ROOT, Stack

# Tests assert no timings: hypothesis's per-example deadline and its too-slow health check are timings, and
# they failed property tests on a loaded machine (a generated example is as good when it is slow).
settings.register_profile("apiary", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("apiary")

TEST_STATE = ROOT / ".apiary" / "test"
# APIARY_TEST_PORT_OFFSET lets several checkouts run their suites side by side.
TEST_OFFSET = int(os.environ.get("APIARY_TEST_PORT_OFFSET", "1000"))


# The session's OTLP receiver (services/cluster/otlpreceiver.py), on 4317 moved by the offset as the
# stack's ports are.
# Every process of the session's stack exports to it at samplingRatePerMillion 0: no request is traced
# unless a system:masters client sends a sampled traceparent (tests/e2e/test_tracing.py does), so the
# rest of the suite runs with tracing configured and idle, the cost the benchmarks bound.
TRACES_PORT = 4317 + TEST_OFFSET
# where it keeps the spans too, as `apiary up --tracing`'s receiver does, for `apiary traces` (docs/tour.md)
TRACES_FILE = TEST_STATE / "logs" / "traces.jsonl"


@pytest.fixture(scope="session")
def traces() -> Iterator[Receiver]:
    TRACES_FILE.parent.mkdir(parents=True, exist_ok=True)
    TRACES_FILE.unlink(missing_ok=True)
    r = Receiver(TRACES_PORT, out=str(TRACES_FILE)).start()
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture(scope="session")
def stack(traces: Receiver) -> Iterator[Stack]:
    s = Stack(TEST_STATE, TEST_OFFSET, tracing_endpoint=traces.endpoint)
    s.start(fresh=True)
    try:
        yield s
    finally:
        s.stop(quiet=True)


@pytest.fixture(scope="session")
def tokens(stack: Stack) -> dict[str, str]:
    return read_tokens(stack.state)


@pytest.fixture(scope="session")
def admin(stack: Stack) -> Iterator[httpx.Client]:
    """An HTTPS client holding the admin client certificate."""
    pki = stack.state / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    with httpx.Client(base_url=stack.server, verify=ctx, timeout=30) as c:
        yield c


class Kubectl:
    def __init__(self, stack: Stack, cache: Path, binary: str = "kubectl", kubeconfig: Path | None = None) -> None:
        self.stack, self.cache, self.binary = stack, cache, binary
        self.kubeconfig = kubeconfig or stack.kubeconfig

    def with_token(self, token: str, name: str) -> "Kubectl":
        """The same kubectl, authenticating with a bearer token instead of the admin certificate."""
        path = self.cache / f"kubeconfig-{name}"
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: apiary\n  cluster:\n    server: {self.stack.server}\n"
            f"    certificate-authority: {self.stack.state / 'pki' / 'ca.crt'}\n"
            f"users:\n- name: {name}\n  user:\n    token: {token}\n"
            f"contexts:\n- name: apiary\n  context:\n    cluster: apiary\n    user: {name}\n"
            "current-context: apiary\n"
        )
        return Kubectl(self.stack, self.cache, self.binary, path)

    def run(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [self.binary, f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.cache}", *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def get_json(self, *args: str) -> dict[str, Any] | None:
        """`kubectl get ... -o json` decoded, or None when the object is NotFound (any other error fails)."""
        proc = self.run("get", *args, "-o", "json", check=False)
        if proc.returncode != 0:
            assert "NotFound" in proc.stderr, proc.stderr
            return None
        return json.loads(proc.stdout)

    def table(self, *args: str) -> tuple[list[str], list[list[str]]]:
        """`kubectl get ...`'s header and rows, cells split where kubectl pads (two spaces or more)."""
        lines = self.run("get", *args).stdout.splitlines()
        split = [re.split(r"\s{2,}", line.strip()) for line in lines]
        return split[0], split[1:]

    def popen(self, *args: str) -> subprocess.Popen[bytes]:
        cmd = [self.binary, f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.cache}", *args]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def kubectl(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    return Kubectl(stack, tmp_path_factory.mktemp("kube-cache"), os.environ.get("KUBECTL", "kubectl"))


def pytest_report_header(config: pytest.Config) -> str:
    return f"python {sys.version.split()[0]}; test stack state {TEST_STATE}"
