import orjson

from services.apis import schemas
from services.apis.install import new_catalogue
from services.apiserver import discovery, openapi
from services.registry.server import discovery_response

CATALOGUE = new_catalogue()


def test_aggregated_core():
    doc = discovery.aggregated(CATALOGUE, core=True)
    assert doc["kind"] == "APIGroupDiscoveryList" and doc["apiVersion"] == "apidiscovery.k8s.io/v2"
    (core,) = doc["items"]
    assert core["metadata"]["name"] == "" and core["versions"][0]["freshness"] == "Current"
    res = {r["resource"]: r for r in core["versions"][0]["resources"]}
    assert set(res) == {"configmaps", "endpoints", "events", "namespaces", "secrets", "serviceaccounts", "services",
                        "resourcequotas", "limitranges", "nodes", "pods", "podtemplates",
                        "replicationcontrollers", "persistentvolumes", "persistentvolumeclaims",
                        "componentstatuses"}
    assert [s["subresource"] for s in res["pods"]["subresources"]] == ["binding", "ephemeralcontainers", "eviction",
                                                                       "status"]
    scale = res["replicationcontrollers"]["subresources"][0]
    assert scale["subresource"] == "scale"
    assert scale["responseKind"] == {"group": "autoscaling", "version": "v1", "kind": "Scale"}
    ev = res["events"]
    assert ev["scope"] == "Namespaced" and ev["shortNames"] == ["ev"] and ev["singularResource"] == "event"
    assert ev["verbs"] == ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    ns = res["namespaces"]
    assert ns["scope"] == "Cluster" and ns["shortNames"] == ["ns"] and "deletecollection" not in ns["verbs"]
    assert ns["responseKind"] == {"group": "", "version": "v1", "kind": "Namespace"}
    assert [s["subresource"] for s in ns["subresources"]] == ["finalize", "status"]
    assert res["configmaps"]["singularResource"] == "configmap"


def test_aggregated_groups_and_legacy():
    doc = discovery.aggregated(CATALOGUE, core=False)
    # kube-aggregator's group priorities: apps 17800, events 17750, authentication 17700, authorization 17600,
    # apiregistration 17400, batch 17400, certificates 17300, networking 17200, policy 17100, rbac 17000, storage 16800,
    # admissionregistration 16700, apiextensions 16700, scheduling 16600, coordination 16500, discovery 16200,
    # flowcontrol 16100.
    assert [i["metadata"]["name"] for i in doc["items"]] == ["apps", "events.k8s.io", "authentication.k8s.io",
                                                             "authorization.k8s.io", "autoscaling",
                                                             "apiregistration.k8s.io",
                                                             "batch", "certificates.k8s.io",
                                                             "networking.k8s.io", "policy",
                                                             "rbac.authorization.k8s.io", "storage.k8s.io",
                                                             "admissionregistration.k8s.io", "apiextensions.k8s.io",
                                                                 "scheduling.k8s.io",
                                                             "coordination.k8s.io", "node.k8s.io",
                                                             "discovery.k8s.io", "flowcontrol.apiserver.k8s.io"]
    assert discovery.api_versions() == {
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]}
    rl = discovery.resource_list(CATALOGUE, "", "v1")
    assert rl["groupVersion"] == "v1" and rl["kind"] == "APIResourceList"
    names = [r["name"] for r in rl["resources"]]
    assert "namespaces/status" in names and "namespaces/finalize" in names
    cm = next(r for r in rl["resources"] if r["name"] == "configmaps")
    assert cm["namespaced"] and cm["kind"] == "ConfigMap" and cm["shortNames"] == ["cm"] and cm["storageVersionHash"]


def test_openapi_patch_ops_declare_field_validation_and_gvk():
    docs = openapi.documents(CATALOGUE, schemas)
    assert set(docs) == {"api/v1", "apis/apiregistration.k8s.io/v1", "apis/rbac.authorization.k8s.io/v1",
                         "apis/apps/v1", "apis/batch/v1", "apis/certificates.k8s.io/v1",
                         "apis/authentication.k8s.io/v1", "apis/authorization.k8s.io/v1",
                         "apis/discovery.k8s.io/v1", "apis/admissionregistration.k8s.io/v1",
                         "apis/admissionregistration.k8s.io/v1beta1", "apis/admissionregistration.k8s.io/v1alpha1", "apis/networking.k8s.io/v1",
                         "apis/policy/v1", "apis/scheduling.k8s.io/v1", "apis/storage.k8s.io/v1",
                         "apis/events.k8s.io/v1", "apis/coordination.k8s.io/v1", "apis/apiextensions.k8s.io/v1",
                             "apis/flowcontrol.apiserver.k8s.io/v1",
                             "apis/autoscaling/v2", "apis/autoscaling/v1", "apis/node.k8s.io/v1"}
    for key, raw in docs.items():
        doc = orjson.loads(raw)
        patches = [(path, item["patch"]) for path, item in doc["paths"].items() if "patch" in item]
        assert patches or "authentication" in key or key.startswith("apis/authorization")
        for path, op in patches:
            assert "fieldValidation" in [p["name"] for p in op["parameters"]], path
            assert op["x-kubernetes-group-version-kind"]["kind"]
        for name, schema in doc["components"]["schemas"].items():
            for ref in schemas._refs(schema):
                assert ref in doc["components"]["schemas"], (key, name, ref)
    core = orjson.loads(docs["api/v1"])
    cmschema = core["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"]
    assert cmschema["x-kubernetes-group-version-kind"] == [{"group": "", "kind": "ConfigMap", "version": "v1"}]
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in core["components"]["schemas"]
    assert "/api/v1/namespaces/{namespace}/configmaps/{name}" in core["paths"]
    agg = orjson.loads(docs["apis/apiregistration.k8s.io/v1"])
    assert "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIService" in agg["components"]["schemas"]
    assert "/apis/apiregistration.k8s.io/v1/apiservices/{name}/status" in agg["paths"]


def test_discovery_response():
    resp = discovery_response(CATALOGUE)
    assert set(resp.resource_lists) == {"v1", "apps/v1", "batch/v1", "apiregistration.k8s.io/v1", "rbac.authorization.k8s.io/v1",
                                        "certificates.k8s.io/v1",
                                        "authentication.k8s.io/v1", "authorization.k8s.io/v1",
                                        "discovery.k8s.io/v1", "admissionregistration.k8s.io/v1",
                                        "admissionregistration.k8s.io/v1beta1", "admissionregistration.k8s.io/v1alpha1", "networking.k8s.io/v1", "policy/v1",
                                        "scheduling.k8s.io/v1", "storage.k8s.io/v1", "events.k8s.io/v1", "apps/v1", "batch/v1", "coordination.k8s.io/v1",
                                        "apiextensions.k8s.io/v1", "flowcontrol.apiserver.k8s.io/v1",
                                        "autoscaling/v2", "autoscaling/v1", "node.k8s.io/v1"}
    assert set(resp.openapi) == {"api/v1", "apis/apiregistration.k8s.io/v1", "apis/rbac.authorization.k8s.io/v1",
                                 "apis/certificates.k8s.io/v1",
                                 "apis/authentication.k8s.io/v1", "apis/authorization.k8s.io/v1",
                                 "apis/discovery.k8s.io/v1", "apis/admissionregistration.k8s.io/v1",
                                 "apis/admissionregistration.k8s.io/v1beta1", "apis/admissionregistration.k8s.io/v1alpha1", "apis/networking.k8s.io/v1",
                                 "apis/policy/v1", "apis/scheduling.k8s.io/v1", "apis/storage.k8s.io/v1",
                                 "apis/events.k8s.io/v1", "apis/apps/v1", "apis/batch/v1", "apis/coordination.k8s.io/v1",
                                 "apis/apiextensions.k8s.io/v1", "apis/flowcontrol.apiserver.k8s.io/v1",
                                 "apis/autoscaling/v2", "apis/autoscaling/v1", "apis/node.k8s.io/v1"}
    assert orjson.loads(resp.api_group_list)["groups"][0]["name"] == "apps"
