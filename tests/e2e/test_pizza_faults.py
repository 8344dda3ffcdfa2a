"""Issue 11's faults, on a stack of its own: the pizza server (the stack's aggregated server) stops,
its APIServices turn unavailable, pizzas are answered 503 naming the APIService and the rest of the
API keeps working; started again alone, it is available and serves pizzas again."""
from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import TEST_OFFSET, Kubectl
from services.cluster.aggregated import PIZZA, PIZZA_GROUP
from services.cluster.stack import ROOT, Stack

pytestmark = pytest.mark.stack

OFFSET = TEST_OFFSET + 200
APISERVICES = [f"{api.version}.{api.group}" for api in PIZZA.apiservices]
PIZZAS = f"/apis/{PIZZA_GROUP}/v1beta1/namespaces/default/pizzas"
REQUEST_TIMEOUT = 30.0  # the client's; the proxy must answer before it


def wait_until(fn: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


@pytest.fixture(scope="module")
def faulty() -> Iterator[Stack]:
    s = Stack(ROOT / ".apiary" / "test-pizza-faults", OFFSET)
    s.start(fresh=True)
    try:
        yield s
    finally:
        s.stop(quiet=True)


@pytest.fixture(scope="module")
def admin(faulty: Stack) -> Iterator[httpx.Client]:
    pki = faulty.state / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    with httpx.Client(base_url=faulty.server, verify=ctx, timeout=REQUEST_TIMEOUT) as c:
        yield c


def conditions(admin: httpx.Client) -> dict[str, dict[str, str]]:
    """The Available condition of each pizza APIService."""
    out = {}
    for name in APISERVICES:
        obj = admin.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}").json()
        out[name] = next((c for c in (obj.get("status") or {}).get("conditions") or []
                          if c["type"] == "Available"), {})
    return out


def all_available(admin: httpx.Client, status: str) -> dict[str, dict[str, str]] | None:
    found = conditions(admin)
    return found if all(c.get("status") == status for c in found.values()) else None


def test_pizza_server_down_and_back(faulty: Stack, admin: httpx.Client, tmp_path_factory: pytest.TempPathFactory
                                    ) -> None:
    kubectl = Kubectl(faulty, tmp_path_factory.mktemp("kube-cache"))
    assert wait_until(lambda: all_available(admin, "True"), 90), conditions(admin)
    r = admin.post(f"/apis/{PIZZA_GROUP}/v1alpha1/toppings",
                   json={"metadata": {"name": "tomato"}, "spec": {"cost": 0.25}})
    assert r.status_code == 201, r.text
    r = wait_until(lambda: (r := admin.post(PIZZAS, json={"metadata": {"name": "before"},
                                                           "spec": {"toppings": [{"name": "tomato"}]}}))
                   .status_code == 201 and r, 30)  # the server's topping informer sees the topping
    assert r, "the pizza was never created"
    kubectl.run("get", "pizzas")  # discovery cached with the restaurant group in it

    pid = faulty.pid(PIZZA.name)
    faulty.stop_one(PIZZA.name)
    assert faulty.pid(PIZZA.name) is None

    down = wait_until(lambda: all_available(admin, "False"), 60)
    assert down, conditions(admin)
    for cond in down.values():
        assert cond["reason"] in ("FailedDiscoveryCheck", "MissingEndpoints"), cond
    # an answer, not a hang: 503 naming the APIService, before the client's timeout
    r = admin.get(PIZZAS)
    assert r.status_code == 503, r.text
    status = r.json()
    assert status["kind"] == "Status" and status["reason"] == "ServiceUnavailable", status
    assert "v1beta1." + PIZZA_GROUP in status["message"], status
    # the rest of the API works, kubectl too
    assert "extension-apiserver-authentication" in kubectl.run("get", "configmaps", "-A").stdout
    resources = kubectl.run("api-resources").stdout
    assert "configmaps" in resources and "apiservices" in resources
    kubectl.run("api-resources", "--api-group=apps")
    kubectl.run("create", "configmap", "still-served", "--from-literal=k=v")
    assert "still-served" in kubectl.run("get", "configmaps").stdout

    others = {n: faulty.pid(n) for n in faulty.names() if n != PIZZA.name}
    faulty.start()  # idempotent: starts what is missing, the pizza server alone
    assert {n: faulty.pid(n) for n in others} == others
    assert faulty.pid(PIZZA.name) not in (None, pid)
    assert wait_until(lambda: all_available(admin, "True"), 90), conditions(admin)
    r = wait_until(lambda: (r := admin.get(f"{PIZZAS}/before")).status_code == 200 and r, 30)
    assert r, admin.get(f"{PIZZAS}/before").text
    assert r.json()["spec"]["toppings"] == [{"name": "tomato", "quantity": 1}]
    assert wait_until(lambda: "before" in kubectl.run("get", "pizzas", check=False).stdout, 60)
