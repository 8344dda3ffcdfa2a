"""Per-kind field selectors as kube registers them (its field label conversion functions and
ToSelectableFields): the labels each kind accepts, kube's 400 for any other, and the selection itself."""
from __future__ import annotations

import pytest

from services.apis.install import new_catalogue
from services.apiserver.registry.rest import strategy_for

from .conftest import Client

CATALOGUE = new_catalogue()

META = {"metadata.name", "metadata.namespace"}
# kube 1.33's field labels (pkg/apis/*/v1/conversion.go; the default conversion's two for the rest)
KUBE_LABELS = {
    ("", "pods"): META | {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                         "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs",
                         "status.nominatedNodeName", "spec.host"},
    ("", "nodes"): {"metadata.name", "spec.unschedulable"},
    ("", "namespaces"): {"metadata.name", "status.phase"},
    ("", "replicationcontrollers"): META | {"status.replicas"},
    ("", "events"): META | {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                           "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                           "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"},
    ("", "secrets"): META | {"type"},
    ("", "services"): META | {"spec.clusterIP", "spec.type"},
    ("", "configmaps"): META,
    ("apps", "replicasets"): META | {"status.replicas"},
    ("apps", "deployments"): META,
    ("batch", "jobs"): META | {"status.successful"},
    ("rbac.authorization.k8s.io", "clusterroles"): META,
}


@pytest.mark.parametrize("group, plural", sorted(KUBE_LABELS))
def test_field_labels_are_kubes(group: str, plural: str) -> None:
    info = CATALOGUE.lookup(group, "v1", plural)
    assert info is not None
    assert strategy_for(info).field_labels == KUBE_LABELS[(group, plural)]


@pytest.fixture
def api(status_api: Client) -> Client:
    """This module's calls read errors as Status bodies."""
    return status_api


async def names(api, resource: str, selector: str, namespace: str = "default") -> list[str]:
    code, body = await api("list", resource, namespace, query={"fieldSelector": selector})
    assert code == 200, body
    return sorted(i["metadata"]["name"] for i in body["items"])


async def test_unknown_field_label_is_kubes_400(api) -> None:
    code, body = await api("list", "nodes", query={"fieldSelector": "metadata.namespace=x"})
    assert (code, body["reason"], body["message"]) == (400, "BadRequest",
                                                       "field label not supported: metadata.namespace")
    code, body = await api("list", "pods", "default", query={"fieldSelector": "spec.priority=1"})
    assert (code, body["message"]) == (400, "field label not supported: spec.priority")


async def test_pod_fields_and_the_spec_host_alias(api) -> None:
    for name, node in (("a", "n1"), ("b", "n2")):
        code, body = await api("create", "pods", "default", body={
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "restartPolicy": "Never" if name == "a" else "Always",
                     "containers": [{"name": "c", "image": "nginx"}]}})
        assert code == 201, body
    assert await names(api, "pods", "spec.nodeName=n1") == ["a"]
    assert await names(api, "pods", "spec.host=n2") == ["b"]
    assert await names(api, "pods", "spec.restartPolicy!=Never,status.phase=Pending") == ["b"]
    assert await names(api, "pods", "status.podIPs=") == ["a", "b"]  # accepted, never filled: as kube


async def test_service_type_and_cluster_ip(api) -> None:
    for name, typ in (("web", "NodePort"), ("db", "ClusterIP")):
        code, body = await api("create", "services", "default", body={
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"type": typ, "ports": [{"port": 80}], "clusterIP": "None" if name == "db" else None}})
        assert code == 201, body
    assert await names(api, "services", "spec.type=NodePort") == ["web"]
    assert await names(api, "services", "spec.clusterIP=None") == ["db"]
