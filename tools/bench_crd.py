"""Custom resources' cost (issue 22): CREATE and GET of a custom object whose CRD has a structural schema
of ~20 fields and two x-kubernetes-validations rules, each as a ratio of the same operation on a ConfigMap
of the same JSON size (interleaved rounds on one stack); then the time from a CRD's create to Established
and servable (a LIST of its collection answering 200 through the proxy), over CRDs of distinct groups and
kinds created one after another.

`python -m tools.bench crd` runs these figures alone on a fresh bench stack; `make bench` runs them too.
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from services.cluster.stack import Stack
from tools.bench import Conn, Probe, client_ctx, drive, interleaved, paired
from tools.bench_stats import percentile

JSON = {"Content-Type": "application/json", "Accept": "application/json"}
NS = "bench-crd"
GROUP = "bench.crd.apiary.test"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
READY_CRDS = 10
GOAL_READY_P50_MS = 1000.0

# ~20 fields: strings (one with a pattern, one an enum), integers, a boolean, a list with maxItems and
# two nested objects; the two rules sit on spec.
SPEC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "replicas"],
    "x-kubernetes-validations": [
        {"rule": "self.minReplicas <= self.replicas", "message": "minReplicas must not exceed replicas"},
        {"rule": "!has(self.endpoint) || self.endpoint.path.startsWith('/')",
         "message": "endpoint.path must be absolute"},
    ],
    "properties": {
        "name": {"type": "string", "maxLength": 63, "pattern": "^[a-z][a-z0-9-]*$"},
        "replicas": {"type": "integer", "minimum": 0, "maximum": 100},
        "minReplicas": {"type": "integer", "minimum": 0, "default": 0},
        "mode": {"type": "string", "enum": ["Fast", "Slow", "Balanced"]},
        "image": {"type": "string", "maxLength": 200},
        "port": {"type": "integer", "minimum": 1, "maximum": 65535},
        "tags": {"type": "array", "maxItems": 16, "items": {"type": "string", "maxLength": 32}},
        "owner": {"type": "string", "maxLength": 64},
        "description": {"type": "string", "maxLength": 256},
        "enabled": {"type": "boolean"},
        "priority": {"type": "integer", "format": "int32"},
        "resources": {"type": "object", "properties": {
            "cpu": {"type": "string", "maxLength": 16}, "memory": {"type": "string", "maxLength": 16},
            "gpus": {"type": "integer", "minimum": 0}}},
        "endpoint": {"type": "object", "properties": {
            "host": {"type": "string", "maxLength": 253}, "path": {"type": "string", "maxLength": 256},
            "timeoutSeconds": {"type": "integer", "minimum": 1}}},
    },
}
SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "spec": SPEC_SCHEMA,
    "status": {"type": "object", "properties": {"phase": {"type": "string"},
                                                "observedGeneration": {"type": "integer"}}}}}


def crd(group: str, kind: str) -> dict[str, Any]:
    """A namespaced v1 CRD of kind in group with SCHEMA, served and stored as v1."""
    plural = kind.lower() + "s"
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": SCHEMA}}]}}


def ready_crds(count: int) -> list[tuple[str, str]]:
    """(group, kind) of count CRDs, each a different group and kind."""
    return [(f"r{i}.ready.apiary.test", f"Ready{chr(ord('A') + i % 26)}{i}") for i in range(count)]


def widget(name: str, replicas: int = 3, path: str = "/healthz") -> dict[str, Any]:
    """A Widget that fills every field of the schema (and passes both rules unless made to fail)."""
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name},
            "spec": {"name": "frontend", "replicas": replicas, "minReplicas": 2, "mode": "Balanced",
                     "image": "registry.example/frontend:1.4.2", "port": 8080,
                     "tags": ["web", "team-a", "tier-1", "canary"], "owner": "team-a",
                     "description": "the bench's custom object", "enabled": True, "priority": 5,
                     "resources": {"cpu": "500m", "memory": "256Mi", "gpus": 0},
                     "endpoint": {"host": "frontend.bench.svc", "path": path, "timeoutSeconds": 5}}}


def sized_configmap(name: str, size: int) -> dict[str, Any]:
    """A ConfigMap named name whose compact JSON is size bytes (the padding in one data value), or as
    near as a minimal one allows."""
    cm: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"key": ""}}
    cm["data"]["key"] = "x" * max(0, size - len(_compact(cm)))
    return cm


def _compact(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def ready_summary(times: list[tuple[float, float]]) -> dict[str, Any]:
    """p50 and p90 in ms of the CRDs' times to servable (and of their times to Established), and the times
    to servable themselves."""
    def ms(q: float, i: int) -> float:
        return round(percentile([t[i] for t in times], q) * 1000, 1)
    return {"p50_ms": ms(0.5, 1), "p90_ms": ms(0.9, 1), "established_p50_ms": ms(0.5, 0),
            "established_p90_ms": ms(0.9, 0), "crds": len(times), "times_ms": [round(t[1] * 1000, 1) for t in times]}


async def _until(check, what: str, timeout: float = 60.0, every: float = 0.01) -> float:
    """Polls check() until it is true; the monotonic time it first was."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(every)
    return time.monotonic()


async def create_ready(c: Conn, group: str, kind: str) -> tuple[float, float]:
    """Seconds from the CRD's create until it is Established, and until its collection also answers 200
    through the proxy (servable)."""
    body = crd(group, kind)
    name, plural = body["metadata"]["name"], body["spec"]["names"]["plural"]
    start = time.monotonic()
    s, data = await c.request("POST", CRDS, _compact(body), JSON)
    if s != 201:
        raise RuntimeError(f"CRD create: {s} {data[:300]!r}")

    async def established() -> bool:
        s, data = await c.request("GET", f"{CRDS}/{name}", headers={"Accept": "application/json"})
        conditions = (json.loads(data).get("status", {}).get("conditions") or []) if s == 200 else []
        return any(x.get("type") == "Established" and x.get("status") == "True" for x in conditions)

    async def listed() -> bool:
        s, _ = await c.request("GET", f"/apis/{group}/v1/namespaces/{NS}/{plural}", headers={"Accept": "application/json"})
        return s == 200
    established_at = await _until(established, f"{name} to be Established")
    return established_at - start, await _until(listed, f"{name} to be servable") - start


async def run_async(stack: Stack, concurrency: int, n: int, rounds: int) -> dict[str, Any]:
    port = int(stack.server.rsplit(":", 1)[1])
    ctx = client_ctx(stack)

    def mk() -> Conn:
        return Conn("127.0.0.1", port, ctx)

    admin = mk()
    await admin.request("POST", "/api/v1/namespaces", _compact(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}), JSON)
    widgets_ready = (await create_ready(admin, GROUP, "Widget"))[1]
    widgets = f"/apis/{GROUP}/v1/namespaces/{NS}/widgets"
    configmaps = f"/api/v1/namespaces/{NS}/configmaps"
    # the rules are in effect: a Widget breaking the second is refused with its message
    s, data = await admin.request("POST", widgets, _compact(widget("probe", path="relative")), JSON)
    if s != 422 or b"endpoint.path must be absolute" not in data:
        raise RuntimeError(f"the CRD's rules are not in effect: {s} {data[:300]!r}")
    size = len(_compact(widget("obj-000000")))

    conns = [mk() for _ in range(concurrency)]
    turn = iter(range(10**9))

    def pooled() -> Conn:
        return conns[next(turn) % len(conns)]

    seq = iter(range(1, 10**6))

    def creator(collection: str, body) -> Any:
        async def create(i: int, c: Conn) -> None:
            s, data = await c.request("POST", collection, _compact(body(f"obj-{next(seq):06d}")), JSON)
            if s != 201:
                raise RuntimeError(f"create {collection}: {s} {data[:300]!r}")
        return create

    def getter(path: str) -> Any:
        async def get(i: int, c: Conn) -> None:
            s, data = await c.request("GET", path, headers={"Accept": "application/json"})
            if s != 200:
                raise RuntimeError(f"get {path}: {s} {data[:300]!r}")
        return get

    create_cm = creator(configmaps, lambda name: sized_configmap(name, size))
    create_cr = creator(widgets, widget)
    for create in (create_cm, create_cr):
        await drive(concurrency * 2, concurrency, create, pooled)  # warm, and every handshake done
    cm_path, cr_path = f"{configmaps}/obj-000001", f"{widgets}/obj-{concurrency * 2 + 1:06d}"
    get_cm, get_cr = getter(cm_path), getter(cr_path)
    # what a GET answers (managedFields name every field set): the bytes each GET moves
    stored = {name: len((await admin.request("GET", path, headers={"Accept": "application/json"}))[1])
              for name, path in (("configmap", cm_path), ("custom", cr_path))}
    probe = Probe(stack)
    per_round = max(1, rounds)
    rates = await interleaved(rounds, {
        "configmap_create": lambda: probe.measure(drive(n // per_round, concurrency, create_cm, pooled)),
        "create": lambda: probe.measure(drive(n // per_round, concurrency, create_cr, pooled)),
        "configmap_get": lambda: probe.measure(drive(2 * n // per_round, concurrency, get_cm, pooled)),
        "get": lambda: probe.measure(drive(2 * n // per_round, concurrency, get_cr, pooled)),
    })
    ready = [await create_ready(admin, group, kind) for group, kind in ready_crds(READY_CRDS)]
    return {"object_bytes": size, "get_bytes": stored, "widgets_ready_s": round(widgets_ready, 3), **rates,
            "ready": ready_summary(ready)}


def run(stack: Stack, concurrency: int = 32, n: int = 1500, rounds: int = 3) -> dict[str, Any]:
    return asyncio.run(run_async(stack, concurrency, n, rounds))


def figures(raw: dict[str, Any]) -> dict[str, dict]:
    """bench.json entries: crd_create and crd_get against the ConfigMap's in the same rounds, and
    crd_established (the p50 of create to servable against the goal's 1 s; ratio = p50 / goal)."""
    ready = raw["ready"]
    return {"crd_create": {**paired(raw["create"], raw["configmap_create"], "configmap_create"),
                           "object_bytes": raw["object_bytes"]},
            "crd_get": {**paired(raw["get"], raw["configmap_get"], "configmap_get"), "object_bytes": raw["object_bytes"],
                        "get_bytes": raw["get_bytes"]},
            "crd_established": {"p50_ms": ready["p50_ms"], "p90_ms": ready["p90_ms"], "baseline": "goal_p50_ms",
                                "baseline_rate": GOAL_READY_P50_MS,
                                "ratio": round(ready["p50_ms"] / GOAL_READY_P50_MS, 3), "ratio_is_cost": True,
                                **{k: ready[k] for k in ("established_p50_ms", "established_p90_ms", "crds",
                                                         "times_ms")}}}
