"""The kinds of issue 14 through kubectl (1.32 on the PATH, 1.27 and 1.33 beside it): create, get and -o wide
columns, apply and patch, status subresources, dry-run with kube's defaults, validation texts, explain, and
RBAC on cluster-scoped nodes."""
from __future__ import annotations

import json

import pytest
import yaml

from tests.kubectls import RUN, refused, tag
from tests.waiting import wait_for

pytestmark = pytest.mark.stack
NS = f"kinds-e2e-{RUN}"


@pytest.fixture(scope="module", autouse=True)
def ns(kubectl):
    kubectl.run("create", "namespace", NS)
    yield NS
    kubectl.run("delete", "namespace", NS, "--wait=false", check=False)



def test_priority_class(kctl):
    name = f"pc-{tag(kctl)}"
    out = kctl.run("create", "priorityclass", name, "--value=1000", "--description=high", "--preemption-policy=Never")
    assert f"priorityclass.scheduling.k8s.io/{name} created" in out.stdout
    header, rows = kctl.table("pc", name)
    assert header == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    assert rows[0][:3] == [name, "1000", "false"] and rows[0][4] == "Never"
    # kube's system classes exist from the start
    _, system = kctl.table("priorityclasses", "system-node-critical", "system-cluster-critical")
    assert [r[:2] for r in system] == [["system-node-critical", "2000001000"],
                                      ["system-cluster-critical", "2000000000"]]
    err = refused(kctl, "create", "priorityclass", f"huge-{tag(kctl)}", "--value=2000000000")
    assert (f'PriorityClass.scheduling.k8s.io "huge-{tag(kctl)}" is invalid: value: Forbidden: maximum allowed '
            "value of a user defined priority is 1000000000") in err
    err = refused(kctl, "patch", "pc", name, "-p", '{"value": 5}')
    assert "value: Forbidden: may not be changed in an update." in err
    kctl.run("patch", "pc", name, "-p", '{"description": "higher"}')
    assert kctl.run("get", "pc", name, "-o", "jsonpath={.description}").stdout == "higher"
    dry = yaml.safe_load(kctl.run("create", "priorityclass", f"dry-{tag(kctl)}", "--value=7", "--dry-run=server",
                                  "-o", "yaml").stdout)
    assert dry["preemptionPolicy"] == "PreemptLowerPriority" and dry["value"] == 7
    assert "NotFound" in refused(kctl, "get", "pc", f"dry-{tag(kctl)}")


def test_pod_disruption_budget(kctl):
    name = f"pdb-{tag(kctl)}"
    dry = yaml.safe_load(kctl.run("-n", NS, "create", "pdb", name, "--selector=app=web", "--min-available=50%",
                                  "--dry-run=server", "-o", "yaml").stdout)
    assert dry["status"] == {"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0}
    assert dry["metadata"]["generation"] == 1 and dry["spec"]["minAvailable"] == "50%"
    kctl.run("-n", NS, "create", "pdb", name, "--selector=app=web", "--min-available=50%")
    header, rows = kctl.table("-n", NS, "pdb", name)
    assert header == ["NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE"]
    assert rows[0][:4] == [name, "50%", "N/A", "0"]
    # the status changes through /status only
    kctl.run("-n", NS, "patch", "pdb", name, "--type=merge", "-p", '{"status": {"disruptionsAllowed": 2}}')
    assert kctl.table("-n", NS, "pdb", name)[1][0][3] == "0"
    kctl.run("-n", NS, "patch", "pdb", name, "--subresource=status", "--type=merge", "-p",
             '{"status": {"disruptionsAllowed": 2}}')
    assert kctl.table("-n", NS, "pdb", name)[1][0][3] == "2"
    kctl.run("-n", NS, "patch", "pdb", name, "--type=merge", "-p", '{"spec": {"minAvailable": 1}}')
    got = json.loads(kctl.run("-n", NS, "get", "pdb", name, "-o", "json").stdout)
    assert got["metadata"]["generation"] == 2 and got["status"]["disruptionsAllowed"] == 2
    err = refused(kctl, "-n", NS, "create", "pdb", f"bad-{tag(kctl)}", "--selector=app=web", "--min-available=150%")
    assert ('spec.minAvailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"150%"}: must not be '
            "greater than 100%") in err


def test_quota_dry_run_is_not_persisted(kctl):
    name = f"q-{tag(kctl)}"
    dry = yaml.safe_load(kctl.run("-n", NS, "create", "quota", name, "--hard=pods=2", "--dry-run=server",
                                  "-o", "yaml").stdout)
    assert dry["spec"]["hard"] == {"pods": "2"} and dry["metadata"]["uid"]
    assert "NotFound" in refused(kctl, "-n", NS, "get", "quota", name)


INGRESS_NO_PATH_TYPE = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: {ns}
spec:
  rules:
  - host: 10.0.0.1
    http:
      paths:
      - path: /
        backend:
          service:
            name: web
            port:
              number: 80
"""


def test_ingress(kctl):
    name = f"ing-{tag(kctl)}"
    kctl.run("-n", NS, "create", "ingress", name, "--class=nginx", "--rule=foo.example.com/bar=svc1:8080,tls=my-cert")
    header, rows = kctl.table("-n", NS, "ingress", name)
    assert header == ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]
    assert rows[0][:3] == [name, "nginx", "foo.example.com"] and "80, 443" in rows[0]
    kctl.run("-n", NS, "patch", "ingress", name, "--subresource=status", "--type=merge", "-p",
             '{"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}}')
    assert kctl.table("-n", NS, "ing", name)[1][0][3] == "192.0.2.10"
    got = json.loads(kctl.run("-n", NS, "get", "ingress", name, "-o", "json").stdout)
    assert got["spec"]["rules"][0]["http"]["paths"][0]["pathType"] == "Exact"
    assert got["metadata"]["generation"] == 1
    err = refused(kctl, "apply", "-f", "-", input=INGRESS_NO_PATH_TYPE.format(name=f"bad-{tag(kctl)}", ns=NS))
    assert 'spec.rules[0].host: Invalid value: "10.0.0.1": must be a DNS name, not an IP address' in err
    assert "spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified" in err


CLUSTER_OBJECTS = """apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: ic-{tag}
spec:
  controller: example.com/ingress
  parameters:
    apiGroup: k8s.example.com
    kind: Params
    name: p
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: sc-{tag}
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: example.com/disk
parameters:
  type: ssd
allowVolumeExpansion: true
---
apiVersion: v1
kind: Node
metadata:
  name: node-{tag}
  labels:
    node-role.kubernetes.io/control-plane: ""
spec:
  podCIDRs: ["10.0.1.0/24"]
status:
  addresses:
  - type: InternalIP
    address: 192.0.2.20
  nodeInfo:
    kubeletVersion: v1.33.0
    osImage: Plan9
    kernelVersion: 6.1.0
    containerRuntimeVersion: containerd://1.7.0
    architecture: amd64
    bootID: ""
    kubeProxyVersion: ""
    machineID: ""
    operatingSystem: linux
    systemUUID: ""
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: np-{tag}
  namespace: {ns}
spec:
  podSelector:
    matchLabels:
      app: web
  ingress:
  - ports:
    - port: 80
---
apiVersion: v1
kind: LimitRange
metadata:
  name: lr-{tag}
  namespace: {ns}
spec:
  limits:
  - type: Container
    max:
      cpu: "2"
"""


def test_apply_patch_and_wide_columns(kctl):
    t = tag(kctl)
    docs = CLUSTER_OBJECTS.format(tag=t, ns=NS)
    out = kctl.run("apply", "-f", "-", input=docs).stdout
    assert f"ingressclass.networking.k8s.io/ic-{t} created" in out and f"node/node-{t} created" in out
    assert "unchanged" in kctl.run("apply", "-f", "-", input=docs).stdout

    header, rows = kctl.table("nodes", f"node-{t}", "-o", "wide")
    assert header == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE",
                      "KERNEL-VERSION", "CONTAINER-RUNTIME"]
    assert rows[0][:3] == [f"node-{t}", "Unknown", "control-plane"]
    assert rows[0][4:] == ["v1.33.0", "192.0.2.20", "<none>", "Plan9", "6.1.0", "containerd://1.7.0"]
    kctl.run("patch", "node", f"node-{t}", "--subresource=status", "--type=merge", "-p",
             '{"status": {"conditions": [{"type": "Ready", "status": "True"}]}}')
    kctl.run("patch", "node", f"node-{t}", "-p", '{"spec": {"unschedulable": true}}')
    assert kctl.table("nodes", f"node-{t}")[1][0][1] == "Ready,SchedulingDisabled"
    err = refused(kctl, "patch", "node", f"node-{t}", "-p", '{"spec": {"podCIDRs": ["10.0.9.0/24"]}}')
    assert 'node updates may not change podCIDR except from "" to valid' in err

    header, rows = kctl.table("storageclass", f"sc-{t}")
    assert header == ["NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION", "AGE"]
    assert rows[0][:5] == [f"sc-{t} (default)", "example.com/disk", "Delete", "Immediate", "true"]
    err = refused(kctl, "patch", "sc", f"sc-{t}", "-p", '{"parameters": {"type": "hdd"}}')
    assert "parameters: Forbidden: updates to parameters are forbidden." in err
    kctl.run("annotate", "sc", f"sc-{t}", "storageclass.kubernetes.io/is-default-class-")
    assert kctl.table("sc", f"sc-{t}")[1][0][0] == f"sc-{t}"

    header, rows = kctl.table("ingressclass", f"ic-{t}")
    assert header == ["NAME", "CONTROLLER", "PARAMETERS", "AGE"]
    assert rows[0][:3] == [f"ic-{t}", "example.com/ingress", "Params.k8s.example.com/p"]
    err = refused(kctl, "patch", "ingressclass", f"ic-{t}", "-p", '{"spec": {"controller": "example.com/x"}}')
    assert 'spec.controller: Invalid value: "example.com/x": field is immutable' in err

    header, rows = kctl.table("-n", NS, "netpol", f"np-{t}")
    assert header == ["NAME", "POD-SELECTOR", "AGE"] and rows[0][:2] == [f"np-{t}", "app=web"]
    got = json.loads(kctl.run("-n", NS, "get", "networkpolicy", f"np-{t}", "-o", "json").stdout)
    assert got["spec"]["policyTypes"] == ["Ingress"] and got["spec"]["ingress"][0]["ports"][0]["protocol"] == "TCP"
    kctl.run("-n", NS, "patch", "netpol", f"np-{t}", "--type=json", "-p",
             '[{"op": "replace", "path": "/spec/podSelector", "value": {}}]')
    assert kctl.table("-n", NS, "netpol", f"np-{t}")[1][0][1] == "<none>"

    header, rows = kctl.table("-n", NS, "limits", f"lr-{t}")
    assert header == ["NAME", "CREATED AT"] and rows[0][0] == f"lr-{t}"
    got = json.loads(kctl.run("-n", NS, "get", "limitrange", f"lr-{t}", "-o", "json").stdout)
    assert got["spec"]["limits"][0]["default"] == {"cpu": "2"}
    err = refused(kctl, "-n", NS, "patch", "limitrange", f"lr-{t}", "--type=json", "-p",
                  '[{"op": "add", "path": "/spec/limits/0/min", "value": {"cpu": "3"}}]')
    assert "min value 3 is greater than max value 2" in err
    kctl.run("delete", f"node/node-{t}", f"storageclass/sc-{t}")
    kctl.run("delete", "ingressclass", f"ic-{t}")


@pytest.mark.parametrize("field,text", [
    ("priorityclass.preemptionPolicy", "preemptionPolicy is the Policy for preempting pods with lower priority"),
    ("pdb.spec.minAvailable", "An eviction is allowed if at least"),
    ("ingress.spec.rules.http.paths.pathType", "pathType determines the interpretation of the path matching"),
    ("networkpolicy.spec.podSelector", "podSelector selects the pods to which this NetworkPolicy object applies"),
    ("storageclass.provisioner", "provisioner indicates the type of the provisioner"),
    ("node.spec.taints", "If specified, the node's taints"),
    ("limitrange.spec.limits", "Limits is the list of LimitRangeItem objects that are enforced"),
    ("ingressclass.spec.controller", "controller refers to the name of the controller"),
])
def test_explain(kctl, field, text):
    out = kctl.run("explain", field).stdout
    assert text in " ".join(out.split())


def test_auth_can_i_nodes_follows_cluster_roles(kctl):
    t = tag(kctl)
    user, role = f"erin-{t}", f"node-reader-{t}"

    def can(*args: str) -> str:
        return kctl.run("auth", "can-i", *args, check=False).stdout.strip()

    assert can("list", "nodes", f"--as={user}") == "no"
    kctl.run("create", "clusterrole", role, "--verb=get,list,watch", "--resource=nodes,configmaps")
    # a RoleBinding grants nothing on a cluster-scoped kind: once it lets the user read the namespace's
    # ConfigMaps, nodes are still refused
    kctl.run("-n", NS, "create", "rolebinding", role, f"--clusterrole={role}", f"--user={user}")
    wait_for(lambda: can("list", "configmaps", "-n", NS, f"--as={user}") == "yes", what="the RoleBinding")
    assert can("list", "nodes", f"--as={user}") == "no"
    assert "Forbidden" in refused(kctl, "get", "nodes", f"--as={user}")
    kctl.run("create", "clusterrolebinding", f"{role}-ns-only", "--clusterrole=view", f"--user={user}-other")
    kctl.run("create", "clusterrolebinding", role, f"--clusterrole={role}", f"--user={user}")
    wait_for(lambda: can("list", "nodes", f"--as={user}") == "yes", what="the ClusterRoleBinding")
    assert can("delete", "nodes", f"--as={user}") == "no"
    assert kctl.run("get", "nodes", f"--as={user}").returncode == 0
    # view does not cover nodes; the aggregated edit covers ingresses and pdbs, view only reads them
    wait_for(lambda: can("list", "ingresses.networking.k8s.io", "-n", NS, f"--as={user}-other") == "yes",
             what="the view binding")
    assert can("list", "nodes", f"--as={user}-other") == "no"
    assert can("create", "poddisruptionbudgets.policy", "-n", NS, f"--as={user}-other") == "no"
    kctl.run("-n", NS, "create", "rolebinding", f"{role}-edit", "--clusterrole=edit", f"--user={user}-editor")
    wait_for(lambda: can("create", "poddisruptionbudgets.policy", "-n", NS, f"--as={user}-editor") == "yes",
             what="the edit binding")
    assert can("create", "networkpolicies.networking.k8s.io", "-n", NS, f"--as={user}-editor") == "yes"
    assert can("update", "poddisruptionbudgets.policy", "--subresource=status", "-n", NS, f"--as={user}-editor") == "no"
    kctl.run("delete", "clusterrolebinding", role, f"{role}-ns-only")
    kctl.run("delete", "clusterrole", role)


EVENTS = """apiVersion: events.k8s.io/v1
kind: Event
metadata:
  name: new-{tag}
  namespace: {ns}
regarding:
  kind: ConfigMap
  namespace: {ns}
  name: cm-{tag}
reason: Tested
note: written in events.k8s.io/v1
type: Warning
action: Testing
eventTime: "2026-01-02T03:04:05.000000Z"
reportingController: example.com/tester
reportingInstance: tester-1
---
apiVersion: v1
kind: Event
metadata:
  name: old-{tag}
  namespace: {ns}
involvedObject:
  kind: ConfigMap
  namespace: {ns}
  name: cm-{tag}
reason: Old
message: written in v1
type: Normal
count: 2
source:
  component: e2e
"""


def test_events_in_both_versions(kctl):
    t = tag(kctl)
    kctl.run("apply", "-f", "-", input=EVENTS.format(tag=t, ns=NS))
    selector = f"--field-selector=involvedObject.name=cm-{t}"
    for resource in ("events", "events.v1.events.k8s.io"):
        header, rows = kctl.table("-n", NS, resource, selector)
        assert header[:5] == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], resource
        assert sorted((r[1], r[3], r[4]) for r in rows) == [
            ("Normal", f"configmap/cm-{t}", "written in v1"),
            ("Warning", f"configmap/cm-{t}", "written in events.k8s.io/v1")], resource
    new_core = json.loads(kctl.run("-n", NS, "get", "events", f"new-{t}", "-o", "json").stdout)
    assert new_core["apiVersion"] == "v1" and new_core["message"] == "written in events.k8s.io/v1"
    assert new_core["reportingComponent"] == "example.com/tester"
    old_v1 = json.loads(kctl.run("-n", NS, "get", "events.events.k8s.io", f"old-{t}", "-o", "json").stdout)
    assert old_v1["apiVersion"] == "events.k8s.io/v1" and old_v1["note"] == "written in v1"
    assert old_v1["deprecatedCount"] == 2 and old_v1["deprecatedSource"] == {"component": "e2e"}
    bad = EVENTS.format(tag=f"bad-{t}", ns=NS).split("---")[0].replace('eventTime: "2026-01-02T03:04:05.000000Z"\n', "")
    assert "eventTime: Required value" in refused(kctl, "apply", "-f", "-", input=bad)
    kctl.run("-n", NS, "delete", "events.events.k8s.io", f"new-{t}", f"old-{t}")


CSI_DRIVER = """apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: disk-{tag}.example.com
spec:
  tokenRequests:
  - audience: vault
"""


def test_csi_driver(kctl):
    name = f"disk-{tag(kctl)}.example.com"
    kctl.run("apply", "-f", "-", input=CSI_DRIVER.format(tag=tag(kctl)))
    header, rows = kctl.table("csidriver", name)
    assert header == ["NAME", "ATTACHREQUIRED", "PODINFOONMOUNT", "STORAGECAPACITY", "TOKENREQUESTS",
                      "REQUIRESREPUBLISH", "MODES", "AGE"]
    assert rows[0][:7] == [name, "true", "false", "false", "vault", "false", "Persistent"]
    err = refused(kctl, "patch", "csidriver", name, "-p", '{"spec": {"attachRequired": false}}')
    assert "spec.attachRequired: Invalid value: false: field is immutable" in err
    kctl.run("patch", "csidriver", name, "-p", '{"spec": {"podInfoOnMount": true}}')
    assert kctl.table("csidriver", name)[1][0][2] == "true"
    kctl.run("delete", "csidriver", name)
