"""selectableFields of a CRD version: kube's validation (paths through the schema to a string, integer or boolean,
no list indexes, not metadata, no duplicates, at most 8) with its field paths and messages, and the values a
field selector compares."""
from __future__ import annotations

import copy

from services.apis.strategies.selectablefields import names, value

from .test_crd_validation import ADMIN, CRONTAB, invalid

SCHEMA = {"type": "object", "properties": {
    "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
    "spec": {"type": "object", "properties": {
        "color": {"type": "string", "enum": ["red", "blue"]}, "size": {"type": "integer"},
        "ready": {"type": "boolean"}, "ratio": {"type": "number"}, "items": {"type": "array", "items": {
            "type": "string"}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}


def crd(*paths: str) -> dict:
    out = copy.deepcopy(CRONTAB)
    ver = out["spec"]["versions"][0]
    ver["schema"]["openAPIV3Schema"] = SCHEMA
    ver["selectableFields"] = [{"jsonPath": p} for p in paths]
    return out


async def test_valid_selectable_fields(api):
    code, got = await api("create", "customresourcedefinitions", body=crd(".spec.color", ".spec.size", ".spec.ready",
                                                                          ".spec.labels.app"),
                          group="apiextensions.k8s.io", user=ADMIN)
    assert code == 201
    assert [f["jsonPath"] for f in got["spec"]["versions"][0]["selectableFields"]] == [
        ".spec.color", ".spec.size", ".spec.ready", ".spec.labels.app"]


async def test_invalid_selectable_fields(api):
    at = "spec.versions[0].selectableFields"
    errs = await invalid(api, crd(".spec.ratio", ".spec.labels['app']", "spec.color", ".spec.nothing", ".metadata.name",
                                  ".spec.color", ".spec.color", "", ".spec.free.x"))
    typed = "must point to a field of type string, boolean or integer. Enum string fields and strings with " \
            "formats are allowed."
    assert errs == [
        f'{at}[0].jsonPath: Invalid value: ".spec.ratio": {typed}',
        (f'{at}[1].jsonPath: Invalid value: ".spec.labels[\'app\']": is an invalid path: array notation is not '
         "allowed"),
        f'{at}[2].jsonPath: Invalid value: "spec.color": is an invalid path: expected [ or . but got: spec',
        f'{at}[3].jsonPath: Invalid value: ".spec.nothing": is an invalid path: does not refer to a valid field',
        f'{at}[4].jsonPath: Invalid value: ".metadata.name": must not point to fields in metadata',
        f'{at}[6].jsonPath: Duplicate value: ".spec.color"',
        f"{at}[7].jsonPath: Required value",
        f'{at}[8].jsonPath: Invalid value: ".spec.free.x": is an invalid path: does not refer to a valid field',
    ]


async def test_at_most_eight(api):
    schema = copy.deepcopy(SCHEMA)
    schema["properties"]["spec"]["properties"].update({f"f{i}": {"type": "string"} for i in range(9)})
    body = crd(*(f".spec.f{i}" for i in range(9)))
    body["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = schema
    assert await invalid(api, body) == [
        "spec.versions[0].selectableFields: Too many: 9: must have at most 8 items"]


def test_values():
    obj = {"spec": {"color": "red", "size": 3, "ready": False, "labels": {"app": "x"}}}
    fields = names([{"jsonPath": ".spec.color"}, {"jsonPath": ".spec.size"}, {"jsonPath": ".spec.ready"},
                    {"jsonPath": ".spec.missing"}, {"jsonPath": ".spec.labels.app"}])
    assert {n: value(obj, n) for n in fields} == {"spec.color": "red", "spec.size": "3", "spec.ready": "false",
                                                  "spec.missing": "", "spec.labels.app": "x"}
