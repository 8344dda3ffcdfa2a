"""Two controller-manager processes against the shared stack, on a Lease of their own with short
durations: one leads, the other waits; the leader killed with SIGKILL, the other takes the lease over."""
from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from services.common.config import HEALTH_PORTS
from tests.waiting import wait_for
from services.cluster.stack import ROOT

WAIT = 60.0


def master_status(port: int, lease: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    m = re.search(rf'^leader_election_master_status\{{name="{re.escape(lease)}"\}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else None


eventually = functools.partial(wait_for, timeout=WAIT, interval=0.2)


@pytest.fixture
def candidates(stack, tmp_path) -> Iterator[tuple[str, dict[int, subprocess.Popen[bytes]]]]:
    lease = f"test-{uuid.uuid4().hex[:8]}"
    procs: dict[int, subprocess.Popen[bytes]] = {}
    # between the health ports of the stacks at offset and offset + 100 (ports 91xx + a multiple of 100)
    base = HEALTH_PORTS["controllermanager"] + stack.offset + 50
    for i in range(2):
        port = base + i
        log = open(tmp_path / f"cm-{i}.log", "wb")
        procs[port] = subprocess.Popen([
            sys.executable, "-m", "services.controllermanager", "--insecure-internal",
            "--health-port", str(port), "--kubeconfig", str(stack.kubeconfig),
            "--controllers", "serviceaccount", "--leader-elect-resource-name", lease,
            "--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s",
            "--leader-elect-retry-period", "1s"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        yield lease, procs
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def test_one_leads_and_the_other_takes_over(kubectl, candidates):
    lease, procs = candidates

    def statuses() -> dict[int, float | None]:
        return {port: master_status(port, lease) for port in procs}

    leading = eventually(lambda: [p for p, s in statuses().items() if s == 1.0] if
                         all(s is not None for s in statuses().values()) else None, what="one candidate leads")
    assert len(leading) == 1
    leader = leading[0]
    (follower,) = [p for p in procs if p != leader]
    assert master_status(follower, lease) == 0.0
    holder = kubectl.run("-n", "kube-system", "get", "lease", lease, "-o", "jsonpath={.spec.holderIdentity}").stdout
    assert holder
    os.killpg(procs[leader].pid, signal.SIGKILL)
    procs[leader].wait()
    eventually(lambda: master_status(follower, lease) == 1.0, what="the other candidate leads")
    new_holder = kubectl.run("-n", "kube-system", "get", "lease", lease, "-o",
                             "jsonpath={.spec.holderIdentity} {.spec.leaseTransitions}").stdout.split()
    assert new_holder[0] != holder and int(new_holder[1]) >= 1
