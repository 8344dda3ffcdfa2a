"""The kinds of issue 14 served by definitions and strategies: Node, LimitRange, PriorityClass,
PodDisruptionBudget, Ingress, IngressClass, NetworkPolicy, StorageClass (defaults, validation with kube's
messages, update rules, status subresources, Table cells)."""
from __future__ import annotations

from typing import Any

import pytest

from services.apis.install import new_catalogue
from services.apis.networking import format_label_selector
from services.common import errors

CATALOGUE = new_catalogue()

Obj = dict[str, Any]


def obj(api_version: str, kind: str, name: str, ns: str | None = None, **body: Any) -> Obj:
    meta: Obj = {"name": name}
    if ns:
        meta["namespace"] = ns
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **body}


async def refused(api, *args: Any, **kwargs: Any) -> list[str]:
    """The write is answered 422 Invalid: its causes as kubectl prints them."""
    with pytest.raises(errors.Invalid) as e:
        await api(*args, **kwargs)
    return [f"{c['field']}: {c['message']}" for c in (e.value.details or {})["causes"]]


async def cells(api, resource: str, ns: str = "") -> list[list[Any]]:
    code, table = await api("list", resource, ns, table=True)
    assert code == 200, table
    return [r["cells"] for r in table["rows"]]


# PriorityClass -------------------------------------------------------------------------------

def pc(name: str, value: int, **body: Any) -> Obj:
    return obj("scheduling.k8s.io/v1", "PriorityClass", name, value=value, **body)


async def test_priority_class_defaults_validation_and_update(api):
    code, got = await api("create", "priorityclasses", body=pc("high", 1000))
    assert code == 201 and got["preemptionPolicy"] == "PreemptLowerPriority"
    assert await refused(api, "create", "priorityclasses", body=pc("huge", 2_000_000_000)) == [
        "value: Forbidden: maximum allowed value of a user defined priority is 1000000000"]
    assert await refused(api, "create", "priorityclasses", body=pc("system-mine", 10)) == [
        ("metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. "
        "error: system-mine is not a known system priority class")]
    assert await refused(api, "create", "priorityclasses", body=pc("x", 1, preemptionPolicy="Sometimes")) == [('preemptionPolicy: Unsupported value: "Sometimes": supported values: '
                             '"PreemptLowerPriority", "Never"')]
    got["value"] = 5
    assert await refused(api, "update", "priorityclasses", "", "high", body=got) == ["value: Forbidden: may not be changed in an update."]
    rows = await cells(api, "priorityclasses")
    assert rows == [["high", 1000, False, rows[0][3], "PreemptLowerPriority"]]


async def test_system_priority_classes_are_bootstrapped(handlers, api):
    from services.registry.bootstrap import bootstrap

    await bootstrap(handlers, handlers.catalogue)
    code, got = await api("get", "priorityclasses", "", "system-node-critical")
    assert code == 200 and got["value"] == 2000001000
    code, got = await api("get", "priorityclasses", "", "system-cluster-critical")
    assert code == 200 and got["value"] == 2000000000 and not got.get("globalDefault")


# PodDisruptionBudget -------------------------------------------------------------------------

def pdb(name: str, **spec: Any) -> Obj:
    return obj("policy/v1", "PodDisruptionBudget", name, "default", spec={"selector": {"matchLabels": {"a": "b"}},
                                                                          **spec})


async def test_pdb_status_generation_and_validation(api):
    code, got = await api("create", "poddisruptionbudgets", "default", body={
        **pdb("web", minAvailable=2), "status": {"disruptionsAllowed": 7}})
    assert code == 201
    assert got["status"] == {"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0}
    assert got["metadata"]["generation"] == 1
    got["spec"]["minAvailable"] = 3
    got["status"]["disruptionsAllowed"] = 9  # ignored: status changes through /status
    code, upd = await api("update", "poddisruptionbudgets", "default", "web", body=got)
    assert code == 200 and upd["metadata"]["generation"] == 2 and upd["status"]["disruptionsAllowed"] == 0
    upd["status"]["disruptionsAllowed"] = 1
    code, st = await api("update", "poddisruptionbudgets", "default", "web", body=upd, subresource="status")
    assert code == 200 and st["status"]["disruptionsAllowed"] == 1 and st["metadata"]["generation"] == 2
    assert await refused(api, "create", "poddisruptionbudgets", "default", body=pdb("p", minAvailable="150%")) == [('spec.minAvailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, '
                             'StrVal:"150%"}: must not be greater than 100%')]
    assert await refused(api, "create", "poddisruptionbudgets", "default", body=pdb("p", maxUnavailable=-1)) == ["spec.maxUnavailable: Invalid value: -1: must be greater than or equal to 0"]
    both = await refused(api, "create", "poddisruptionbudgets", "default", body=pdb("p", minAvailable=1,
                                                                                     maxUnavailable=1))
    assert len(both) == 1 and both[0].startswith("spec: Invalid value: ")
    assert both[0].endswith(": minAvailable and maxUnavailable cannot be both set")
    rows = await cells(api, "poddisruptionbudgets", "default")
    assert [r[:4] for r in rows] == [["web", "3", "N/A", 1]]


# Ingress, IngressClass, NetworkPolicy ----------------------------------------------------------

def ingress(name: str, **spec: Any) -> Obj:
    return obj("networking.k8s.io/v1", "Ingress", name, "default", spec=spec)


def _path(path: str = "/", **extra: Any) -> Obj:
    return {"path": path, "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}},
            **extra}


async def test_ingress_validation_status_and_table(api):
    assert await refused(api, "create", "ingresses", "default", body=ingress("empty")) == [
        "spec: Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified"]
    no_type = {"path": "/x", "backend": {"service": {"name": "web", "port": {"number": 80}}}}
    assert await refused(api, "create", "ingresses", "default", body=ingress("bad", rules=[
        {"host": "10.0.0.1", "http": {"paths": [no_type, _path("relative"),
                                                 {**_path(), "backend": {"service": {"name": "web"}}}]}}])) == [
        'spec.rules[0].host: Invalid value: "10.0.0.1": must be a DNS name, not an IP address',
        "spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified",
        'spec.rules[0].http.paths[1].path: Invalid value: "relative": must be an absolute path',
        "spec.rules[0].http.paths[2].backend: Required value: port name or number is required"]
    rules = [{"host": h, "http": {"paths": [_path()]}} for h in ("a.example.com", "b.example.com",
                                                                  "c.example.com", "d.example.com")]
    code, got = await api("create", "ingresses", "default", body={
        **ingress("web", rules=rules, tls=[{"hosts": ["a.example.com"], "secretName": "s"}]),
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}})
    assert code == 201 and "status" not in got and got["metadata"]["generation"] == 1
    got["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}
    code, st = await api("update", "ingresses", "default", "web", body=got, subresource="status")
    assert code == 200 and st["metadata"]["generation"] == 1
    rows = await cells(api, "ingresses", "default")
    assert rows[0][:5] == ["web", "<none>", "a.example.com,b.example.com,c.example.com + 1 more...", "192.0.2.1",
                           "80, 443"]


async def test_ingress_class_defaults_and_immutable_controller(api):
    body = obj("networking.k8s.io/v1", "IngressClass", "nginx", spec={
        "controller": "example.com/ingress", "parameters": {"kind": "Params", "name": "p", "apiGroup": "k8s.example.com"}})
    code, got = await api("create", "ingressclasses", body=body)
    assert code == 201 and got["spec"]["parameters"]["scope"] == "Cluster"
    got["spec"]["controller"] = "example.com/other"
    assert await refused(api, "update", "ingressclasses", "", "nginx", body=got) == ['spec.controller: Invalid value: "example.com/other": field is immutable']
    assert await refused(api, "create", "ingressclasses", body=obj("networking.k8s.io/v1", "IngressClass", "x",
                                                               spec={"controller": "nope"})) == [('spec.controller: Invalid value: "nope": must be a domain-prefixed path (such as '
                             '"acme.io/foo")')]
    rows = await cells(api, "ingressclasses")
    assert rows[0][:3] == ["nginx", "example.com/ingress", "Params.k8s.example.com/p"]


async def test_network_policy_defaults_and_validation(api):
    body = obj("networking.k8s.io/v1", "NetworkPolicy", "np", "default", spec={
        "podSelector": {"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["b", "a"]}]},
        "ingress": [{"ports": [{"port": 80}]}], "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]})
    code, got = await api("create", "networkpolicies", "default", body=body)
    assert code == 201
    assert got["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert got["spec"]["ingress"][0]["ports"] == [{"port": 80, "protocol": "TCP"}]
    rows = await cells(api, "networkpolicies", "default")
    assert rows[0][:2] == ["np", "app=web,tier in (a,b)"]
    bad_body = obj("networking.k8s.io/v1", "NetworkPolicy", "bad", "default", spec={
        "podSelector": {}, "ingress": [{"ports": [{"port": 70000, "protocol": "ICMP"}], "from": [{}]}],
        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16"]}}]}]})
    assert await refused(api, "create", "networkpolicies", "default", body=bad_body) == [
        'spec.ingress[0].ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"',
        "spec.ingress[0].ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
        "spec.ingress[0].from[0]: Required value: must specify a peer",
        'spec.egress[0].to[0].ipBlock.except[0]: Invalid value: "11.0.0.0/16": must be a strict subset of `cidr`']


def test_format_label_selector():
    assert format_label_selector({}) == "<none>"
    assert format_label_selector({"matchExpressions": [{"key": "b", "operator": "DoesNotExist"},
                                                        {"key": "a", "operator": "Exists"}]}) == "a,!b"


# StorageClass --------------------------------------------------------------------------------

async def test_storage_class_defaults_update_rules_and_default_marker(api):
    body = obj("storage.k8s.io/v1", "StorageClass", "fast", provisioner="example.com/disk",
               parameters={"type": "ssd"})
    body["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    code, got = await api("create", "storageclasses", body=body)
    assert code == 201 and (got["reclaimPolicy"], got["volumeBindingMode"]) == ("Delete", "Immediate")
    got["parameters"] = {"type": "hdd"}
    got["reclaimPolicy"] = "Retain"
    assert await refused(api, "update", "storageclasses", "", "fast", body=got) == ["parameters: Forbidden: updates to parameters are forbidden.",
                             "reclaimPolicy: Forbidden: updates to reclaimPolicy are forbidden."]
    assert await refused(api, "create", "storageclasses", body=obj("storage.k8s.io/v1", "StorageClass", "x",
                                                               reclaimPolicy="Recycle")) == ["provisioner: Required value",
                             'reclaimPolicy: Unsupported value: "Recycle": supported values: "Delete", "Retain"']
    rows = await cells(api, "storageclasses")
    assert rows[0][:5] == ["fast (default)", "example.com/disk", "Delete", "Immediate", False]


# Node ----------------------------------------------------------------------------------------

async def test_node_is_cluster_scoped_with_status_subresource(api):
    body = obj("v1", "Node", "n1", spec={"taints": [{"key": "k", "effect": "Sometimes"}]})
    assert await refused(api, "create", "nodes", body=body) == [('spec.taints[0].effect: Unsupported value: "Sometimes": supported values: '
                             '"NoSchedule", "PreferNoSchedule", "NoExecute"')]
    body = obj("v1", "Node", "n1", spec={"podCIDRs": ["10.0.1.0/24"]},
               status={"capacity": {"cpu": "4"}, "nodeInfo": {"kubeletVersion": "v1.33.0"}})
    body["metadata"]["labels"] = {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "infra"}
    code, got = await api("create", "nodes", body=body)
    assert code == 201 and got["status"]["allocatable"] == {"cpu": "4"}
    assert "namespace" not in got["metadata"]
    row = (await cells(api, "nodes"))[0]
    assert row[:3] == ["n1", "Unknown", "control-plane,infra"] and row[4:] == [
        "v1.33.0", "<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"]
    got["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    code, upd = await api("update", "nodes", "", "n1", body=got)
    assert code == 200 and "conditions" not in upd["status"]  # the main resource keeps the status
    code, upd = await api("update", "nodes", "", "n1", body=got, subresource="status")
    assert code == 200 and upd["status"]["conditions"][0]["status"] == "True"
    upd["spec"]["unschedulable"] = True
    code, upd = await api("update", "nodes", "", "n1", body=upd)
    assert (await cells(api, "nodes"))[0][1] == "Ready,SchedulingDisabled"
    upd["spec"]["podCIDRs"] = ["10.0.2.0/24"]
    assert await refused(api, "update", "nodes", "", "n1", body=upd) == ['spec.podCIDRs: Forbidden: node updates may not change podCIDR except from "" to valid']


# LimitRange ----------------------------------------------------------------------------------

async def test_limit_range_defaults_and_order_rules(api):
    body = obj("v1", "LimitRange", "lr", "default", spec={"limits": [
        {"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "64Mi"}}]})
    code, got = await api("create", "limitranges", "default", body=body)
    assert code == 201
    item = got["spec"]["limits"][0]
    assert item["default"] == {"cpu": "2"} and item["defaultRequest"] == {"cpu": "2", "memory": "64Mi"}
    bad_body = obj("v1", "LimitRange", "bad", "default", spec={"limits": [
        {"type": "Pod", "max": {"cpu": "1"}, "min": {"cpu": "2"}, "maxLimitRequestRatio": {"cpu": "0.5"}},
        {"type": "Pod"}]})
    assert await refused(api, "create", "limitranges", "default", body=bad_body) == [
        'spec.limits[0].min[cpu]: Invalid value: "2": min value 2 is greater than max value 1',
        'spec.limits[0].maxLimitRequestRatio[cpu]: Invalid value: "0.5": ratio 0.5 is less than 1',
        'spec.limits[1].type: Duplicate value: "Pod"']
    code, table = await api("list", "limitranges", "default", table=True)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Created At"]
    assert table["rows"][0]["cells"] == ["lr", got["metadata"]["creationTimestamp"]]


async def test_limit_range_order_messages(api):
    """ValidateLimitRange's six order checks, each with kube's field, value and message."""
    body = obj("v1", "LimitRange", "order", "default", spec={"limits": [{
        "type": "Container", "min": {"cpu": "4", "memory": "2"}, "max": {"cpu": "2"},
        "default": {"cpu": "3"}, "defaultRequest": {"cpu": "5", "memory": "1"}}]})
    assert await refused(api, "create", "limitranges", "default", body=body) == [
        'spec.limits[0].min[cpu]: Invalid value: "4": min value 4 is greater than max value 2',
        'spec.limits[0].defaultRequest[cpu]: Invalid value: "5": default request value 5 is greater than max '
        'value 2',
        'spec.limits[0].defaultRequest[cpu]: Invalid value: "5": default request value 5 is greater than '
        'default limit value 3',
        'spec.limits[0].default[cpu]: Invalid value: "4": min value 4 is greater than default value 3',
        'spec.limits[0].default[cpu]: Invalid value: "2": default value 3 is greater than max value 2',
        'spec.limits[0].defaultRequest[memory]: Invalid value: "1": min value 2 is greater than default '
        'request value 1']


@pytest.mark.parametrize("resource,short", [("nodes", "no"), ("limitranges", "limits"), ("priorityclasses", "pc"),
                                            ("poddisruptionbudgets", "pdb"), ("ingresses", "ing"),
                                            ("networkpolicies", "netpol"), ("storageclasses", "sc")])
def test_short_names(resource, short):
    assert [r.short_names for r in CATALOGUE.resources if r.plural == resource] == [(short,)]


async def test_csi_driver_defaults_immutable_fields_and_table(api):
    body = obj("storage.k8s.io/v1", "CSIDriver", "disk.example.com", spec={"tokenRequests": [{"audience": "a"}]})
    code, got = await api("create", "csidrivers", body=body)
    assert code == 201 and got["spec"] == {
        "attachRequired": True, "podInfoOnMount": False, "storageCapacity": False, "requiresRepublish": False,
        "seLinuxMount": False, "fsGroupPolicy": "ReadWriteOnceWithFSType", "volumeLifecycleModes": ["Persistent"],
        "tokenRequests": [{"audience": "a"}]}
    got["spec"]["attachRequired"] = False
    assert await refused(api, "update", "csidrivers", "", "disk.example.com", body=got) == [
        "spec.attachRequired: Invalid value: false: field is immutable"]
    bad = obj("storage.k8s.io/v1", "CSIDriver", "x", spec={"fsGroupPolicy": "Some", "volumeLifecycleModes": ["Odd"],
                                                           "tokenRequests": [{"audience": "a"}, {"audience": "a"}]})
    assert await refused(api, "create", "csidrivers", body=bad) == [
        'spec.fsGroupPolicy: Unsupported value: "Some": supported values: "File", "None", "ReadWriteOnceWithFSType"',
        'spec.volumeLifecycleModes[0]: Unsupported value: "Odd": supported values: "Ephemeral", "Persistent"',
        'spec.tokenRequests[1].audience: Duplicate value: "a"']
    rows = await cells(api, "csidrivers")
    assert rows[0][:7] == ["disk.example.com", True, False, False, "a", False, "Persistent"]
