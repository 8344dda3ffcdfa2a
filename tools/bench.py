"""`make bench`: apiary through the full stack, against baselines measured in the same run.

Figures (each at a fixed concurrency, admin client certificate, HTTPS):
  get     GET of one configmap                       baseline: bare hello-world on the same HTTP stack
  list    LIST of 1,000 configmaps                   baseline: bare hello-world on the same HTTP stack
  create  POST of a new configmap                    baseline: raw etcd puts from Python (aetcd)
plus raw etcd gets, the CPU each apiary process spent per request (from /proc),
and the gRPC calls each service served per request (from its /metrics); `python -m tools.bench core`
runs only these three figures and their baselines.
get_oidc is the same GET with an OIDC bearer token from a local issuer (tools.fakeservers) trusted
by --authentication-config, against the GET with a client certificate of a user with the same rights
measured just before it (both warm, neither in system:masters).
apply and patch are a server-side apply and a strategic merge patch of a 3-container Deployment against
a plain update (PUT) of the same objects, in the same run (`python -m tools.bench writes` runs only those).
The aggregation figures of tools/bench_pizza.py (the pizza server registered with apiary):
aggregation_get, a GET of a pizza through the proxy against the same GET straight to the pizza
server with the front-proxy certificate and the same identity (CPU per request of the proxy and of
the pizza server beside it); pizza_get_cold_authz, that GET with the pizza server's authorization
cache cold against warm; watch_pizzas_100, the delivery p99 of a watch of 100 pizzas' changes
through the proxy at 100 writes/s against the same watch straight to the pizza server.
Then the admission webhooks' figures of tools/bench_webhooks.py (CREATE with one validating and with
one mutating webhook over the plain CREATE of the same run), the storage-scale figures of tools/bench_storage.py (LIST of 10,000, watch-cache memory for
100,000 objects, 1,000-watcher fan-out) and the RBAC decision rates of tools/bench_rbac.py.
Writes .apiary/bench.json; `--record` appends the run to docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import os
import re
import ssl
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import TypeVar
from pathlib import Path

from services.common.runtime import tune_malloc
from tools import certs
from tools.fakeservers import Issuer
from tools.run import ROOT, Stack, replica_of

BENCH_STATE = ROOT / ".apiary" / "bench"
# Ports of the bench stack: the default ports plus this offset (APIARY_BENCH_PORT_OFFSET, so that
# benches of several checkouts, or a bench beside a test run, never share a port).
BENCH_OFFSET = int(os.environ.get("APIARY_BENCH_PORT_OFFSET", "2000"))
HELLO_PORT = 8443 + BENCH_OFFSET
# The stack with two replicas of every service (replica 1 on its ports + 100: tools/run.py).
REPLICAS_OFFSET = BENCH_OFFSET + 200
CLK = os.sysconf("SC_CLK_TCK")


# A lean keep-alive HTTP/1.1 client, so the load generator costs less CPU than the server.

class Conn:
    def __init__(self, host: str, port: int, ctx: ssl.SSLContext) -> None:
        self.host, self.port, self.ctx = host, port, ctx
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"",
                      headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port, ssl=self.ctx)
        assert self.reader is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Length: {len(body)}\r\n"
        for k, v in (headers or {}).items():
            head += f"{k}: {v}\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        if "content-length" in hdrs:
            data = await self.reader.readexactly(int(hdrs["content-length"]))
        else:
            parts = []
            while True:
                size = int((await self.reader.readline()).strip(), 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                parts.append(chunk[:-2])
            data = b"".join(parts)
        return status, data


async def drive(n: int, concurrency: int, one: Callable[[int, Conn], Awaitable[None]],
                make_conn: Callable[[], Conn]) -> dict[str, float]:
    lat: list[float] = []
    counter = iter(range(n))

    async def worker() -> None:
        conn = make_conn()
        for i in counter:
            t = time.perf_counter()
            await one(i, conn)
            lat.append(time.perf_counter() - t)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    lat.sort()
    return {
        "rate": round(len(lat) / elapsed, 1),
        "p50_ms": round(statistics.median(lat) * 1000, 2),
        "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 2),
        "requests": len(lat),
    }


def client_ctx(stack: Stack, name: str = "admin") -> ssl.SSLContext:
    pki = stack.state / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / f"{name}.crt"), str(pki / f"{name}.key"))
    return ctx


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def grpc_calls(stack: Stack, name: str) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{stack.health_port(name)}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for m in re.finditer(r'^grpc_server_started_total\{grpc_method="([^"]+)"\} ([0-9.e+]+)$', text, re.M):
        out[m.group(1)] = float(m.group(2))
    for m in re.finditer(r"^apiserver_flowcontrol_dispatched_requests_total\{[^}]*\} ([0-9.e+]+)$", text, re.M):
        out["Seats(acquire)"] = out.get("Seats(acquire)", 0.0) + float(m.group(1))
    return out


class Probe:
    """CPU seconds and gRPC calls per apiary service (all its replicas) over one measured phase."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.pids = {n: stack.pid(n) for n in ("etcd", *stack.service_names())}

    def snapshot(self, end: bool = False) -> dict[str, tuple[float, dict[str, float]]]:
        """At a phase's start the metrics are read before the CPU counters, at its end (end=True)
        after them: rendering /metrics costs a service milliseconds, which is not the phase's."""
        out: dict[str, tuple[float, dict[str, float]]] = {}
        cpus = {n: cpu_seconds(p) if p else 0.0 for n, p in self.pids.items()} if end else {}
        scraped = {n: grpc_calls(self.stack, n) if n != "etcd" else {} for n in self.pids}
        if not end:
            cpus = {n: cpu_seconds(p) if p else 0.0 for n, p in self.pids.items()}
        for n in self.pids:
            service = replica_of(n)[0]
            cpu, calls = out.get(service, (0.0, {}))
            for method, v in scraped[n].items():
                calls[method] = calls.get(method, 0.0) + v
            out[service] = (cpu + cpus[n], calls)
        return out

    @staticmethod
    def per_request(before: dict, after: dict, n: int) -> tuple[dict[str, float], dict[str, float]]:
        cpu = {k: round((after[k][0] - before[k][0]) / n * 1000, 3) for k in before}
        hops: dict[str, float] = {}
        for k in before:
            for method, v in after[k][1].items():
                d = (v - before[k][1].get(method, 0.0)) / n
                if d >= 0.01 and method not in ("Seats", "Calls"):
                    hops[f"{k}.{method}"] = round(d, 2)
        return cpu, hops


async def bench_apiary(stack: Stack, concurrency: int, n: int, with_list: bool = True) -> dict[str, dict]:
    ctx = client_ctx(stack)
    # the connections go to each proxy replica in turn (a load balancer's spreading)
    ports = [int(stack.server_of(r).rsplit(":", 1)[1]) for r in range(stack.replicas)]
    turn = itertools.count()

    def mk() -> Conn:
        return Conn("127.0.0.1", ports[next(turn) % len(ports)], ctx)

    setup = mk()
    json_hdr = {"Content-Type": "application/json", "Accept": "application/json"}
    for ns in ("bench", "bench-list"):
        body = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}).encode()
        await setup.request("POST", "/api/v1/namespaces", body, json_hdr)
    probe = Probe(stack)
    results: dict[str, dict] = {}

    async def create(i: int, c: Conn) -> None:
        body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}"},
                           "data": {"key": "value-" * 20}}).encode()
        s, data = await c.request("POST", "/api/v1/namespaces/bench/configmaps", body, json_hdr)
        if s != 201:
            raise RuntimeError(f"create: {s} {data[:200]!r}")

    async def get(i: int, c: Conn) -> None:
        s, data = await c.request("GET", "/api/v1/namespaces/bench/configmaps/cm-0", headers={"Accept": "application/json"})
        if s != 200:
            raise RuntimeError(f"get: {s} {data[:200]!r}")

    async def fill(i: int, c: Conn) -> None:
        body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"item-{i}"},
                           "data": {"key": "value-" * 20}}).encode()
        await c.request("POST", "/api/v1/namespaces/bench-list/configmaps", body, json_hdr)

    async def lst(i: int, c: Conn) -> None:
        s, data = await c.request("GET", "/api/v1/namespaces/bench-list/configmaps", headers={"Accept": "application/json"})
        # the 1,000 items (the controller-manager's kube-root-ca.crt is there too)
        if s != 200 or data.count(b'"name":"item-') != 1000:
            raise RuntimeError(f"list: {s} {data[:200]!r}")

    for name, fn, count in (("create", create, n), ("get", get, 2 * n)):
        before = probe.snapshot()
        results[name] = await drive(count, concurrency, fn, mk)
        cpu, hops = Probe.per_request(before, probe.snapshot(end=True), results[name]["requests"])
        results[name].update(cpu_ms_per_request=cpu, grpc_calls_per_request=hops)
    if not with_list:
        return results
    await drive(1000, concurrency, fill, mk)
    before = probe.snapshot()
    results["list"] = await drive(max(20, n // 20), min(concurrency, 8), lst, mk)
    cpu, hops = Probe.per_request(before, probe.snapshot(end=True), results["list"]["requests"])
    results["list"].update(cpu_ms_per_request=cpu, grpc_calls_per_request=hops)
    return results


def bench_replicas(concurrency: int, n: int, replicas: int = 2) -> dict[str, dict]:
    """GET and CREATE on a stack with `replicas` processes of every service (one etcd), the load
    spread over its proxies: how the figures scale with replicas (on 2 cores, expect <= 1)."""
    stack = Stack(BENCH_STATE / "replicas", REPLICAS_OFFSET, replicas=replicas)
    stack.start(fresh=True)
    try:
        return asyncio.run(bench_apiary(stack, concurrency, n, with_list=False))
    finally:
        stack.stop(quiet=True)


WRITE_OBJECTS = 64


async def bench_writes(stack: Stack, concurrency: int, n: int) -> dict[str, dict]:
    """A plain update (PUT), a server-side apply and a strategic merge patch of the same 3-container
    Deployments (issue 14), each changing one env value of the first container, so each is a real write
    (a spec change: the generation moves) and the patch merges by key twice (containers, then env);
    ratios against the update."""
    ctx = client_ctx(stack)
    port = int(stack.server.rsplit(":", 1)[1])

    def mk() -> Conn:
        return Conn("127.0.0.1", port, ctx)

    base = "/apis/apps/v1/namespaces/bench-writes/deployments"
    json_hdr = {"Content-Type": "application/json", "Accept": "application/json"}
    setup = mk()
    await setup.request("POST", "/api/v1/namespaces", json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench-writes"}}).encode(), json_hdr)

    def container(j: int, value: str) -> dict:
        return {"name": f"c{j}", "image": f"registry.example/app-{j}:1.0",
                "ports": [{"containerPort": 8080 + j, "name": f"http-{j}"}],
                "env": [{"name": "MODE", "value": "bench"}, {"name": "CHANGING", "value": value if j == 0 else "-"}],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}

    def obj(i: int, value: str) -> bytes:
        labels = {"app": "bench", "tier": "x"}
        return json.dumps({"apiVersion": "apps/v1", "kind": "Deployment",
                           "metadata": {"name": f"w-{i % WRITE_OBJECTS}", "labels": labels},
                           "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                                    "template": {"metadata": {"labels": labels}, "spec": {
                                        "containers": [container(j, value) for j in range(3)]}}}}).encode()

    for i in range(WRITE_OBJECTS):
        s, data = await setup.request("PATCH", f"{base}/w-{i}?fieldManager=bench", obj(i, "start"),
                                      {"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"})
        if s not in (200, 201):
            raise RuntimeError(f"apply setup: {s} {data[:200]!r}")

    def checked(verb: str, method: str, query: str, ctype: str, body: Callable[[int], bytes]
                ) -> Callable[[int, Conn], Awaitable[None]]:
        async def one(i: int, c: Conn) -> None:
            s, data = await c.request(method, f"{base}/w-{i % WRITE_OBJECTS}{query}", body(i),
                                      {"Content-Type": ctype, "Accept": "application/json"})
            if s != 200:
                raise RuntimeError(f"{verb}: {s} {data[:200]!r}")
        return one

    def smp(i: int) -> bytes:
        return json.dumps({"spec": {"template": {"spec": {"containers": [
            {"name": "c0", "env": [{"name": "CHANGING", "value": f"p{i}"}]}]}}}}).encode()

    runs = {
        "update": checked("update", "PUT", "?fieldManager=bench-put", "application/json",
                          lambda i: obj(i, f"u{i}")),
        "apply": checked("apply", "PATCH", "?fieldManager=bench&force=true", "application/apply-patch+yaml",
                         lambda i: obj(i, f"a{i}")),
        "patch": checked("patch", "PATCH", "?fieldManager=bench-patch", "application/strategic-merge-patch+json",
                         smp),
    }
    results: dict[str, dict] = {}
    for name, fn in runs.items():
        results[name] = await drive(n, concurrency, fn, mk)
    return results


def write_figures(raw: dict) -> dict[str, dict]:
    w = raw["writes"]
    return {name: {**{k: w[name][k] for k in ("rate", "p50_ms", "p99_ms")}, "baseline": "update",
                   "baseline_rate": w["update"]["rate"], "ratio": round(w[name]["rate"] / w["update"]["rate"], 4)}
            for name in ("apply", "patch")}


POLICY_NS = "bench-policy"
BENCH_POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "bench-three-expressions"},
    "spec": {"failurePolicy": "Fail",
             "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                     "operations": ["CREATE", "UPDATE"],
                                                     "resources": ["configmaps"]}]},
             "validations": [
                 {"expression": "!has(object.data) || size(object.data) <= 16"},
                 {"expression": "object.metadata.name.startsWith('cm-') || object.metadata.name == 'refused'",
                  "message": "names start with cm-"},
                 {"expression": "!has(object.data) || object.data.all(k, size(object.data[k]) < 1024)",
                  "messageExpression": "'value too long in ' + object.metadata.name"}]}}
BENCH_BINDING = {
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "bench-three-expressions"},
    "spec": {"policyName": "bench-three-expressions", "validationActions": ["Deny"],
             "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": POLICY_NS}}}}}


async def bench_policy(stack: Stack, concurrency: int, n: int) -> dict[str, dict]:
    """CREATE of a configmap without any admission extension, then with one matching ValidatingAdmissionPolicy
    of three expressions (binding by namespaceSelector), alternated twice in the same run; the figures sum
    both rounds of each."""
    ctx = client_ctx(stack)
    port = int(stack.server.rsplit(":", 1)[1])

    def mk() -> Conn:
        return Conn("127.0.0.1", port, ctx)

    json_hdr = {"Content-Type": "application/json", "Accept": "application/json"}
    setup = mk()
    for ns in ("bench-plain", POLICY_NS):
        body = {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}}
        await setup.request("POST", "/api/v1/namespaces", json.dumps(body).encode(), json_hdr)
    await setup.request("POST", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
                        json.dumps(BENCH_POLICY).encode(), json_hdr)
    bindings = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    seq = iter(range(10**9))

    def creator(ns: str) -> Callable[[int, Conn], Awaitable[None]]:
        async def create(i: int, c: Conn) -> None:
            body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{next(seq)}"},
                               "data": {"key": "value-" * 20, "other": "x"}}).encode()
            s, data = await c.request("POST", f"/api/v1/namespaces/{ns}/configmaps", body, json_hdr)
            if s != 201:
                raise RuntimeError(f"create: {s} {data[:200]!r}")
        return create

    async def policy_effective(on: bool) -> None:
        """Until a violating create is refused (on) or accepted (off): the binding arrives by watch."""
        while True:
            body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "x-"}})
            s, _ = await setup.request("POST", f"/api/v1/namespaces/{POLICY_NS}/configmaps", body.encode(),
                                       json_hdr)
            if (s == 422) == on:
                return
            await asyncio.sleep(0.1)

    totals: dict[str, list[dict]] = {"plain": [], "policy": []}
    probe = Probe(stack)

    async def measure(name: str, ns: str) -> None:
        before = probe.snapshot()
        r = await drive(n, concurrency, creator(ns), mk)
        cpu, _ = Probe.per_request(before, probe.snapshot(end=True), r["requests"])
        r["cpu_ms_per_request"] = round(sum(cpu.values()), 3)
        totals[name].append(r)

    for _ in range(2):
        await measure("plain", "bench-plain")
        await setup.request("POST", bindings, json.dumps(BENCH_BINDING).encode(), json_hdr)
        await policy_effective(True)
        await measure("policy", POLICY_NS)
        await setup.request("DELETE", f"{bindings}/bench-three-expressions", b"", json_hdr)
        await policy_effective(False)
    out = {}
    for name, runs in totals.items():
        out[name] = {"rate": round(sum(r["rate"] for r in runs) / len(runs), 1),
                     "p50_ms": round(statistics.median(r["p50_ms"] for r in runs), 2),
                     "p99_ms": max(r["p99_ms"] for r in runs),
                     "cpu_ms_per_request": round(sum(r["cpu_ms_per_request"] for r in runs) / len(runs), 3),
                     "rounds": runs}
    return out


def policy_figures(raw: dict) -> dict[str, dict]:
    p, plain = raw["policy"]["policy"], raw["policy"]["plain"]
    return {"create_vap": {"rate": p["rate"], "p50_ms": p["p50_ms"], "p99_ms": p["p99_ms"],
                           "baseline": "create_plain", "baseline_rate": plain["rate"],
                           "ratio": round(p["rate"] / plain["rate"], 4),
                           "cpu_ms_per_request": p["cpu_ms_per_request"],
                           "baseline_cpu_ms_per_request": plain["cpu_ms_per_request"]}}


def oidc_config(issuer: Issuer) -> str:
    ca = "\n".join("      " + line for line in issuer.ca_pem.strip().splitlines())
    return ("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n"
            f"- issuer:\n    url: {issuer.url}\n    audiences: [apiary]\n    certificateAuthority: |\n{ca}\n"
            "  claimMappings:\n    username: {claim: sub, prefix: 'oidc:'}\n"
            "    groups: {claim: groups, prefix: 'oidc:'}\n")


async def bench_oidc(stack: Stack, issuer: Issuer, concurrency: int, n: int) -> dict[str, dict]:
    """GET of one configmap with a client certificate, then with an OIDC token, both warm and both for
    users with the same view rights (neither in system:masters, so both take an APF seat and a cached
    authorization decision: the figure compares the authentications)."""
    pki = stack.state / "pki"
    certs.make_cert(pki / "bench-user", certs.make_ca(pki / "ca", "apiary-ca"), "cert:bench", client=True)
    port = int(stack.server.rsplit(":", 1)[1])
    admin = Conn("127.0.0.1", port, client_ctx(stack))
    json_hdr = {"Content-Type": "application/json", "Accept": "application/json"}
    for path, obj in (
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench-oidc"}}),
        ("/api/v1/namespaces/bench-oidc/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                     "metadata": {"name": "cm"}, "data": {"key": "value-" * 20}}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "bench-oidc-view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "oidc:bench"},
                         {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "cert:bench"}]}),
    ):
        await admin.request("POST", path, json.dumps(obj).encode(), json_hdr)
    token = issuer.token(sub="bench", lifetime=3600)
    bearer = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
    path = "/api/v1/namespaces/bench-oidc/configmaps/cm"

    async def get(i: int, c: Conn) -> None:
        s, data = await c.request("GET", path, headers={"Accept": "application/json"})
        if s != 200:
            raise RuntimeError(f"get: {s} {data[:200]!r}")

    async def get_token(i: int, c: Conn) -> None:
        s, data = await c.request("GET", path, headers={"Accept": "application/json", "Authorization": f"Bearer {token}"})
        if s != 200:
            raise RuntimeError(f"get with a token: {s} {data[:200]!r}")

    deadline = time.monotonic() + 30   # the RBAC binding reaches the auth service's index
    while (await Conn("127.0.0.1", port, bearer).request("GET", path, headers={"Authorization": f"Bearer {token}"}))[0] != 200:
        if time.monotonic() > deadline:
            raise RuntimeError("the OIDC token was never allowed to GET")
        await asyncio.sleep(0.5)
    results = {}
    for name, fn, ctx in (("get_cert", get, client_ctx(stack, "bench-user")), ("get_oidc", get_token, bearer)):
        await drive(n // 5, concurrency, fn, lambda: Conn("127.0.0.1", port, ctx))   # warm
        results[name] = await drive(2 * n, concurrency, fn, lambda: Conn("127.0.0.1", port, ctx))
    return results


def start_hello(stack: Stack) -> subprocess.Popen:
    pki = stack.state / "pki"
    return subprocess.Popen([sys.executable, "-m", "tools.bench", "hello-server", "--port", str(HELLO_PORT),
                             "--cert", str(pki / "apiserver.crt"), "--key", str(pki / "apiserver.key"),
                             "--ca", str(pki / "ca.crt")], cwd=ROOT)


async def wait_hello(ctx: ssl.SSLContext) -> None:
    for _ in range(100):
        try:
            await Conn("127.0.0.1", HELLO_PORT, ctx).request("GET", "/hello")
            return
        except OSError:
            await asyncio.sleep(0.1)


async def bench_hello(stack: Stack, concurrency: int, n: int) -> dict:
    proc = start_hello(stack)
    try:
        ctx = client_ctx(stack)
        await wait_hello(ctx)

        async def one(i: int, c: Conn) -> None:
            await c.request("GET", "/hello")

        return await drive(2 * n, concurrency, one, lambda: Conn("127.0.0.1", HELLO_PORT, ctx))
    finally:
        proc.terminate()
        proc.wait()


async def bench_etcd(stack: Stack, concurrency: int, n: int) -> dict[str, dict]:
    import aetcd

    host, port = stack.etcd_url.removeprefix("http://").split(":")
    client = aetcd.Client(host=host, port=int(port))
    await client.connect()
    value = b"x" * 1024
    out: dict[str, dict] = {}
    try:
        for name, op in (("put", lambda i: client.put(f"/bench/raw/{i}".encode(), value)),
                         ("get", lambda i: client.get(f"/bench/raw/{i % 100}".encode()))):
            lat: list[float] = []
            sem = asyncio.Semaphore(concurrency)

            async def one(i: int) -> None:
                async with sem:
                    t = time.perf_counter()
                    await op(i)
                    lat.append(time.perf_counter() - t)

            start = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(n)))
            elapsed = time.perf_counter() - start
            lat.sort()
            out[name] = {"rate": round(n / elapsed, 1), "p50_ms": round(statistics.median(lat) * 1000, 2),
                         "p99_ms": round(lat[int(n * 0.99) - 1] * 1000, 2), "requests": n}
        await client.delete_prefix(b"/bench/raw/")
    finally:
        await client.close()
    return out


def hello_server(port: int, cert: str, key: str, ca: str) -> None:
    """The HTTP stack the proxy runs on (a bare ASGI app on uvicorn, httptools, uvloop, TLS),
    serving a constant: /hello, and /blob?bytes=N (a JSON body of N bytes, the transport floor for
    a response that size)."""
    from urllib.parse import parse_qs

    import uvicorn

    hello = b'{"hello":"world"}'
    blobs: dict[int, bytes] = {}

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        body = hello
        if scope["path"] == "/blob":
            n = min(int(parse_qs(scope["query_string"].decode()).get("bytes", ["0"])[0]), 64 << 20)
            if n not in blobs:
                blobs[n] = b'"' + b"x" * max(0, n - 2) + b'"'
            body = blobs[n]
        elif scope["path"] != "/hello":
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    uvicorn.run(app, host="127.0.0.1", port=port, ssl_certfile=cert, ssl_keyfile=key, ssl_ca_certs=ca,
                ssl_cert_reqs=ssl.CERT_OPTIONAL, http="httptools", loop="uvloop", log_level="warning",
                access_log=False, lifespan="off")


EXTRA_FIGURES = ("replicas_get", "replicas_create", "watch_pizzas_100", "list_10k", "storage_memory", "watch_fanout", "watch_fanout_single_100", "watch_fanout_https", "rbac_inprocess", "auth_grpc")


def measured(r: dict) -> str:
    """The figure's measured value as `key value` (its first key: rate, rss_delta_mb, ...)."""
    key = next(iter(r))
    return f"{key} {r[key]}"


def record(results: dict, raw: dict, path: Path) -> None:
    today = dt.date.today().isoformat()
    lines = [f"\n## {today}\n", "| figure | rate/s | p50 ms | p99 ms | baseline | baseline rate/s | ratio |",
             "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if name in EXTRA_FIGURES:
            continue
        lines.append(f"| {name} | {r['rate']} | {r['p50_ms']} | {r['p99_ms']} | {r['baseline']} | "
                     f"{r['baseline_rate']} | {r['ratio']} |")
    lines.append("\nCPU ms per request by process, and gRPC calls per request:\n")
    for name in ("get", "list", "create"):
        r = raw["apiary"][name]
        cpu = ", ".join(f"{k} {v}" for k, v in r["cpu_ms_per_request"].items() if v)
        hops = ", ".join(f"{k} {v}" for k, v in r["grpc_calls_per_request"].items())
        lines.append(f"- {name}: CPU {cpu}; gRPC {hops}")
    extra = [n for n in EXTRA_FIGURES if n in results]
    if extra:
        lines += ["\nStorage scale (tools/bench_storage.py), the watch through the aggregation proxy "
                  "(tools/bench_pizza.py) and RBAC (tools/bench_rbac.py); "
                  "p50/p99 empty: beyond the measurement window or not a latency figure:\n",
                  "| figure | measured | p50 ms | p99 ms | baseline | baseline value | ratio | notes |",
                  "|---|---|---|---|---|---|---|---|"]
        for name in extra:
            r = results[name]
            lines.append(f"| {name} | {measured(r)} | {_cell(r.get('p50_ms'))} | {_cell(r.get('p99_ms'))} | "
                         f"{r['baseline']} | {r['baseline_rate']} | {_cell(r.get('ratio'))} | {extra_notes(name, r)} |")
    with path.open("a") as f:
        f.write("\n".join(lines) + "\n")


def _cell(v: object) -> str:
    return "" if v is None else str(v)


def extra_notes(name: str, r: dict) -> str:
    if name == "list_10k":
        return (f"{r['seconds']} s through the proxy vs {r['baseline_seconds']} s to encode; goal ratio <= "
                f"{r['goal_ratio']}; the storage service's List alone {r.get('storage_seconds')} s (ratio "
                f"{r.get('storage_ratio')}); HTTPS floor (a constant body of the same size, same HTTP stack) "
                f"{r.get('https_floor_seconds')} s (ratio {r.get('https_floor_ratio')})")
    if name == "storage_memory":
        return (f"{r['objects']} objects, {r['bytes_per_object']} B RSS vs {r['json_bytes_per_object']} B JSON "
                f"each; goal ratio <= {r['goal_ratio']}")
    if name == "watch_pizzas_100":
        return (f"through the proxy, {r['watchers']} watcher of {r['objects']} pizzas, {r['write_rate']} writes/s "
                f"(straight to the pizza server), delivered {r['delivered']}/{r['expected']}, {r['write_errors']} "
                f"write errors; baseline: the same watch straight to the pizza server (p50 {r['baseline_p50_ms']} ms, "
                f"{r['baseline_write_rate']} writes/s)")
    if name.startswith("watch_fanout"):
        cpu = f"storage CPU {r['storage_cpu_s']} s"
        if r.get("proxy_cpu_s") is not None:
            cpu += f", registry {r['registry_cpu_s']} s, proxy {r['proxy_cpu_s']} s"
        return (f"{r['via']}, {r['watchers']} watchers, {r['write_rate']} writes/s, delivered "
                f"{r['delivered']}/{r['expected']} within {r['window_s']} s, {cpu}, "
                f"{r['write_errors']} write errors")
    return ""


def aggregation_figures(pizza: dict) -> dict[str, dict]:
    """bench.json entries of tools/bench_pizza.py's run (through_proxy)."""
    def figure(r: dict, baseline: str, base: dict) -> dict:
        return {**{k: r[k] for k in ("rate", "p50_ms", "p99_ms")}, "baseline": baseline,
                "baseline_rate": base["rate"], "ratio": round(r["rate"] / base["rate"], 4)}

    direct, proxied = pizza["get_direct_admin"], pizza["get_proxy"]
    out = {"aggregation_get": {**figure(proxied, "pizza_get", direct),
                               "cpu_ms_per_request": proxied.get("cpu_ms_per_request"),
                               "baseline_cpu_ms_per_request": direct.get("cpu_ms_per_request")},
           "pizza_get_cold_authz": figure(pizza["get_cold_authz"], "pizza_get_warm", pizza["get_direct"])}
    wd, wp = pizza["watch_direct"], pizza["watch_proxy"]
    out["watch_pizzas_100"] = {"p99_ms": wp["p99_ms"], "p50_ms": wp["p50_ms"], "baseline": "watch_direct_p99_ms",
                               "baseline_rate": wd["p99_ms"], "ratio": wp.get("ratio"),
                               "baseline_p50_ms": wd["p50_ms"], "baseline_write_rate": wd["write_rate"],
                               **{k: wp[k] for k in ("write_rate", "delivered", "expected", "write_errors",
                                                     "watchers", "objects")}}
    return out


def storage_figures(raw: dict) -> dict[str, dict]:
    """bench.json entries for the storage-scale and RBAC runs (same keys as the others, plus extras)."""
    out = dict(raw.get("storage", {}))
    rbac = raw.get("rbac")
    if rbac:
        inproc, grpc_ = rbac["rbac_inprocess"], rbac["auth_grpc"]
        out["rbac_inprocess"] = {"rate": inproc["rate"], "p50_ms": None, "p99_ms": None,
                                 "baseline": "goal_decisions_per_s", "baseline_rate": 50_000,
                                 "ratio": round(inproc["rate"] / 50_000, 2),
                                 **{k: v for k, v in inproc.items() if k != "rate"}}
        out["auth_grpc"] = {"rate": grpc_["rate"], "p50_ms": None, "p99_ms": None, "baseline": "rbac_inprocess",
                            "baseline_rate": inproc["rate"], "ratio": round(grpc_["rate"] / inproc["rate"], 4),
                            **{k: v for k, v in grpc_.items() if k != "rate"}}
    return out


T = TypeVar("T")


def bench_core(stack: Stack, concurrency: int, n: int) -> dict[str, dict]:
    """The baselines and apiary's get, list and create, each asyncio run on its own as in `run`."""
    return {"hello": asyncio.run(bench_hello(stack, concurrency, n)),
            "etcd": asyncio.run(bench_etcd(stack, concurrency, n)),
            "apiary": asyncio.run(bench_apiary(stack, concurrency, n))}


def core_figures(raw: dict) -> dict[str, dict]:
    """get and list against the bare HTTP stack, create against raw etcd puts (same run)."""
    bases = {"get": ("http_hello", raw["hello"]["rate"]), "list": ("http_hello", raw["hello"]["rate"]),
             "create": ("etcd_put", raw["etcd"]["put"]["rate"])}
    out = {}
    for name, (base, base_rate) in bases.items():
        r = raw["apiary"][name]
        out[name] = {"rate": r["rate"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "baseline": base,
                     "baseline_rate": base_rate, "ratio": round(r["rate"] / base_rate, 4),
                     "cpu_ms_per_request": r["cpu_ms_per_request"]}
    return out


def on_fresh_stack(measure: Callable[[Stack], T]) -> T:
    """measure(stack) on a fresh bench stack, stopped afterwards (the single-figure modes)."""
    stack = Stack(BENCH_STATE, BENCH_OFFSET)
    stack.start(fresh=True)
    try:
        return measure(stack)
    finally:
        stack.stop(quiet=True)


def main() -> None:
    # The load generator reads multi-MB answers like the services do (services/common/runtime.py).
    tune_malloc()
    p = argparse.ArgumentParser(prog="python -m tools.bench")
    p.add_argument("mode", nargs="?", default="run",
                   choices=["run", "core", "writes", "policy", "replicas", "aggregation", "hello-server"],
                   help="run: every figure; core: only get, list and create with their baselines and the CPU "
                   "per request of each service; writes: only the apply and patch figures; policy: only CREATE with "
                   "and without a ValidatingAdmissionPolicy; replicas: only GET and CREATE with 2 replicas of "
                   "every service against 1; aggregation: only the GET of a pizza through the proxy against "
                   "straight to the pizza server, --rounds times")
    p.add_argument("--rounds", type=int, default=3, help="aggregation: rounds of both GETs, one ratio each")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("-n", type=int, default=1500, help="requests per figure (GET runs 2n)")
    p.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    p.add_argument("--port", type=int)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--ca")
    args = p.parse_args()
    if args.mode == "hello-server":
        hello_server(args.port, args.cert, args.key, args.ca)
        return
    if args.mode == "core":
        core = on_fresh_stack(lambda st: bench_core(st, args.concurrency, args.n))
        print(json.dumps(core, indent=1))
        for name, r in core_figures(core).items():
            print(f"{name:8} {r['rate']:>9} {r['p50_ms']:>8} {r['p99_ms']:>8}  {r['baseline']:11} "
                  f"{r['baseline_rate']:>9} {r['ratio']:>7}  CPU ms/request {sum(r['cpu_ms_per_request'].values()):.3f}")
        return
    if args.mode == "writes":
        raw_writes = {"writes": on_fresh_stack(lambda st: asyncio.run(bench_writes(st, args.concurrency, args.n)))}
        for name, r in write_figures(raw_writes).items():
            print(f"{name:8} {r['rate']:>9} {r['p50_ms']:>8} {r['p99_ms']:>8}  {r['baseline']:11} "
                  f"{r['baseline_rate']:>9} {r['ratio']:>7}")
        return
    if args.mode == "policy":
        raw = {"policy": on_fresh_stack(lambda st: asyncio.run(bench_policy(st, args.concurrency, args.n)))}
        r = policy_figures(raw)["create_vap"]
        print(f"create, no admission extension: {r['baseline_rate']}/s; with one matching "
              f"ValidatingAdmissionPolicy of three expressions: {r['rate']}/s (p50 {r['p50_ms']} ms, "
              f"p99 {r['p99_ms']} ms); ratio {r['ratio']} (cost {round((1 - r['ratio']) * 100, 1)} %); CPU of "
              f"the apiary processes per create {r['baseline_cpu_ms_per_request']} ms -> {r['cpu_ms_per_request']} ms")
        print(json.dumps(raw["policy"], indent=1))
        return
    if args.mode == "aggregation":
        from tools import bench_pizza

        agg = on_fresh_stack(lambda st: bench_pizza.aggregation_rounds(st, args.concurrency // 2, args.n,
                                                                       args.rounds))
        for i, r in enumerate(agg["rounds"]):
            d, p_ = r["get_direct_admin"], r["get_proxy"]
            print(f"round {i + 1}: through the proxy {p_['rate']}/s (p50 {p_['p50_ms']} ms), straight "
                  f"{d['rate']}/s (p50 {d['p50_ms']} ms), ratio {r['ratio']}")
            print(f"  CPU ms/request through the proxy {p_['cpu_ms_per_request']}")
            print(f"  CPU ms/request straight {d['cpu_ms_per_request']}")
        print(f"aggregation_get ratios {agg['ratios']}, median {agg['median_ratio']}")
        (ROOT / ".apiary" / "bench-aggregation.json").write_text(json.dumps(agg, indent=2))
        return
    if args.mode == "replicas":
        one = on_fresh_stack(lambda st: asyncio.run(bench_apiary(st, args.concurrency, args.n, with_list=False)))
        two = bench_replicas(args.concurrency, args.n)
        for name in ("get", "create"):
            print(f"{name}: 1 replica {one[name]['rate']}/s, 2 replicas {two[name]['rate']}/s, ratio "
                  f"{round(two[name]['rate'] / one[name]['rate'], 4)}")
            print(f"  CPU ms/request, 1 replica: {one[name]['cpu_ms_per_request']}")
            print(f"  CPU ms/request, 2 replicas (both): {two[name]['cpu_ms_per_request']}")
        return
    issuer = Issuer(BENCH_STATE / "oidc", "bench-issuer").start()
    authn_config = BENCH_STATE / "oidc" / "authentication-config.yaml"
    authn_config.write_text(oidc_config(issuer))
    stack = Stack(BENCH_STATE, BENCH_OFFSET, extra={"auth": ["--authentication-config", str(authn_config)]})
    stack.start(fresh=True)
    try:
        raw = {
            **bench_core(stack, args.concurrency, args.n),
            "oidc": asyncio.run(bench_oidc(stack, issuer, args.concurrency, args.n)),
            "writes": asyncio.run(bench_writes(stack, args.concurrency, args.n)),
            "policy": asyncio.run(bench_policy(stack, args.concurrency, args.n)),
        }
        from tools import bench_pizza, bench_storage, bench_webhooks

        raw["pizza"] = bench_pizza.run(stack, args.concurrency // 2, args.n, through_proxy=True)

        raw["webhooks"] = bench_webhooks.run(stack, args.concurrency, args.n)
        raw["storage"] = bench_storage.run(stack)
    finally:
        stack.stop(quiet=True)
        issuer.stop()
    raw["replicas"] = bench_replicas(args.concurrency, args.n)
    try:
        from tools import bench_rbac
    except ImportError:
        bench_rbac = None  # type: ignore[assignment]
    if bench_rbac is not None:
        raw["rbac"] = bench_rbac.run()
    results = {name: {k: v for k, v in r.items() if k != "cpu_ms_per_request"}
               for name, r in core_figures(raw).items()}
    oidc = raw["oidc"]
    results["get_oidc"] = {**{k: oidc["get_oidc"][k] for k in ("rate", "p50_ms", "p99_ms")},
                           "baseline": "get_cert", "baseline_rate": oidc["get_cert"]["rate"],
                           "ratio": round(oidc["get_oidc"]["rate"] / oidc["get_cert"]["rate"], 4)}
    results["etcd_get"] = {**{k: raw["etcd"]["get"][k] for k in ("rate", "p50_ms", "p99_ms")},
                           "baseline": "etcd_get", "baseline_rate": raw["etcd"]["get"]["rate"], "ratio": 1.0}
    results.update(write_figures(raw))
    results.update(bench_webhooks.figures(raw["webhooks"]))
    results.update(aggregation_figures(raw["pizza"]))
    results.update(storage_figures(raw))
    results.update(policy_figures(raw))
    for name in ("get", "create"):
        two, one = raw["replicas"][name], raw["apiary"][name]
        results[f"replicas_{name}"] = {"rate": two["rate"], "p50_ms": two["p50_ms"], "p99_ms": two["p99_ms"],
                                       "baseline": f"{name}, 1 replica", "baseline_rate": one["rate"],
                                       "ratio": round(two["rate"] / one["rate"], 4)}
    out = ROOT / ".apiary" / "bench.json"
    out.write_text(json.dumps(results, indent=2))
    (ROOT / ".apiary" / "bench-raw.json").write_text(json.dumps(raw, indent=2))
    print(f"concurrency {args.concurrency}")
    print(f"{'figure':8} {'rate/s':>9} {'p50 ms':>8} {'p99 ms':>8}  {'baseline':11} {'rate/s':>9} {'ratio':>7}")
    for name, r in results.items():
        if name in EXTRA_FIGURES:
            continue
        print(f"{name:8} {r['rate']:>9} {r['p50_ms']:>8} {r['p99_ms']:>8}  {r['baseline']:11} "
              f"{r['baseline_rate']:>9} {r['ratio']:>7}")
    for name in ("get", "list", "create"):
        print(f"{name}: CPU ms/request {raw['apiary'][name]['cpu_ms_per_request']}")
        print(f"{name}: gRPC calls/request {raw['apiary'][name]['grpc_calls_per_request']}")
    agg = results["aggregation_get"]
    print(f"aggregation_get: CPU ms/request {agg['cpu_ms_per_request']} (straight to the pizza server: "
          f"{agg['baseline_cpu_ms_per_request']})")
    for name in ("get", "create"):
        print(f"{name}, 2 replicas: CPU ms/request (all replicas) {raw['replicas'][name]['cpu_ms_per_request']}")
    extra = [n for n in EXTRA_FIGURES if n in results]
    if extra:
        print(f"\n{'figure':16} {'measured':>26} {'p50 ms':>8} {'p99 ms':>8}  {'baseline':20} {'value':>9} "
              f"{'ratio':>7}")
        for name in extra:
            r = results[name]
            print(f"{name:16} {measured(r):>26} {_cell(r.get('p50_ms')):>8} {_cell(r.get('p99_ms')):>8}  "
                  f"{r['baseline']:20} {r['baseline_rate']:>9} {_cell(r.get('ratio')):>7}")
            if notes := extra_notes(name, r):
                print(f"{'':16} {notes}")
    print(f"wrote {out}")
    if args.record:
        record(results, raw, ROOT / "docs" / "benchmarks.md")


if __name__ == "__main__":
    main()
