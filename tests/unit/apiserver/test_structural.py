"""Structural schemas: the CRD's schema checks, and pruning, defaulting and validation of custom objects with
kube's field paths and messages."""
from __future__ import annotations

from services.apiserver import structural

SCHEMA = {"type": "object", "properties": {"spec": {"type": "object", "required": ["cronSpec"], "properties": {
    "cronSpec": {"type": "string", "pattern": r"^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$"},
    "image": {"type": "string", "minLength": 1, "maxLength": 10},
    "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
    "mode": {"type": "string", "enum": ["a", "b"]},
    "port": {"x-kubernetes-int-or-string": True},
    "when": {"type": "string", "format": "date-time", "nullable": True},
    "tags": {"type": "array", "maxItems": 2, "minItems": 1, "items": {"type": "string"}},
    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string",
                                                                                   "default": "x"}}}},
}}}}


def messages(causes):
    return [f"{c['field']}: {c['message']}" for c in causes]


def test_prune_keeps_specified_fields_and_type_meta():
    obj = {"apiVersion": "stable.example.com/v1", "kind": "CronTab", "metadata": {"name": "a"}, "extra": 1,
           "spec": {"cronSpec": "* * * * */5", "unknown": True, "free": {"any": {"thing": 1}},
                    "labels": {"a": "b"}, "items": [{"name": "n", "gone": 1}]}}
    dropped = structural.prune(obj, SCHEMA)
    assert sorted(dropped) == ["extra", "spec.items[0].gone", "spec.unknown"]
    assert obj["spec"] == {"cronSpec": "* * * * */5", "free": {"any": {"thing": 1}}, "labels": {"a": "b"},
                           "items": [{"name": "n"}]}
    assert obj["metadata"] == {"name": "a"}


def test_defaults_fill_missing_fields_at_any_depth():
    obj = {"spec": {"cronSpec": "* * * * *", "items": [{}]}}
    structural.apply_defaults(obj, SCHEMA)
    assert obj["spec"]["replicas"] == 1 and obj["spec"]["items"] == [{"name": "x"}]


def test_valid_object_has_no_errors():
    obj = {"spec": {"cronSpec": "* * * * */5", "image": "img", "replicas": 3, "mode": "a", "port": "http",
                    "when": None, "tags": ["x"]}}
    assert structural.validate(obj, SCHEMA) == []
    assert structural.validate({"spec": {"cronSpec": "* * * * *", "port": 80}}, SCHEMA) == []


def test_value_errors_have_kube_paths_and_messages():
    obj = {"spec": {"cronSpec": "nope", "image": "", "replicas": 11, "mode": "c", "port": True,
                    "when": "yesterday", "tags": ["a", "b", "c"]}}
    assert messages(structural.validate(obj, SCHEMA)) == [
        ('spec.cronSpec: Invalid value: "nope": spec.cronSpec in body should match '
        r"'^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$'"),
        'spec.image: Invalid value: "": spec.image in body should be at least 1 chars long',
        "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10",
        'spec.mode: Unsupported value: "c": supported values: "a", "b"',
        'spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"',
        'spec.when: Invalid value: "yesterday": spec.when in body must be of type date-time: "yesterday"',
        "spec.tags: Too many: 3: must have at most 2 items",
    ]


def test_type_required_and_null_errors():
    assert messages(structural.validate({"spec": {"replicas": "3"}}, SCHEMA)) == [
        "spec.cronSpec: Required value",
        'spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"']
    assert messages(structural.validate({"spec": {"cronSpec": "* * * * *", "image": None}}, SCHEMA)) == [
        'spec.image: Invalid value: "null": spec.image in body must be of type string: "null"']


def test_structural_errors():
    path = "spec.versions[0].schema.openAPIV3Schema"
    assert structural.structural_errors(SCHEMA, path) == []
    bad = {"properties": {"spec": {"properties": {"a": {}}, "additionalProperties": {"type": "string"}},
                          "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
                          "list": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}}
    assert messages(structural.structural_errors(bad, path)) == [
        f"{path}.type: Required value: must not be empty at the root",
        (f"{path}.properties[metadata]: Forbidden: must not specify anything other than name and generateName, "
        "but metadata is implicitly specified"),
        (f"{path}.properties[list].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime "
        "complexity becomes quadratic"),
        (f"{path}.properties[spec].additionalProperties: Forbidden: additionalProperties and properties are "
        "mutual exclusive"),
        f"{path}.properties[spec].type: Required value: must not be empty for specified object fields",
        f"{path}.properties[spec].properties[a].type: Required value: must not be empty for specified object fields",
    ]
    assert structural.structural_errors({"type": "string"}, path) == [
        {"reason": "FieldValueInvalid", "message": 'Invalid value: "string": must be object at the root',
         "field": f"{path}.type"}]
    assert structural.structural_errors({"type": "object", "properties": {
        "x": {"x-kubernetes-int-or-string": True}, "y": {"x-kubernetes-preserve-unknown-fields": True},
        "metadata": {"type": "object", "properties": {"name": {"type": "string"}}}}}, path) == []
