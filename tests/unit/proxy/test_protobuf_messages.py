"""Every protobuf message apiary encodes covers its kind's whole definition (kube's OpenAPI, schemas.json):
an object with every field of the definition set (generated from the schema, recursively) survives
JSON -> protobuf -> JSON unchanged. A field missing from a .proto makes the encoding fail (answers
never lose data silently), so this test names it."""
from __future__ import annotations

from typing import Any

import orjson
import pytest

from services.proxy.protobuf import ENCODABLE, decode_k8s_protobuf, encode_object
from services.registry.schemas import ALL, GVK, REF_PREFIX

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
    """kube's definition name of a go-to-protobuf message: k8s.io.api.core.v1.Pod -> io.k8s.api.core.v1.Pod."""
    assert message.startswith("k8s.io.")
    return "io.k8s." + message[len("k8s.io."):].replace("kube_aggregator", "kube-aggregator")


# PartialObjectMetadata[List] have no published definition; their parts (ObjectMeta, ListMeta) are covered.
@pytest.mark.parametrize("api_version,kind", sorted(
    k for k, cls in ENCODABLE.items() if definition_of(cls.DESCRIPTOR.full_name) in ALL), ids=lambda v: v)
def test_every_field_of_the_definition_round_trips(api_version: str, kind: str) -> None:
    name = definition_of(ENCODABLE[(api_version, kind)].DESCRIPTOR.full_name)
    obj = {"apiVersion": api_version, "kind": kind, **example(ALL[name], (name,))}
    assert orjson.loads(decode_k8s_protobuf(encode_object(obj), kinds=ENCODABLE)) == obj
