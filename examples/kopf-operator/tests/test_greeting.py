"""The Greeting operator against a real API server: child ConfigMap, status, garbage collection, webhook."""
from __future__ import annotations

import pytest
from conftest import eventually
from kubernetes import client
from kubernetes.client.exceptions import ApiException

GROUP, VERSION, PLURAL = "example.apiary.dev", "v1", "greetings"


def greeting(name: str, message: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Greeting", "metadata": {"name": name},
            "spec": {"message": message}}


def gone(read) -> None:
    try:
        read()
    except ApiException as e:
        if e.status == 404:
            return
        raise
    raise AssertionError("still there")


def test_greeting_lifecycle(operator, apiary_namespace, k8s_api_client):
    custom, core = client.CustomObjectsApi(k8s_api_client), client.CoreV1Api(k8s_api_client)
    created = custom.create_namespaced_custom_object(GROUP, VERSION, apiary_namespace, PLURAL,
                                                     greeting("hello", "Hello, world"))

    config_map = eventually(lambda: core.read_namespaced_config_map("hello-greeting", apiary_namespace))
    assert config_map.data == {"message": "Hello, world"}
    [owner] = config_map.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller) == (
        "Greeting", "hello", created["metadata"]["uid"], True)

    def ready() -> dict:
        status = custom.get_namespaced_custom_object_status(GROUP, VERSION, apiary_namespace, PLURAL, "hello")["status"]
        assert status["phase"] == "Ready"
        return status
    assert eventually(ready)["configMap"] == "hello-greeting"

    custom.patch_namespaced_custom_object(GROUP, VERSION, apiary_namespace, PLURAL, "hello",
                                          {"spec": {"message": "Hello again"}})

    def updated() -> None:
        assert core.read_namespaced_config_map("hello-greeting", apiary_namespace).data == {"message": "Hello again"}
    eventually(updated)

    custom.delete_namespaced_custom_object(GROUP, VERSION, apiary_namespace, PLURAL, "hello")
    eventually(lambda: gone(lambda: core.read_namespaced_config_map("hello-greeting", apiary_namespace)))


@pytest.mark.parametrize("message", ["", "   "])
def test_webhook_refuses_a_blank_message(operator, apiary_namespace, k8s_api_client, message):
    custom = client.CustomObjectsApi(k8s_api_client)
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(GROUP, VERSION, apiary_namespace, PLURAL, greeting("blank", message))
    assert refused.value.status == 422
    assert "spec.message must not be blank" in refused.value.body
    gone(lambda: custom.get_namespaced_custom_object(GROUP, VERSION, apiary_namespace, PLURAL, "blank"))
