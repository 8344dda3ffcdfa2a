"""The pizza server (services.pizza, on services.kit) as a real process beside a real apiary stack:
its own etcd prefix on the stack's etcd, delegated authentication and authorization against apiary.
Requests go straight to its port, as the aggregation proxy sends them: the front-proxy client
certificate and X-Remote-* headers."""
from __future__ import annotations

import queue
import ssl
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.procs import free_port
from services.cluster import certs
from tools import pizza_server
from services.cluster.stack import Stack
from tests.waiting import wait_for

GROUP = "restaurant.programming-kubernetes.info"
V1ALPHA1, V1BETA1 = f"/apis/{GROUP}/v1alpha1", f"/apis/{GROUP}/v1beta1"
ADMIN = {"X-Remote-User": "kubernetes-admin", "X-Remote-Group": "system:masters"}
UNAUTHORIZED_TTL = 2.0


@pytest.fixture(scope="module")
def pizza(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A pizza server process; its base URL."""
    server = pizza_server.start(stack, free_port(), tmp_path_factory.mktemp("pizza") / "pizza.log",
                                ["--authorization-webhook-cache-unauthorized-ttl", f"{UNAUTHORIZED_TTL}s"])
    try:
        yield server.url
    finally:
        server.stop()


def _client(stack: Stack, base: str, cert: tuple[Path, Path] | None, headers: dict[str, str] | None = None
            ) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
    if cert:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return httpx.Client(base_url=base, verify=ctx, headers=headers or {}, timeout=30)


def front_proxy(stack: Stack, base: str, headers: dict[str, str]) -> httpx.Client:
    pki = stack.state / "pki"
    return _client(stack, base, (pki / "front-proxy-client.crt", pki / "front-proxy-client.key"), headers)


@pytest.fixture(scope="module")
def chef(stack: Stack, pizza: str) -> Iterator[httpx.Client]:
    """The pizza server, as the aggregator calls it on behalf of a system:masters user."""
    with front_proxy(stack, pizza, ADMIN) as c:
        yield c


def topping(name: str, cost: float, version: str = "v1alpha1") -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{version}", "kind": "Topping", "metadata": {"name": name}, "spec": {"cost": cost}}


def make_toppings(chef: httpx.Client) -> None:
    for name, cost in (("salami", 1.5), ("mozzarella", 0.75), ("tomato", 0.25)):
        r = chef.post(f"{V1ALPHA1}/toppings", json=topping(name, cost))
        assert r.status_code in (201, 409), r.text


def test_toppings_crud_in_both_versions(chef: httpx.Client) -> None:
    name = f"basil-{uuid.uuid4().hex[:6]}"
    r = chef.post(f"{V1BETA1}/toppings", json=topping(name, 0.1, "v1beta1"))
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["apiVersion"] == f"{GROUP}/v1beta1" and created["spec"] == {"cost": 0.1}
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    r = chef.get(f"{V1ALPHA1}/toppings/{name}")
    assert r.status_code == 200 and r.json()["apiVersion"] == f"{GROUP}/v1alpha1"
    assert r.json()["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    updated = {**r.json(), "spec": {"cost": 0.2}}
    r = chef.put(f"{V1ALPHA1}/toppings/{name}", json=updated)
    assert r.status_code == 200 and r.json()["spec"]["cost"] == 0.2, r.text
    stale = chef.put(f"{V1ALPHA1}/toppings/{name}", json={**updated, "spec": {"cost": 0.3}})
    assert stale.status_code == 409 and stale.json()["reason"] == "Conflict"
    assert name in [t["metadata"]["name"] for t in chef.get(f"{V1BETA1}/toppings").json()["items"]]
    assert chef.post(f"{V1BETA1}/toppings", json=topping(name, 1, "v1beta1")).json()["reason"] == "AlreadyExists"
    r = chef.delete(f"{V1BETA1}/toppings/{name}")
    assert r.status_code == 200 and r.json()["metadata"]["name"] == name
    r = chef.get(f"{V1BETA1}/toppings/{name}")
    assert r.status_code == 404
    assert r.json()["message"] == f'toppings.{GROUP} "{name}" not found'


def test_margherita_converts_on_the_wire_and_is_priced(chef: httpx.Client) -> None:
    make_toppings(chef)
    body = (f"apiVersion: {GROUP}/v1alpha1\nkind: Pizza\nmetadata:\n  name: margherita\n"
            "spec:\n  toppings:\n  - mozzarella\n  - tomato\n  - mozzarella\n")
    r = chef.post(f"{V1ALPHA1}/namespaces/default/pizzas", content=body,
                  headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["toppings"] == ["mozzarella", "mozzarella", "tomato"]
    beta = chef.get(f"{V1BETA1}/namespaces/default/pizzas/margherita").json()
    assert beta["apiVersion"] == f"{GROUP}/v1beta1"
    assert beta["spec"]["toppings"] == [{"name": "mozzarella", "quantity": 2}, {"name": "tomato", "quantity": 1}]
    assert beta["status"]["cost"] == pytest.approx(2 * 0.75 + 0.25)
    # a v1beta1 update is seen as repeated names in v1alpha1
    beta["spec"]["toppings"][1]["quantity"] = 3
    r = chef.put(f"{V1BETA1}/namespaces/default/pizzas/margherita", json=beta)
    assert r.status_code == 200, r.text
    assert r.json()["status"]["cost"] == pytest.approx(2 * 0.75 + 3 * 0.25)
    alpha = chef.get(f"{V1ALPHA1}/namespaces/default/pizzas/margherita").json()
    assert alpha["spec"]["toppings"] == ["mozzarella", "mozzarella", "tomato", "tomato", "tomato"]
    # a merge patch in v1alpha1
    r = chef.patch(f"{V1ALPHA1}/namespaces/default/pizzas/margherita", content=b'{"spec":{"toppings":["salami"]}}',
                   headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200 and r.json()["status"]["cost"] == pytest.approx(1.5), r.text
    assert r.json()["metadata"]["generation"] == 3
    # YAML and Table output
    r = chef.get(f"{V1BETA1}/namespaces/default/pizzas/margherita", headers={"Accept": "application/yaml"})
    assert r.headers["content-type"] == "application/yaml" and "quantity: 1" in r.text
    r = chef.get(f"{V1BETA1}/namespaces/default/pizzas",
                 headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    assert [c["name"] for c in r.json()["columnDefinitions"]] == ["Name", "Toppings", "Cost", "Age"]
    assert ["margherita", "salami(1)", 1.5] in [row["cells"][:3] for row in r.json()["rows"]]


def test_empty_pizza_gets_the_default_toppings(chef: httpx.Client) -> None:
    make_toppings(chef)
    for version in (V1ALPHA1, V1BETA1):
        name = f"empty-{uuid.uuid4().hex[:6]}"
        r = chef.post(f"{version}/namespaces/default/pizzas", json={"metadata": {"name": name}, "spec": {}})
        assert r.status_code == 201, r.text
        got = chef.get(f"{V1BETA1}/namespaces/default/pizzas/{name}").json()
        assert got["spec"]["toppings"] == [{"name": n, "quantity": 1} for n in ("salami", "mozzarella", "tomato")]
        assert got["status"]["cost"] == pytest.approx(2.5)


def test_quantity_minus_one_is_invalid_with_its_field_path(chef: httpx.Client) -> None:
    r = chef.post(f"{V1BETA1}/namespaces/default/pizzas", json={
        "apiVersion": f"{GROUP}/v1beta1", "kind": "Pizza", "metadata": {"name": "negative"},
        "spec": {"toppings": [{"name": "salami", "quantity": -1}]}})
    assert r.status_code == 422, r.text
    st = r.json()
    assert st["reason"] == "Invalid"
    assert st["message"] == (f'Pizza.{GROUP} "negative" is invalid: spec.toppings[0].quantity: '
                             "Invalid value: -1: cannot be negative or zero")
    assert st["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "spec.toppings[0].quantity",
                                        "message": "Invalid value: -1: cannot be negative or zero"}]
    r = chef.post(f"{V1BETA1}/namespaces/default/pizzas", json={
        "metadata": {"name": "twice"}, "spec": {"toppings": [{"name": "salami"}, {"name": "salami"}]}})
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "spec.toppings[1].name"


def test_watch_sees_added_modified_deleted(chef: httpx.Client, admin: httpx.Client) -> None:
    make_toppings(chef)
    ns = f"watch-{uuid.uuid4().hex[:6]}"
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    rv = chef.get(f"{V1BETA1}/namespaces/{ns}/pizzas").json()["metadata"]["resourceVersion"]
    events: queue.Queue[dict[str, Any]] = queue.Queue()

    def watch() -> None:
        with chef.stream("GET", f"{V1ALPHA1}/namespaces/{ns}/pizzas",
                         params={"watch": "true", "resourceVersion": rv, "timeoutSeconds": "60"}) as r:
            seen = 0
            for line in r.iter_lines():
                if line:
                    events.put(orjson.loads(line))
                    seen += 1
                    if seen == 3:
                        return

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    url = f"{V1BETA1}/namespaces/{ns}/pizzas"
    assert chef.post(url, json={"metadata": {"name": "w"}, "spec": {"toppings": [{"name": "tomato"}]}}).status_code == 201
    r = chef.patch(f"{url}/w", content=b'{"spec":{"toppings":[{"name":"tomato","quantity":2}]}}',
                   headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    assert chef.delete(f"{url}/w").status_code == 200
    got = [events.get(timeout=30) for _ in range(3)]
    assert [e["type"] for e in got] == ["ADDED", "MODIFIED", "DELETED"]
    assert got[0]["object"]["apiVersion"] == f"{GROUP}/v1alpha1"
    assert got[1]["object"]["spec"]["toppings"] == ["tomato", "tomato"]
    t.join(10)


def test_pizzas_only_in_namespaces_that_exist(chef: httpx.Client, admin: httpx.Client) -> None:
    """NamespaceLifecycle: the namespaces are apiary's."""
    ns = f"later-{uuid.uuid4().hex[:6]}"
    pizza = {"metadata": {"name": "p"}, "spec": {"toppings": [{"name": "tomato"}]}}
    r = chef.post(f"{V1BETA1}/namespaces/{ns}/pizzas", json=pizza)
    assert r.status_code == 404, r.text
    assert r.json()["message"] == f'namespaces "{ns}" not found'
    # made just now: found by a GET when the informer has not seen it yet
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    assert chef.post(f"{V1BETA1}/namespaces/{ns}/pizzas", json=pizza).status_code == 201


def test_unknown_topping_is_forbidden_by_admission(chef: httpx.Client) -> None:
    make_toppings(chef)
    for name in ("salami", "mozzarella", "tomato"):
        assert chef.delete(f"{V1ALPHA1}/toppings/{name}").status_code == 200

    def refused() -> httpx.Response | None:
        r = chef.post(f"{V1ALPHA1}/namespaces/default/pizzas", json={
            "metadata": {"name": "late"}, "spec": {"toppings": ["mozzarella", "tomato"]}})
        return r if r.status_code == 403 else None

    r = wait_for(refused)  # the informer sees the deletions
    assert r is not None
    assert r.json()["message"] == f'pizzas.{GROUP} "late" is forbidden: unknown topping: mozzarella'
    assert r.json()["reason"] == "Forbidden"


def test_user_without_rbac_is_forbidden_until_a_role_is_bound(stack: Stack, pizza: str, admin: httpx.Client) -> None:
    user, ns = f"eve-{uuid.uuid4().hex[:6]}", f"rbac-{uuid.uuid4().hex[:6]}"
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    with front_proxy(stack, pizza, {"X-Remote-User": user, "X-Remote-Group": "pizza-eaters"}) as eve:
        r = eve.get(f"{V1BETA1}/namespaces/{ns}/pizzas")
        assert r.status_code == 403, r.text
        assert r.json()["message"] == (
            f'pizzas.{GROUP} is forbidden: User "{user}" cannot list resource "pizzas" in API group "{GROUP}" '
            f'in the namespace "{ns}"')
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        role = {"metadata": {"name": "pizza-reader"},
                "rules": [{"apiGroups": [GROUP], "resources": ["pizzas"], "verbs": ["get", "list", "watch"]}]}
        assert admin.post(f"{rbac}/namespaces/{ns}/roles", json=role).status_code == 201
        binding = {"metadata": {"name": "pizza-reader"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pizza-reader"},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}
        assert admin.post(f"{rbac}/namespaces/{ns}/rolebindings", json=binding).status_code == 201
        # a denial is cached for the unauthorized TTL, then the SubjectAccessReview allows
        assert wait_for(lambda: eve.get(f"{V1BETA1}/namespaces/{ns}/pizzas").status_code == 200,
                        UNAUTHORIZED_TTL + 20)
        r = eve.post(f"{V1BETA1}/namespaces/{ns}/pizzas", json={"metadata": {"name": "p"}})
        assert r.status_code == 403 and 'cannot create resource "pizzas"' in r.json()["message"]


def test_forged_identity_without_the_front_proxy_certificate_is_401(stack: Stack, pizza: str) -> None:
    with _client(stack, pizza, None, ADMIN) as forger:
        r = forger.get(f"{V1BETA1}/namespaces/default/pizzas")
        assert r.status_code == 401 and r.json()["reason"] == "Unauthorized"
    # the admin's client certificate is an x509 identity, but asserts nothing with X-Remote-* headers
    pki = stack.state / "pki"
    with _client(stack, pizza, (pki / "admin.crt", pki / "admin.key"),
                 {"X-Remote-User": "someone-else"}) as admin_cert:
        assert admin_cert.get(f"{V1BETA1}/namespaces/default/pizzas").status_code == 200


def test_requestheader_ca_certificate_with_a_name_not_allowed_is_not_trusted(
        stack: Stack, pizza: str, tmp_path: Path) -> None:
    pki = stack.state / "pki"
    ca = certs.make_ca(pki / "front-proxy-ca", "front-proxy-ca")
    certs.make_cert(tmp_path / "impostor", ca, "not-the-front-proxy", client=True)
    with _client(stack, pizza, (tmp_path / "impostor.crt", tmp_path / "impostor.key"), ADMIN) as impostor:
        r = impostor.get(f"{V1BETA1}/namespaces/default/pizzas")
        assert r.status_code == 401 and r.json()["reason"] == "Unauthorized"


def test_bearer_tokens_are_reviewed_by_apiary(stack: Stack, pizza: str, tokens: dict[str, str]) -> None:
    with _client(stack, pizza, None, {"Authorization": f"Bearer {tokens['alice']}"}) as alice:
        r = alice.get(f"{V1BETA1}/toppings")
        assert r.status_code == 403 and 'User "alice" cannot list' in r.json()["message"]
    with _client(stack, pizza, None, {"Authorization": "Bearer not-a-token"}) as nobody:
        assert nobody.get(f"{V1BETA1}/toppings").status_code == 401
    with _client(stack, pizza, None, {"Authorization": f"Bearer {tokens['admin']}"}) as admin:
        assert admin.get(f"{V1BETA1}/toppings").status_code == 200


def test_discovery_openapi_and_health(stack: Stack, pizza: str, chef: httpx.Client) -> None:
    agg = chef.get("/apis", headers={"Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"})
    assert agg.headers["content-type"] == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    versions = agg.json()["items"][0]["versions"]
    assert [v["version"] for v in versions] == ["v1beta1", "v1alpha1"]
    pizzas = next(r for r in versions[0]["resources"] if r["resource"] == "pizzas")
    assert pizzas["scope"] == "Namespaced" and pizzas["responseKind"]["kind"] == "Pizza"
    assert chef.get(f"/apis/{GROUP}").json()["preferredVersion"]["version"] == "v1beta1"
    toppings = next(r for r in chef.get(V1ALPHA1).json()["resources"] if r["name"] == "toppings")
    assert toppings["namespaced"] is False
    index = chef.get("/openapi/v3").json()["paths"]
    doc = chef.get(index[f"apis/{GROUP}/v1beta1"]["serverRelativeURL"]).json()
    spec = doc["components"]["schemas"]["info.programming-kubernetes.restaurant.v1beta1.Pizza"]
    assert spec["properties"]["spec"]["properties"]["toppings"]["items"]["properties"]["quantity"]["type"] == "integer"
    assert "definitions" in chef.get("/openapi/v2").json()
    v2pb = chef.get("/openapi/v2", headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"})
    assert v2pb.status_code == 200 and "protobuf" in v2pb.headers["content-type"] and v2pb.content
    # health needs no credentials; metrics do
    with _client(stack, pizza, None) as anonymous:
        assert anonymous.get("/healthz").text == "ok" and anonymous.get("/readyz").status_code == 200
        assert anonymous.get("/metrics").status_code == 401
    assert "apiserver_request_total" in chef.get("/metrics").text


def test_requestheader_configuration_from_the_extension_configmap(
        stack: Stack, admin: httpx.Client, tmp_path: Path) -> None:
    """Without CA flags the server reads kube-system/extension-apiserver-authentication, as kube's do."""
    pki = stack.state / "pki"
    url = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
    if admin.get(url).status_code == 404:  # published by apiary itself once it does
        cm = {"metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"}, "data": {
            "client-ca-file": (pki / "ca.crt").read_text(),
            "requestheader-client-ca-file": (pki / "front-proxy-ca.crt").read_text(),
            "requestheader-allowed-names": '["front-proxy-client"]',
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]',
            "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]'}}
        assert admin.post("/api/v1/namespaces/kube-system/configmaps", json=cm).status_code == 201
    server = pizza_server.start(stack, free_port(), tmp_path / "pizza.log", ca_flags=False)
    try:
        with front_proxy(stack, server.url, ADMIN) as chef:
            assert chef.get(f"{V1BETA1}/toppings").status_code == 200
        ca = certs.make_ca(pki / "front-proxy-ca", "front-proxy-ca")
        certs.make_cert(tmp_path / "impostor", ca, "not-the-front-proxy", client=True)
        with _client(stack, server.url, (tmp_path / "impostor.crt", tmp_path / "impostor.key"), ADMIN) as impostor:
            assert impostor.get(f"{V1BETA1}/toppings").status_code == 401
        with _client(stack, server.url, (pki / "admin.crt", pki / "admin.key")) as x509_admin:
            assert x509_admin.get(f"{V1BETA1}/toppings").status_code == 200
    finally:
        server.stop()


def test_unknown_and_duplicate_fields_per_field_validation(chef: httpx.Client) -> None:
    make_toppings(chef)
    url = f"{V1BETA1}/namespaces/default/pizzas"
    body = (b'{"metadata":{"name":"typo","labelz":{}},"spec":{"toppings":[{"name":"tomato","quantty":2}],'
            b'"crust":"thin"},"spec":{"toppings":[{"name":"tomato"}]}}')
    r = chef.post(url, params={"fieldValidation": "Strict"}, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["message"] == ('strict decoding error: duplicate field "spec", unknown field "metadata.labelz"')
    body = b'{"metadata":{"name":"typo"},"spec":{"toppings":[{"name":"tomato","quantty":2}],"crust":"thin"}}'
    r = chef.post(url, params={"fieldValidation": "Strict"}, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["message"] == ('strict decoding error: unknown field "spec.toppings[0].quantty", '
                                   'unknown field "spec.crust"')
    r = chef.post(url, content=body, headers={"Content-Type": "application/json"})  # Warn, the default
    assert r.status_code == 201, r.text
    assert r.headers.get_list("warning") == ['299 - "unknown field \\"spec.toppings[0].quantty\\""',
                                             '299 - "unknown field \\"spec.crust\\""']
    assert "crust" not in r.json()["spec"]  # dropped, as kube's decoder does
    r = chef.patch(f"{url}/typo", params={"fieldValidation": "Ignore"}, content=b'{"spec":{"sauce":"bbq"}}',
                   headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200 and "warning" not in r.headers and "sauce" not in r.json()["spec"]


def test_server_side_apply_conflicts_on_a_pizza(chef: httpx.Client) -> None:
    """The kit serves apply as the core does: managedFields per manager, a conflict between two managers,
    taken over with force."""
    make_toppings(chef)
    name = f"applied-{uuid.uuid4().hex[:6]}"
    url = f"{V1BETA1}/namespaces/default/pizzas/{name}"
    apply = {"Content-Type": "application/apply-patch+yaml"}

    def config(topping: str, quantity: int) -> bytes:
        return orjson.dumps({"apiVersion": f"{GROUP}/v1beta1", "kind": "Pizza", "metadata": {"name": name},
                             "spec": {"toppings": [{"name": topping, "quantity": quantity}]}})

    r = chef.patch(url, params={"fieldManager": "alice"}, content=config("salami", 1), headers=apply)
    assert r.status_code == 201, r.text
    assert ("alice", "Apply") in [(m["manager"], m["operation"]) for m in r.json()["metadata"]["managedFields"]]
    r = chef.patch(url, params={"fieldManager": "bob"}, content=config("tomato", 2), headers=apply)
    assert r.status_code == 409, r.text
    assert r.json()["message"] == 'Apply failed with 1 conflict: conflict with "alice": .spec.toppings'
    r = chef.patch(url, params={"fieldManager": "bob", "force": "true"}, content=config("tomato", 2), headers=apply)
    assert r.status_code == 200, r.text
    assert r.json()["spec"]["toppings"] == [{"name": "tomato", "quantity": 2}]
    assert r.json()["status"]["cost"] == pytest.approx(0.5)
    managers = [m["manager"] for m in r.json()["metadata"]["managedFields"]]
    assert "bob" in managers and "alice" not in managers
