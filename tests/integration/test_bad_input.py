"""Bad input through the whole stack: a Status with a 4xx, nothing written, services still healthy."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.stack

NS = "bad-input"


@pytest.fixture(scope="module", autouse=True)
def namespace(admin):
    r = admin.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    assert r.status_code in (201, 409), r.text
    yield NS


def status_of(r, code: int, reason: str | None = None) -> dict:
    assert r.status_code == code, r.text
    body = r.json()
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert body["code"] == code
    if reason:
        assert body["reason"] == reason
    return body


def count_configmaps(admin) -> int:
    """The namespace's configmaps but the controller-manager's kube-root-ca.crt (it comes a moment after the
    namespace, whatever the test sends)."""
    r = admin.get(f"/api/v1/namespaces/{NS}/configmaps")
    assert r.status_code == 200
    return len([c for c in r.json()["items"] if c["metadata"]["name"] != "kube-root-ca.crt"])


def assert_healthy(admin, stack):
    assert admin.get("/readyz").status_code == 200
    for name in ("auth", "apf", "admission", "registry", "storage"):
        assert stack.healthy(name), name


CM = "/api/v1/namespaces/" + NS + "/configmaps"


def test_malformed_json(admin, stack):
    before = count_configmaps(admin)
    r = admin.post(CM, content=b'{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {',
                   headers={"Content-Type": "application/json"})
    status_of(r, 400, "BadRequest")
    assert count_configmaps(admin) == before
    assert_healthy(admin, stack)


def test_malformed_yaml(admin, stack):
    before = count_configmaps(admin)
    r = admin.post(CM, content=b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x\n  data: [",
                   headers={"Content-Type": "application/yaml"})
    status_of(r, 400, "BadRequest")
    assert count_configmaps(admin) == before
    assert_healthy(admin, stack)


def test_yaml_body_is_accepted(admin):
    r = admin.post(CM, content=b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  a: b\n",
                   headers={"Content-Type": "application/yaml", "Accept": "application/yaml"})
    assert r.status_code == 201, r.text
    assert "name: from-yaml" in r.text and r.headers["content-type"].startswith("application/yaml")


@pytest.mark.parametrize("api_version,kind", [("apps/v1", "ConfigMap"), ("v1", "Secret"), ("v2", "ConfigMap")])
def test_kind_or_version_mismatch(admin, stack, api_version, kind):
    before = count_configmaps(admin)
    r = admin.post(CM, json={"apiVersion": api_version, "kind": kind, "metadata": {"name": "mismatch"}})
    assert 400 <= r.status_code < 500, r.text
    status_of(r, r.status_code)
    assert count_configmaps(admin) == before
    assert_healthy(admin, stack)


def test_invalid_name(admin, stack):
    before = count_configmaps(admin)
    r = admin.post(CM, json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}})
    body = status_of(r, 422, "Invalid")
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    assert 'ConfigMap "Bad_Name" is invalid' in body["message"]
    assert count_configmaps(admin) == before
    assert_healthy(admin, stack)


def test_body_over_3_mib(admin, stack):
    before = count_configmaps(admin)
    big = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"x": "a" * (3 * 1024 * 1024 + 10)}}
    r = admin.post(CM, content=json.dumps(big).encode(), headers={"Content-Type": "application/json"})
    status_of(r, 413, "RequestEntityTooLarge")
    assert count_configmaps(admin) == before
    assert_healthy(admin, stack)


def test_unknown_resource(admin, stack):
    r = admin.get(f"/api/v1/namespaces/{NS}/widgets")
    status_of(r, 404, "NotFound")
    r = admin.post(f"/api/v1/namespaces/{NS}/widgets", json={"apiVersion": "v1", "kind": "Widget", "metadata": {"name": "w"}})
    status_of(r, 404, "NotFound")
    r = admin.get("/apis/nope.example.com/v1/things")
    assert r.status_code == 404
    assert_healthy(admin, stack)


def test_missing_namespace(admin, stack):
    r = admin.post("/api/v1/namespaces/does-not-exist/configmaps",
                   json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "orphan"}})
    body = status_of(r, 404, "NotFound")
    assert body["message"] == 'namespaces "does-not-exist" not found'
    r = admin.get("/api/v1/namespaces/does-not-exist/configmaps/orphan")
    assert r.status_code == 404
    assert_healthy(admin, stack)


def test_invalid_secret_data(admin, stack):
    r = admin.post(f"/api/v1/namespaces/{NS}/secrets",
                   json={"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "%%%not base64"}})
    assert r.status_code in (400, 422), r.text
    assert admin.get(f"/api/v1/namespaces/{NS}/secrets/s").status_code == 404
    assert_healthy(admin, stack)


def test_already_exists_status_is_exact(admin):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "twice"}}
    assert admin.post(CM, json=cm).status_code == 201
    r = admin.post(CM, json=cm)
    assert r.status_code == 409
    assert r.content == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"configmaps \\"twice\\" already exists","reason":"AlreadyExists",'
        b'"details":{"name":"twice","kind":"configmaps"},"code":409}\n'
    )


def test_stale_update_conflicts(admin):
    r = admin.post(CM, json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cas"}, "data": {"a": "1"}})
    obj = r.json()
    obj["data"]["a"] = "2"
    assert admin.put(f"{CM}/cas", json=obj).status_code == 200
    obj["data"]["a"] = "3"
    r = admin.put(f"{CM}/cas", json=obj)
    status_of(r, 409, "Conflict")
    assert admin.get(f"{CM}/cas").json()["data"]["a"] == "2"


def test_pagination(admin):
    for i in range(7):
        admin.post(CM, json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"page-{i}"}})
    names, token = [], None
    while True:
        params = {"limit": "3", "labelSelector": ""}
        if token:
            params["continue"] = token
        body = admin.get(CM, params=params).json()
        names += [o["metadata"]["name"] for o in body["items"]]
        token = body["metadata"].get("continue")
        if not token:
            break
    assert [n for n in names if n.startswith("page-")] == [f"page-{i}" for i in range(7)]
    assert len(names) == len(set(names))


def test_unknown_field_selector(admin, stack):
    body = status_of(admin.get(CM, params={"fieldSelector": "spec.foo=bar"}), 400, "BadRequest")
    assert body["message"] == "field label not supported: spec.foo"
    status_of(admin.get(CM, params={"fieldSelector": "spec.foo=bar", "watch": "true"}), 400, "BadRequest")
    assert admin.get(CM, params={"fieldSelector": "metadata.name=twice"}).status_code == 200
    r = admin.get(f"/api/v1/namespaces/{NS}/secrets", params={"fieldSelector": "type=Opaque"})
    assert r.status_code == 200
    assert admin.get("/api/v1/namespaces", params={"fieldSelector": "status.phase=Active"}).status_code == 200
    assert_healthy(admin, stack)
