"""The GA kinds of issue 26 through kubectl: create by server-side apply, get with kube's columns, explain, a bad
object answered 422 with kube's field paths, delete; `kubectl autoscale` and one HPA read in autoscaling/v1 and v2
(kubectl 1.32 on the PATH, 1.27 and 1.33 beside it); a Service's ClusterIP as an IPAddress object, and the
default ServiceCIDR."""
from __future__ import annotations

import json

import pytest
import yaml

from tests.kubectls import RUN, refused, tag
from tests.waiting import wait_for

pytestmark = pytest.mark.stack
NS = f"kinds26-e2e-{RUN}"


@pytest.fixture(scope="module", autouse=True)
def ns(kubectl):
    kubectl.run("create", "namespace", NS)
    yield NS
    kubectl.run("delete", "namespace", NS, "--wait=false", check=False)



# (resource, namespaced, manifest, header, the row's first cells, a bad manifest, what kube answers it); the
# ControllerRevision has no owner (the garbage collector would delete it, its owner missing)
KINDS = [
    ("controllerrevisions", True, """
apiVersion: apps/v1
kind: ControllerRevision
metadata: {name: web-1}
data: {spec: {replicas: 1}}
revision: 1
""", ["NAME", "CONTROLLER", "REVISION", "AGE"], ["web-1", "<none>", "1"], """
apiVersion: apps/v1
kind: ControllerRevision
metadata: {name: bad}
revision: -1
""", ["data: Required value: data is mandatory", "revision: Invalid value: -1: must be greater than or equal to 0"]),
    ("runtimeclasses", False, """
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor-RUN}
handler: runsc
overhead: {podFixed: {cpu: 250m}}
""", ["NAME", "HANDLER", "AGE"], ["gvisor-RUN", "runsc"], """
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: bad-RUN}
handler: Run_SC
""", ['handler: Invalid value: "Run_SC": a lowercase RFC 1123 label must consist of']),
    ("csinodes", False, """
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: node-RUN}
spec: {drivers: [{name: disk.example.com, nodeID: n1, topologyKeys: [topology.example.com/zone]}]}
""", ["NAME", "DRIVERS", "AGE"], ["node-RUN", "1"], """
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: bad-RUN}
spec: {drivers: [{name: disk.example.com, nodeID: ""}]}
""", ["spec.drivers[0].nodeID: Required value"]),
    ("csistoragecapacities", True, """
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata: {name: cap-1}
storageClassName: fast
capacity: 10Gi
nodeTopology: {matchLabels: {zone: a}}
""", ["NAME", "STORAGECLASSNAME", "CAPACITY"], ["cap-1", "fast", "10Gi"], """
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata: {name: bad}
storageClassName: fast
capacity: "-1"
""", ['capacity: Invalid value: "-1": must be greater than or equal to 0']),
    ("volumeattachments", False, """
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {name: va-RUN}
spec: {attacher: disk.example.com, nodeName: node-1, source: {persistentVolumeName: pv-1}}
""", ["NAME", "ATTACHER", "PV", "NODE", "ATTACHED", "AGE"], ["va-RUN", "disk.example.com", "pv-1", "node-1", "false"],
     """
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {name: bad-RUN}
spec: {attacher: disk.example.com, nodeName: node-1, source: {}}
""", ["spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName"]),
    ("servicecidrs", False, """
apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata: {name: extra-RUN}
spec: {cidrs: [10.240.0.0/24]}
""", ["NAME", "CIDRS", "AGE"], ["extra-RUN", "10.240.0.0/24"], """
apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata: {name: bad-RUN}
spec: {cidrs: [10.240.0.0/24, 10.241.0.0/24]}
""", [('spec.cidrs: Invalid value: networking.ServiceCIDRSpec{CIDRs:[]string{"10.240.0.0/24", "10.241.0.0/24"}}: '
       "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64")]),
    ("ipaddresses", False, """
apiVersion: networking.k8s.io/v1
kind: IPAddress
metadata: {name: 192.168.7.1}
spec: {parentRef: {group: example.com, resource: gateways, namespace: gw, name: gw-RUN}}
""", ["NAME", "PARENTREF"], ["192.168.7.1", "gateways.example.com/gw/gw-RUN"], """
apiVersion: networking.k8s.io/v1
kind: IPAddress
metadata: {name: 192.168.007.2}
spec: {parentRef: {resource: services}}
""", ['metadata.name: Invalid value: "192.168.007.2": ParseAddr("192.168.007.2"): unable to parse IP',
      "spec.parentRef.name: Required value"]),
]


@pytest.mark.parametrize("resource,namespaced,manifest,header,row,bad,messages", KINDS, ids=[k[0] for k in KINDS])
def test_kind_through_kubectl(kubectl, resource, namespaced, manifest, header, row, bad, messages):
    ns = ("-n", NS) if namespaced else ()
    manifest, row = manifest.replace("RUN", RUN), [c.replace("RUN", RUN) for c in row]
    name = yaml.safe_load(manifest)["metadata"]["name"]
    dry = kubectl.run(*ns, "create", "--dry-run=server", "-o", "name", "-f", "-", input=manifest)
    assert dry.stdout.strip().endswith(f"/{name}")
    assert "NotFound" in refused(kubectl, *ns, "get", resource, name)
    out = kubectl.run(*ns, "apply", "--server-side", "-f", "-", input=manifest)
    assert "serverside-applied" in out.stdout
    got, rows = kubectl.table(*ns, resource, name)
    assert got == header and rows[0][:len(row)] == row
    listed = json.loads(kubectl.run(*ns, "get", resource, "-o", "json", "--field-selector",
                                    f"metadata.name={name}").stdout)
    assert [i["metadata"]["name"] for i in listed["items"]] == [name]
    managers = [m["manager"] for m in json.loads(kubectl.run(*ns, "get", resource, name, "-o", "json",
                                                       "--show-managed-fields").stdout)[
        "metadata"]["managedFields"]]
    assert managers == ["kubectl"]
    assert "FIELDS:" in kubectl.run("explain", resource).stdout
    err = refused(kubectl, *ns, "create", "-f", "-", input=bad.replace("RUN", RUN))
    assert "is invalid" in err and all(m in err for m in messages), err
    kubectl.run(*ns, "delete", resource, name)
    assert "NotFound" in refused(kubectl, *ns, "get", resource, name)


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: c, image: nginx}}]}}
"""


def test_kubectl_autoscale_and_one_hpa_in_both_versions(kctl):
    name = f"web-{tag(kctl)}"
    kctl.run("-n", NS, "apply", "-f", "-", input=DEPLOYMENT.format(name=name))
    out = kctl.run("-n", NS, "autoscale", "deployment", name, "--min=2", "--max=5", "--cpu-percent=80")
    assert f"horizontalpodautoscaler.autoscaling/{name} autoscaled" in out.stdout
    header, rows = kctl.table("-n", NS, "hpa", name)
    assert header == ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]
    assert rows[0][:6] == [name, f"Deployment/{name}", "cpu: <unknown>/80%", "2", "5", "0"]
    v1 = json.loads(kctl.run("-n", NS, "get", "horizontalpodautoscalers.v1.autoscaling", name, "-o", "json").stdout)
    v2 = json.loads(kctl.run("-n", NS, "get", "horizontalpodautoscalers.v2.autoscaling", name, "-o", "json").stdout)
    assert v1["apiVersion"] == "autoscaling/v1" and v2["apiVersion"] == "autoscaling/v2"
    assert v1["metadata"]["uid"] == v2["metadata"]["uid"]
    assert v1["spec"]["targetCPUUtilizationPercentage"] == 80 and v1["spec"]["minReplicas"] == 2
    assert v2["spec"]["metrics"] == [{"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 80}}}]
    # a v2-only field set in v2 is kept in an annotation in v1, and kept by a write in v1
    kctl.run("-n", NS, "patch", "horizontalpodautoscalers.v2.autoscaling", name, "--type=merge", "-p",
             '{"spec": {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}}')
    v1 = json.loads(kctl.run("-n", NS, "get", "horizontalpodautoscalers.v1.autoscaling", name, "-o", "json").stdout)
    assert "autoscaling.alpha.kubernetes.io/behavior" in v1["metadata"]["annotations"]
    kctl.run("-n", NS, "patch", "horizontalpodautoscalers.v1.autoscaling", name, "--type=merge", "-p",
             '{"spec": {"maxReplicas": 7}}')
    v2 = json.loads(kctl.run("-n", NS, "get", "horizontalpodautoscalers.v2.autoscaling", name, "-o", "json").stdout)
    assert v2["spec"]["maxReplicas"] == 7 and v2["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 60
    assert "annotations" not in v2["metadata"]
    kctl.run("-n", NS, "delete", "hpa", name)


def test_hpa_server_side_apply_and_bad_input(kubectl):
    name = f"hpa-ssa-{RUN}"
    manifest = f"""
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: {name}}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}
  maxReplicas: 3
  metrics: [{{type: Pods, pods: {{metric: {{name: qps}}, target: {{type: AverageValue, averageValue: "10"}}}}}}]
"""
    kubectl.run("-n", NS, "apply", "--server-side", "-f", "-", input=manifest)
    _, rows = kubectl.table("-n", NS, "hpa", name)
    assert rows[0][:5] == [name, "Deployment/web", "<unknown>/10", "1", "3"]
    err = refused(kubectl, "-n", NS, "apply", "--server-side", "-f", "-",
                  input=manifest.replace("maxReplicas: 3", "maxReplicas: 0"))
    assert "spec.maxReplicas: Invalid value: 0: must be greater than 0" in err
    kubectl.run("-n", NS, "delete", "hpa", name)


def test_cluster_ip_is_an_ip_address_and_the_default_service_cidr(kubectl):
    header, rows = kubectl.table("servicecidrs", "kubernetes")
    assert header == ["NAME", "CIDRS", "AGE"] and rows[0][:2] == ["kubernetes", "10.96.0.0/12"]
    cidr = json.loads(kubectl.run("get", "servicecidr", "kubernetes", "-o", "json").stdout)
    assert [(c["type"], c["status"]) for c in cidr["status"]["conditions"]] == [("Ready", "True")]
    name = f"web-{RUN}"
    kubectl.run("-n", NS, "create", "service", "clusterip", name, "--tcp=80")
    ip = kubectl.run("-n", NS, "get", "service", name, "-o", "jsonpath={.spec.clusterIP}").stdout
    header, rows = kubectl.table("ip", ip)
    assert header == ["NAME", "PARENTREF"] and rows == [[ip, f"services/{NS}/{name}"]]
    err = refused(kubectl, "-n", NS, "create", "service", "clusterip", f"copy-{RUN}", "--tcp=80",
                  f"--clusterip={ip}")
    assert f"failed to allocate IP {ip}: provided IP is already allocated" in err
    kubectl.run("-n", NS, "delete", "service", name)
    wait_for(lambda: "NotFound" in kubectl.run("get", "ipaddress", ip, check=False).stderr,
             what="the IPAddress deleted with its Service")


def test_edit_and_view_roles_cover_hpas(kubectl):
    user = f"hpa-editor-{RUN}"
    kubectl.run("-n", NS, "create", "rolebinding", user, "--clusterrole=edit", f"--user={user}")
    wait_for(lambda: kubectl.run("-n", NS, "auth", "can-i", "create", "horizontalpodautoscalers.autoscaling",
                                 f"--as={user}", check=False).stdout.strip() == "yes",
             what="edit aggregated with the HPA rule")
    assert kubectl.run("-n", NS, "auth", "can-i", "get", "horizontalpodautoscalers.autoscaling/status",
                       f"--as={user}", check=False).stdout.strip() == "yes"


def test_api_resources_and_get_all(kubectl):
    lines = [line.split() for line in kubectl.run("api-resources").stdout.splitlines()[1:]]
    for row in (["horizontalpodautoscalers", "hpa", "autoscaling/v2", "true", "HorizontalPodAutoscaler"],
                ["ipaddresses", "ip", "networking.k8s.io/v1", "false", "IPAddress"],
                ["servicecidrs", "networking.k8s.io/v1", "false", "ServiceCIDR"],
                ["controllerrevisions", "apps/v1", "true", "ControllerRevision"],
                ["runtimeclasses", "node.k8s.io/v1", "false", "RuntimeClass"],
                ["csinodes", "storage.k8s.io/v1", "false", "CSINode"],
                ["csistoragecapacities", "storage.k8s.io/v1", "true", "CSIStorageCapacity"],
                ["volumeattachments", "storage.k8s.io/v1", "false", "VolumeAttachment"]):
        assert row in lines, row
    assert {"autoscaling/v1", "autoscaling/v2", "node.k8s.io/v1"} <= set(kubectl.run("api-versions").stdout.split())
    name = f"all-{RUN}"
    kubectl.run("-n", NS, "create", "-f", "-", input=f"""
apiVersion: autoscaling/v1
kind: HorizontalPodAutoscaler
metadata: {{name: {name}}}
spec: {{scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}, maxReplicas: 2}}
""")
    # in the "all" category, as kube's
    assert f"horizontalpodautoscaler.autoscaling/{name}" in kubectl.run("-n", NS, "get", "all", "-o", "name").stdout
    kubectl.run("-n", NS, "delete", "hpa", name)
