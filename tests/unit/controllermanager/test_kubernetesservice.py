"""The kubernetes-service controller's decisions without a server: which leases count, and the Service, Endpoints
and EndpointSlices it wants."""
from __future__ import annotations

import datetime as dt

import pytest

from services.controllermanager.kubernetesservice import (
    desired_endpoints,
    desired_service,
    desired_slices,
    first_address,
    lease_state,
    parse_endpoint,
)

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.timezone.utc)


def lease(address: str, renewed: str, duration: int = 15) -> dict:
    return {"metadata": {"name": "apiserver-x", "annotations": {"apiary.io/endpoint": address}},
            "spec": {"renewTime": renewed, "leaseDurationSeconds": duration}}


def test_first_address():
    assert first_address("10.96.0.0/12") == "10.96.0.1"
    assert first_address("fd00:10:96::/112") == "fd00:10:96::1"
    with pytest.raises(ValueError):
        first_address("10.96.0.0/33")


def test_leases():
    assert lease_state(lease("127.0.0.1:6443", "2026-06-01T11:59:50.000000Z"), NOW) == (("127.0.0.1", 6443), True)
    assert lease_state(lease("127.0.0.1:6443", "2026-06-01T11:59:44.000000Z"), NOW) == (("127.0.0.1", 6443), False)
    assert lease_state(lease("[::1]:6443", "2026-06-01T11:59:59Z"), NOW) == (("::1", 6443), True)
    assert lease_state({"metadata": {}, "spec": {}}, NOW) == (None, False)
    for bad in ("", "localhost:6443", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:x"):
        assert parse_endpoint(bad) is None


def test_desired_objects():
    eps = [("127.0.0.1", 6443), ("127.0.0.1", 6543), ("10.0.0.2", 6443)]
    assert desired_service("10.96.0.1", 6443)["spec"] == {
        "type": "ClusterIP", "clusterIP": "10.96.0.1", "sessionAffinity": "None",
        "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}
    assert desired_endpoints(eps)["subsets"] == [
        {"addresses": [{"ip": "10.0.0.2"}, {"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": 6443,
                                                                          "protocol": "TCP"}]},
        {"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": 6543, "protocol": "TCP"}]}]
    assert "subsets" not in desired_endpoints([])
    slices = desired_slices(eps + [("::1", 6443)], 6443)
    assert sorted(slices) == ["kubernetes", "kubernetes-6543", "kubernetes-ipv6"]
    assert slices["kubernetes"]["endpoints"] == [{"addresses": ["10.0.0.2"], "conditions": {"ready": True}},
                                                 {"addresses": ["127.0.0.1"], "conditions": {"ready": True}}]
    assert slices["kubernetes-ipv6"]["addressType"] == "IPv6"
    assert slices["kubernetes-6543"]["ports"] == [{"name": "https", "port": 6543, "protocol": "TCP"}]
    # no replica: the Service's slice stays, empty
    assert desired_slices([], 6443)["kubernetes"]["endpoints"] == []
