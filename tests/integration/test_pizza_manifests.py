"""k8s/pizza: the manifests render and validate against the Kubernetes 1.32 schemas, carry what an
aggregated API server needs (delegation RBAC, Service 443 -> 8443, both APIServices), the server
accepts its arguments, and the certificate Job's code sets the caBundles through a real API."""
from __future__ import annotations

import base64
import subprocess
import uuid
from pathlib import Path

import httpx
import kubernetes_validate
import yaml
from cryptography import x509

from services.kit.options import parser
from tools import pizza_certs
from services.cluster.aggregated import PIZZA
from services.cluster.stack import ROOT, Stack

GROUP = "restaurant.programming-kubernetes.info"


def render() -> list[dict]:
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / "k8s" / "pizza")], capture_output=True, text=True,
                         check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(objs: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def test_every_object_validates_against_kubernetes_1_32() -> None:
    objs = render()
    assert objs
    for obj in objs:
        kubernetes_validate.validate(obj, "1.32.0", strict=True)


def test_delegation_rbac_service_and_apiservices() -> None:
    objs = render()
    crb = by_kind(objs, "ClusterRoleBinding")["pizza-apiserver:system:auth-delegator"]
    assert crb["roleRef"]["name"] == "system:auth-delegator"
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": "apiserver", "namespace": "pizza-apiserver"}]
    reader = by_kind(objs, "RoleBinding")["pizza-apiserver-auth-reader"]
    assert reader["metadata"]["namespace"] == "kube-system"
    assert reader["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                 "name": "extension-apiserver-authentication-reader"}
    namespaces = by_kind(objs, "ClusterRole")["pizza-apiserver:namespaces"]["rules"]
    assert namespaces == [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}]
    (port,) = by_kind(objs, "Service")["api"]["spec"]["ports"]
    assert port["port"] == 443 and port["targetPort"] == 8443
    apiservices = by_kind(objs, "APIService")
    assert {n: (a["spec"]["groupPriorityMinimum"], a["spec"]["versionPriority"]) for n, a in apiservices.items()} == {
        f"v1alpha1.{GROUP}": (1000, 15), f"v1beta1.{GROUP}": (1000, 20)}
    assert all(a["spec"]["service"] == {"name": "api", "namespace": "pizza-apiserver", "port": 443}
               for a in apiservices.values())
    assert set(apiservices) == set(pizza_certs.APISERVICES)
    assert by_kind(objs, "StatefulSet")["etcd"]["spec"]["replicas"] == 1


def test_the_server_accepts_its_arguments() -> None:
    d = by_kind(render(), "Deployment")["pizza-apiserver"]
    pod = d["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"][:3] == ["python", "-m", "services.pizza"]
    args = parser("pizza", "", "/pizza-apiserver").parse_args(c["args"][3:])
    assert args.secure_port == 8443 and args.etcd_servers == "http://etcd:2379"
    assert args.tls_cert_file.startswith(c["volumeMounts"][0]["mountPath"])
    assert pod["serviceAccountName"] == "apiserver"
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}


def test_the_certificate_job_sets_both_cabundles(stack: Stack, admin: httpx.Client, tmp_path: Path) -> None:
    ns = f"pizza-certs-{uuid.uuid4().hex[:6]}"
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    objs = by_kind(render(), "APIService")
    created = []
    # the manifests' APIServices have the names of the stack's own pizza server's: they stand in for
    # them during the test, then the runner registers the stack's again
    for name in objs:
        admin.delete(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
    try:
        for name, obj in objs.items():
            obj["spec"]["service"]["namespace"] = ns
            obj["metadata"].pop("labels", None)
            r = admin.post("/apis/apiregistration.k8s.io/v1/apiservices", json=obj)
            assert r.status_code == 201, r.text
            created.append(name)
        ca = pizza_certs.apply(admin, ns, tmp_path)
        (tmp_path / "again").mkdir()
        again = pizza_certs.apply(admin, ns, tmp_path / "again")  # the Secret is kept, never rotated
        assert again == ca
        for name in created:
            spec = admin.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}").json()["spec"]
            assert spec["caBundle"] == ca
        secret = admin.get(f"/api/v1/namespaces/{ns}/secrets/{pizza_certs.SECRET}").json()
        cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert f"api.{ns}.svc" in names.get_values_for_type(x509.DNSName)
    finally:
        for name in created:
            admin.delete(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
        for agg in stack.aggregated:
            if agg.name == PIZZA.name:
                stack.register_service(agg)
