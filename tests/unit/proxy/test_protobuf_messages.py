"""Every protobuf message apiary encodes covers its kind's whole definition (kube's OpenAPI, schemas.json):
an object with every field of the definition set (generated from the schema, recursively) survives
JSON -> protobuf -> JSON unchanged. A field missing from a .proto makes the encoding fail (answers
never lose data silently), so this test names it."""
from __future__ import annotations

from typing import Any

import orjson
import pytest
from google.protobuf import descriptor_pool, message_factory

from services.apis.schemas import ALL, GVK, REF_PREFIX, definition_for
from services.proxy.protobuf import ENCODABLE, decode_k8s_protobuf, encode_object

_SPECIAL: dict[str, Any] = {
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": "2024-01-02T03:04:05Z",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": "2024-01-02T03:04:05.123456Z",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1": {"f:metadata": {"f:labels": {".": {}}}},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": "1500m",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "http",
}


def _ref(schema: dict[str, Any]) -> str | None:
    if "$ref" in schema:
        return schema["$ref"][len(REF_PREFIX):]
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return _ref(schema["allOf"][0])
    return None


def example(schema: dict[str, Any], path: tuple[str, ...] = ()) -> Any:
    """A value with every field the schema names set to a non-zero value (a definition already on the
    path is left out: recursion)."""
    ref = _ref(schema)
    if ref is not None:
        if ref in _SPECIAL:
            return _SPECIAL[ref]
        if ref in path:
            return None
        return example(ALL[ref], path + (ref,))
    kind = schema.get("type")
    if "properties" in schema:
        out = {}
        for name, prop in schema["properties"].items():
            if name in ("apiVersion", "kind") and GVK in schema:
                continue  # a kind's TypeMeta: the envelope's, or left out of a List's items
            value = example(prop, path)
            if value is not None:
                out[name] = value
        return out
    if kind == "object" and "additionalProperties" in schema:
        value = example(schema["additionalProperties"], path)
        return None if value is None else {"key-a": value}
    if kind == "array":
        value = example(schema["items"], path)
        return None if value is None else [value]
    if kind == "string":
        return "AAEC" if schema.get("format") == "byte" else f"s-{len(path)}"
    if kind == "integer":
        return 7
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    raise AssertionError(f"no example for {schema}")


def definition_of(message: str) -> str:
    """kube's definition name of a go-to-protobuf message (k8s.io.api.core.v1.Pod: io.k8s.api.core.v1.Pod)."""
    assert message.startswith("k8s.io.")
    return "io.k8s." + message[len("k8s.io."):].replace("kube_aggregator", "kube-aggregator")


# The messages of kinds served by other branches (the merger names them in ResourceInfo.protobuf), by
# (apiVersion, kind): checked here the same way, with their Lists.
PENDING = {
    ("v1", "LimitRange"): "k8s.io.api.core.v1.LimitRange",
    ("v1", "Node"): "k8s.io.api.core.v1.Node",
    ("v1", "Pod"): "k8s.io.api.core.v1.Pod",
    ("v1", "PodTemplate"): "k8s.io.api.core.v1.PodTemplate",
    ("v1", "ReplicationController"): "k8s.io.api.core.v1.ReplicationController",
    ("coordination.k8s.io/v1", "Lease"): "k8s.io.api.coordination.v1.Lease",
    ("apps/v1", "Deployment"): "k8s.io.api.apps.v1.Deployment",
    ("apps/v1", "ReplicaSet"): "k8s.io.api.apps.v1.ReplicaSet",
    ("apps/v1", "StatefulSet"): "k8s.io.api.apps.v1.StatefulSet",
    ("apps/v1", "DaemonSet"): "k8s.io.api.apps.v1.DaemonSet",
    ("batch/v1", "Job"): "k8s.io.api.batch.v1.Job",
    ("batch/v1", "CronJob"): "k8s.io.api.batch.v1.CronJob",
    ("events.k8s.io/v1", "Event"): "k8s.io.api.events.v1.Event",
    ("policy/v1", "PodDisruptionBudget"): "k8s.io.api.policy.v1.PodDisruptionBudget",
    ("scheduling.k8s.io/v1", "PriorityClass"): "k8s.io.api.scheduling.v1.PriorityClass",
    ("networking.k8s.io/v1", "Ingress"): "k8s.io.api.networking.v1.Ingress",
    ("networking.k8s.io/v1", "IngressClass"): "k8s.io.api.networking.v1.IngressClass",
    ("networking.k8s.io/v1", "NetworkPolicy"): "k8s.io.api.networking.v1.NetworkPolicy",
    ("storage.k8s.io/v1", "StorageClass"): "k8s.io.api.storage.v1.StorageClass",
}
_POOL = descriptor_pool.Default()
MESSAGES = {**ENCODABLE, **{
    (v, k + suffix): message_factory.GetMessageClass(_POOL.FindMessageTypeByName(m + suffix))
    for (v, k), m in PENDING.items() for suffix in ("", "List")}}


# PartialObjectMetadata[List] have no published definition; their parts (ObjectMeta, ListMeta) are covered.
@pytest.mark.parametrize("api_version,kind", sorted(
    k for k, cls in MESSAGES.items() if definition_of(cls.DESCRIPTOR.full_name) in ALL), ids=lambda v: v)
def test_every_field_of_the_definition_round_trips(api_version: str, kind: str) -> None:
    name = definition_of(MESSAGES[(api_version, kind)].DESCRIPTOR.full_name)
    obj = {"apiVersion": api_version, "kind": kind, **example(ALL[name], (name,))}
    assert orjson.loads(decode_k8s_protobuf(encode_object(obj, MESSAGES), kinds=MESSAGES)) == obj


def test_pending_kinds_have_kubes_definitions():
    """Every message named for the merger is the one of a kind kube defines under that group/version."""
    for (api_version, kind), message in PENDING.items():
        group, _, version = api_version.rpartition("/")
        assert definition_for(group, version, kind) == definition_of(message)


@pytest.mark.parametrize("api_version,kind,body", [
    ("v1", "Pod", {"spec": {"automountServiceAccountToken": False, "enableServiceLinks": False,
                            "securityContext": {"runAsUser": 0, "runAsNonRoot": False},
                            "containers": [{"name": "c",
                                            "securityContext": {"privileged": False, "runAsUser": 0}}],
                            "tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": 0}]}}),
    ("v1", "ReplicationController", {"spec": {"replicas": 0}}),
    ("apps/v1", "Deployment", {"spec": {"replicas": 0, "revisionHistoryLimit": 0}}),
    ("batch/v1", "Job", {"spec": {"backoffLimit": 0, "suspend": False, "ttlSecondsAfterFinished": 0}}),
    ("coordination.k8s.io/v1", "Lease", {"spec": {"holderIdentity": "", "leaseTransitions": 0}}),
])
def test_zero_values_of_pointer_fields_survive(api_version: str, kind: str, body: dict) -> None:
    """Go pointers: a zero there is the client's choice (runAsUser: 0 is root, replicas: 0 is none), so a
    body decoded from protobuf keeps it."""
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, **body}
    assert orjson.loads(decode_k8s_protobuf(encode_object(obj, MESSAGES), kinds=MESSAGES)) == obj
