"""The GA kinds of issue 26 served by definitions and strategies: ControllerRevision, HorizontalPodAutoscaler (v2
stored, v1 converted through it), RuntimeClass, CSINode, CSIStorageCapacity, VolumeAttachment, ServiceCIDR and
IPAddress (defaults, validation with kube's messages and field paths, update rules, status, Table cells)."""
from __future__ import annotations

import json
from typing import Any

import pytest

from services.apis.autoscaling import format_metrics
from services.apis.install import new_catalogue
from services.apis.strategies import hpaconversion
from services.apis.strategies.autoscaling import CONVERSION_V1

from .test_kinds import cells, obj, refused

CATALOGUE = new_catalogue()
Obj = dict[str, Any]


@pytest.mark.parametrize("resource,shorts,categories", [
    ("horizontalpodautoscalers", ("hpa",), ("all",)), ("ipaddresses", ("ip",), ()), ("controllerrevisions", (), ()),
    ("runtimeclasses", (), ()), ("csinodes", (), ()), ("csistoragecapacities", (), ()), ("volumeattachments", (), ()),
    ("servicecidrs", (), ())])
def test_short_names_and_categories(resource, shorts, categories):
    infos = [r for r in CATALOGUE.resources if r.plural == resource]
    assert infos and all(r.short_names == shorts and r.categories == categories for r in infos)


# ControllerRevision ----------------------------------------------------------------------------

async def test_controller_revision(api):
    body = obj("apps/v1", "ControllerRevision", "web-1", "ns", data={"spec": {"a": 1}}, revision=1)
    body["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                                            "uid": "u1", "controller": True}]
    code, got = await api("create", "controllerrevisions", "ns", body=body)
    assert code == 201
    assert await refused(api, "create", "controllerrevisions", "ns",
                         body=obj("apps/v1", "ControllerRevision", "bad", "ns", revision=-1)) == [
        "data: Required value: data is mandatory", "revision: Invalid value: -1: must be greater than or equal to 0"]
    got["revision"] = 2
    code, got = await api("update", "controllerrevisions", "ns", "web-1", body=got)
    assert code == 200 and got["revision"] == 2
    got["data"] = {"spec": {"a": 2}}
    (msg,) = await refused(api, "update", "controllerrevisions", "ns", "web-1", body=got)
    assert msg.startswith("data: Invalid value: ") and msg.endswith("field is immutable")
    assert [r[:3] for r in await cells(api, "controllerrevisions", "ns")] == [["web-1", "statefulset.apps/web", 2]]


# RuntimeClass ----------------------------------------------------------------------------------

async def test_runtime_class(api):
    code, got = await api("create", "runtimeclasses", body=obj("node.k8s.io/v1", "RuntimeClass", "gvisor",
                                                               handler="runsc",
                                                               overhead={"podFixed": {"cpu": "250m"}}))
    assert code == 201
    bad = obj("node.k8s.io/v1", "RuntimeClass", "bad", handler="Run_SC", overhead={"podFixed": {"cpu": "-1"}},
              scheduling={"nodeSelector": {"a b": "c"}, "tolerations": [{"key": "k", "operator": "Maybe"}]})
    causes = await refused(api, "create", "runtimeclasses", body=bad)
    assert causes[0].startswith('handler: Invalid value: "Run_SC": a lowercase RFC 1123 label must consist of')
    assert 'overhead.limits[cpu]: Invalid value: "-1": must be greater than or equal to 0' in causes
    assert any(c.startswith('scheduling.nodeSelector: Invalid value: "a b"') for c in causes)
    assert ('scheduling.tolerations[0].operator: Unsupported value: "Maybe": supported values: "Equal", "Exists"'
            in causes)
    got["handler"] = "kata"
    assert await refused(api, "update", "runtimeclasses", "", "gvisor", body=got) == [
        'handler: Invalid value: "kata": field is immutable']
    assert [r[:2] for r in await cells(api, "runtimeclasses")] == [["gvisor", "runsc"]]


# storage.k8s.io --------------------------------------------------------------------------------

async def test_csi_node(api):
    driver = {"name": "disk.example.com", "nodeID": "n1", "topologyKeys": ["topology.example.com/zone"]}
    code, got = await api("create", "csinodes", body=obj("storage.k8s.io/v1", "CSINode", "node-1",
                                                         spec={"drivers": [driver]}))
    assert code == 201
    bad = obj("storage.k8s.io/v1", "CSINode", "node-2", spec={"drivers": [
        {"name": "Bad_Driver", "nodeID": "", "allocatable": {"count": -1}}, dict(driver), dict(driver)]})
    causes = await refused(api, "create", "csinodes", body=bad)
    assert causes[0].startswith('spec.drivers[0].name: Invalid value: "Bad_Driver"')
    assert causes[1:] == ["spec.drivers[0].nodeID: Required value",
                          "spec.drivers[0].allocatable.count: Invalid value: -1: must be greater than or equal to 0",
                          'spec.drivers[2].name: Duplicate value: "disk.example.com"']
    got["spec"]["drivers"][0]["nodeID"] = "n2"
    (msg,) = await refused(api, "update", "csinodes", "", "node-1", body=got)
    assert msg.startswith("spec.drivers: Invalid value: storage.CSINodeDriver{") and msg.endswith("field is immutable")
    got["spec"]["drivers"] = [driver, {"name": "other.example.com", "nodeID": "x"}]
    assert (await api("update", "csinodes", "", "node-1", body=got))[0] == 200
    assert [r[:2] for r in await cells(api, "csinodes")] == [["node-1", 2]]


async def test_csi_storage_capacity(api):
    body = obj("storage.k8s.io/v1", "CSIStorageCapacity", "cap-1", "ns", storageClassName="fast", capacity="10Gi",
               nodeTopology={"matchLabels": {"zone": "a"}})
    code, got = await api("create", "csistoragecapacities", "ns", body=body)
    assert code == 201
    assert await refused(api, "create", "csistoragecapacities", "ns", body=obj(
        "storage.k8s.io/v1", "CSIStorageCapacity", "cap-2", "ns", storageClassName="Fast", capacity="-1")) == [
        ('storageClassName: Invalid value: "Fast": a lowercase RFC 1123 subdomain must consist of lower case '
         "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
         "'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
        'capacity: Invalid value: "-1": must be greater than or equal to 0']
    got["storageClassName"] = "slow"
    assert await refused(api, "update", "csistoragecapacities", "ns", "cap-1", body=got) == [
        'storageClassName: Invalid value: "slow": field is immutable']
    assert await cells(api, "csistoragecapacities", "ns") == [["cap-1", "fast", "10Gi"]]


async def test_volume_attachment_spec_immutable_and_status(api):
    body = obj("storage.k8s.io/v1", "VolumeAttachment", "va-1", spec={
        "attacher": "disk.example.com", "nodeName": "node-1", "source": {"persistentVolumeName": "pv-1"}},
        status={"attached": True})
    code, got = await api("create", "volumeattachments", body=body)
    assert code == 201 and "status" not in got
    assert await refused(api, "create", "volumeattachments", body=obj(
        "storage.k8s.io/v1", "VolumeAttachment", "va-2", spec={"attacher": "", "nodeName": "n", "source": {}})) == [
        "spec.attacher: Required value",
        "spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName",
        "spec.attacher: Required value",
        ('spec.attacher: Invalid value: "": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
         "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
         "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")]
    got["spec"]["nodeName"] = "node-2"
    (msg,) = await refused(api, "update", "volumeattachments", "", "va-1", body=got)
    assert msg.startswith("spec: Invalid value: storage.VolumeAttachmentSpec{") and msg.endswith("field is immutable")
    got["spec"]["nodeName"] = "node-1"
    got["status"] = {"attached": True}
    code, st = await api("update", "volumeattachments", "", "va-1", body=got, subresource="status")
    assert code == 200 and st["status"] == {"attached": True}
    assert [r[:5] for r in await cells(api, "volumeattachments")] == [
        ["va-1", "disk.example.com", "pv-1", "node-1", True]]


# networking.k8s.io -----------------------------------------------------------------------------

async def test_service_cidr(api):
    code, got = await api("create", "servicecidrs", body=obj("networking.k8s.io/v1", "ServiceCIDR", "extra",
                                                             spec={"cidrs": ["10.200.0.0/16"]},
                                                             status={"conditions": []}))
    assert code == 201 and "status" not in got
    assert await refused(api, "create", "servicecidrs", body=obj("networking.k8s.io/v1", "ServiceCIDR", "x",
                                                                 spec={"cidrs": []})) == [
        "spec.cidrs: Required value: at least one CIDR required"]
    assert await refused(api, "create", "servicecidrs", body=obj(
        "networking.k8s.io/v1", "ServiceCIDR", "x", spec={"cidrs": ["10.1.0.0/16", "nonsense"]})) == [
        'spec.cidrs[1]: Invalid value: "nonsense": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)',
        ('spec.cidrs: Invalid value: networking.ServiceCIDRSpec{CIDRs:[]string{"10.1.0.0/16", "nonsense"}}: may '
         "specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64")]
    got["spec"]["cidrs"] = ["10.201.0.0/16"]
    assert await refused(api, "update", "servicecidrs", "", "extra", body=got) == [
        'spec.cidrs[0]: Invalid value: "10.201.0.0/16": field is immutable']
    got["spec"]["cidrs"] = ["10.200.0.0/16", "fd00:10:96::/112"]  # single to dual stack: allowed
    assert (await api("update", "servicecidrs", "", "extra", body=got))[0] == 200
    assert [r[:2] for r in await cells(api, "servicecidrs")] == [["extra", "10.200.0.0/16,fd00:10:96::/112"]]


async def test_ip_address(api):
    ref = {"group": "", "resource": "services", "namespace": "default", "name": "web"}
    code, got = await api("create", "ipaddresses", body=obj("networking.k8s.io/v1", "IPAddress", "10.96.0.10",
                                                            spec={"parentRef": ref}))
    assert code == 201
    assert await refused(api, "create", "ipaddresses", body=obj("networking.k8s.io/v1", "IPAddress", "10.96.0.011",
                                                                spec={})) == [
        'metadata.name: Invalid value: "10.96.0.011": ParseAddr("10.96.0.011"): unable to parse IP',
        "spec.parentRef: Required value"]
    assert await refused(api, "create", "ipaddresses", body=obj("networking.k8s.io/v1", "IPAddress", "fd00::0:1",
                                                                spec={"parentRef": {"resource": "services"}})) == [
        'metadata.name: Invalid value: "fd00::0:1": must be a canonical format IP address',
        "spec.parentRef.name: Required value"]
    got["spec"]["parentRef"]["name"] = "other"
    (msg,) = await refused(api, "update", "ipaddresses", "", "10.96.0.10", body=got)
    assert msg.startswith("spec.parentRef: Invalid value: &networking.ParentReference{") and "field is immutable" in msg
    assert await cells(api, "ipaddresses") == [["10.96.0.10", "services/default/web"]]


# HorizontalPodAutoscaler -----------------------------------------------------------------------

def hpa(version: str, name: str, **spec: Any) -> Obj:
    return obj(f"autoscaling/{version}", "HorizontalPodAutoscaler", name, "ns", spec={
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 5, **spec})


async def test_hpa_v2_defaults_and_status(api):
    code, got = await api("create", "horizontalpodautoscalers", "ns", version="v2",
                          body=hpa("v2", "web", behavior={"scaleDown": {"stabilizationWindowSeconds": 60}},
                                   status={"currentReplicas": 3}))
    assert code == 201
    assert got["spec"]["minReplicas"] == 1 and got["status"] == {"desiredReplicas": 0}
    assert got["spec"]["metrics"] == [{"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 80}}}]
    assert got["spec"]["behavior"] == {
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]},
        "scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max", "policies": [
            {"type": "Percent", "value": 100, "periodSeconds": 15}]}}
    got["status"] = {"currentReplicas": 2, "desiredReplicas": 3, "currentMetrics": [{"type": "Resource", "resource": {
        "name": "cpu", "current": {"averageUtilization": 42, "averageValue": "100m"}}}]}
    code, st = await api("update", "horizontalpodautoscalers", "ns", "web", version="v2", body=got,
                         subresource="status")
    assert code == 200 and st["status"]["currentReplicas"] == 2
    rows = await cells(api, "horizontalpodautoscalers", "ns")
    assert rows[0][:6] == ["web", "Deployment/web", "cpu: 42%/80%", "1", 5, 2]


async def test_hpa_validation_v2_paths_in_both_versions(api):
    bad = hpa("v2", "bad", minReplicas=0, maxReplicas=0, metrics=[
        {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue"}}},
        {"type": "Resource", "resource": {"name": "memory", "target": {"type": "Utilization"}}, "pods": {}},
        {"type": "Weird"}],
        behavior={"scaleUp": {"selectPolicy": "Most", "policies": [{"type": "Pods", "value": 0,
                                                                    "periodSeconds": 4000}]}})
    bad["spec"]["scaleTargetRef"] = {"kind": "Deployment"}
    assert await refused(api, "create", "horizontalpodautoscalers", "ns", body=bad, version="v2") == [
        "spec.scaleTargetRef.name: Required value",
        "spec.minReplicas: Invalid value: 0: must be greater than or equal to 1",
        "spec.maxReplicas: Invalid value: 0: must be greater than 0",
        "spec.metrics[0].pods.target.averageValue: Required value: must specify a positive target averageValue",
        "spec.metrics[1].pods: Forbidden: must populate the given metric source only",
        ('spec.metrics[2].type: Unsupported value: "Weird": supported values: "ContainerResource", "External", '
         '"Object", "Pods", "Resource"'),
        'spec.behavior.scaleUp.selectPolicy: Unsupported value: "Most": supported values: "Disabled", "Max", "Min"',
        "spec.behavior.scaleUp.policies[0].value: Invalid value: 0: must be greater than zero",
        "spec.behavior.scaleUp.policies[0].periodSeconds: Invalid value: 4000: must be less than or equal to 1800"]
    assert await refused(api, "create", "horizontalpodautoscalers", "ns", body=hpa(
        "v1", "bad", minReplicas=3, maxReplicas=2, targetCPUUtilizationPercentage=0)) == [
        "spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`",
        "spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0"]


async def test_hpa_one_object_in_both_versions(api):
    code, v1 = await api("create", "horizontalpodautoscalers", "ns", body=hpa("v1", "web",
                                                                               targetCPUUtilizationPercentage=70))
    assert code == 201 and v1["spec"]["minReplicas"] == 1 and v1["status"] == {"currentReplicas": 0,
                                                                               "desiredReplicas": 0}
    code, v2 = await api("get", "horizontalpodautoscalers", "ns", "web", version="v2")
    assert v2["apiVersion"] == "autoscaling/v2" and "annotations" not in v2["metadata"]
    assert v2["spec"]["metrics"] == [{"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 70}}}]
    # v2-only fields, written in v2, read in v1 as kube's round-trip annotations, and kept by a v1 update
    v2["spec"]["metrics"].append({"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {
        "type": "AverageValue", "averageValue": "10"}}})
    v2["spec"]["behavior"] = {"scaleDown": {"stabilizationWindowSeconds": 30}}
    assert (await api("update", "horizontalpodautoscalers", "ns", "web", version="v2", body=v2))[0] == 200
    code, v1 = await api("get", "horizontalpodautoscalers", "ns", "web")
    notes = v1["metadata"]["annotations"]
    assert v1["spec"]["targetCPUUtilizationPercentage"] == 70
    assert json.loads(notes[hpaconversion.METRICS]) == [{"type": "Pods", "pods": {
        "metricName": "qps", "targetAverageValue": "10"}}]
    assert json.loads(notes[hpaconversion.BEHAVIOR])["ScaleDown"] == {
        "StabilizationWindowSeconds": 30, "SelectPolicy": "Max", "Policies": [
            {"Type": "Percent", "Value": 100, "PeriodSeconds": 15}], "Tolerance": None}
    v1["spec"]["maxReplicas"] = 9
    assert (await api("update", "horizontalpodautoscalers", "ns", "web", body=v1))[0] == 200
    code, v2 = await api("get", "horizontalpodautoscalers", "ns", "web", version="v2")
    assert v2["spec"]["maxReplicas"] == 9 and len(v2["spec"]["metrics"]) == 2
    assert v2["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 30
    assert "annotations" not in v2["metadata"]
    # as in kube, the v1 round trip puts the CPU target after the others
    assert [r[2] for r in await cells(api, "horizontalpodautoscalers", "ns")] == ["<unknown>/10, cpu: <unknown>/70%"]
    _, table = await api("list", "horizontalpodautoscalers", "ns", table=True, version="v2")
    assert [r["cells"][2] for r in table["rows"]] == ["<unknown>/10, cpu: <unknown>/70%"]


def test_hpa_conversion_round_trips_status_and_every_source():
    stored = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
              "metadata": {"name": "x", "annotations": {"team": "a"}},
              "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 2, "maxReplicas": 4,
                       "metrics": [
                           {"type": "Object", "object": {"describedObject": {"kind": "Service", "name": "s"},
                                                         "metric": {"name": "rps"},
                                                         "target": {"type": "Value", "value": "5"}}},
                           {"type": "External", "external": {"metric": {"name": "queue"},
                                                             "target": {"type": "AverageValue", "averageValue": "3"}}},
                           {"type": "ContainerResource", "containerResource": {
                               "name": "memory", "container": "app",
                               "target": {"type": "AverageValue", "averageValue": "1Gi"}}}]},
              "status": {"currentReplicas": 2, "desiredReplicas": 2,
                         "conditions": [{"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale"}],
                         "currentMetrics": [{"type": "Resource", "resource": {
                             "name": "cpu", "current": {"averageUtilization": 10, "averageValue": "5m"}}}]}}
    v1 = CONVERSION_V1.served_object(stored, "autoscaling/v1", "HorizontalPodAutoscaler")
    assert v1["status"]["currentCPUUtilizationPercentage"] == 10 and "targetCPUUtilizationPercentage" not in v1["spec"]
    assert set(v1["metadata"]["annotations"]) == {"team", hpaconversion.METRICS, hpaconversion.CURRENT_METRICS,
                                                  hpaconversion.CONDITIONS}
    back = CONVERSION_V1.storage_object(v1)
    assert back["spec"]["metrics"] == stored["spec"]["metrics"]
    assert back["status"]["conditions"] == stored["status"]["conditions"]
    assert back["status"]["currentMetrics"] == stored["status"]["currentMetrics"]
    assert back["metadata"]["annotations"] == {"team": "a"}


def test_hpa_targets_column():
    pods = {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"averageValue": "10"}}}
    assert format_metrics([], []) == "<none>"
    assert format_metrics([pods, pods, pods], []) == "<unknown>/10, <unknown>/10 + 1 more..."
    ext = {"type": "External", "external": {"metric": {"name": "q"}, "target": {"averageValue": "3"}}}
    assert format_metrics([ext], [{"type": "External", "external": {"current": {"averageValue": "2"}}}]) == \
        "2/3 (avg)"


# ClusterIPs as IPAddress objects, and the default ServiceCIDR ------------------------------------

def svc(name: str, **spec: Any) -> Obj:
    return obj("v1", "Service", name, "default", spec={"ports": [{"port": 80}], **spec})


async def test_cluster_ip_is_an_ip_address_of_its_service(api):
    _, s = await api("create", "services", "default", body=svc("web"))
    ip = s["spec"]["clusterIP"]
    code, addr = await api("get", "ipaddresses", "", ip)
    assert code == 200 and addr["spec"]["parentRef"] == {"group": "", "resource": "services",
                                                         "namespace": "default", "name": "web"}
    assert addr["metadata"]["labels"] == {"ipaddress.kubernetes.io/ip-family": "IPv4",
                                          "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"}
    assert await cells(api, "ipaddresses") == [[ip, "services/default/web"]]
    # a dry run claims nothing; a refused create gives its address back
    _, dry = await api("create", "services", "default", body=svc("dry"), query={"dryRun": "All"})
    assert [a["metadata"]["name"] for a in (await api("list", "ipaddresses"))[1]["items"]] == [ip]
    assert dry["spec"]["clusterIP"] != ip
    await api("delete", "services", "default", "web")
    assert (await api("list", "ipaddresses"))[1]["items"] == []


async def test_default_service_cidr_is_bootstrapped_ready(handlers, api):
    from services.registry.bootstrap import bootstrap
    await bootstrap(handlers, handlers.catalogue, "10.0.0.0/16")
    await bootstrap(handlers, handlers.catalogue, "10.0.0.0/16")
    _, got = await api("get", "servicecidrs", "", "kubernetes")
    assert got["spec"] == {"cidrs": ["10.0.0.0/16"]}
    (ready,) = got["status"]["conditions"]
    assert (ready["type"], ready["status"], ready["message"]) == ("Ready", "True",
                                                                  "Kubernetes default Service CIDR is ready")
