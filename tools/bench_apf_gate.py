"""The cost of API Priority and Fairness's gate (issue 25): GET of one configmap through the whole path by a user
who is not exempt (so every request takes a seat from the apf service), through the stack's proxy, against
the same GET through a second proxy of the same stack started with --enable-priority-and-fairness=false (kube's
flag: only the max-in-flight limits), in alternated rounds of the same run. apf_gate.ratio: the first rate ÷
the second (goal >= 0.9). `python -m tools.bench apf` runs only this figure (tools/bench_apf.py holds the fairness figures).
"""
from __future__ import annotations

import asyncio
import itertools
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

import httpx

from services.cluster import certs
from services.cluster.stack import ROOT, Stack

USER = "cert:apf-bench"
NS = "bench-apf"
PATH = f"/api/v1/namespaces/{NS}/configmaps/cm"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _with(cmd: list[str], flag: str, value: str) -> list[str]:
    i = cmd.index(flag)
    return [*cmd[:i + 1], value, *cmd[i + 2:]]


def start_proxy_without_apf(stack: Stack) -> tuple[subprocess.Popen[bytes], int]:
    """A second proxy of the stack, with --enable-priority-and-fairness=false, on ports of its own."""
    port, health = _free_port(), _free_port()
    cmd = _with(_with(stack.command("proxy"), "--secure-port", str(port)), "--health-port", str(health))
    cmd = _with(cmd, "--audit-log-path", str(stack.logs / "audit-apf-off.log"))
    log = open(stack.logs / "proxy-apf-off.log", "ab")  # noqa: SIM115 - the child holds it
    proc = subprocess.Popen([*cmd, "--enable-priority-and-fairness=false"], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as r:
                if r.status == 200:
                    return proc, port
        except (urllib.error.URLError, OSError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the proxy without APF did not start; see {stack.logs / 'proxy-apf-off.log'}")
        time.sleep(0.2)


async def bench(stack: Stack, concurrency: int, n: int, rounds: int) -> dict[str, Any]:
    from tools.bench import Conn, Probe, client_ctx, drive, interleaved

    pki = stack.state / "pki"
    certs.make_cert(pki / "apf-bench", certs.make_ca(pki / "ca", "apiary-ca"), USER, client=True)
    port = int(stack.server.rsplit(":", 1)[1])
    admin = Conn("127.0.0.1", port, client_ctx(stack))
    hdr = {"Content-Type": "application/json", "Accept": "application/json"}
    for path, obj in (
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        (f"/api/v1/namespaces/{NS}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
                                                 "data": {"key": "value-" * 20}}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "bench-apf-view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]}),
    ):
        await admin.request("POST", path, json.dumps(obj).encode(), hdr)
    ctx = client_ctx(stack, "apf-bench")

    async def get(i: int, c: Conn) -> None:
        s, data = await c.request("GET", PATH, headers={"Accept": "application/json"})
        if s != 200:
            raise RuntimeError(f"get: {s} {data[:200]!r}")

    deadline = time.monotonic() + 30  # the binding reaches the auth service's index
    while (await Conn("127.0.0.1", port, ctx).request("GET", PATH))[0] != 200:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{USER} was never allowed to GET")
        await asyncio.sleep(0.5)
    proc, off_port = start_proxy_without_apf(stack)
    try:
        async with httpx.AsyncClient(verify=ctx) as client:  # the gate is there, and then not
            for p, named in ((port, True), (off_port, False)):
                r = await client.get(f"https://127.0.0.1:{p}{PATH}")
                if r.status_code != 200 or ("X-Kubernetes-PF-FlowSchema-UID" in r.headers) != named:
                    raise RuntimeError(f"port {p}: {r.status_code} {dict(r.headers)}")
        on = itertools.cycle([Conn("127.0.0.1", port, ctx) for _ in range(concurrency)]).__next__
        off = itertools.cycle([Conn("127.0.0.1", off_port, ctx) for _ in range(concurrency)]).__next__
        await drive(n // 5, concurrency, get, on)  # warm: connections, caches
        await drive(n // 5, concurrency, get, off)
        probe = Probe(stack, others={"proxy-apf-off": proc.pid})
        return await interleaved(rounds, {
            "get_apf_off": lambda: probe.measure(drive(2 * n // rounds, concurrency, get, off)),
            "get_apf": lambda: probe.measure(drive(2 * n // rounds, concurrency, get, on))})
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def figures(raw: dict[str, Any]) -> dict[str, dict]:
    from tools.bench import paired

    return {"apf_gate": paired(raw["get_apf"], raw["get_apf_off"], "get, APF off")}
