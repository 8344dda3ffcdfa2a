"""A proxy replica's lease for the `kubernetes` Service's endpoints: its name and content, and the flags."""
from __future__ import annotations

import datetime as dt

import pytest

from services.proxy.__main__ import parse_args
from services.proxy.endpointlease import LEASE_DURATION, EndpointLease, endpoint, lease_name

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.timezone.utc)


def test_proxy_lease():
    assert endpoint("::1", 6443) == "[::1]:6443" and endpoint("127.0.0.1", 6443) == "127.0.0.1:6443"
    assert lease_name("127.0.0.1", 6443) != lease_name("127.0.0.1", 6543)
    assert lease_name("127.0.0.1", 6443).startswith("apiserver-") and len(lease_name("127.0.0.1", 6443)) == 36
    want = EndpointLease(object(), "127.0.0.1", 6443).desired(NOW)  # type: ignore[arg-type]
    assert want["metadata"]["labels"] == {"apiserver.kubernetes.io/identity": "kube-apiserver"}
    assert want["metadata"]["annotations"] == {"apiary.io/endpoint": "127.0.0.1:6443"}
    assert want["spec"]["leaseDurationSeconds"] == LEASE_DURATION
    assert want["spec"]["renewTime"] == "2026-06-01T12:00:00.000000Z"


def test_proxy_flags():
    base = ["--tls-cert-file", "c", "--tls-private-key-file", "k"]
    args = parse_args(base)
    assert args.endpoint_reconciler_type == "lease" and args.advertise_address == ""
    assert parse_args([*base, "--advertise-address", "10.0.0.5"]).advertise_address == "10.0.0.5"
    with pytest.raises(SystemExit):
        parse_args([*base, "--advertise-address", "api.example"])
    with pytest.raises(SystemExit):
        parse_args([*base, "--endpoint-reconciler-type", "master-count"])
