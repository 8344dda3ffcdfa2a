"""The dashboards against a real Prometheus scraping a real stack: every panel's query returns data
after traffic of every kind (reads, writes, a secret, watches, a 403, an admission rejection, a webhook allowing and refusing, 429s,
an access review, pizzas through the aggregation proxy and a bearer token straight to the pizza
server), and every metric a dashboard names is served by some service.

The stack is the test's own: APF gets a tiny seat limit and queue wait so a flood is answered 429,
and storage compacts every 2 s so compaction has something to show.
"""
from __future__ import annotations

import asyncio
import base64
import re
import shutil
import ssl
import time
import urllib.request
from collections.abc import Iterator

import httpx
import pytest

from services.cluster.aggregated import PIZZA, PIZZA_GROUP
from services.cluster.certs import read_tokens
from services.cluster.stack import ROOT, Stack
from tests.conftest import TEST_OFFSET
from tools.dashboards import dashboards
from tools.fakeservers import AdmissionWebhook
from tools.observe import COMMITTED_CONFIG, Prometheus, config

OFFSET = TEST_OFFSET + 700

@pytest.fixture(scope="module")
def observed() -> Iterator[tuple[Stack, Prometheus]]:
    stack = Stack(ROOT / ".apiary" / "test-dashboards", OFFSET, extra={
        # 16 seats: global-default (alice) gets 2 of them by its 20 of the bootstrap levels' 245 shares, so her
        # one-at-a-time requests never queue behind their own seat's release; her floods still do, and wait
        # 5 ms at most
        "apf": ["--max-requests-inflight", "12", "--max-mutating-requests-inflight", "4",
                "--apf-queue-wait-seconds", "0.005"],
        "storage": ["--etcd-compaction-interval", "2s"],
    })
    shutil.rmtree(stack.logs, ignore_errors=True)  # _apf_configured reads this run's apf log
    stack.start(fresh=True)
    prom = Prometheus(stack.state, OFFSET, interval="1s")
    try:
        prom.start()
        yield stack, prom
    finally:
        prom.stop()
        stack.stop(quiet=True)


def _client(stack: Stack, token: str | None = None) -> httpx.Client:
    pki = stack.state / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if token is None:
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=stack.server, verify=ctx, headers=headers, timeout=30)


async def _flood(stack: Stack, token: str, n: int, rounds: int) -> list[int]:
    """n requests at once, again and again on the same n connections until APF answers one 429 (the queue wait
    is 5 ms: a request waits that long behind the 2 seats of global-default once a few dozen arrive together).
    Each names another configmap, so each seat is held for an authorization by the auth service rather than
    freed at once by a decision the proxy has cached."""
    ctx = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
    codes: list[int] = []
    async with httpx.AsyncClient(base_url=stack.server, verify=ctx, timeout=30,
                                 headers={"Authorization": f"Bearer {token}"},
                                 limits=httpx.Limits(max_connections=n, max_keepalive_connections=n)) as c:
        for r in range(rounds):
            rs = await asyncio.gather(*(c.get(f"/api/v1/namespaces/default/configmaps/flood-{r}-{i}")
                                        for i in range(n)))
            codes += [r.status_code for r in rs]
            if 429 in codes:
                break
    return codes


def _apf_configured(stack: Stack, within: float = 60) -> None:
    """The apf service has the suggested FlowSchemas (global-default: alice's), which the controller-manager
    creates a few seconds after the stack is ready; until then a user's requests fall in catch-all."""
    deadline = time.monotonic() + within
    log = stack.logs / "apf.log"
    while not any("flow schemas added:" in line and "global-default" in line
                  for line in log.read_text(errors="replace").splitlines()):
        assert time.monotonic() < deadline, "the apf service never read the suggested FlowSchemas"
        time.sleep(0.2)


def _traffic(stack: Stack) -> None:
    tokens = read_tokens(stack.state)
    _apf_configured(stack)
    with _client(stack) as admin:
        assert admin.post("/api/v1/namespaces", json={"metadata": {"name": "dash"}}).status_code == 201
        with admin.stream("GET", "/api/v1/namespaces/dash/configmaps?watch=true&timeoutSeconds=30") as watch:
            for i in range(20):
                r = admin.post("/api/v1/namespaces/dash/configmaps",
                               json={"metadata": {"name": f"c{i}"}, "data": {"k": str(i)}})
                assert r.status_code == 201, r.text
                assert admin.get(f"/api/v1/namespaces/dash/configmaps/c{i}").status_code == 200
            assert admin.get("/api/v1/namespaces/dash/configmaps").status_code == 200
            r = admin.post("/api/v1/namespaces/dash/secrets", json={"metadata": {"name": "s"}, "data": {"k": "dg=="}})
            assert r.status_code == 201, r.text
            assert admin.get("/api/v1/namespaces/dash/secrets/s").status_code == 200
            next(watch.iter_lines())  # the watch has streamed
        # NamespaceLifecycle refuses a write into a namespace that does not exist
        r = admin.post("/api/v1/namespaces/missing/configmaps", json={"metadata": {"name": "x"}})
        assert r.status_code == 404, r.text
        r = admin.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json={
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}})
        assert r.status_code == 201, r.text
    _webhook_traffic(stack)
    with _client(stack, tokens["alice"]) as alice:
        for _ in range(3):
            assert alice.get("/api/v1/namespaces/default/secrets").status_code == 403
        # an RBAC allow decided by the auth service (system:masters is decided in the proxy)
        r = alice.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json={
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}})
        assert r.status_code == 201, r.text
    codes = asyncio.run(_flood(stack, tokens["alice"], 60, rounds=10))
    assert 429 in codes, f"no 429 from APF in {len(codes)} requests: {sorted(set(codes))}"


def _webhook_traffic(stack: Stack) -> None:
    """A validating webhook (a real HTTPS server) that refuses configmaps named deny-*: one call allowed,
    one rejected, for the admission dashboard's webhook panels."""
    def decide(request: dict) -> dict:
        if request["name"].startswith("deny-"):
            return {"allowed": False, "status": {"code": 403, "message": "no deny- names"}}
        return {"allowed": True}

    server = AdmissionWebhook(stack.state, "dash-webhook", decide).start()
    hook = {"name": "names.dash.apiary.test", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["configmaps"]}],
            "clientConfig": {"url": f"{server.url}/validate",
                             "caBundle": base64.b64encode(server.ca_pem.encode()).decode()},
            "objectSelector": {"matchLabels": {"dash-webhook": "on"}}}
    labelled = {"dash-webhook": "on"}
    try:
        with _client(stack) as admin:
            r = admin.post("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
                           json={"metadata": {"name": "dash-names"}, "webhooks": [hook]})
            assert r.status_code == 201, r.text
            deadline = time.monotonic() + 30
            i = 0
            while True:  # the configuration reaches the admission service by watch
                r = admin.post("/api/v1/namespaces/dash/configmaps",
                               json={"metadata": {"name": f"deny-{i}", "labels": labelled}})
                if r.status_code == 403:
                    break
                assert r.status_code == 201 and time.monotonic() < deadline, r.text
                i += 1
            assert "no deny- names" in r.text, r.text
            r = admin.post("/api/v1/namespaces/dash/configmaps",
                           json={"metadata": {"name": "allowed", "labels": labelled}})
            assert r.status_code == 201, r.text
            assert len(server.calls) >= 2
            assert admin.delete("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
                                "dash-names").status_code == 200
    finally:
        server.stop()


def _pizza_traffic(stack: Stack) -> None:
    """Through the proxy as admin (system:masters: no review needed): toppings, pizzas, a watch, a 404
    and an admission rejection; straight to the pizza server with alice's bearer token: a TokenReview
    and a SubjectAccessReview (denied), then the same request answered from the caches."""
    v1alpha1, pizzas = f"/apis/{PIZZA_GROUP}/v1alpha1", f"/apis/{PIZZA_GROUP}/v1beta1/namespaces/default/pizzas"
    with _client(stack) as admin:
        deadline = time.monotonic() + 90
        while (r := admin.get(pizzas)).status_code != 200:  # the APIServices available, discovery merged
            assert time.monotonic() < deadline, r.text
            time.sleep(0.5)
        r = admin.post(f"{v1alpha1}/toppings", json={"metadata": {"name": "tomato"}, "spec": {"cost": 0.25}})
        assert r.status_code == 201, r.text
        with admin.stream("GET", f"{pizzas}?watch=true&timeoutSeconds=30") as watch:
            deadline = time.monotonic() + 30  # the server's topping informer sees the new topping
            while (r := admin.post(pizzas, json={"metadata": {"name": "margherita"},
                                                 "spec": {"toppings": [{"name": "tomato"}]}})).status_code != 201:
                assert r.status_code == 403 and time.monotonic() < deadline, r.text
                time.sleep(0.3)
            next(watch.iter_lines())
        for _ in range(5):
            assert admin.get(f"{pizzas}/margherita").status_code == 200
        assert admin.get(f"{pizzas}/missing").status_code == 404
        r = admin.post(pizzas, json={"metadata": {"name": "hawaii"}, "spec": {"toppings": [{"name": "pineapple"}]}})
        assert r.status_code == 403 and "unknown topping: pineapple" in r.text, r.text
    ctx = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
    ctx.check_hostname = False  # its certificate names its Service, pizza-apiserver.pizza-apiserver.svc
    token = read_tokens(stack.state)["alice"]
    with httpx.Client(base_url=f"https://127.0.0.1:{PIZZA.port + stack.offset}", verify=ctx, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as alice:
        for _ in range(3):
            assert alice.get(pizzas).status_code == 403


def _metric_names(expr: str) -> set[str]:
    """The metric names in a PromQL expression: what is left without strings, label matchers,
    grouping clauses, ranges, numbers, functions and operators."""
    bare = re.sub(r'"[^"]*"', "", expr)
    bare = re.sub(r"\{[^}]*\}|\[[^]]*\]|\bby\s*\([^)]*\)", " ", bare)
    words = re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\(?)", bare)
    return {w for w, call in words if not call and w not in ("or", "and", "unless", "by", "without")}


def test_committed_prometheus_config_matches_the_generator() -> None:
    assert COMMITTED_CONFIG.read_text() == config(0)


def test_every_panel_returns_data(observed: tuple[Stack, Prometheus]) -> None:
    stack, prom = observed
    _traffic(stack)
    _pizza_traffic(stack)
    panels = [(uid, p) for uid, _, ps in dashboards() for p in ps]
    assert len(panels) >= 40
    # A metric is in every dashboard that names it: all of them must be served somewhere.
    served = ""
    for name in ("proxy", "auth", "apf", "admission", "registry", "storage", "controllermanager"):
        with urllib.request.urlopen(f"http://127.0.0.1:{stack.health_port(name)}/metrics", timeout=5) as r:
            served += r.read().decode()
    with urllib.request.urlopen(f"{stack.etcd_url}/metrics", timeout=5) as r:
        served += r.read().decode()
    ctx = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
    ctx.check_hostname = False
    with urllib.request.urlopen(f"https://127.0.0.1:{PIZZA.port + stack.offset}/metrics", timeout=5,
                                context=ctx) as r:
        served += r.read().decode()
    exposed = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)", served, re.M))
    missing = {n for _, p in panels for n in _metric_names(p.expr)} - exposed - {"up"}
    assert not missing, f"metrics no service serves: {sorted(missing)}"

    deadline = time.monotonic() + 60
    empty = panels
    while empty and time.monotonic() < deadline:
        time.sleep(2)
        empty = [(uid, p) for uid, p in empty if not prom.query(p.expr)]
    assert not empty, "panels without data:\n" + "\n".join(f"{uid}: {p.title}: {p.expr}" for uid, p in empty)
