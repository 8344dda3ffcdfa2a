"""The kit's ASGI front in process on a real etcd: FastAPI routes beside the lean resource path.

Requests are handed to the application as the HTTPS layer hands them (the verified client
certificate in scope["extensions"]["tls"], services.apiserver.serving.TLSHttpToolsProtocol), so these
tests cover the front, the routes and the storage, not TLS (test_pizza.py does, over real HTTPS).
"""
from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi import Request

from services import kit, pizza
from services.common.errors import Conflict
from services.kit.options import parse_args, parser

GROUP = "widgets.example.com"


class WithCertificate:
    """The application, called as if a client certificate of `user` (groups `orgs`) had verified."""

    def __init__(self, app: Any, user: str, orgs: list[str]) -> None:
        self.app, self.tls = app, {"cn": user, "o": orgs, "ca": ["client"]}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope["extensions"] = {**(scope.get("extensions") or {}), "tls": self.tls}
        await self.app(scope, receive, send)


def widget_server() -> kit.APIServer:
    widget = kit.Kind(kind="Widget", plural="widgets", namespaced=True,
                      versions={"v1": kit.Version({"type": "object", "properties": {"spec": {"type": "object"}}})})
    server = kit.APIServer(GROUP, [widget], versions=["v1"], name="widgets")

    @server.app.post(f"/apis/{GROUP}/v1/namespaces/{{namespace}}/widgets/{{name}}/polish")
    async def polish(namespace: str, name: str, request: Request) -> dict[str, Any]:
        """A custom subresource: reads the widget through the kit and answers who asked."""
        obj = await server.get("widgets", "v1", namespace, name, request.scope["user"])
        return {"polished": obj["metadata"]["name"], "by": request.scope["user"].name}

    @server.app.get("/hello")
    async def hello() -> dict[str, str]:
        raise Conflict("not now")

    return server


@pytest.fixture
async def widgets(etcd: str) -> AsyncIterator[httpx.AsyncClient]:
    server = widget_server()
    args = parser("widgets", "", "/widgets").parse_args([
        "--tls-cert-file", "unused", "--tls-private-key-file", "unused", "--etcd-servers", etcd,
        "--etcd-prefix", f"/widgets-{uuid.uuid4().hex[:8]}"])
    server.configure(args)
    assert server.storage is not None
    await server.storage.start()
    app = WithCertificate(server, "admin", ["system:masters"])
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://kit") as c:
            yield c
    finally:
        await server.storage.stop()


async def test_fastapi_routes_beside_resources(widgets: httpx.AsyncClient) -> None:
    base = f"/apis/{GROUP}/v1/namespaces/default/widgets"
    r = await widgets.post(base, json={"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": "w"},
                                       "spec": {"size": 3}})
    assert r.status_code == 201, r.text
    r = await widgets.post(f"{base}/w/polish")
    assert r.status_code == 200 and r.json() == {"polished": "w", "by": "admin"}
    r = await widgets.post(f"{base}/missing/polish")
    assert r.status_code == 404 and r.json()["message"] == f'widgets.{GROUP} "missing" not found'


async def test_fastapi_errors_are_statuses(widgets: httpx.AsyncClient) -> None:
    r = await widgets.get("/hello")
    assert r.status_code == 409 and r.json()["kind"] == "Status" and r.json()["message"] == "not now"
    r = await widgets.get("/nothing/here")
    assert r.status_code == 404 and r.json()["reason"] == "NotFound"
    r = await widgets.get(f"/apis/{GROUP}/v1/namespaces/default/gadgets")
    assert r.status_code == 404 and r.json()["kind"] == "Status"


async def test_resource_path_statuses(widgets: httpx.AsyncClient) -> None:
    base = f"/apis/{GROUP}/v1/namespaces/default/widgets"
    r = await widgets.post(base, content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["reason"] == "BadRequest"
    r = await widgets.post(base, json={"metadata": {"name": "Not_A_Name"}})
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "metadata.name"
    r = await widgets.post(base, json={"metadata": {"generateName": "w-"}})
    assert r.status_code == 201 and r.json()["metadata"]["name"].startswith("w-")
    r = await widgets.post(base, json={"metadata": {"name": "other", "namespace": "elsewhere"}})
    assert r.status_code == 400
    r = await widgets.get(base, params={"limit": "1"})
    assert r.status_code == 200 and len(r.json()["items"]) == 1
    r = await widgets.patch(f"{base}/nope", content=b"{}", headers={"Content-Type": "application/apply-patch+yaml"})
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "fieldManager"
    r = await widgets.get(base, headers={"Accept": "application/xml"})
    assert r.status_code == 406


async def test_server_side_apply_conflicts_between_managers(widgets: httpx.AsyncClient) -> None:
    """A kit kind is served by the library's handlers: managedFields, apply conflicts, force, dry-run."""
    url = f"/apis/{GROUP}/v1/namespaces/default/widgets/applied"
    apply = {"Content-Type": "application/apply-patch+yaml"}

    def config(size: int) -> bytes:
        return orjson.dumps({"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": "applied"},
                             "spec": {"size": size}})

    r = await widgets.patch(url, params={"fieldManager": "alice"}, content=config(1), headers=apply)
    assert r.status_code == 201, r.text
    assert [(m["manager"], m["operation"]) for m in r.json()["metadata"]["managedFields"]] == [("alice", "Apply")]
    r = await widgets.patch(url, params={"fieldManager": "bob"}, content=config(2), headers=apply)
    assert r.status_code == 409 and r.json()["message"] == \
        'Apply failed with 1 conflict: conflict with "alice": .spec'  # an object without properties is atomic
    r = await widgets.patch(url, params={"fieldManager": "bob", "force": "true", "dryRun": "All"},
                            content=config(2), headers=apply)
    assert r.status_code == 200 and r.json()["spec"] == {"size": 2}
    assert (await widgets.get(url)).json()["spec"] == {"size": 1}
    r = await widgets.patch(url, params={"fieldManager": "bob", "force": "true"}, content=config(2), headers=apply)
    assert r.status_code == 200 and r.json()["spec"] == {"size": 2}
    assert [m["manager"] for m in r.json()["metadata"]["managedFields"]] == ["bob"]


class Slow(kit.AdmissionPlugin):
    """Holds a write of a widget named "slow" for half a second."""

    async def admit(self, a: kit.Attributes) -> None:
        if a.name == "slow":
            await asyncio.sleep(0.5)


async def test_request_deadline_answers_504(etcd: str) -> None:
    """kube's request deadline: a ?timeout= shorter than --request-timeout ends the request with 504."""
    server = widget_server()
    server.admission.append(Slow())
    args = parser("widgets", "", "/widgets").parse_args([
        "--tls-cert-file", "unused", "--tls-private-key-file", "unused", "--etcd-servers", etcd,
        "--etcd-prefix", f"/widgets-{uuid.uuid4().hex[:8]}"])
    server.configure(args)
    assert server.storage is not None
    await server.storage.start()
    try:
        app = WithCertificate(server, "admin", ["system:masters"])
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://kit") as c:
            base = f"/apis/{GROUP}/v1/namespaces/default/widgets"
            r = await c.post(base, params={"timeout": "100ms"}, json={"metadata": {"name": "slow"}})
            assert r.status_code == 504 and r.json()["reason"] == "Timeout"
            assert r.json()["message"] == "Timeout: request did not complete within the allotted timeout"
            r = await c.post(base, params={"timeout": "5s"}, json={"metadata": {"name": "quick"}})
            assert r.status_code == 201, r.text
            r = await c.get(base, params={"timeout": "soon"})
            assert r.status_code == 400
    finally:
        await server.storage.stop()


async def test_server_timing_names_the_storage_stage(widgets: httpx.AsyncClient) -> None:
    base = f"/apis/{GROUP}/v1/namespaces/default/widgets"
    r = await widgets.post(base, json={"metadata": {"name": "timed"}})
    assert r.status_code == 201 and "storage;dur=" in r.headers["server-timing"]
    r = await widgets.get(f"{base}/timed")
    assert r.status_code == 200 and "storage;dur=" in r.headers["server-timing"]


AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: RequestResponse
  resources:
  - group: restaurant.programming-kubernetes.info
    resources: ["pizzas"]
- level: None
"""


async def test_an_audit_event_for_a_request_to_the_pizza_server(etcd: str, tmp_path: Path) -> None:
    """The kit audits as kube-apiserver does, with the library's policy and log backend (--audit-*)."""
    (tmp_path / "policy.yaml").write_text(AUDIT_POLICY)
    log = tmp_path / "audit.log"
    server = pizza.server()
    args = parse_args(parser("pizza", "", "/pizza"), [
        "--tls-cert-file", "unused", "--tls-private-key-file", "unused", "--etcd-servers", etcd,
        "--etcd-prefix", f"/pizza-{uuid.uuid4().hex[:8]}", "--audit-policy-file", str(tmp_path / "policy.yaml"),
        "--audit-log-path", str(log)])
    server.configure(args)
    assert server.storage is not None and server.auditor is not None
    await server.storage.start()
    await server.auditor.start()
    app = WithCertificate(server, "chef", ["system:masters"])
    base = "/apis/restaurant.programming-kubernetes.info/v1alpha1/namespaces/default/pizzas"
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://kit") as c:
            assert (await c.get(base, headers={"Audit-ID": "pizza-list"})).status_code == 200
            assert (await c.get(f"{base}/missing")).status_code == 404
            assert (await c.get("/healthz")).status_code == 200  # level None: no event
    finally:
        await server.auditor.stop()
        await server.storage.stop()
    events = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    assert [(e["kind"], e["stage"], e["verb"], e["objectRef"]["resource"], e["responseStatus"]["code"])
            for e in events] == [("Event", "ResponseComplete", "list", "pizzas", 200),
                                 ("Event", "ResponseComplete", "get", "pizzas", 404)]
    listed, missing = events
    assert listed["auditID"] == "pizza-list" and missing["auditID"] != "pizza-list"
    assert listed["user"]["username"] == "chef" and "system:masters" in listed["user"]["groups"]
    assert listed["level"] == "RequestResponse" and listed["responseObject"]["kind"] == "PizzaList"
    assert missing["objectRef"]["name"] == "missing" and missing["responseStatus"]["reason"] == "NotFound"


async def test_pizza_answers_carry_the_audit_id_of_their_audit_event(etcd: str, tmp_path: Path) -> None:
    """The library's filter chain in front of the kit: every answer names its audit event (Audit-Id,
    made by the server or taken from the client) and the stages it went through (Server-Timing)."""
    (tmp_path / "policy.yaml").write_text(AUDIT_POLICY)
    log = tmp_path / "audit.log"
    server = pizza.server()
    args = parse_args(parser("pizza", "", "/pizza"), [
        "--tls-cert-file", "unused", "--tls-private-key-file", "unused", "--etcd-servers", etcd,
        "--etcd-prefix", f"/pizza-{uuid.uuid4().hex[:8]}", "--audit-policy-file", str(tmp_path / "policy.yaml"),
        "--audit-log-path", str(log)])
    server.configure(args)
    assert server.storage is not None and server.auditor is not None
    await server.storage.start()
    await server.auditor.start()
    app = WithCertificate(server, "chef", ["system:masters"])
    base = "/apis/restaurant.programming-kubernetes.info/v1alpha1/namespaces/default/pizzas"
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://kit") as c:
            listed = await c.get(base)
            missing = await c.get(f"{base}/missing", headers={"Audit-ID": "where-is-it"})
            health = await c.get("/healthz")
    finally:
        await server.auditor.stop()
        await server.storage.stop()
    assert listed.status_code == 200, listed.text
    assert missing.status_code == 404 and missing.headers["audit-id"] == "where-is-it"
    assert health.status_code == 200 and health.headers["audit-id"]  # not audited, named all the same
    stages = [s.split(";")[0] for s in listed.headers["server-timing"].split(", ")]
    assert stages[:2] == ["authn", "authz"] and "storage" in stages
    events = {e["auditID"]: e for e in map(orjson.loads, log.read_bytes().splitlines())}
    assert events.keys() == {listed.headers["audit-id"], "where-is-it"}
    assert events[listed.headers["audit-id"]]["verb"] == "list"
    assert events[listed.headers["audit-id"]]["responseObject"]["kind"] == "PizzaList"
    assert events["where-is-it"]["responseStatus"]["code"] == 404


async def test_an_informer_reads_its_writes_after_wait_fresh(etcd: str) -> None:
    """server.wait_fresh(plural): the kind's informer holds every object stored before the call (what an
    admission plug-in asks before refusing an object it has not seen)."""
    server = widget_server()
    args = parser("widgets", "", "/widgets").parse_args([
        "--tls-cert-file", "unused", "--tls-private-key-file", "unused", "--etcd-servers", etcd,
        "--etcd-prefix", f"/widgets-{uuid.uuid4().hex[:8]}"])
    server.configure(args)
    assert server.storage is not None
    await server.storage.start()
    informer = server.informer("widgets")
    informer.start()
    try:
        await informer.synced.wait()
        app = WithCertificate(server, "admin", ["system:masters"])
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://kit") as c:
            for i in range(5):
                r = await c.post(f"/apis/{GROUP}/v1/namespaces/default/widgets", json={"metadata": {"name": f"w{i}"}})
                assert r.status_code == 201, r.text
                assert await server.wait_fresh("widgets")
                assert f"default/w{i}" in informer.store
    finally:
        await informer.stop()
        await server.storage.stop()
