"""Server-side apply, diff, patch and dry-run as kubectl drives them (1.32 on the PATH, 1.27 and 1.33 beside it)."""
from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import Kubectl
from tests.kubectls import tag

pytestmark = pytest.mark.stack

NS = "ssa"
CM = """apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
  namespace: ssa
data:
  key: {value}
"""


@pytest.fixture(scope="module", autouse=True)
def ns(kubectl):
    kubectl.run("create", "namespace", NS, check=False)
    yield NS
    kubectl.run("delete", "namespace", NS, "--wait=false", check=False)


def get(kctl: Kubectl, name: str) -> dict:
    return json.loads(kctl.run("-n", NS, "get", "cm", name, "-o", "json", "--show-managed-fields").stdout)


def test_server_side_apply_two_managers(kctl):
    name = f"two-{tag(kctl)}"
    first = kctl.run("apply", "--server-side", "--field-manager=one", "-f", "-", input=CM.format(name=name, value="a"))
    assert f"configmap/{name} serverside-applied" in first.stdout
    again = kctl.run("apply", "--server-side", "--field-manager=one", "-f", "-", input=CM.format(name=name, value="a"))
    assert again.returncode == 0
    clash = kctl.run("apply", "--server-side", "--field-manager=two", "-f", "-",
                     input=CM.format(name=name, value="b"), check=False)
    assert clash.returncode != 0
    assert 'conflict with "one"' in clash.stderr and ".data.key" in clash.stderr
    assert get(kctl, name)["data"] == {"key": "a"}
    kctl.run("apply", "--server-side", "--field-manager=two", "--force-conflicts", "-f", "-",
             input=CM.format(name=name, value="b"))
    obj = get(kctl, name)
    assert obj["data"] == {"key": "b"}
    owners = {e["manager"]: e for e in obj["metadata"]["managedFields"]}
    assert owners["two"]["fieldsV1"] == {"f:data": {"f:key": {}}} and owners["two"]["operation"] == "Apply"
    assert "one" not in owners


def test_client_side_apply_then_server_side(kctl):
    name = f"upgrade-{tag(kctl)}"
    assert "created" in kctl.run("apply", "-f", "-", input=CM.format(name=name, value="a")).stdout
    assert "configured" in kctl.run("apply", "-f", "-", input=CM.format(name=name, value="b")).stdout
    managers = {e["manager"] for e in get(kctl, name)["metadata"]["managedFields"]}
    assert "kubectl-client-side-apply" in managers
    kctl.run("apply", "--server-side", "-f", "-", input=CM.format(name=name, value="c"))
    obj = get(kctl, name)
    assert obj["data"] == {"key": "c"}
    last = json.loads(obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert last["data"] == {"key": "c"}
    owners = {e["manager"]: e for e in obj["metadata"]["managedFields"]}
    assert owners["kubectl"]["operation"] == "Apply" and "f:key" in owners["kubectl"]["fieldsV1"]["f:data"]


def test_diff_changes_nothing(kctl):
    name = f"diff-{tag(kctl)}"
    kctl.run("apply", "-f", "-", input=CM.format(name=name, value="a"))
    before = get(kctl, name)["metadata"]["resourceVersion"]
    same = kctl.run("diff", "-f", "-", input=CM.format(name=name, value="a"), check=False)
    assert same.returncode == 0, same.stderr
    changed = kctl.run("diff", "-f", "-", input=CM.format(name=name, value="z"), check=False)
    assert changed.returncode == 1, changed.stderr
    assert "+  key: z" in changed.stdout
    after = get(kctl, name)
    assert after["data"] == {"key": "a"} and after["metadata"]["resourceVersion"] == before


def test_patch_types_and_server_dry_run(kubectl, ns):
    kubectl.run("-n", NS, "create", "configmap", "p", "--from-literal=a=1")
    kubectl.run("-n", NS, "patch", "cm", "p", "--type=strategic", "-p", '{"data":{"s":"2"}}')
    kubectl.run("-n", NS, "patch", "cm", "p", "--type=merge", "-p", '{"data":{"m":"3","a":null}}')
    kubectl.run("-n", NS, "patch", "cm", "p", "--type=json", "-p", '[{"op":"add","path":"/data/j","value":"4"}]')
    obj = get(kubectl, "p")
    assert obj["data"] == {"s": "2", "m": "3", "j": "4"}
    # kubectl-create owned only data.a, which the merge patch removed
    [entry] = obj["metadata"]["managedFields"]
    assert entry["manager"] == "kubectl-patch" and entry["operation"] == "Update"
    assert entry["fieldsV1"] == {"f:data": {"f:j": {}, "f:m": {}, "f:s": {}}}
    rv = get(kubectl, "p")["metadata"]["resourceVersion"]
    kubectl.run("-n", NS, "patch", "cm", "p", "--dry-run=server", "--type=merge", "-p", '{"data":{"dry":"1"}}')
    assert "dry" not in get(kubectl, "p")["data"] and get(kubectl, "p")["metadata"]["resourceVersion"] == rv

    dry = kubectl.run("-n", NS, "create", "configmap", "d", "--from-literal=x=y", "--dry-run=server", "-o", "yaml")
    shown = yaml.safe_load(dry.stdout)
    assert shown["metadata"]["name"] == "d" and shown["metadata"]["uid"] and shown["data"] == {"x": "y"}
    gone = kubectl.run("-n", NS, "get", "cm", "d", check=False)
    assert gone.returncode != 0 and "not found" in gone.stderr
    again = kubectl.run("-n", NS, "create", "configmap", "p", "--dry-run=server", check=False)
    assert again.returncode != 0 and "already exists" in again.stderr


def test_delete_with_a_finalizer_pending_then_removed(kubectl, ns):
    kubectl.run("apply", "-f", "-", input=CM.format(name="fin", value="a").replace(
        "  namespace: ssa\n", "  namespace: ssa\n  finalizers: [example.com/hold]\n"))
    kubectl.run("-n", NS, "delete", "cm", "fin", "--wait=false")
    obj = get(kubectl, "fin")
    assert obj["metadata"]["deletionTimestamp"] and obj["metadata"]["deletionGracePeriodSeconds"] == 0
    more = kubectl.run("-n", NS, "patch", "cm", "fin", "--type=merge", "-p",
                       '{"metadata":{"finalizers":["example.com/hold","example.com/more"]}}', check=False)
    assert more.returncode != 0 and "no new finalizers can be added if the object is being deleted" in more.stderr
    kubectl.run("-n", NS, "patch", "cm", "fin", "--type=json", "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')
    gone = kubectl.run("-n", NS, "get", "cm", "fin", check=False)
    assert gone.returncode != 0 and "not found" in gone.stderr


def test_delete_collection_by_label(kubectl, ns):
    for name, tier in (("l1", "web"), ("l2", "db"), ("l3", "web")):
        kubectl.run("-n", NS, "create", "configmap", name)
        kubectl.run("-n", NS, "label", "cm", name, f"tier={tier}")
    kubectl.run("-n", NS, "delete", "cm", "-l", "tier=web")
    left = kubectl.run("-n", NS, "get", "cm", "-l", "tier", "-o", "name").stdout.split()
    assert left == ["configmap/l2"]


SERVICE = """apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: ssa
spec:
  selector: {{app: web}}
  ports:
  - name: http
    port: 80
    targetPort: {target}
"""


def test_server_side_apply_of_a_service(kubectl, ns):
    kubectl.run("apply", "--server-side", "--field-manager=team-a", "-f", "-", input=SERVICE.format(target=8080))
    clash = kubectl.run("apply", "--server-side", "--field-manager=team-b", "-f", "-",
                        input=SERVICE.format(target=9090), check=False)
    assert clash.returncode != 0
    assert 'conflict with "team-a": .spec.ports[port=80,protocol="TCP"].targetPort' in clash.stderr
    kubectl.run("apply", "--server-side", "--field-manager=team-b", "--force-conflicts", "-f", "-",
                input=SERVICE.format(target=9090))
    svc = json.loads(kubectl.run("-n", NS, "get", "svc", "web", "-o", "json").stdout)
    assert svc["spec"]["ports"][0]["targetPort"] == 9090 and svc["spec"]["clusterIP"]
