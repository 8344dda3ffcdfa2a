"""The pizza server's serving certificate on a cluster (k8s/pizza's certificate Job): a CA and a
certificate for the Service `api.<namespace>.svc`, kept in the Secret `pizza-serving-cert` (made
once: a Secret that exists is kept), and the CA written into both APIServices' spec.caBundle, which
the manifests leave empty (the aggregator verifies the pizza server with it)."""
from __future__ import annotations

import argparse
import base64
import tempfile
from pathlib import Path

import httpx

from services.cluster.certs import dns_names, in_cluster_arguments, in_cluster_client, make_ca, make_cert

SECRET = "pizza-serving-cert"
SERVICE = "api"
APISERVICES = ("v1alpha1.restaurant.programming-kubernetes.info", "v1beta1.restaurant.programming-kubernetes.info")


def serving_secret(state: Path, namespace: str) -> dict[str, str]:
    """tls.crt, tls.key and ca.crt (base64) for the Service's names."""
    ca = make_ca(state / "pizza-ca", "pizza-ca")
    make_cert(state / "pizza", ca, f"{SERVICE}.{namespace}.svc", server=True, dns_names=dns_names(SERVICE, namespace))
    def b64(name: str) -> str:
        return base64.b64encode((state / name).read_bytes()).decode()

    return {"tls.crt": b64("pizza.crt"), "tls.key": b64("pizza.key"), "ca.crt": b64("pizza-ca.crt")}


def apply(client: httpx.Client, namespace: str, state: Path) -> str:
    """Create the Secret unless it exists, then set both caBundles from it; the CA it holds."""
    secrets = f"/api/v1/namespaces/{namespace}/secrets"
    r = client.post(secrets, json={"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                                   "metadata": {"name": SECRET}, "data": serving_secret(state, namespace)})
    if r.status_code != 409:
        r.raise_for_status()
    r = client.get(f"{secrets}/{SECRET}")
    r.raise_for_status()
    ca = r.json()["data"]["ca.crt"]
    for name in APISERVICES:
        r = client.patch(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}", json={"spec": {"caBundle": ca}},
                         headers={"Content-Type": "application/merge-patch+json"})
        r.raise_for_status()
    return ca


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tools.pizza_certs", description=__doc__)
    in_cluster_arguments(p, "pizza-apiserver")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, in_cluster_client(args) as client:
        apply(client, args.namespace, Path(tmp))
    print(f"{SECRET} in {args.namespace}; caBundle set on {', '.join(APISERVICES)}")


if __name__ == "__main__":
    main()
