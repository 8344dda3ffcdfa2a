"""The pizza server's figures, against baselines measured in the same run.

  get_direct      GET of one pizza straight to the pizza server, front-proxy certificate and
                  X-Remote-User of a user allowed by RBAC (not system:masters): the
                  SubjectAccessReview answer is cached (warm)
  get_cold_authz  the same GET, each request by another user of the same group, so every request
                  costs a SubjectAccessReview against apiary (cold cache); ratio = cold / warm
  fastapi_cost    in process, no HTTP: the same GET through the kit's lean resource path and
                  through a FastAPI route calling the same handler; the difference per request is
                  what FastAPI's routing and Request/Response objects cost
  get_proxy       (--through-proxy, once the proxy forwards to aggregated servers) the same GET
                  through apiary's proxy with the admin certificate; ratio = its rate / the rate of
                  get_direct_admin (straight, with the identity the proxy forwards for that
                  certificate): the aggregation overhead, see get_through_proxy
                  (`python -m tools.bench aggregation` measures only this, in several rounds)

`python -m tools.bench_pizza [--through-proxy]` runs them on a stack of its own; `run(stack)` is
what tools/bench.py calls on its stack.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
from fastapi import Request
from fastapi.responses import Response

from apiary_pb import registry_pb2 as rpb
from services.common import identity
from services.kit.options import parser
from services.pizza import server as pizza
from tools.bench import Conn, client_ctx, cpu_seconds, drive
from tools.bench_stats import median_of_rounds, ratio_of_rounds
from services.cluster.aggregated import PIZZA as PIZZA_SERVER
from services.cluster.stack import ORDER, ROOT, Stack

GROUP = "restaurant.programming-kubernetes.info"
PIZZA = f"/apis/{GROUP}/v1beta1/namespaces/default/pizzas/margherita"
BENCH_GROUP = "pizza-benchers"


def front_proxy_ctx(stack: Stack, ca: Path) -> ssl.SSLContext:
    """The front-proxy client certificate; the pizza server verified with its CA (its certificate names
    the Service, pizza-apiserver.pizza-apiserver.svc, not the loopback address dialled)."""
    pki = stack.state / "pki"
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False
    ctx.load_cert_chain(str(pki / "front-proxy-client.crt"), str(pki / "front-proxy-client.key"))
    return ctx


def _setup(stack: Stack, url: str, ca: Path) -> None:
    """Toppings and the margherita (as system:masters), and read access to pizzas for BENCH_GROUP."""
    fp = httpx.Client(base_url=url, verify=front_proxy_ctx(stack, ca), timeout=30, headers={"X-Remote-User": "kubernetes-admin", "X-Remote-Group": "system:masters"})
    with fp:
        for name, cost in (("mozzarella", 0.75), ("tomato", 0.25)):
            fp.post(f"/apis/{GROUP}/v1alpha1/toppings", json={"metadata": {"name": name}, "spec": {"cost": cost}})
        r = fp.post(f"/apis/{GROUP}/v1alpha1/namespaces/default/pizzas",
                    json={"metadata": {"name": "margherita"}, "spec": {"toppings": ["mozzarella", "tomato"]}})
        assert r.status_code in (201, 409), r.text
    admin = httpx.Client(base_url=stack.server, verify=client_ctx(stack, "admin"), timeout=30)
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    with admin:
        admin.post(f"{rbac}/clusterroles", json={"metadata": {"name": "pizza-reader"}, "rules": [
            {"apiGroups": [GROUP], "resources": ["pizzas"], "verbs": ["get", "list", "watch"]}]})
        admin.post(f"{rbac}/clusterrolebindings", json={
            "metadata": {"name": "pizza-benchers"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pizza-reader"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": BENCH_GROUP}]})


async def _get(stack: Stack, port: int, ca: Path, user: Any, concurrency: int, n: int,
               group: str = BENCH_GROUP) -> dict[str, float]:
    """GETs of the margherita straight to the pizza server; user(i) names the i-th request's user."""
    ctx = front_proxy_ctx(stack, ca)

    async def one(i: int, conn: Conn) -> None:
        status, body = await conn.request("GET", PIZZA, headers={"X-Remote-User": user(i),
                                                                 "X-Remote-Group": group})
        assert status == 200, body[:300]

    return await drive(n, concurrency, one, lambda: Conn("127.0.0.1", port, ctx))


async def get_through_proxy(stack: Stack, concurrency: int, n: int) -> dict[str, float]:
    """The same GET through apiary's proxy with the admin certificate: the aggregation path (the pizza
    stack's own, registered by the runner); run(through_proxy=True) reports ratio = this rate /
    get_direct_admin's rate."""
    ctx = client_ctx(stack, "admin")
    port = int(stack.server.rsplit(":", 1)[1])

    async def one(i: int, conn: Conn) -> None:
        status, body = await conn.request("GET", PIZZA)
        assert status == 200, body[:300]

    return await drive(n, concurrency, one, lambda: Conn("127.0.0.1", port, ctx))


async def fastapi_cost(stack: Stack, n: int = 3000) -> dict[str, float]:
    """µs per GET in process through the lean path and through an equivalent FastAPI route."""
    s = pizza()

    @s.app.get("/bench/namespaces/{namespace}/pizzas/{name}")
    async def get(namespace: str, name: str, request: Request) -> Response:
        obj = await s.get("pizzas", "v1beta1", namespace, name, request.scope["user"])
        return Response(orjson.dumps(obj), media_type="application/json")

    args = parser("bench", "", "/pizza").parse_args([
        "--tls-cert-file", "-", "--tls-private-key-file", "-", "--etcd-servers", stack.etcd_url,
        "--etcd-prefix", f"/pizza-{uuid.uuid4().hex[:8]}"])
    s.configure(args)
    assert s.storage is not None and s.handlers is not None
    await s.storage.start()
    for inf in s.informers.values():  # PizzaToppings admits a pizza once its toppings' informer synced
        inf.start()
    tls = {"cn": "admin", "o": ["system:masters"], "ca": ["client"]}
    admin = identity.user_pb("admin", ["system:masters"])
    try:
        await s.handlers.handle(rpb.APIRequest(
            verb="create", group=GROUP, version="v1beta1", resource="toppings", content_type="application/json",
            user=admin, body=orjson.dumps({"metadata": {"name": "tomato"}, "spec": {"cost": 0.5}})))
        for inf in s.informers.values():
            await asyncio.wait_for(inf.synced.wait(), 10)
        await s.handlers.handle(rpb.APIRequest(
            verb="create", group=GROUP, version="v1beta1", resource="pizzas", namespace="default",
            content_type="application/json", user=admin,
            body=orjson.dumps({"metadata": {"name": "margherita"},
                               "spec": {"toppings": [{"name": "tomato", "quantity": 1}]}})))

        async def one(path: str) -> float:
            scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"",
                     "headers": [(b"host", b"pizza")], "extensions": {"tls": tls}, "scheme": "https",
                     "server": ("127.0.0.1", 443), "client": ("127.0.0.1", 1), "root_path": "",
                     "http_version": "1.1"}
            status: list[int] = []

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    status.append(message["status"])

            t = time.perf_counter()
            await s(scope, receive, send)
            assert status == [200], status
            return time.perf_counter() - t

        lean_path = PIZZA
        fastapi_path = "/bench/namespaces/default/pizzas/margherita"
        for p in (lean_path, fastapi_path):  # warm up: caches, FastAPI's route compilation
            for _ in range(200):
                await one(p)
        lean, routed = [], []
        for _ in range(n):
            lean.append(await one(lean_path))
            routed.append(await one(fastapi_path))
        lean_us, routed_us = statistics.median(lean) * 1e6, statistics.median(routed) * 1e6
        return {"lean_us": round(lean_us, 1), "fastapi_us": round(routed_us, 1),
                "fastapi_cost_us": round(routed_us - lean_us, 1), "ratio": round(routed_us / lean_us, 3)}
    finally:
        for inf in s.informers.values():
            await inf.stop()
        await s.storage.stop()


WATCH_PIZZAS = 100
WATCH_LABEL = "apiary.bench/watch"


async def _watch_events(port: int, ctx: ssl.SSLContext, path: str, headers: dict[str, str],
                        on_event: Any) -> None:
    """Read a watch's chunked JSON lines, calling on_event(event, arrival time) for each."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    try:
        head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(head.encode() + b"\r\n")
        raw = await reader.readuntil(b"\r\n\r\n")
        assert raw.split(b" ", 2)[1] == b"200", raw
        assert b"chunked" in raw.lower(), raw
        buf = b""
        while True:
            size = int((await reader.readline()).split(b";")[0].strip(), 16)
            if size == 0:
                return
            buf += (await reader.readexactly(size + 2))[:-2]
            *lines, buf = buf.split(b"\n")
            now = time.time()
            for line in lines:
                if line.strip():
                    on_event(orjson.loads(line), now)
    finally:
        writer.close()


async def watch_delivery(write: Any, list_watch: tuple[int, ssl.SSLContext, dict[str, str]],
                         rate: float = 100.0, seconds: float = 10.0, writers: int = 16) -> dict[str, Any]:
    """Delivery latency of changes to one watch of the WATCH_PIZZAS pizzas: write(conn, i, body) patches
    pizza i; list_watch is where the watch goes (port, TLS, headers). Writes are paced at `rate`."""
    port, ctx, headers = list_watch
    run = uuid.uuid4().hex[:8]
    selector = f"labelSelector={WATCH_LABEL}%3Dtrue"
    collection = f"/apis/{GROUP}/v1beta1/namespaces/default/pizzas"
    status, body = await Conn("127.0.0.1", port, ctx).request("GET", f"{collection}?{selector}", headers=headers)
    assert status == 200, body[:300]
    rv = orjson.loads(body)["metadata"]["resourceVersion"]
    lat: list[float] = []
    seen: set[str] = set()
    synced = asyncio.Event()

    def on_event(ev: dict[str, Any], now: float) -> None:
        notes = ((ev.get("object") or {}).get("metadata") or {}).get("annotations") or {}
        if notes.get("apiary.bench/run") != run:
            return
        seq = notes.get("apiary.bench/seq", "")
        if seq == "sync":
            synced.set()
        elif seq not in seen:
            seen.add(seq)
            lat.append(now - float(notes["apiary.bench/sent"]))

    watcher = asyncio.create_task(_watch_events(
        port, ctx, f"{collection}?watch=true&{selector}&resourceVersion={rv}", headers, on_event))
    pool: asyncio.Queue[Conn] = asyncio.Queue()

    def patch(seq: str) -> bytes:
        return orjson.dumps({"metadata": {"annotations": {"apiary.bench/run": run, "apiary.bench/seq": seq,
                                                          "apiary.bench/sent": repr(time.time())}}})

    errors = 0

    async def one(i: int) -> None:
        nonlocal errors
        conn = await pool.get()
        try:
            if await write(conn, i % WATCH_PIZZAS, patch(str(i))) != 200:
                errors += 1
        finally:
            pool.put_nowait(conn)

    try:
        conns = [await write.conn() for _ in range(writers)]
        for c in conns:
            pool.put_nowait(c)
        # the watch is live once a change made after it started arrives
        deadline = time.monotonic() + 30
        while not synced.is_set():
            assert time.monotonic() < deadline, "the watch never delivered"
            assert await write(conns[0], 0, patch("sync")) == 200
            try:
                await asyncio.wait_for(synced.wait(), 1.0)
            except TimeoutError:
                pass
        count = int(rate * seconds)
        start = time.perf_counter()
        tasks = []
        for i in range(count):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
        write_rate = count / (time.perf_counter() - start)
        grace = time.monotonic() + 10
        while len(seen) < count - errors and time.monotonic() < grace and not watcher.done():
            await asyncio.sleep(0.05)
    finally:
        watcher.cancel()
        ended = (await asyncio.gather(watcher, return_exceptions=True))[0]
        if isinstance(ended, Exception):
            raise ended
    lat.sort()
    return {"p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 2) if lat else None,
            "p50_ms": round(statistics.median(lat) * 1000, 2) if lat else None,
            "write_rate": round(write_rate, 1), "delivered": len(seen), "expected": count,
            "write_errors": errors, "watchers": 1, "objects": WATCH_PIZZAS}


class _PizzaWriter:
    """Patches pizza i straight to the pizza server (front-proxy certificate, system:masters)."""

    def __init__(self, stack: Stack, port: int, ca: Path) -> None:
        self.port, self.ctx = port, front_proxy_ctx(stack, ca)
        self.headers = {"X-Remote-User": "kubernetes-admin", "X-Remote-Group": "system:masters",
                        "Content-Type": "application/merge-patch+json"}

    async def conn(self) -> Conn:
        return Conn("127.0.0.1", self.port, self.ctx)

    async def __call__(self, conn: Conn, i: int, body: bytes) -> int:
        status, _ = await conn.request("PATCH", f"/apis/{GROUP}/v1beta1/namespaces/default/pizzas/bench-watch-{i}",
                                       body, self.headers)
        return status


def watch_figures(stack: Stack, port: int, ca: Path) -> dict[str, Any]:
    """watch_direct and watch_proxy (the proxy must serve the pizza server's group already)."""
    writer = _PizzaWriter(stack, port, ca)

    async def create() -> None:
        conn = await writer.conn()
        for i in range(WATCH_PIZZAS):
            status, body = await conn.request(
                "POST", f"/apis/{GROUP}/v1alpha1/namespaces/default/pizzas", orjson.dumps({
                    "metadata": {"name": f"bench-watch-{i}", "labels": {WATCH_LABEL: "true"}},
                    "spec": {"toppings": ["tomato"]}}),
                {**writer.headers, "Content-Type": "application/json"})
            assert status in (201, 409), body[:300]

    asyncio.run(create())
    direct = (port, writer.ctx, {k: v for k, v in writer.headers.items() if k != "Content-Type"})
    proxied = (int(stack.server.rsplit(":", 1)[1]), client_ctx(stack, "admin"), {})
    out = {"watch_direct": asyncio.run(watch_delivery(writer, direct)),
           "watch_proxy": asyncio.run(watch_delivery(writer, proxied))}
    d, p = out["watch_direct"]["p99_ms"], out["watch_proxy"]["p99_ms"]
    out["watch_proxy"]["ratio"] = round(p / d, 3) if d and p else None
    return out


def _wait_served(stack: Stack) -> None:
    """Wait until the proxy serves the margherita (the APIServices available, discovery merged)."""
    with httpx.Client(base_url=stack.server, verify=client_ctx(stack, "admin"), timeout=30) as admin:
        deadline = time.monotonic() + 90
        while admin.get(PIZZA).status_code != 200:
            assert time.monotonic() < deadline, admin.get(PIZZA).text
            time.sleep(0.5)


def with_cpu(pids: dict[str, int | None], phase: Any) -> dict[str, Any]:
    """phase()'s figures plus the CPU ms per request each process in pids spent during it."""
    before = {k: cpu_seconds(p) for k, p in pids.items() if p}
    out = phase()
    out["cpu_ms_per_request"] = {k: round((cpu_seconds(pids[k]) - v) / out["requests"] * 1000, 3)  # type: ignore[arg-type]
                                 for k, v in before.items()}
    return out


def aggregation_rounds(stack: Stack, concurrency: int = 16, n: int = 1500, rounds: int = 3) -> dict[str, Any]:
    """Only the aggregation figure, `rounds` times: each round the GET straight to the pizza server
    (same identity as the proxy forwards) then through the proxy, each ratio from its own round, so
    that load from elsewhere shifts both halves of a ratio alike."""
    agg = stack.aggregated_server(PIZZA_SERVER.name)
    assert agg is not None, "the stack runs no pizza server"
    port, ca = agg.port + stack.offset, stack.state / "pki" / "ca.crt"
    _setup(stack, f"https://127.0.0.1:{port}", ca)
    _wait_served(stack)
    pids = {**{name: stack.pid(name) for name in ORDER}, "pizza": stack.pid(PIZZA_SERVER.name)}
    asyncio.run(get_through_proxy(stack, concurrency, 200))  # warm: pooled connections, caches
    out: list[dict[str, Any]] = []
    for _ in range(rounds):
        direct = with_cpu(pids, lambda: asyncio.run(_get(
            stack, port, ca, lambda i: "kubernetes-admin", concurrency, n, "system:masters")))
        proxied = with_cpu(pids, lambda: asyncio.run(get_through_proxy(stack, concurrency, n)))
        out.append({"ratio": round(proxied["rate"] / direct["rate"], 4), "get_direct_admin": direct,
                    "get_proxy": proxied})
    return {"rounds": out, "ratios": [r["ratio"] for r in out],
            "median_ratio": statistics.median(r["ratio"] for r in out)}


def run(stack: Stack, concurrency: int = 16, n: int = 1500, through_proxy: bool = False,
        rounds: int = 1) -> dict[str, Any]:
    """On the stack's own pizza server (services.cluster.aggregated.PIZZA, registered with apiary by the runner)."""
    agg = stack.aggregated_server(PIZZA_SERVER.name)
    assert agg is not None, "the stack runs no pizza server"
    port, ca = agg.port + stack.offset, stack.state / "pki" / "ca.crt"
    _setup(stack, f"https://127.0.0.1:{port}", ca)
    out: dict[str, Any] = {}
    asyncio.run(_get(stack, port, ca, lambda i: "warm-up", concurrency, 200))
    out["get_direct"] = asyncio.run(_get(stack, port, ca, lambda i: "pizza-bench", concurrency, n))
    out["get_cold_authz"] = asyncio.run(_get(stack, port, ca, lambda i: f"pizza-bench-{uuid.uuid4().hex}",
                                             concurrency, n))
    out["get_cold_authz"]["ratio"] = round(out["get_cold_authz"]["rate"] / out["get_direct"]["rate"], 4)
    if through_proxy:
        _wait_served(stack)
        pids = {**{name: stack.pid(name) for name in ORDER}, "pizza": stack.pid(PIZZA_SERVER.name)}
        asyncio.run(get_through_proxy(stack, concurrency, 200))  # warm: pooled connections, caches
        # the identity the proxy forwards for the admin certificate, sent straight, then through the
        # proxy, in rounds: medians, and the median of the rounds' ratios
        direct, proxied = [], []
        for _ in range(rounds):
            direct.append(with_cpu(pids, lambda: asyncio.run(_get(
                stack, port, ca, lambda i: "kubernetes-admin", concurrency, n // rounds, "system:masters"))))
            proxied.append(with_cpu(pids, lambda: asyncio.run(get_through_proxy(stack, concurrency, n // rounds))))
        out["get_direct_admin"] = {**median_of_rounds(direct), "rounds": direct}
        out["get_proxy"] = {**median_of_rounds(proxied), "rounds": proxied,
                            "ratio": ratio_of_rounds(proxied, direct)}
        out.update(watch_figures(stack, port, ca))
    out["fastapi_cost"] = asyncio.run(fastapi_cost(stack))
    return out


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tools.bench_pizza", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("-n", type=int, default=1500)
    p.add_argument("--through-proxy", action="store_true", help="also GET through apiary's proxy")
    p.add_argument("--port-offset", type=int, default=int(os.environ.get("APIARY_TEST_PORT_OFFSET", "1000")) + 300)
    args = p.parse_args()
    stack = Stack(ROOT / ".apiary" / "bench-pizza", args.port_offset)
    stack.start(fresh=True)
    try:
        out = run(stack, args.concurrency, args.n, args.through_proxy)
    finally:
        stack.stop(quiet=True)
    print(json.dumps(out, indent=2))
    (ROOT / ".apiary" / "bench-pizza.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
