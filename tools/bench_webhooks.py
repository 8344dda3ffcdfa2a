"""Admission webhooks' cost: CREATE of a configmap with one validating webhook and with one mutating
webhook (each a local HTTPS webhook server in its own process, keep-alive), each as a ratio of the
plain CREATE measured in the same run, and the webhook's own round trip (AdmissionReviews POSTed to it
directly at the same concurrency) for comparison.

`python -m tools.bench_webhooks` runs these figures alone on a bench stack (APIARY_BENCH_PORT_OFFSET);
tools/bench.py runs them as part of `make bench`.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import signal
import ssl
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from tools.bench import BENCH_OFFSET, BENCH_STATE, Conn, client_ctx, drive
from tools.fakeservers import AdmissionWebhook
from services.cluster.stack import Stack

JSON = {"Content-Type": "application/json", "Accept": "application/json"}
NS = "bench-webhooks"
RULE = {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}
LABEL_PATCH = base64.b64encode(json.dumps(
    [{"op": "add", "path": "/metadata/labels", "value": {"webhook": "yes"}}]).encode()).decode()


def decide(kind: str):
    """Validating: refuse names starting with "probe-" (how the bench sees the webhook in effect), allow
    the rest; mutating: add a label."""
    def validating(req: dict[str, Any]) -> dict[str, Any]:
        return {"allowed": not req["name"].startswith("probe-"), "status": {"message": "probe"}}

    def mutating(req: dict[str, Any]) -> dict[str, Any]:
        return {"allowed": True, "patchType": "JSONPatch", "patch": LABEL_PATCH}
    return validating if kind == "validating" else mutating


def serve(directory: Path, kind: str) -> None:
    """The webhook server process: prints its port, serves until SIGTERM."""
    class Server(AdmissionWebhook):
        keep_alive = True

    srv = Server(directory, f"bench-{kind}", decide(kind)).start()
    print(srv.port, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    srv.stop()


class WebhookProcess:
    def __init__(self, directory: Path, kind: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tools.bench_webhooks", "serve", "--kind", kind,
                                      "--dir", str(directory)], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        self.ca_pem = (directory / f"bench-{kind}-ca.crt").read_text()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


async def _until(check, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def run_async(stack: Stack, concurrency: int, n: int) -> dict[str, dict]:
    port = int(stack.server.rsplit(":", 1)[1])
    ctx = client_ctx(stack)

    def mk() -> Conn:
        return Conn("127.0.0.1", port, ctx)

    admin = mk()
    await admin.request("POST", "/api/v1/namespaces", json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}).encode(), JSON)

    def creator(prefix: str):
        async def create(i: int, c: Conn) -> None:
            body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{prefix}-{i}"},
                               "data": {"key": "value-" * 20}}).encode()
            s, data = await c.request("POST", f"/api/v1/namespaces/{NS}/configmaps", body, JSON)
            if s != 201:
                raise RuntimeError(f"create: {s} {data[:200]!r}")
        return create

    async def create_probe() -> tuple[int, dict]:
        body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": f"probe-{uuid.uuid4().hex[:8]}"}}).encode()
        s, data = await admin.request("POST", f"/api/v1/namespaces/{NS}/configmaps", body, JSON)
        return s, json.loads(data)

    results: dict[str, dict] = {}
    await drive(n // 5, concurrency, creator("warm"), mk)
    results["create_plain"] = await drive(n, concurrency, creator("plain"), mk)
    directory = BENCH_STATE / "webhooks"
    directory.mkdir(parents=True, exist_ok=True)
    for kind in ("validating", "mutating"):
        hook = WebhookProcess(directory, kind)
        plural = f"{kind}webhookconfigurations"
        try:
            cfg = {"apiVersion": "admissionregistration.k8s.io/v1",
                   "kind": f"{kind.capitalize()}WebhookConfiguration", "metadata": {"name": f"bench-{kind}"},
                   "webhooks": [{"name": f"{kind}.bench.apiary.test", "sideEffects": "None",
                                 "admissionReviewVersions": ["v1"], "rules": [RULE],
                                 "clientConfig": {"url": f"https://localhost:{hook.port}/",
                                                  "caBundle": base64.b64encode(hook.ca_pem.encode()).decode()}}]}
            s, data = await admin.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}",
                                          json.dumps(cfg).encode(), JSON)
            if s != 201:
                raise RuntimeError(f"{kind} configuration: {s} {data[:300]!r}")
            if kind == "validating":
                async def effective() -> bool:
                    return (await create_probe())[0] == 400
            else:
                async def effective() -> bool:
                    s, obj = await create_probe()
                    return s == 201 and (obj["metadata"].get("labels") or {}).get("webhook") == "yes"
            await _until(effective, f"the {kind} webhook to take effect")
            await drive(n // 5, concurrency, creator(f"warm-{kind}"), mk)
            results[f"create_{kind}_webhook"] = await drive(n, concurrency, creator(kind), mk)

            # the webhook's own round trip, at the same concurrency
            hook_ctx = ssl.create_default_context(cadata=hook.ca_pem)
            review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": "bench", "name": "cm", "namespace": NS, "operation": "CREATE",
                "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
                           "data": {"key": "value-" * 20}}}}
            body = json.dumps(review).encode()

            async def direct(i: int, c: Conn) -> None:
                s, data = await c.request("POST", "/?timeout=10s", body, JSON)
                if s != 200:
                    raise RuntimeError(f"webhook: {s} {data[:200]!r}")
            results[f"{kind}_webhook_round_trip"] = await drive(
                n, concurrency, direct, lambda: Conn("localhost", hook.port, hook_ctx))
            await admin.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/bench-{kind}")
            if kind == "validating":
                async def gone() -> bool:
                    return (await create_probe())[0] == 201
                await _until(gone, "the validating webhook to be gone")
        finally:
            hook.stop()
    return results


def figures(raw: dict[str, dict]) -> dict[str, dict]:
    """The figures for bench.json: each CREATE with a webhook over the plain CREATE; the webhook's own
    round trip rate beside it."""
    base = raw["create_plain"]["rate"]
    out = {}
    for kind in ("validating", "mutating"):
        r = raw[f"create_{kind}_webhook"]
        out[f"create_{kind}_webhook"] = {
            "rate": r["rate"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "baseline": "create_plain",
            "baseline_rate": base, "ratio": round(r["rate"] / base, 4),
            "webhook_round_trip_rate": raw[f"{kind}_webhook_round_trip"]["rate"],
            "webhook_round_trip_p50_ms": raw[f"{kind}_webhook_round_trip"]["p50_ms"]}
    return out


def run(stack: Stack, concurrency: int = 32, n: int = 1500) -> dict[str, dict]:
    return asyncio.run(run_async(stack, concurrency, n))


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tools.bench_webhooks")
    p.add_argument("mode", nargs="?", default="run", choices=["run", "serve"])
    p.add_argument("--kind", default="validating")
    p.add_argument("--dir", default=str(BENCH_STATE / "webhooks"))
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("-n", type=int, default=1500)
    args = p.parse_args()
    if args.mode == "serve":
        serve(Path(args.dir), args.kind)
        return
    stack = Stack(BENCH_STATE, BENCH_OFFSET)
    stack.start(fresh=True)
    try:
        raw = run(stack, args.concurrency, args.n)
    finally:
        stack.stop(quiet=True)
    print(json.dumps(raw, indent=2))
    print(json.dumps(figures(raw), indent=2))


if __name__ == "__main__":
    main()
