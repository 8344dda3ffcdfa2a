"""The official Python client: server-side apply with field managers, strategic merge patch, 409 on a stale
update, dry-run."""
from __future__ import annotations

import json

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.stack

NS = "pyapply"
APPLY = "application/apply-patch+yaml"


@pytest.fixture(scope="module")
def core(stack):
    api_client = config.new_client_from_config(config_file=str(stack.kubeconfig))
    api = client.CoreV1Api(api_client)
    api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
    yield api
    api.delete_namespace(NS)
    api_client.close()


def cm(data: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": NS}, "data": data}


def test_server_side_apply_with_field_managers(core):
    core.patch_namespaced_config_map("c", NS, cm({"a": "1", "b": "2"}), field_manager="alpha",
                                     _content_type=APPLY)
    with pytest.raises(ApiException) as e:
        core.patch_namespaced_config_map("c", NS, cm({"a": "9"}), field_manager="beta", _content_type=APPLY)
    assert e.value.status == 409
    status = json.loads(e.value.body)
    assert status["reason"] == "Conflict"
    assert status["details"]["causes"] == [{"reason": "FieldManagerConflict", "message": 'conflict with "alpha"',
                                            "field": ".data.a"}]
    got = core.patch_namespaced_config_map("c", NS, cm({"a": "9"}), field_manager="beta", force=True,
                                           _content_type=APPLY)
    assert got.data == {"a": "9", "b": "2"}
    owners = {m.manager: m.fields_v1 for m in got.metadata.managed_fields}
    assert owners == {"alpha": {"f:data": {"f:b": {}}}, "beta": {"f:data": {"f:a": {}}}}
    # without a field manager apply is refused
    with pytest.raises(ApiException) as e:
        core.patch_namespaced_config_map("c", NS, cm({"a": "9"}), _content_type=APPLY)
    assert e.value.status == 422


def test_strategic_merge_patch_of_service_ports(core):
    svc = client.V1Service(metadata=client.V1ObjectMeta(name="s"), spec=client.V1ServiceSpec(
        ports=[client.V1ServicePort(port=80, name="http"), client.V1ServicePort(port=443, name="https")]))
    core.create_namespaced_service(NS, svc)
    got = core.patch_namespaced_service("s", NS, {"spec": {"ports": [{"port": 80, "name": "web"},
                                                                      {"port": 8080, "name": "alt"}]}})
    assert [(p.port, p.name) for p in got.spec.ports] == [(80, "web"), (443, "https"), (8080, "alt")]
    got = core.patch_namespaced_service("s", NS, {"spec": {"ports": [{"port": 443, "$patch": "delete"}]}})
    assert [p.port for p in got.spec.ports] == [80, 8080]


def test_stale_update_is_409_and_dry_run_writes_nothing(core):
    obj = core.create_namespaced_config_map(NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="u"),
                                                                  data={"k": "1"}))
    # no field_manager: kube names the Update's manager after the User-Agent
    assert [m.manager for m in obj.metadata.managed_fields] == ["OpenAPI-Generator"]
    obj.data = {"k": "2"}
    core.replace_namespaced_config_map("u", NS, obj)
    obj.data = {"k": "3"}
    with pytest.raises(ApiException) as e:
        core.replace_namespaced_config_map("u", NS, obj)   # still the first resourceVersion
    assert e.value.status == 409 and "the object has been modified" in json.loads(e.value.body)["message"]
    live = core.read_namespaced_config_map("u", NS)
    dry = core.patch_namespaced_config_map("u", NS, {"data": {"k": "dry"}}, dry_run="All")
    assert dry.data == {"k": "dry"}
    again = core.read_namespaced_config_map("u", NS)
    assert again.data == {"k": "2"} and again.metadata.resource_version == live.metadata.resource_version
    created = core.create_namespaced_config_map(NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(
        generate_name="gen-"), data={"x": "y"}), dry_run="All")
    assert created.metadata.name.startswith("gen-") and created.metadata.uid
    with pytest.raises(ApiException) as e:
        core.read_namespaced_config_map(created.metadata.name, NS)
    assert e.value.status == 404
    with pytest.raises(ApiException) as e:
        core.create_namespaced_config_map(NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="u")),
                                          dry_run="All")
    assert e.value.status == 409 and json.loads(e.value.body)["reason"] == "AlreadyExists"
