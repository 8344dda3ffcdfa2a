"""Every served kind, created through the handlers, read back, round-trips through JSON and YAML unchanged and
validates against the schema the server publishes for it (its OpenAPI v3 document)."""
from __future__ import annotations

import base64
import functools
from typing import Any

import jsonschema
import orjson
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from apiary_pb import registry_pb2 as rpb
from services.apis import schemas
from services.apis.install import new_catalogue
from services.apiserver import openapi
from services.common import identity

CATALOGUE = new_catalogue()

Obj = dict[str, Any]
NS = "default"
SELECTOR = {"matchLabels": {"app": "web"}}
RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
POD_SPEC = {"containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80, "name": "http"}],
                            "env": [{"name": "A", "value": "1"}], "resources": {"limits": {"cpu": "500m"}}}],
            "volumes": [{"name": "cfg", "configMap": {"name": "c"}}], "tolerations": [{"key": "k", "operator": "Exists"}]}
TEMPLATE = {"metadata": {"labels": {"app": "web"}}, "spec": POD_SPEC}

# One valid object of every stored kind, by kind or, where two groups serve one, by apiVersion/kind
# (metadata added by the test).
SAMPLES: dict[str, Obj] = {
    "ConfigMap": {"data": {"a": "1"}},
    "Event": {"involvedObject": {"kind": "ConfigMap", "namespace": NS, "name": "c"}, "reason": "Tested",
              "message": "m", "type": "Normal", "count": 1},
    "events.k8s.io/v1/Event": {"regarding": {"kind": "ConfigMap", "namespace": NS, "name": "c"},
                               "reason": "Tested", "note": "n", "type": "Normal", "action": "Testing",
                               "eventTime": "2026-01-02T03:04:05.000001Z", "reportingController": "example.com/t",
                               "reportingInstance": "t-1"},
    "Namespace": {},
    "LimitRange": {"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}, "min": {"cpu": "100m"}}]}},
    "Node": {"spec": {"podCIDRs": ["10.0.0.0/24"], "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
             "status": {"capacity": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]}},
    "ResourceQuota": {"spec": {"hard": {"pods": "3"}}},
    "Secret": {"stringData": {"a": "b"}},
    "Endpoints": {"subsets": [{"addresses": [{"ip": "10.1.2.3"}], "ports": [{"port": 80}]}]},
    "Service": {"spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}},
    "ServiceAccount": {},
    "APIService": {"spec": {"group": "example.com", "version": "v1", "groupPriorityMinimum": 100,
                            "versionPriority": 10}},
    "CustomResourceDefinition": {"spec": {
        "group": "stable.example.com", "scope": "Namespaced",
        "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab", "listKind": "CronTabList"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object", "properties": {"spec": {"type": "object", "properties": {
                "cronSpec": {"type": "string"}}}}}}}]}},
    "ClusterRole": {"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
    "Role": {"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
    "ClusterRoleBinding": {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                       "name": "view"},
                           "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "u"}]},
    "RoleBinding": {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "u"}]},
    "EndpointSlice": {"addressType": "IPv4", "endpoints": [{"addresses": ["10.1.2.3"]}]},
    "ValidatingAdmissionPolicy": {"spec": {"matchConstraints": {"resourceRules": [RULE]},
                                           "validations": [{"expression": "true"}]}},
    "ValidatingAdmissionPolicyBinding": {"spec": {"policyName": "p", "validationActions": ["Deny"]}},
    "MutatingAdmissionPolicy": {"spec": {"matchConstraints": {"resourceRules": [RULE]},
                                         "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                                             "expression": "Object{}"}}]}},
    "MutatingAdmissionPolicyBinding": {"spec": {"policyName": "p"}},
    "ValidatingWebhookConfiguration": {"webhooks": [{
        "name": "v.example.com", "clientConfig": {"url": "https://127.0.0.1:9443/v"}, "rules": [RULE],
        "sideEffects": "None", "admissionReviewVersions": ["v1"]}]},
    "MutatingWebhookConfiguration": {"webhooks": [{
        "name": "m.example.com", "clientConfig": {"url": "https://127.0.0.1:9443/m"}, "rules": [RULE],
        "sideEffects": "None", "admissionReviewVersions": ["v1"]}]},
    "Ingress": {"spec": {"ingressClassName": "nginx", "rules": [{"host": "foo.example.com", "http": {"paths": [
        {"path": "/", "pathType": "Prefix",
         "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}},
    "IngressClass": {"spec": {"controller": "example.com/ingress"}},
    "NetworkPolicy": {"spec": {"podSelector": SELECTOR, "ingress": [{"ports": [{"port": 80}],
                                                                     "from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}},
    "PodDisruptionBudget": {"spec": {"minAvailable": "50%", "selector": SELECTOR}},
    "PriorityClass": {"value": 1000, "description": "d"},
    "CSIDriver": {"spec": {"tokenRequests": [{"audience": "vault"}]}},
    "CSINode": {"spec": {"drivers": [{"name": "disk.example.com", "nodeID": "n1", "topologyKeys": ["zone"]}]}},
    "CSIStorageCapacity": {"storageClassName": "fast", "capacity": "10Gi", "nodeTopology": SELECTOR},
    "VolumeAttachment": {"spec": {"attacher": "disk.example.com", "nodeName": "n1",
                                  "source": {"persistentVolumeName": "pv-1"}}},
    "RuntimeClass": {"handler": "runsc", "overhead": {"podFixed": {"cpu": "250m"}},
                     "scheduling": {"nodeSelector": {"sandbox": "yes"}, "tolerations": [{"key": "k", "operator": "Exists"}]}},
    "ControllerRevision": {"data": {"spec": {"replicas": 1}}, "revision": 3},
    "ServiceCIDR": {"spec": {"cidrs": ["10.250.0.0/16"]}},
    "IPAddress": {"spec": {"parentRef": {"group": "", "resource": "services", "namespace": "default", "name": "web"}}},
    "autoscaling/v2/HorizontalPodAutoscaler": {"spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 4,
        "metrics": [{"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue",
                                                                                     "averageValue": "10"}}}],
        "behavior": {"scaleUp": {"selectPolicy": "Min"}}}},
    "autoscaling/v1/HorizontalPodAutoscaler": {"spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 4,
        "targetCPUUtilizationPercentage": 60}},
    "StorageClass": {"provisioner": "example.com/disk", "parameters": {"type": "ssd"}},
    "PersistentVolume": {"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                                  "hostPath": {"path": "/data"}}},
    "PersistentVolumeClaim": {"spec": {"accessModes": ["ReadWriteOnce"],
                                       "resources": {"requests": {"storage": "1Gi"}}}},
    "Pod": {"spec": POD_SPEC},
    "PodTemplate": {"template": TEMPLATE},
    "ReplicationController": {"spec": {"replicas": 2, "selector": {"app": "web"}, "template": TEMPLATE}},
    "Deployment": {"spec": {"replicas": 2, "selector": SELECTOR, "template": TEMPLATE}},
    "ReplicaSet": {"spec": {"replicas": 2, "selector": SELECTOR, "template": TEMPLATE}},
    "StatefulSet": {"spec": {"serviceName": "web", "selector": SELECTOR, "template": TEMPLATE}},
    "DaemonSet": {"spec": {"selector": SELECTOR, "template": TEMPLATE}},
    "Job": {"spec": {"template": {"spec": {**POD_SPEC, "restartPolicy": "Never"}}}},
    "CronJob": {"spec": {"schedule": "*/5 * * * *",
                         "jobTemplate": {"spec": {"template": {"spec": {**POD_SPEC, "restartPolicy": "OnFailure"}}}}}},
    "FlowSchema": {"spec": {"priorityLevelConfiguration": {"name": "workload-low"}, "distinguisherMethod": {
        "type": "ByUser"}, "rules": [{"subjects": [{"kind": "Group", "group": {"name": "devs"}}], "resourceRules": [
            {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "namespaces": ["*"]}]}]}},
    "PriorityLevelConfiguration": {"spec": {"type": "Limited", "limited": {"limitResponse": {
        "type": "Queue", "queuing": {"queues": 16}}}}},
    "Lease": {"spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 0}},
    "CertificateSigningRequest": {"spec": {"request": base64.b64encode(
        x509.CertificateSigningRequestBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "u")]))
        .sign(ec.generate_private_key(ec.SECP256R1()), hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    ).decode(), "signerName": "example.com/signer", "usages": ["client auth"], "expirationSeconds": 3600}},
}

STORED = [r for r in CATALOGUE.resources if not r.virtual]


def sample(info: Any) -> Obj | None:
    return SAMPLES.get(f"{info.api_version}/{info.kind}", SAMPLES.get(info.kind))


# Kinds whose name is not free (an APIService is named version.group, a CRD plural.group).
NAMES = {"APIService": "v1.example.com", "CustomResourceDefinition": "crontabs.stable.example.com",
         "IPAddress": "10.250.0.7"}


def _type(validator: Any, types: Any, instance: Any, schema: Obj) -> Any:
    """kube's x-kubernetes-int-or-string: the published type is "string", an integer is as valid; and Go's zero
    metav1.Time, which encoding/json writes as null (a template's metadata.creationTimestamp: null, as kube writes it)."""
    if schema.get("x-kubernetes-int-or-string") and validator.is_type(instance, "integer"):
        return
    if instance is None and schema.get("format") == "date-time":
        return
    yield from jsonschema.Draft202012Validator.VALIDATORS["type"](validator, types, instance, schema)


KubeValidator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"type": _type})


@functools.cache
def components() -> dict[str, Any]:
    """Every published OpenAPI v3 document's schemas, together."""
    out: dict[str, Any] = {}
    for raw in openapi.documents(CATALOGUE, schemas).values():
        out.update(orjson.loads(raw)["components"]["schemas"])
    return out


def test_every_stored_kind_has_a_sample():
    assert all(sample(r) is not None for r in STORED)


@pytest.mark.parametrize("info", STORED, ids=lambda r: f"{r.api_version}/{r.kind}")
async def test_kind_round_trips_and_validates_against_its_schema(info, handlers):
    obj = {"apiVersion": info.api_version, "kind": info.kind,
           "metadata": {"name": NAMES.get(info.kind, f"sample-{info.plural}"), **({"namespace": NS} if info.namespaced else {})},
           **orjson.loads(orjson.dumps(sample(info)))}

    def req(verb: str, body: bytes = b"", name: str = "") -> rpb.APIRequest:
        return rpb.APIRequest(verb=verb, group=info.group, version=info.version, resource=info.plural,
                              namespace=NS if info.namespaced else "", name=name, body=body,
                              content_type="application/json", user=identity.user_pb("admin", ["system:masters"]))

    resp, _ = await handlers.handle(req("create", orjson.dumps(obj)))
    assert resp.code == 201, resp.body
    resp, _ = await handlers.handle(req("get", name=obj["metadata"]["name"]))
    assert resp.code == 200, resp.body
    got = orjson.loads(resp.body)
    assert (got["apiVersion"], got["kind"]) == (info.api_version, info.kind)
    assert orjson.loads(orjson.dumps(got)) == got
    assert yaml.safe_load(yaml.safe_dump(got)) == got
    schema = {"components": {"schemas": components()},
              "$ref": f"#/components/schemas/{schemas.definition_for(info.group, info.version, info.kind)}"}
    KubeValidator(schema).validate(got)
