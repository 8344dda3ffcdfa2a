"""A pizza server (python -m services.pizza) as a process beside a Stack: its own etcd prefix on the
stack's etcd, delegated authentication and authorization against the stack's apiary, the stack's
serving certificate and the front-proxy CA. Used by the tests and the bench until the local runner
runs aggregated servers itself."""
from __future__ import annotations

import base64
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from tools.certs import make_ca, make_cert
from tools.run import ROOT, Stack


@dataclass
class PizzaServer:
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path
    log: BinaryIO
    prefix: str

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def command(stack: Stack, port: int, prefix: str, extra: list[str] | None = None,
            tls: tuple[Path, Path] | None = None, ca_flags: bool = True) -> list[str]:
    """tls: the serving certificate and key (default: the stack's apiserver certificate); without
    ca_flags the server reads its CAs from kube-system/extension-apiserver-authentication."""
    pki = stack.state / "pki"
    cert, key = tls or (pki / "apiserver.crt", pki / "apiserver.key")
    return [sys.executable, "-m", "services.pizza", "--secure-port", str(port), "--bind-address", "127.0.0.1",
            "--tls-cert-file", str(cert), "--tls-private-key-file", str(key),
            "--etcd-servers", stack.etcd_url, "--etcd-prefix", prefix, "--kubeconfig", str(stack.kubeconfig),
            *(["--requestheader-client-ca-file", str(pki / "front-proxy-ca.crt"),
                "--requestheader-allowed-names", "front-proxy-client", "--client-ca-file", str(pki / "ca.crt")]
              if ca_flags else []),
            *(extra or [])]


def start(stack: Stack, port: int, log_path: Path, extra: list[str] | None = None, timeout: float = 30.0,
          prefix: str = "", tls: tuple[Path, Path] | None = None, ca_flags: bool = True) -> PizzaServer:
    """Start it and wait until /readyz answers 200 (its informers synced, etcd reachable)."""
    prefix = prefix or f"/pizza-{uuid.uuid4().hex[:8]}"
    log = open(log_path, "ab")  # noqa: SIM115 - held open by the process, closed by PizzaServer.stop
    proc = subprocess.Popen(command(stack, port, prefix, extra, tls, ca_flags), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    server = PizzaServer(proc, f"https://127.0.0.1:{port}", log_path, log, prefix)
    ctx = ssl._create_unverified_context()  # a probe, as kubelet's: the certificate may be any CA's
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            server.log.close()
            raise RuntimeError(f"the pizza server exited ({proc.returncode}):\n{log_path.read_text()}")
        try:
            with urllib.request.urlopen(f"{server.url}/readyz", timeout=2, context=ctx) as r:
                if r.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"the pizza server is not ready after {timeout} s:\n{log_path.read_text()}")
        time.sleep(0.2)


# Registration with apiary, as the book's manifests register the server in a cluster ------------------

NAMESPACE, SERVICE = "pizza-apiserver", "api"
GROUP = "restaurant.programming-kubernetes.info"
VERSIONS = (("v1alpha1", 15), ("v1beta1", 20))


def serving_certificate(directory: Path) -> tuple[Path, Path, Path]:
    """(certificate, key, CA) for the name the aggregator verifies: <service>.<namespace>.svc."""
    name = f"{SERVICE}.{NAMESPACE}.svc"
    ca = make_ca(directory / "pizza-ca", "pizza-ca")
    make_cert(directory / "pizza", ca, name, server=True, dns_names=(name,))
    return directory / "pizza.crt", directory / "pizza.key", directory / "pizza-ca.crt"


def registration(port: int, ca_file: Path) -> list[dict[str, Any]]:
    """Namespace, Service, its Endpoints (127.0.0.1:<port>, as an endpoints controller would write
    them) and both APIServices with the CA as caBundle."""
    ca_bundle = base64.b64encode(ca_file.read_bytes()).decode()
    meta = {"name": SERVICE, "namespace": NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta,
         "spec": {"ports": [{"port": 443, "targetPort": port}]}},
        {"apiVersion": "v1", "kind": "Endpoints", "metadata": meta,
         "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": port}]}]},
        *({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": f"{v}.{GROUP}"},
           "spec": {"group": GROUP, "version": v, "groupPriorityMinimum": 1000, "versionPriority": priority,
                    "caBundle": ca_bundle, "service": {"name": SERVICE, "namespace": NAMESPACE, "port": 443}}}
          for v, priority in VERSIONS),
    ]


def registration_yaml(port: int, ca_file: Path) -> str:
    return yaml.safe_dump_all(registration(port, ca_file), sort_keys=False)


def namespace_reader_rbac(namespace: str, service_account: str) -> list[dict[str, Any]]:
    """What the server's identity needs besides system:auth-delegator and the auth-reader binding: its
    NamespaceLifecycle admission lists and watches namespaces (k8s/pizza/rbac.yaml grants the same)."""
    name = f"{service_account}:namespaces"
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
         "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]},
    ]
