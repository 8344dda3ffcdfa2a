"""The k8s manifests: every kustomization renders (kubectl kustomize), every object validates
against the Kubernetes 1.32 schemas (kubernetes-validate), every service's arguments parse with
that service's own flags, and the certificate Job's code creates its Secrets through a real API
(apiary's own, on the shared stack)."""
from __future__ import annotations

import argparse
import base64
import importlib
import subprocess
from pathlib import Path

import httpx
import kubernetes_validate
import pytest
import yaml
from cryptography import x509

from services.cluster.certs import create_secrets, in_cluster_arguments, in_cluster_client, k8s_secrets
from tools.dashboards import dashboards, write_all
from services.cluster.stack import ROOT, Stack
from services.common import tracing

K8S = ROOT / "k8s"
KUSTOMIZATIONS = ["base", "overlays/single-etcd", "overlays/dashboards", "overlays/tracing"]


def render(path: str) -> list[dict]:
    if path == "overlays/dashboards":
        write_all(K8S / "overlays" / "dashboards" / "dashboards")  # what `make dashboards` writes
    out = subprocess.run(["kubectl", "kustomize", str(K8S / path)], capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_every_object_validates_against_kubernetes_1_32(path: str) -> None:
    objs = render(path)
    assert objs
    for obj in objs:
        kubernetes_validate.validate(obj, "1.32.0", strict=True)


def _by_kind(objs: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def test_deployments_probes_budgets_and_scraping() -> None:
    objs = render("base")
    deployments = _by_kind(objs, "Deployment")
    assert set(deployments) == {"proxy", "auth", "apf", "admission", "registry", "storage", "controllermanager"}
    budgets = _by_kind(objs, "PodDisruptionBudget")
    services = _by_kind(objs, "Service")
    for name, d in deployments.items():
        assert d["metadata"]["namespace"] == "apiary"
        assert d["spec"]["replicas"] >= 2, name  # every stateless service runs as several replicas
        pod = d["spec"]["template"]
        (c,) = pod["spec"]["containers"]
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
        assert c["resources"]["requests"]
        assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        assert name in budgets and name in services
    etcd = _by_kind(objs, "StatefulSet")["etcd"]
    assert etcd["spec"]["replicas"] == 3
    single = _by_kind(render("overlays/single-etcd"), "StatefulSet")["etcd"]
    assert single["spec"]["replicas"] == 1
    env = {e["name"]: e.get("value") for e in single["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["INITIAL_CLUSTER"] == "etcd-0=http://etcd-0.etcd:2380"


def test_every_service_accepts_its_arguments() -> None:
    for name, d in _by_kind(render("base"), "Deployment").items():
        args = d["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[:3] == ["python", "-m", f"services.{name}"]
        module = importlib.import_module(f"services.{name}.__main__")
        parsed = module.parse_args(args[3:])  # an unknown or malformed flag exits
        assert parsed.bind_address == "0.0.0.0"
        peers = {k: v for k, v in vars(parsed).items() if k.endswith("_address") and k not in ("bind_address", "advertise_address")}
        assert all(v.split(":")[0] in ("auth", "apf", "admission", "registry", "storage") for v in peers.values())


def test_the_tracing_overlay_points_every_service_at_the_collector() -> None:
    objs = render("overlays/tracing")
    (config,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("apiary-tracing")]
    cfg = tracing.decode(config["data"]["tracing-config.yaml"])  # kube's TracingConfiguration, as a service reads it
    host, _, port = cfg.endpoint.rpartition(":")
    collector = _by_kind(objs, "Service")["otel-collector"]
    assert host == "otel-collector.apiary.svc" and collector["spec"]["ports"][0]["port"] == int(port)
    deployments = _by_kind(objs, "Deployment")
    receiver = deployments.pop("otel-collector")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert receiver[:3] == ["python", "-m", "services.cluster.otlpreceiver"] and f"--port={port}" in receiver
    assert set(deployments) == set(_by_kind(render("base"), "Deployment"))
    for name, d in deployments.items():
        pod = d["spec"]["template"]["spec"]
        args = pod["containers"][0]["args"]
        parsed = importlib.import_module(f"services.{name}.__main__").parse_args(args[3:])
        mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tracing")
        assert parsed.tracing_config_file == f"{mount['mountPath']}/tracing-config.yaml", name
        volume = next(v for v in pod["volumes"] if v["name"] == "tracing")
        assert volume["configMap"]["name"] == config["metadata"]["name"]


def test_the_dashboards_overlay_provisions_every_dashboard() -> None:
    objs = render("overlays/dashboards")
    cms = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("apiary-dashboards")]
    assert len(cms) == 1 and sorted(cms[0]["data"]) == sorted(f"{uid}.json" for uid, _, _ in dashboards())


def test_the_certificate_job_creates_its_secrets(stack: Stack, tokens: dict[str, str], admin: httpx.Client,
                                                 tmp_path: Path) -> None:
    ns = "pki-job"
    admin.post("/api/v1/namespaces", json={"metadata": {"name": ns}})
    secrets = k8s_secrets(tmp_path, ns)
    token = tmp_path / "token"
    token.write_text(tokens["admin"])
    flags = argparse.ArgumentParser()
    in_cluster_arguments(flags, "apiary")
    args = flags.parse_args(["--server", stack.server, "--token-file", str(token),
                             "--certificate-authority", str(stack.state / "pki" / "ca.crt")])
    with in_cluster_client(args) as job:
        assert create_secrets(secrets, ns, job) == ["apiary-pki", "apiary-config"]
        assert create_secrets(secrets, ns, job) == []  # kept, never rotated
    pki = admin.get(f"/api/v1/namespaces/{ns}/secrets/apiary-pki").json()["data"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(pki["storage.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "storage" in names and f"storage.{ns}.svc" in names
    config = admin.get(f"/api/v1/namespaces/{ns}/secrets/apiary-config").json()["data"]
    assert set(config) == {"tokens.csv", "encryption-config.yaml"}
