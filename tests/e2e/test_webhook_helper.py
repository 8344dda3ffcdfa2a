"""services.cluster.webhooks against the shared stack: the test's own HTTPS server on loopback, its
serving certificate, and Validating/MutatingWebhookConfigurations registered by URL with the caBundle
(as an operator ships them, pointing at a Service), removed again by uninstall."""
from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.cluster.webhooks import WebhookInstallOptions

LABEL = "apiary.dev/webhook-helper-test"


def configuration(kind: str, name: str, path: str) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name},
            "webhooks": [{
                "name": f"{name}.example.apiary.dev",
                "clientConfig": {"service": {"namespace": "operator", "name": "operator", "path": path}},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["configmaps"]}],
                "objectSelector": {"matchLabels": {LABEL: "yes"}},
                "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail"}]}


def refuse_blank(request: dict[str, Any]) -> dict[str, Any]:
    if (request["object"].get("data") or {}).get("message", "").strip():
        return {"allowed": True}
    return {"allowed": False, "status": {"code": 422, "message": "data.message must not be blank"}}


def add_greeting(request: dict[str, Any]) -> dict[str, Any]:
    patch = [{"op": "add", "path": "/metadata/annotations", "value": {"greeted": "yes"}}]
    return {"allowed": True, "patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(patch).encode()).decode()}


@pytest.fixture
def hooks(admin: httpx.Client, tmp_path: Path) -> Iterator[WebhookInstallOptions]:
    options = WebhookInstallOptions(admin, tmp_path)
    try:
        yield options
    finally:
        options.uninstall()


def config_map(name: str, message: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {LABEL: "yes"}}, "data": {"message": message}}


def test_registered_webhooks_are_called_on_loopback_and_removed(admin: httpx.Client,
                                                                  hooks: WebhookInstallOptions) -> None:
    suffix = uuid.uuid4().hex[:6]
    validating = hooks.install(configuration("ValidatingWebhookConfiguration", f"helper-v-{suffix}", "/validate"))
    hooks.install(configuration("MutatingWebhookConfiguration", f"helper-m-{suffix}", "/mutate"))
    assert validating["webhooks"][0]["clientConfig"] == {"url": hooks.url("/validate"),
                                                         "caBundle": hooks.certificate.ca_bundle}
    configmaps = "/api/v1/namespaces/default/configmaps"
    with hooks.serve({"/validate": refuse_blank, "/mutate": add_greeting}):
        refused = admin.post(configmaps, json=config_map(f"blank-{suffix}", " "))
        assert refused.status_code == 422, refused.text
        assert "data.message must not be blank" in refused.json()["message"]
        created = admin.post(configmaps, json=config_map(f"hello-{suffix}", "hello"))
        assert created.status_code == 201, created.text
        assert created.json()["metadata"]["annotations"] == {"greeted": "yes"}
    hooks.uninstall()
    # nothing serves the webhooks now; with them removed, failurePolicy Fail no longer applies
    after = admin.post(configmaps, json=config_map(f"blank-{suffix}", " "))
    assert after.status_code == 201, after.text
    for name in (f"blank-{suffix}", f"hello-{suffix}"):
        admin.delete(f"{configmaps}/{name}")


def test_a_crds_conversion_is_pointed_at_loopback_and_restored(admin: httpx.Client,
                                                               hooks: WebhookInstallOptions) -> None:
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    name = f"convs{uuid.uuid4().hex[:6]}"
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    created = admin.post(crds, json={
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{name}.example.apiary.dev"},
        "spec": {"group": "example.apiary.dev", "scope": "Namespaced",
                 "names": {"plural": name, "kind": name.capitalize()},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema},
                              {"name": "v2", "served": True, "storage": False, "schema": schema}]}})
    assert created.status_code == 201, created.text
    try:
        hooks.install_conversion(f"{name}.example.apiary.dev", "/convert")
        conversion = admin.get(f"{crds}/{name}.example.apiary.dev").json()["spec"]["conversion"]
        assert conversion == {"strategy": "Webhook", "webhook": {
            "clientConfig": {"url": hooks.url("/convert"), "caBundle": hooks.certificate.ca_bundle},
            "conversionReviewVersions": ["v1"]}}
        hooks.uninstall()
        conversion = admin.get(f"{crds}/{name}.example.apiary.dev").json()["spec"]["conversion"]
        assert conversion == {"strategy": "None"}
    finally:
        admin.delete(f"{crds}/{name}.example.apiary.dev")
