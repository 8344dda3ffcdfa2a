"""Service (ClusterIP allocation), Endpoints and EndpointSlice through the registry's handlers."""
from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import pytest

from services.common import errors
from services.registry import ipallocator

pytestmark = pytest.mark.asyncio


def svc(name: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("ports", [{"port": 80}])
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
            "spec": spec}


async def test_cluster_ip_defaults_and_release(api, storage):
    _, s = await api("create", "services", "default", body=svc("web"))
    spec = s["spec"]
    assert ipaddress.ip_address(spec["clusterIP"]) in ipaddress.ip_network("10.96.0.0/12")
    assert spec["clusterIPs"] == [spec["clusterIP"]]
    assert spec["type"] == "ClusterIP" and spec["sessionAffinity"] == "None"
    assert spec["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    # the same address asked for again is refused while taken
    with pytest.raises(errors.Invalid) as e:
        await api("create", "services", "default", body=svc("copy", clusterIP=spec["clusterIP"]))
    assert "provided IP is already allocated" in e.value.message
    await api("delete", "services", "default", "web")
    _, again = await api("create", "services", "default", body=svc("copy", clusterIP=spec["clusterIP"]))
    assert again["spec"]["clusterIP"] == spec["clusterIP"]


async def test_concurrent_creates_get_unique_ips(api, monkeypatch):
    monkeypatch.setattr(ipallocator.ClusterIPAllocator, "__init__", _small_range)
    results = await asyncio.gather(*(api("create", "services", "default", body=svc(f"s{i}")) for i in range(6)))
    ips = [r[1]["spec"]["clusterIP"] for r in results]
    assert len(set(ips)) == 6
    with pytest.raises(errors.InternalError, match="range is full"):
        await api("create", "services", "default", body=svc("full"))


def _small_range(self: Any, store: Any, cidr: str = "") -> None:
    """10.0.0.0/29: six usable addresses, so collisions are certain without CAS."""
    _orig_init(self, store, "10.0.0.0/29")


_orig_init = ipallocator.ClusterIPAllocator.__init__


async def test_headless_external_name_and_out_of_range(api):
    _, h = await api("create", "services", "default", body=svc("h", clusterIP="None"))
    assert h["spec"]["clusterIPs"] == ["None"]
    _, x = await api("create", "services", "default",
                     body=svc("x", type="ExternalName", externalName="example.com", ports=[]))
    assert "clusterIP" not in x["spec"]
    with pytest.raises(errors.Invalid) as e:
        await api("create", "services", "default", body=svc("o", clusterIP="192.168.0.1"))
    assert "is not in the valid range" in e.value.message


async def test_service_validation(api):
    bad = svc("Bad", type="Weird", ports=[{"port": 0, "protocol": "ICMP"}, {"port": 81, "name": "a"}])
    with pytest.raises(errors.Invalid) as e:
        await api("create", "services", "default", body=bad)
    fields = [c["field"] for c in e.value.details["causes"]]
    assert fields == ["metadata.name", "spec.type", "spec.ports[0].name", "spec.ports[0].port",
                      "spec.ports[0].protocol", "spec.ports[0].targetPort"]
    with pytest.raises(errors.Invalid) as e:
        await api("create", "services", "default", body=svc("noports", ports=[]))
    assert e.value.details["causes"][0] == {"reason": "FieldValueRequired", "message": "Required value",
                                            "field": "spec.ports"}
    _, s = await api("create", "services", "default", body=svc("keep"))
    s["spec"]["clusterIP"] = "10.96.0.77" if s["spec"]["clusterIP"] != "10.96.0.77" else "10.96.0.78"
    s["spec"]["clusterIPs"] = [s["spec"]["clusterIP"]]
    with pytest.raises(errors.Invalid, match="may not change once set"):
        await api("update", "services", "default", "keep", body=s)


async def test_service_and_endpoints_tables(api):
    await api("create", "services", "default", body=svc("web", clusterIP="10.96.0.10",
                                                        ports=[{"port": 80, "name": "a"}, {"port": 443, "name": "b",
                                                                              "protocol": "UDP"}]))
    _, t = await api("get", "services", "default", "web", table=True)
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Type", "Cluster-IP", "External-IP",
                                                           "Port(s)", "Age", "Selector"]
    assert t["rows"][0]["cells"][:5] == ["web", "ClusterIP", "10.96.0.10", "<none>", "80/TCP,443/UDP"]
    ep = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web", "namespace": "default"},
          "subsets": [{"addresses": [{"ip": f"127.0.0.{i}"} for i in range(1, 6)], "ports": [{"port": 8443}]}]}
    _, e = await api("create", "endpoints", "default", body=ep)
    assert e["subsets"][0]["ports"] == [{"port": 8443, "protocol": "TCP"}]
    _, t = await api("get", "endpoints", "default", "web", table=True)
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Endpoints", "Age"]
    assert t["rows"][0]["cells"][1] == "127.0.0.1:8443,127.0.0.2:8443,127.0.0.3:8443 + 2 more..."
    ep["metadata"]["name"] = "bad"
    ep["subsets"] = [{"addresses": [{"ip": "nope"}], "ports": [{"port": 70000}]}]
    with pytest.raises(errors.Invalid) as err:
        await api("create", "endpoints", "default", body=ep)
    assert [c["field"] for c in err.value.details["causes"]] == ["subsets[0].addresses[0].ip",
                                                                 "subsets[0].ports[0].port"]


async def test_endpointslice(api):
    es = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
          "metadata": {"name": "web-1", "namespace": "default"}, "addressType": "IPv4",
          "endpoints": [{"addresses": ["127.0.0.1"]}], "ports": [{"port": 8443, "name": "https"}]}
    _, o = await api("create", "endpointslices", "default", body=es)
    assert o["ports"][0]["protocol"] == "TCP"
    _, t = await api("get", "endpointslices", "default", "web-1", table=True)
    assert t["rows"][0]["cells"][1:4] == ["IPv4", "8443", "127.0.0.1"]
    es["metadata"]["name"] = "web-2"
    es["endpoints"] = [{"addresses": ["::1"]}]
    with pytest.raises(errors.Invalid) as e:
        await api("create", "endpointslices", "default", body=es)
    assert e.value.details["causes"][0]["field"] == "endpoints[0].addresses[0]"


async def test_type_changes_release_and_allocate(api):
    _, s = await api("create", "services", "default", body=svc("flip", clusterIP="10.96.0.50"))
    s["spec"]["type"] = "ExternalName"
    s["spec"]["externalName"] = "example.com"
    _, x = await api("update", "services", "default", "flip", body=s)
    assert "clusterIP" not in x["spec"] and "clusterIPs" not in x["spec"]
    # the address is free again
    _, other = await api("create", "services", "default", body=svc("other", clusterIP="10.96.0.50"))
    assert other["spec"]["clusterIP"] == "10.96.0.50"
    x["spec"]["type"] = "ClusterIP"
    del x["spec"]["externalName"]
    _, back = await api("update", "services", "default", "flip", body=x)
    ip = back["spec"]["clusterIP"]
    assert ip and ip != "10.96.0.50" and back["spec"]["clusterIPs"] == [ip]


@pytest.mark.parametrize("resource,body,message", [
    ("services", svc("a", ports=5), "json: cannot unmarshal number into Go struct field Service.spec.ports of type []"),
    ("services", svc("a", ports=[{"port": "80"}]),
     "json: cannot unmarshal string into Go struct field Service.spec.ports[0].port of type int32"),
    ("services", {"kind": "Service", "metadata": {"name": "a"}, "spec": []},
     "json: cannot unmarshal array into Go struct field Service.spec of type"),
    ("endpoints", {"kind": "Endpoints", "metadata": {"name": "a"}, "subsets": [{"addresses": ["1.2.3.4"]}]},
     "json: cannot unmarshal string into Go struct field Endpoints.subsets[0].addresses[0] of type map"),
    ("endpointslices", {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "a"},
                        "addressType": "IPv4", "endpoints": [{"addresses": [1]}]},
     "json: cannot unmarshal number into Go struct field EndpointSlice.endpoints[0].addresses[0] of type string"),
])
async def test_wrong_types_are_bad_requests(api, resource, body, message):
    with pytest.raises(errors.BadRequest) as e:
        await api("create", resource, "default", body=body)
    assert message in e.value.message
