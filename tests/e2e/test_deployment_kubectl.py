"""A Deployment driven end to end by kubectl 1.27, 1.32 (on the PATH) and 1.33 (issue 14's "Checked by"):
`kubectl create deployment|job|cronjob` as kubectl sends them (protobuf bodies), apply and apply again,
apply --server-side with two managers, the client-side → server-side upgrade, diff, edit with an EDITOR
script, patch of every type, label, annotate, scale, set image, delete with a finalizer pending; then get
-o wide / --show-labels / -L / --sort-by and label and field selectors on list, watch and delete -l."""
from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Kubectl
from tests.kubectls import namespace
from tests.waiting import wait_for

pytestmark = pytest.mark.stack


@pytest.fixture
def ns(kubectl: Kubectl) -> Iterator[str]:
    with namespace(kubectl, "dep") as name:
        yield name


def obj(k: Kubectl, ns: str, *what: str) -> dict[str, Any]:
    return json.loads(k.run("-n", ns, "get", *what, "-o", "json", "--show-managed-fields").stdout)


DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {{app: web}}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: web
        image: {image}
        ports:
        - containerPort: 80
        env:
        - name: MODE
          value: a
      - name: sidecar
        image: busybox
"""


def manifest(image: str = "nginx:1.25", replicas: int = 2) -> str:
    return DEPLOYMENT.format(image=image, replicas=replicas)


def test_create_deployment_job_cronjob_as_protobuf(kctl: Kubectl, ns: str) -> None:
    """kubectl's typed client sends these bodies as application/vnd.kubernetes.protobuf."""
    log = kctl.run("-n", ns, "create", "deployment", "d", "--image=nginx", "--replicas=3", "--port=8080",
                   "-v=8").stderr
    # kubectl 1.32 and 1.33 send the body as protobuf; 1.27 sends JSON
    sent = [line for line in log.splitlines() if "Content-Type:" in line and "Request Headers" not in line]
    assert "application/vnd.kubernetes.protobuf" in log or "1.27" in kctl.binary, sent
    dep = obj(kctl, ns, "deploy", "d")
    assert dep["spec"]["replicas"] == 3
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "nginx" and c["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    kctl.run("-n", ns, "create", "job", "j", "--image=busybox", "--", "echo", "hi")
    job = obj(kctl, ns, "job", "j")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["echo", "hi"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    kctl.run("-n", ns, "create", "cronjob", "cj", "--image=busybox", "--schedule=*/5 * * * *")
    assert obj(kctl, ns, "cronjob", "cj")["spec"]["schedule"] == "*/5 * * * *"
    # a job from the cronjob's template (kubectl create job --from)
    kctl.run("-n", ns, "create", "job", "manual", "--from=cronjob/cj")
    manual = obj(kctl, ns, "job", "manual")
    assert manual["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
    assert manual["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"] == "manual"
    bad = kctl.run("-n", ns, "create", "deployment", "Bad_Name", "--image=nginx", check=False)
    assert bad.returncode != 0 and "Invalid value: \"Bad_Name\"" in bad.stderr
    dry = json.loads(kctl.run("-n", ns, "create", "deployment", "dry", "--image=nginx", "--dry-run=server",
                              "-o", "json").stdout)
    assert dry["metadata"]["uid"] and dry["spec"]["revisionHistoryLimit"] == 10
    assert kctl.run("-n", ns, "get", "deploy", "dry", check=False).returncode != 0


def test_apply_server_side_upgrade_and_diff(kctl: Kubectl, ns: str) -> None:
    assert "deployment.apps/web created" in kctl.run("-n", ns, "apply", "-f", "-", input=manifest()).stdout
    rv = obj(kctl, ns, "deploy", "web")["metadata"]["resourceVersion"]
    again = kctl.run("-n", ns, "apply", "-f", "-", input=manifest())
    assert "deployment.apps/web unchanged" in again.stdout
    assert obj(kctl, ns, "deploy", "web")["metadata"]["resourceVersion"] == rv

    # diff: exit 0 when nothing changes, 1 on a change; nothing is persisted either way
    same = kctl.run("-n", ns, "diff", "-f", "-", input=manifest(), check=False)
    assert same.returncode == 0, same.stderr
    changed = kctl.run("-n", ns, "diff", "-f", "-", input=manifest(image="nginx:1.26"), check=False)
    assert changed.returncode == 1, changed.stderr
    assert "-        image: nginx:1.25" in changed.stdout and "+        image: nginx:1.26" in changed.stdout
    after = obj(kctl, ns, "deploy", "web")
    assert after["metadata"]["resourceVersion"] == rv and after["metadata"]["generation"] == 1

    # client-side → server-side: kubectl's apply takes over what client-side apply owned
    ssa = kctl.run("-n", ns, "apply", "--server-side", "-f", "-", input=manifest(image="nginx:1.26"))
    assert "deployment.apps/web serverside-applied" in ssa.stdout
    dep = obj(kctl, ns, "deploy", "web")
    owners = {e["manager"]: e for e in dep["metadata"]["managedFields"]}
    assert owners["kubectl"]["operation"] == "Apply"
    assert "kubectl-client-side-apply" not in owners, owners
    last = json.loads(dep["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert last["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.26"
    assert dep["metadata"]["generation"] == 2

    # a second manager: conflict on the image and replicas, then --force-conflicts takes them
    other = manifest(image="nginx:1.27", replicas=4)
    clash = kctl.run("-n", ns, "apply", "--server-side", "--field-manager=team-b", "-f", "-", input=other,
                     check=False)
    assert clash.returncode != 0
    # kube groups the conflicts by manager: 'conflicts with "kubectl":' then one line per field
    assert 'Apply failed with 2 conflicts: conflicts with "kubectl"' in clash.stderr
    assert '.spec.template.spec.containers[name="web"].image' in clash.stderr and ".spec.replicas" in clash.stderr
    assert obj(kctl, ns, "deploy", "web")["spec"]["replicas"] == 2
    kctl.run("-n", ns, "apply", "--server-side", "--field-manager=team-b", "--force-conflicts", "-f", "-",
             input=other)
    dep = obj(kctl, ns, "deploy", "web")
    assert dep["spec"]["replicas"] == 4
    assert [c["image"] for c in dep["spec"]["template"]["spec"]["containers"]] == ["nginx:1.27", "busybox"]
    owners = {e["manager"]: e["fieldsV1"] for e in dep["metadata"]["managedFields"]}
    assert "f:replicas" in owners["team-b"]["f:spec"] and "f:replicas" not in owners["kubectl"]["f:spec"]
    web = 'k:{"name":"web"}'
    assert "f:image" in owners["team-b"]["f:spec"]["f:template"]["f:spec"]["f:containers"][web]
    # kubectl still shares what both apply with the same value (the env, the sidecar)
    assert "f:env" in owners["kubectl"]["f:spec"]["f:template"]["f:spec"]["f:containers"][web]
    # the second manager applying again without change: no write
    rv = dep["metadata"]["resourceVersion"]
    kctl.run("-n", ns, "apply", "--server-side", "--field-manager=team-b", "-f", "-", input=other)
    assert obj(kctl, ns, "deploy", "web")["metadata"]["resourceVersion"] == rv


EDITOR = """import re, sys
path = sys.argv[-1]
text = open(path).read()
text = text.replace("image: nginx:1.25", "image: nginx:1.99")
text = re.sub(r"(?m)^  replicas: \\d+$", "  replicas: 7", text, count=1)
open(path, "w").write(text)
"""


def test_edit_patch_label_scale_and_finalizer(kctl: Kubectl, ns: str, tmp_path: Path) -> None:
    kctl.run("-n", ns, "apply", "-f", "-", input=manifest())
    script = tmp_path / "editor.py"
    script.write_text(EDITOR)
    edited = kctl.run("-n", ns, "edit", "deployment", "web", env={"KUBE_EDITOR": f"{sys.executable} {script}"})
    assert "deployment.apps/web edited" in edited.stdout
    dep = obj(kctl, ns, "deploy", "web")
    assert dep["spec"]["replicas"] == 7
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.99"
    managers = {e["manager"] for e in dep["metadata"]["managedFields"]}
    assert "kubectl-edit" in managers

    # strategic merge: containers and env merge by name, ports by containerPort
    kctl.run("-n", ns, "patch", "deploy", "web", "--type=strategic", "-p", json.dumps({"spec": {"template": {
        "spec": {"containers": [{"name": "web", "env": [{"name": "EXTRA", "value": "1"}],
                                 "ports": [{"containerPort": 443}]}]}}}}))
    c = obj(kctl, ns, "deploy", "web")["spec"]["template"]["spec"]["containers"]
    assert [x["name"] for x in c] == ["web", "sidecar"] and c[0]["image"] == "nginx:1.99"
    assert sorted(e["name"] for e in c[0]["env"]) == ["EXTRA", "MODE"]
    assert sorted(p["containerPort"] for p in c[0]["ports"]) == [80, 443]
    # $patch: delete on one env entry, and on the sidecar container
    kctl.run("-n", ns, "patch", "deploy", "web", "-p", json.dumps({"spec": {"template": {"spec": {"containers": [
        {"name": "web", "env": [{"name": "MODE", "$patch": "delete"}]}, {"name": "sidecar", "$patch": "delete"}]}}}}))
    c = obj(kctl, ns, "deploy", "web")["spec"]["template"]["spec"]["containers"]
    assert [x["name"] for x in c] == ["web"] and c[0]["env"] == [{"name": "EXTRA", "value": "1"}]
    # merge patch replaces lists whole
    kctl.run("-n", ns, "patch", "deploy", "web", "--type=merge", "-p", json.dumps({"spec": {"template": {"spec": {
        "containers": [{"name": "only", "image": "busybox"}]}}}}))
    c = obj(kctl, ns, "deploy", "web")["spec"]["template"]["spec"]["containers"]
    assert [(x["name"], x["image"]) for x in c] == [("only", "busybox")] and "env" not in c[0]
    # json patch: test, replace, add
    kctl.run("-n", ns, "patch", "deploy", "web", "--type=json", "-p", json.dumps([
        {"op": "test", "path": "/spec/template/spec/containers/0/name", "value": "only"},
        {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "busybox:1.36"},
        {"op": "add", "path": "/spec/template/spec/containers/0/args", "value": ["sleep", "1"]}]))
    c = obj(kctl, ns, "deploy", "web")["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "busybox:1.36" and c["args"] == ["sleep", "1"]
    failed = kctl.run("-n", ns, "patch", "deploy", "web", "--type=json", "-p",
                      '[{"op":"test","path":"/spec/replicas","value":99}]', check=False)
    assert failed.returncode != 0 and "testing value /spec/replicas failed" in failed.stderr, failed.stderr

    kctl.run("-n", ns, "label", "deploy", "web", "tier=front")
    kctl.run("-n", ns, "annotate", "deploy", "web", "note=hello")
    dep = obj(kctl, ns, "deploy", "web")
    assert dep["metadata"]["labels"] == {"app": "web", "tier": "front"}
    assert dep["metadata"]["annotations"]["note"] == "hello"
    taken = kctl.run("-n", ns, "label", "deploy", "web", "tier=back", check=False)
    assert taken.returncode != 0 and "'tier' already has a value (front)" in taken.stderr
    kctl.run("-n", ns, "label", "deploy", "web", "tier=back", "--overwrite")
    kctl.run("-n", ns, "label", "deploy", "web", "tier-")
    assert obj(kctl, ns, "deploy", "web")["metadata"]["labels"] == {"app": "web"}

    generation = obj(kctl, ns, "deploy", "web")["metadata"]["generation"]
    assert "deployment.apps/web scaled" in kctl.run("-n", ns, "scale", "deploy", "web", "--replicas=3").stdout
    stale = kctl.run("-n", ns, "scale", "deploy", "web", "--current-replicas=9", "--replicas=1", check=False)
    assert stale.returncode != 0
    kctl.run("-n", ns, "set", "image", "deploy/web", "only=busybox:1.37")
    dep = obj(kctl, ns, "deploy", "web")
    assert dep["spec"]["replicas"] == 3 and dep["metadata"]["generation"] == generation + 2
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:1.37"
    missing = kctl.run("-n", ns, "set", "image", "deploy/web", "nope=busybox", check=False)
    assert missing.returncode != 0 and "unable to find container named \"nope\"" in missing.stderr

    # delete with a finalizer pending: kept with a deletionTimestamp until the finalizer goes
    kctl.run("-n", ns, "patch", "deploy", "web", "--type=merge", "-p",
             '{"metadata":{"finalizers":["example.com/hold"]}}')
    kctl.run("-n", ns, "delete", "deploy", "web", "--wait=false")
    dep = obj(kctl, ns, "deploy", "web")
    assert dep["metadata"]["deletionTimestamp"] and dep["metadata"]["finalizers"] == ["example.com/hold"]
    kctl.run("-n", ns, "patch", "deploy", "web", "--type=json", "-p",
             '[{"op":"remove","path":"/metadata/finalizers"}]')
    gone = kctl.run("-n", ns, "get", "deploy", "web", check=False)
    assert gone.returncode != 0 and "not found" in gone.stderr


def pod(name: str, labels: dict[str, str], node: str | None = None) -> str:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
                       "spec": spec})


NOW = ("--grace-period=0", "--force")  # no kubelet: a scheduled pod would wait on it


def names(k: Kubectl, ns: str, *args: str) -> list[str]:
    return sorted(k.run("-n", ns, "get", *args, "-o", "name").stdout.split())


def test_printing_and_selectors(kubectl: Kubectl, ns: str) -> None:
    k = kubectl
    for name, labels, node in (("a", {"tier": "web", "env": "prod"}, "n1"), ("b", {"tier": "db", "env": "prod"}, None),
                               ("c", {"tier": "web"}, "n2"), ("d", {"env": "dev"}, "n1")):
        k.run("-n", ns, "create", "-f", "-", input=pod(name, labels, node))
    k.run("-n", ns, "patch", "pod", "c", "--subresource=status", "--type=merge", "-p",
          '{"status":{"phase":"Running"}}')

    out = k.run("-n", ns, "get", "pods", "--show-labels").stdout.splitlines()
    assert out[0].split()[-1] == "LABELS"
    assert out[1].split()[0] == "a" and out[1].split()[-1] == "env=prod,tier=web"
    out = k.run("-n", ns, "get", "pods", "-L", "tier", "-L", "env").stdout.splitlines()
    assert out[0].split()[-2:] == ["TIER", "ENV"]
    rows = {line.split()[0]: line.split() for line in out[1:]}
    assert rows["a"][-2:] == ["web", "prod"] and rows["d"][-1] == "dev" and rows["c"][-1] == "web"
    out = k.run("-n", ns, "get", "pods", "-o", "wide").stdout.splitlines()
    assert {line.split()[0]: line.split()[6] for line in out[1:]} == {"a": "n1", "b": "<none>", "c": "n2",
                                                                      "d": "n1"}
    out = k.run("-n", ns, "get", "pods", "--sort-by=.spec.nodeName", "--field-selector=spec.nodeName!=",
                "--no-headers").stdout.splitlines()
    assert [line.split()[0] for line in out] == ["a", "d", "c"]
    out = k.run("-n", ns, "get", "pods", "--sort-by=.status.phase", "--no-headers").stdout.splitlines()
    assert [line.split()[0] for line in out] == ["a", "b", "d", "c"]

    # label selectors, every operator
    assert names(k, ns, "pods", "-l", "tier=web") == ["pod/a", "pod/c"]
    assert names(k, ns, "pods", "-l", "tier==web") == ["pod/a", "pod/c"]
    assert names(k, ns, "pods", "-l", "tier!=web") == ["pod/b", "pod/d"]
    assert names(k, ns, "pods", "-l", "tier in (web,db)") == ["pod/a", "pod/b", "pod/c"]
    assert names(k, ns, "pods", "-l", "tier notin (web)") == ["pod/b", "pod/d"]
    assert names(k, ns, "pods", "-l", "tier") == ["pod/a", "pod/b", "pod/c"]
    assert names(k, ns, "pods", "-l", "!tier") == ["pod/d"]
    assert names(k, ns, "pods", "-l", "tier=web,env=prod") == ["pod/a"]
    bad = k.run("-n", ns, "get", "pods", "-l", "tier in web", check=False)
    assert bad.returncode != 0

    # field selectors of pods
    assert names(k, ns, "pods", "--field-selector=spec.nodeName=n1") == ["pod/a", "pod/d"]
    assert names(k, ns, "pods", "--field-selector=spec.nodeName!=n1") == ["pod/b", "pod/c"]
    assert names(k, ns, "pods", "--field-selector=spec.nodeName=") == ["pod/b"]
    assert names(k, ns, "pods", "--field-selector=status.phase=Running") == ["pod/c"]
    assert names(k, ns, "pods", "--field-selector=status.phase=Pending,spec.nodeName=n1") == ["pod/a", "pod/d"]
    assert names(k, ns, "pods", "--field-selector=spec.restartPolicy=Always,metadata.name=b") == ["pod/b"]
    assert names(k, ns, "pods", "--field-selector=spec.schedulerName=default-scheduler",
                 "-l", "env=prod") == ["pod/a", "pod/b"]
    unknown = k.run("-n", ns, "get", "pods", "--field-selector=spec.nope=x", check=False)
    assert unknown.returncode != 0
    assert 'field label not supported: spec.nope' in unknown.stderr, unknown.stderr

    # watch with a label and a field selector: only the matching pods' events arrive
    w = k.popen("-n", ns, "get", "pods", "-w", "-o", "name", "-l", "tier in (web)",
                "--field-selector=spec.nodeName=n1")
    lines: list[bytes] = []
    assert w.stdout is not None
    threading.Thread(target=lambda: lines.extend(iter(w.stdout.readline, b"")), daemon=True).start()
    try:
        wait_for(lambda: b"pod/a\n" in lines, what="the initial list of the watch")
        k.run("-n", ns, "create", "-f", "-", input=pod("e", {"tier": "web"}, "n1"))
        k.run("-n", ns, "create", "-f", "-", input=pod("f", {"tier": "web"}, "n2"))
        k.run("-n", ns, "create", "-f", "-", input=pod("g", {"tier": "db"}, "n1"))
        k.run("-n", ns, "create", "-f", "-", input=pod("h", {"tier": "web"}, "n1"))
        wait_for(lambda: b"pod/h\n" in lines, what="the watch event of pod h")
        assert lines == [b"pod/a\n", b"pod/e\n", b"pod/h\n"], lines
    finally:
        w.kill()
        w.wait()

    # kubectl delete -l (deletecollection is not what kubectl uses; it lists then deletes) and by field
    k.run("-n", ns, "delete", "pods", "-l", "tier notin (db),env", "--wait=false", *NOW)
    assert names(k, ns, "pods") == ["pod/b", "pod/c", "pod/e", "pod/f", "pod/g", "pod/h"]
    k.run("-n", ns, "delete", "pods", "--field-selector=spec.nodeName=n1", "--wait=false", *NOW)
    assert names(k, ns, "pods") == ["pod/b", "pod/c", "pod/f"]
    k.run("-n", ns, "delete", "pods", "-l", "!env", "--field-selector=status.phase=Pending", "--wait=false", *NOW)
    assert names(k, ns, "pods") == ["pod/b", "pod/c"]
