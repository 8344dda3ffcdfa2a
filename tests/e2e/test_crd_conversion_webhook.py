"""CRD conversion webhooks end to end: kube's CronTab in two versions, v1 (spec.cronSpec) and v2 (spec.schedule),
converted by a real HTTPS webhook written here (tools/fakeservers.ConversionWebhook, its serving certificate from
a CA made for the test and given as caBundle), referenced by url and by a Service with Endpoints on loopback.
Seen through kubectl and the API as a user sees them: get and list in either version, create in one and read in
the other, apply and patch, a list converted in one review, dry-run, /scale and /status, a watch in the
non-storage version, storedVersions after the storage version moves, and the error kube gives when the webhook
is down."""
from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kubectls import RUN, refused
from tests.waiting import wait_for
from tools.fakeservers import ConversionWebhook

pytestmark = pytest.mark.stack
NS = f"conv-e2e-{RUN}"
GROUP = f"conv{RUN}.example.com"
NAME = f"crontabs.{GROUP}"
V1, V2 = f"crontabs.v1.{GROUP}", f"crontabs.v2.{GROUP}"
SUBRESOURCES = {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                        "statusReplicasPath": ".status.replicas"}}


def schema(field: str) -> dict[str, Any]:
    return {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {field: {"type": "string"}, "replicas": {"type": "integer"}}},
        "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}}


def convert(obj: dict[str, Any], desired: str) -> dict[str, Any]:
    """v1's spec.cronSpec is v2's spec.schedule."""
    spec = dict(obj.get("spec") or {})
    if desired.endswith("/v2") and "cronSpec" in spec:
        spec["schedule"] = spec.pop("cronSpec")
    elif desired.endswith("/v1") and "schedule" in spec:
        spec["cronSpec"] = spec.pop("schedule")
    return {**obj, "spec": spec}


def by_url(server: ConversionWebhook) -> dict[str, Any]:
    return {"url": f"https://127.0.0.1:{server.port}/convert",
            "caBundle": base64.b64encode(server.ca_pem.encode()).decode()}


def crd(server: ConversionWebhook) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": NAME},
        "spec": {"group": GROUP, "scope": "Namespaced",
                 "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab"},
                 "versions": [
                     {"name": "v1", "served": True, "storage": True, "schema": schema("cronSpec"),
                      "subresources": SUBRESOURCES},
                     {"name": "v2", "served": True, "storage": False, "schema": schema("schedule"),
                      "subresources": SUBRESOURCES}],
                 "conversion": {"strategy": "Webhook", "webhook": {"clientConfig": by_url(server),
                                                                   "conversionReviewVersions": ["v1"]}}}}


def crontab(name: str, version: str, schedule: str) -> str:
    field = "cronSpec" if version == "v1" else "schedule"
    return json.dumps({"apiVersion": f"{GROUP}/{version}", "kind": "CronTab", "metadata": {"name": name},
                       "spec": {field: schedule, "replicas": 1}})


def get(kubectl: Any, resource: str, name: str = "") -> dict[str, Any]:
    return json.loads(kubectl.run("-n", NS, "get", resource, *([name] if name else []), "-o", "json").stdout)


def set_client_config(kubectl: Any, cc: dict[str, Any]) -> None:
    patch = [{"op": "replace", "path": "/spec/conversion/webhook/clientConfig", "value": cc}]
    kubectl.run("patch", "crd", NAME, "--type=json", "-p", json.dumps(patch))


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConversionWebhook]:
    server = ConversionWebhook(tmp_path_factory.mktemp("conversion"), "convert", convert,
                               dns_names=(f"conv.{NS}.svc",)).start()
    yield server
    server.stop()


@pytest.fixture(scope="module", autouse=True)
def installed(kubectl: Any, webhook: ConversionWebhook) -> Iterator[None]:
    kubectl.run("create", "namespace", NS)
    kubectl.run("create", "-f", "-", input=json.dumps(crd(webhook)))
    kubectl.run("wait", "--for=condition=Established", f"crd/{NAME}", "--timeout=30s")
    wait_for(lambda: kubectl.run("-n", NS, "get", V2, check=False).returncode == 0, 10, "v2 served")
    yield
    # the objects go with the CRD while its webhook still answers (they are read to be deleted)
    kubectl.run("delete", "crd", NAME, "--timeout=60s", check=False)
    kubectl.run("delete", "namespace", NS, "--wait=false", check=False)


def test_both_versions_through_the_webhook(kubectl: Any, admin: Any, webhook: ConversionWebhook) -> None:
    created = json.loads(kubectl.run("-n", NS, "create", "-o", "json", "-f", "-",
                                     input=crontab("from-v2", "v2", "*/1 * * * *")).stdout)
    assert created["apiVersion"] == f"{GROUP}/v2" and created["spec"] == {"schedule": "*/1 * * * *", "replicas": 1}
    # stored as v1 (the storage version): read back in v1 it has v1's field
    assert webhook.calls[-1]["request"]["desiredAPIVersion"] == f"{GROUP}/v2"
    in_v1 = get(kubectl, V1, "from-v2")
    assert in_v1["apiVersion"] == f"{GROUP}/v1" and in_v1["spec"] == {"cronSpec": "*/1 * * * *", "replicas": 1}
    kubectl.run("-n", NS, "create", "-f", "-", input=crontab("from-v1", "v1", "*/2 * * * *"))
    assert get(kubectl, V2, "from-v1")["spec"] == {"schedule": "*/2 * * * *", "replicas": 1}

    # server-side apply and a merge patch in v2 land in v1's field
    kubectl.run("-n", NS, "apply", "--server-side", "-f", "-", input=crontab("applied", "v2", "*/7 * * * *"))
    kubectl.run("-n", NS, "patch", V2, "applied", "--type=merge", "-p", '{"spec": {"schedule": "*/8 * * * *"}}')
    assert get(kubectl, V1, "applied")["spec"] == {"cronSpec": "*/8 * * * *", "replicas": 1}
    kubectl.run("-n", NS, "delete", V2, "applied")

    # a list: every object needing conversion in one ConversionReview
    before = len(webhook.calls)
    listed = get(kubectl, V2)
    assert {i["apiVersion"] for i in listed["items"]} == {f"{GROUP}/v2"}
    assert {i["metadata"]["name"]: i["spec"]["schedule"] for i in listed["items"]} == \
        {"from-v1": "*/2 * * * *", "from-v2": "*/1 * * * *"}
    assert [len(c["request"]["objects"]) for c in webhook.calls[before:]] == [2]
    assert kubectl.run("-n", NS, "get", V2).stdout.split()[:2] == ["NAME", "AGE"]

    # dry-run converts as the write would (to the storage version and back), and stores nothing
    before = len(webhook.calls)
    dry = json.loads(kubectl.run("-n", NS, "create", "--dry-run=server", "-o", "json", "-f", "-",
                                 input=crontab("dry", "v2", "*/3 * * * *")).stdout)
    assert dry["spec"]["schedule"] == "*/3 * * * *"
    assert [c["request"]["desiredAPIVersion"] for c in webhook.calls[before:]] == [f"{GROUP}/v1", f"{GROUP}/v2"]
    assert "NotFound" in refused(kubectl, "-n", NS, "get", V2, "dry")

    # /scale and /status in the non-storage version
    assert "scaled" in kubectl.run("-n", NS, "scale", V2, "from-v1", "--replicas=3").stdout
    kubectl.run("-n", NS, "patch", V2, "from-v1", "--subresource=status", "--type=merge",
                "-p", '{"status": {"replicas": 2}}')
    in_v1 = get(kubectl, V1, "from-v1")
    assert (in_v1["spec"], in_v1["status"]) == ({"cronSpec": "*/2 * * * *", "replicas": 3}, {"replicas": 2})
    r = admin.get(f"/apis/{GROUP}/v2/namespaces/{NS}/crontabs/from-v1/scale")
    assert r.status_code == 200 and r.json()["spec"]["replicas"] == 3, r.text


def test_watch_in_the_non_storage_version(kubectl: Any, admin: Any) -> None:
    path = f"/apis/{GROUP}/v2/namespaces/{NS}/crontabs"
    rv = admin.get(path).json()["metadata"]["resourceVersion"]
    kubectl.run("-n", NS, "create", "-f", "-", input=crontab("watched", "v1", "*/4 * * * *"))
    kubectl.run("-n", NS, "patch", V1, "watched", "--type=merge", "-p", '{"spec": {"cronSpec": "*/5 * * * *"}}')
    seen = []
    with admin.stream("GET", path, params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "20"}) as w:
        assert w.status_code == 200
        for line in w.iter_lines():
            ev = json.loads(line)
            obj = ev["object"]
            if obj["metadata"]["name"] == "watched":
                assert obj["apiVersion"] == f"{GROUP}/v2" and "cronSpec" not in obj["spec"], ev
                seen.append((ev["type"], obj["spec"]["schedule"]))
            if len(seen) == 2:
                break
    assert seen == [("ADDED", "*/4 * * * *"), ("MODIFIED", "*/5 * * * *")]


def test_storage_version_moves(kubectl: Any, webhook: ConversionWebhook) -> None:
    patch = [{"op": "replace", "path": "/spec/versions/0/storage", "value": False},
             {"op": "replace", "path": "/spec/versions/1/storage", "value": True}]
    kubectl.run("patch", "crd", NAME, "--type=json", "-p", json.dumps(patch))
    assert json.loads(kubectl.run("get", "crd", NAME, "-o", "json").stdout)["status"]["storedVersions"] == \
        ["v1", "v2"]
    probes = iter(range(1000))

    def stored_as_v2() -> bool:
        # a v1 object now goes to the webhook on its way to storage (v2), once this registry has the change
        name = f"probe-{next(probes)}"
        kubectl.run("-n", NS, "create", "-f", "-", input=crontab(name, "v1", "*/6 * * * *"))
        return any(c["request"]["desiredAPIVersion"] == f"{GROUP}/v2" and
                   c["request"]["objects"][0]["metadata"]["name"] == name for c in webhook.calls[-3:])
    wait_for(stored_as_v2, what="v2 to become the storage version")
    # objects stored as v1 before still read in both versions
    assert get(kubectl, V2, "from-v1")["spec"]["schedule"] == "*/2 * * * *"
    assert get(kubectl, V1, "from-v1")["spec"]["cronSpec"] == "*/2 * * * *"


def test_by_service_and_webhook_down(kubectl: Any, admin: Any, webhook: ConversionWebhook,
                                     tmp_path: Path) -> None:
    r = admin.post(f"/api/v1/namespaces/{NS}/services", json={
        "metadata": {"name": "conv"}, "spec": {"ports": [{"port": 8443, "targetPort": webhook.port}]}})
    assert r.status_code == 201, r.text
    r = admin.post(f"/api/v1/namespaces/{NS}/endpoints", json={
        "metadata": {"name": "conv"}, "subsets": [{"addresses": [{"ip": "127.0.0.1"}],
                                                   "ports": [{"port": webhook.port}]}]})
    assert r.status_code == 201, r.text
    set_client_config(kubectl, {"service": {"namespace": NS, "name": "conv", "path": "/convert", "port": 8443},
                                "caBundle": by_url(webhook)["caBundle"]})

    def through_service() -> bool:
        get(kubectl, V2, "from-v2")
        return webhook.paths[-1] == "/convert?timeout=30s"
    wait_for(through_service, what="the webhook to be called through its Service")

    down = ConversionWebhook(tmp_path, "down", convert).start()
    set_client_config(kubectl, by_url(down))

    def through_down() -> bool:
        get(kubectl, V2, "from-v2")
        return bool(down.calls)
    wait_for(through_down, what="the webhook's url to change")
    down.stop()
    want = (f'conversion webhook for {GROUP}/v1, Kind=CronTab failed: Post "https://127.0.0.1:{down.port}/convert'
            f'?timeout=30s": dial tcp 127.0.0.1:{down.port}: connect: connection refused')
    r = admin.get(f"/apis/{GROUP}/v2/namespaces/{NS}/crontabs/from-v2")
    assert r.status_code == 500 and r.json()["message"] == want, r.text
    assert "reason" not in r.json()
    assert f"Error from server: {want}" in refused(kubectl, "-n", NS, "get", V2, "from-v2")
    set_client_config(kubectl, by_url(webhook))
    wait_for(lambda: kubectl.run("-n", NS, "get", V2, "from-v2", check=False).returncode == 0,
             what="the webhook back")


def test_invalid_conversion_refused(kubectl: Any, webhook: ConversionWebhook) -> None:
    bad = copy.deepcopy(crd(webhook))
    bad["metadata"]["name"] = f"others.{GROUP}"
    bad["spec"]["names"] = {"plural": "others", "kind": "Other"}
    bad["spec"]["conversion"]["webhook"]["conversionReviewVersions"] = ["v3"]
    err = refused(kubectl, "create", "-f", "-", input=json.dumps(bad))
    assert 'spec.conversion.conversionReviewVersions: Invalid value: []string{"v3"}: must include at least one ' \
           "of v1, v1beta1" in err, err
