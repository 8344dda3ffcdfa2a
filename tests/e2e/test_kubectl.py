"""The foundation's end-to-end flow, driven by the kubectl binary against the test stack."""
from __future__ import annotations

import base64
import json
import time

import pytest
import yaml

pytestmark = pytest.mark.stack


def test_version_and_discovery(kubectl):
    out = kubectl.run("version", "-o", "json").stdout
    server = json.loads(out)["serverVersion"]
    assert server["major"] == "1" and server["gitVersion"].startswith("v1.")

    res = kubectl.run("api-resources").stdout
    lines = res.splitlines()
    assert lines[0].split()[:2] == ["NAME", "SHORTNAMES"]
    names = {line.split()[0] for line in lines[1:]}
    assert {"configmaps", "secrets", "namespaces", "serviceaccounts", "apiservices"} <= names
    assert any(line.split()[:2] == ["configmaps", "cm"] for line in lines)

    versions = kubectl.run("api-versions").stdout.split()
    assert "v1" in versions and "apiregistration.k8s.io/v1" in versions


def test_configmap_lifecycle(kubectl):
    kubectl.run("create", "namespace", "demo")
    try:
        kubectl.run("-n", "demo", "create", "configmap", "c", "--from-literal=a=b")
        table = kubectl.run("get", "cm", "-n", "demo").stdout.splitlines()
        assert table[0].split() == ["NAME", "DATA", "AGE"]
        row = next(line.split() for line in table[1:] if line.split()[0] == "c")
        assert row[1] == "1"

        obj = yaml.safe_load(kubectl.run("get", "cm", "c", "-n", "demo", "-o", "yaml").stdout)
        assert obj["kind"] == "ConfigMap" and obj["data"] == {"a": "b"}
        assert obj["metadata"]["uid"] and obj["metadata"]["resourceVersion"]
        assert obj["metadata"]["creationTimestamp"].endswith("Z")

        kubectl.run("-n", "demo", "patch", "cm", "c", "--type=merge", "-p", '{"data":{"m":"1"}}')
        kubectl.run("-n", "demo", "patch", "cm", "c", "--type=json",
                    "-p", '[{"op":"add","path":"/data/j","value":"2"}]')
        data = json.loads(kubectl.run("get", "cm", "c", "-n", "demo", "-o", "json").stdout)["data"]
        assert data == {"a": "b", "m": "1", "j": "2"}

        kubectl.run("-n", "demo", "delete", "cm", "c")
        gone = kubectl.run("-n", "demo", "get", "cm", "c", check=False)
        assert gone.returncode != 0 and 'configmaps "c" not found' in gone.stderr
    finally:
        kubectl.run("delete", "namespace", "demo", "--wait=false", check=False)


MANIFEST = """apiVersion: v1
kind: ConfigMap
metadata:
  name: applied
  namespace: apply-ns
  labels:
    app: demo
data:
  key: {value}
"""


def test_apply_twice_with_validation(kubectl):
    kubectl.run("create", "namespace", "apply-ns")
    first = kubectl.run("apply", "-f", "-", input=MANIFEST.format(value="one"))
    assert "configmap/applied created" in first.stdout
    second = kubectl.run("apply", "-f", "-", input=MANIFEST.format(value="two"))
    assert "configmap/applied configured" in second.stdout
    obj = json.loads(kubectl.run("-n", "apply-ns", "get", "cm", "applied", "-o", "json").stdout)
    assert obj["data"] == {"key": "two"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in obj["metadata"]["annotations"]
    third = kubectl.run("apply", "-f", "-", input=MANIFEST.format(value="two"))
    assert "configmap/applied unchanged" in third.stdout


def test_secret_roundtrip(kubectl):
    kubectl.run("create", "namespace", "sec")
    kubectl.run("-n", "sec", "create", "secret", "generic", "s", "--from-literal=p=q")
    obj = json.loads(kubectl.run("-n", "sec", "get", "secret", "s", "-o", "json").stdout)
    assert obj["type"] == "Opaque"
    assert base64.b64decode(obj["data"]["p"]) == b"q"
    value = kubectl.run("-n", "sec", "get", "secret", "s", "-o", "jsonpath={.data.p}").stdout
    assert base64.b64decode(value) == b"q"
    table = kubectl.run("-n", "sec", "get", "secrets").stdout.splitlines()
    assert table[0].split() == ["NAME", "TYPE", "DATA", "AGE"]


def _read_until(proc, wanted: list[str], timeout: float = 30) -> list[str]:
    """Complete lines of a `kubectl get -w` until every wanted word has been seen (raw reads: no hidden
    buffering). Only lines ended by a newline count: a read can end in the middle of a line (kubectl
    writes a row in more than one piece), and a row cut after its first word is not yet the row."""
    import os
    import select

    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        complete = buf.decode(errors="replace").split("\n")[:-1]
        lines = [line.strip() for line in complete]
        if all(any(w in line for line in lines) for w in wanted):
            return lines
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
    return [line.strip() for line in buf.decode(errors="replace").splitlines()]


def test_watch_sees_added_modified_deleted(kubectl):
    kubectl.run("create", "namespace", "watch-ns")
    kubectl.run("-n", "watch-ns", "create", "configmap", "marker")
    proc = kubectl.popen("-n", "watch-ns", "get", "cm", "-w", "--output-watch-events")
    try:
        # listed (kubectl then watches from the list's resourceVersion: nothing after it is missed)
        assert any("marker" in line for line in _read_until(proc, ["marker"]))
        kubectl.run("-n", "watch-ns", "create", "configmap", "w", "--from-literal=a=1")
        kubectl.run("-n", "watch-ns", "patch", "cm", "w", "--type=merge", "-p", '{"data":{"a":"2"}}')
        kubectl.run("-n", "watch-ns", "delete", "cm", "w")
        lines = _read_until(proc, ["ADDED", "MODIFIED", "DELETED"])
    finally:
        proc.kill()
        proc.wait()
    events = [line.split()[0] for line in lines if line.split()[1:2] == ["w"]]
    assert events == ["ADDED", "MODIFIED", "DELETED"], lines


def test_watch_table_output(kubectl):
    kubectl.run("create", "namespace", "watch-tbl")
    kubectl.run("-n", "watch-tbl", "create", "configmap", "marker")
    proc = kubectl.popen("-n", "watch-tbl", "get", "cm", "-w")
    try:
        # listed (kubectl then watches from the list's resourceVersion: nothing after it is missed)
        assert any("marker" in line for line in _read_until(proc, ["marker"]))
        kubectl.run("-n", "watch-tbl", "create", "configmap", "t1", "--from-literal=a=1", "--from-literal=b=2")
        lines = _read_until(proc, ["t1"])
    finally:
        proc.kill()
        proc.wait()
    row = next(line.split() for line in lines if line.startswith("t1"))
    assert row[1] == "2"


def test_delete_namespace_and_wait(kubectl):
    kubectl.run("create", "namespace", "doomed")
    kubectl.run("-n", "doomed", "create", "configmap", "x", "--from-literal=a=b")
    kubectl.run("-n", "doomed", "create", "secret", "generic", "y", "--from-literal=a=b")
    kubectl.run("delete", "namespace", "doomed", "--wait=false")
    kubectl.run("wait", "--for=delete", "namespace/doomed", "--timeout=60s", timeout=90)
    assert kubectl.run("get", "namespace", "doomed", check=False).returncode != 0
    # its contents went with it
    leftovers = json.loads(kubectl.run("get", "cm,secrets", "-A", "-o", "json").stdout)["items"]
    assert not [o for o in leftovers if o["metadata"].get("namespace") == "doomed"]


def test_protected_namespaces(kubectl):
    out = kubectl.run("delete", "namespace", "kube-system", check=False)
    assert out.returncode != 0 and "forbidden" in out.stderr


def test_bad_token_is_401(kubectl):
    out = kubectl.with_token("not-a-token", "nobody").run("get", "cm", check=False)
    assert out.returncode != 0
    assert "Unauthorized" in out.stderr or "provide credentials" in out.stderr


def test_non_admin_token_is_403(kubectl, tokens):
    out = kubectl.with_token(tokens["alice"], "alice").run("get", "cm", "-n", "default", check=False)
    assert out.returncode != 0
    assert 'User "alice" cannot list resource "configmaps"' in out.stderr


def test_admin_token_works(kubectl, tokens):
    out = kubectl.with_token(tokens["admin"], "admin").run("get", "ns", "default")
    assert "default" in out.stdout
