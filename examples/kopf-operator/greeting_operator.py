"""A kopf operator for Greetings (example.apiary.dev/v1): each one gets a ConfigMap holding its message.

The ConfigMap is owned by its Greeting (ownerReferences), so the garbage collector deletes it with
the Greeting; the Greeting's status names it. A validating webhook refuses a Greeting whose
spec.message is blank. Run with `kopf run --standalone --all-namespaces greeting_operator.py`; the
webhook server listens when GREETING_WEBHOOK_PORT, _CERT and _KEY say where and with what
certificate (the tests take them from the apiary_webhooks fixture).
"""
from __future__ import annotations

import os
from typing import Any

import kopf
import kubernetes

GROUP, VERSION, PLURAL = "example.apiary.dev", "v1", "greetings"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        # KUBECONFIG read now: the client's default was fixed when it was imported
        kubernetes.config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    if port := os.environ.get("GREETING_WEBHOOK_PORT"):
        settings.admission.server = kopf.WebhookServer(
            addr="127.0.0.1", port=int(port),
            certfile=os.environ["GREETING_WEBHOOK_CERT"], pkeyfile=os.environ["GREETING_WEBHOOK_KEY"])


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In a pod, its ServiceAccount; elsewhere the kubeconfig of $KUBECONFIG as it is now (kopf's
    default login goes through the kubernetes client, which read $KUBECONFIG when it was imported)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.validate(GROUP, VERSION, PLURAL, id="validate-greeting")
def validate(spec: kopf.Spec, **_: Any) -> None:
    if not str(spec.get("message") or "").strip():
        raise kopf.AdmissionError("spec.message must not be blank", code=422)


@kopf.on.create(GROUP, VERSION, PLURAL)
def create_config_map(name: str, namespace: str, spec: kopf.Spec, body: kopf.Body, patch: kopf.Patch,
                      **_: Any) -> None:
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-greeting"},
                  "data": {"message": spec["message"]}}
    kopf.adopt(config_map, owner=body)  # namespace and ownerReferences (controller) of the Greeting
    kubernetes.client.CoreV1Api().create_namespaced_config_map(namespace, config_map)
    patch.status["configMap"] = config_map["metadata"]["name"]
    patch.status["phase"] = "Ready"


@kopf.on.field(GROUP, VERSION, PLURAL, field="spec.message")
def update_message(name: str, namespace: str, new: str, old: str | None, **_: Any) -> None:
    if old is not None:
        kubernetes.client.CoreV1Api().patch_namespaced_config_map(
            f"{name}-greeting", namespace, {"data": {"message": new}})
