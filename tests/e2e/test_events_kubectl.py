"""core/v1 Events through kubectl: describe's Events section, get events, field selectors."""
from __future__ import annotations

import datetime
import json

import pytest

pytestmark = pytest.mark.stack
NS = "events-e2e"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _event(name: str, cm: dict, reason: str, message: str, **extra) -> dict:
    meta = cm["metadata"]
    return {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": NS},
        "involvedObject": {"kind": "ConfigMap", "apiVersion": "v1", "namespace": NS, "name": meta["name"],
                           "uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
        "reason": reason, "message": message, "type": "Normal", "source": {"component": "e2e-tester"},
        "firstTimestamp": _now(), "lastTimestamp": _now(), "count": 1, **extra,
    }


@pytest.fixture(scope="module")
def ns(kubectl):
    kubectl.run("create", "namespace", NS)
    yield NS
    kubectl.run("delete", "namespace", NS, "--wait=false", check=False)


def test_describe_configmap_shows_data_and_events(kubectl, admin, ns):
    kubectl.run("-n", ns, "create", "configmap", "a", "--from-literal=greeting=hello-apiary")
    kubectl.run("-n", ns, "create", "configmap", "b", "--from-literal=x=y")

    # Before any event: describe works (it lists events) and says there are none.
    out = kubectl.run("-n", ns, "describe", "cm", "a").stdout
    assert "greeting" in out and "hello-apiary" in out
    assert "Events:" in out and "<none>" in out.split("Events:")[1]

    cm_a = json.loads(kubectl.run("-n", ns, "get", "cm", "a", "-o", "json").stdout)
    cm_b = json.loads(kubectl.run("-n", ns, "get", "cm", "b", "-o", "json").stdout)
    r = admin.post(f"/api/v1/namespaces/{ns}/events",
                   json=_event("a.e2e1", cm_a, "Configured", "configmap a was configured"))
    assert r.status_code == 201, r.text
    assert r.json()["involvedObject"]["uid"] == cm_a["metadata"]["uid"]
    r = admin.post(f"/api/v1/namespaces/{ns}/events",
                   json=_event("b.e2e1", cm_b, "Touched", "configmap b was touched", type="Warning"))
    assert r.status_code == 201, r.text

    # A mismatching namespace is rejected as kube does.
    bad = _event("bad.e2e", cm_a, "Bad", "x")
    bad["involvedObject"]["namespace"] = "elsewhere"
    r = admin.post(f"/api/v1/namespaces/{ns}/events", json=bad)
    assert r.status_code == 422 and "does not match event.namespace" in r.json()["message"]

    out = kubectl.run("-n", ns, "describe", "cm", "a").stdout
    events = out.split("Events:")[1]
    assert "Configured" in events and "configmap a was configured" in events and "e2e-tester" in events
    assert "Touched" not in events  # only the events about this configmap
    assert "hello-apiary" in out

    # kubectl describe of the event itself, by short name.
    assert "configmap a was configured" in kubectl.run("-n", ns, "describe", "ev", "a.e2e1").stdout


def test_get_events_table_and_field_selector(kubectl, ns):
    lines = kubectl.run("-n", ns, "get", "events").stdout.splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    rows = {line.split()[3]: line for line in lines[1:]}
    assert set(rows) == {"configmap/a", "configmap/b"}
    assert rows["configmap/a"].split()[1:3] == ["Normal", "Configured"]
    assert rows["configmap/a"].endswith("configmap a was configured")

    wide = kubectl.run("-n", ns, "get", "events", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "SUBOBJECT", "SOURCE", "MESSAGE",
                               "FIRST", "SEEN", "COUNT", "NAME"]
    row = next(line.split() for line in wide[1:] if "configmap/b" in line)
    assert row[-2:] == ["1", "b.e2e1"] and "e2e-tester" in row

    only_a = kubectl.run("-n", ns, "get", "events", "--field-selector", "involvedObject.name=a").stdout
    assert "configmap/a" in only_a and "configmap/b" not in only_a
    warnings = kubectl.run("-n", ns, "get", "ev", "--field-selector", "type=Warning,reason=Touched",
                           "-o", "name").stdout.split()
    assert warnings == ["event/b.e2e1"]
    none = kubectl.run("-n", ns, "get", "events", "--field-selector", "involvedObject.kind=Secret").stderr
    assert "No resources found" in none
