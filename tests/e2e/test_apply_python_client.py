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


def deployment(image: str, replicas: int, env: list[dict]) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "d"}},
                     "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [
                         {"name": "web", "image": image, "env": env, "ports": [{"containerPort": 80}]},
                         {"name": "log", "image": "busybox"}]}}}}


def test_deployment_apply_patch_stale_update_and_dry_run(core):
    apps = client.AppsV1Api(core.api_client)
    env = [{"name": "A", "value": "1"}]
    got = apps.patch_namespaced_deployment("d", NS, deployment("nginx:1.25", 2, env), field_manager="alpha",
                                           _content_type=APPLY)
    assert got.metadata.generation == 1 and got.spec.replicas == 2
    # the same apply again: nothing written
    again = apps.patch_namespaced_deployment("d", NS, deployment("nginx:1.25", 2, env), field_manager="alpha",
                                             _content_type=APPLY)
    assert again.metadata.resource_version == got.metadata.resource_version
    # beta applies the same env item (shared, no conflict) and another image (conflict)
    with pytest.raises(ApiException) as e:
        apps.patch_namespaced_deployment("d", NS, deployment("nginx:1.26", 2, env), field_manager="beta",
                                         _content_type=APPLY)
    assert e.value.status == 409
    causes = json.loads(e.value.body)["details"]["causes"]
    assert {c["field"] for c in causes} == {'.spec.template.spec.containers[name="web"].image'}
    got = apps.patch_namespaced_deployment("d", NS, deployment("nginx:1.26", 2, env), field_manager="beta",
                                           force=True, _content_type=APPLY)
    assert got.spec.template.spec.containers[0].image == "nginx:1.26" and got.metadata.generation == 2
    fields = {m.manager: m.fields_v1 for m in got.metadata.managed_fields}
    web = 'k:{"name":"web"}'
    assert "f:image" not in fields["alpha"]["f:spec"]["f:template"]["f:spec"]["f:containers"][web]
    assert "f:image" in fields["beta"]["f:spec"]["f:template"]["f:spec"]["f:containers"][web]
    assert 'k:{"name":"A"}' in fields["alpha"]["f:spec"]["f:template"]["f:spec"]["f:containers"][web]["f:env"]
    # alpha stops applying the log container: beta applies it too, so it stays; then beta drops it and it goes
    alpha_only = deployment("nginx:1.25", 2, env)
    del alpha_only["spec"]["template"]["spec"]["containers"][1]
    del alpha_only["spec"]["template"]["spec"]["containers"][0]["image"]
    got = apps.patch_namespaced_deployment("d", NS, alpha_only, field_manager="alpha", _content_type=APPLY)
    assert [c.name for c in got.spec.template.spec.containers] == ["web", "log"]
    beta_only = deployment("nginx:1.26", 2, env)
    del beta_only["spec"]["template"]["spec"]["containers"][1]
    got = apps.patch_namespaced_deployment("d", NS, beta_only, field_manager="beta", _content_type=APPLY)
    assert [c.name for c in got.spec.template.spec.containers] == ["web"]

    # strategic merge patch: containers and env by name, ports by containerPort
    got = apps.patch_namespaced_deployment("d", NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "web", "env": [{"name": "B", "value": "2"}], "ports": [{"containerPort": 443}]},
        {"name": "extra", "image": "busybox"}]}}}})
    c = {x.name: x for x in got.spec.template.spec.containers}
    assert set(c) == {"web", "extra"} and c["web"].image == "nginx:1.26"
    assert [e.name for e in c["web"].env] == ["A", "B"]
    assert sorted(p.container_port for p in c["web"].ports) == [80, 443]
    got = apps.patch_namespaced_deployment("d", NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "web", "ports": [{"containerPort": 80, "$patch": "delete"}]}, {"name": "extra", "$patch": "delete"}]}}}})
    assert [(x.name, [p.container_port for p in x.ports]) for x in got.spec.template.spec.containers] == [
        ("web", [443])]

    # 409 on a stale update
    stale = apps.read_namespaced_deployment("d", NS)
    apps.patch_namespaced_deployment_scale("d", NS, {"spec": {"replicas": 5}})
    stale.spec.replicas = 9
    with pytest.raises(ApiException) as e:
        apps.replace_namespaced_deployment("d", NS, stale)
    assert e.value.status == 409 and "the object has been modified" in json.loads(e.value.body)["message"]
    assert apps.read_namespaced_deployment("d", NS).spec.replicas == 5

    # dry-run on apply, patch, update and delete: answered as if done, nothing persisted
    live = apps.read_namespaced_deployment("d", NS)
    dry = apps.patch_namespaced_deployment("d", NS, deployment("nginx:dry", 1, env), field_manager="beta",
                                           force=True, dry_run="All", _content_type=APPLY)
    assert dry.spec.template.spec.containers[0].image == "nginx:dry" and dry.metadata.generation == live.metadata.generation + 1
    live.spec.replicas = 1
    assert apps.replace_namespaced_deployment("d", NS, live, dry_run="All").spec.replicas == 1
    apps.delete_namespaced_deployment("d", NS, dry_run="All")
    now = apps.read_namespaced_deployment("d", NS)
    assert now.metadata.resource_version == live.metadata.resource_version and now.spec.replicas == 5
    assert now.spec.template.spec.containers[0].image == "nginx:1.26"
