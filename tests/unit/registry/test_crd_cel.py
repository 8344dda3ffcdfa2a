"""x-kubernetes-validations through the registry's handlers: a CRD whose rule does not compile or costs too much
is refused with 422, and a served CRD's rules refuse creates, updates, patches and /status writes of custom
objects with kube's causes, nothing stored."""
from __future__ import annotations

import copy

import orjson
import pytest

from services.common import errors

from . import test_crd_controller as crd_controller
from .test_crd_controller import ADMIN, CT, G, conditions, eventually, schema_crd
from .test_crd_validation import invalid

env = crd_controller.env  # the registry's handlers with a running CRD controller

RULES = [{"rule": "self.replicas <= 5", "message": "at most 5 replicas"},
         {"rule": "self.image == oldSelf.image", "message": "image is immutable"}]
STATUS_RULES = [{"rule": "!has(self.ready) || self.ready == true || self.ready == false"},
                {"rule": "!has(self.replicas) || self.replicas >= 0", "fieldPath": ".replicas",
                 "messageExpression": "'replicas ' + string(self.replicas) + ' is negative'"}]


def cel_crd(spec_rules: list, status_rules: list | None = None) -> dict:
    body = schema_crd()
    schema = body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["x-kubernetes-validations"] = spec_rules
    schema["properties"]["status"] = {"type": "object", "properties": {
        "ready": {"type": "boolean"}, "replicas": {"type": "integer"}, "labelSelector": {"type": "string"}},
        "x-kubernetes-validations": status_rules or STATUS_RULES}
    return body


async def test_rules_that_do_not_compile_or_cost_too_much_are_refused(env):
    api, _ = env
    at = "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations"
    got = await invalid(api, cel_crd([{"rule": "self.replicas <"}]))
    assert len(got) == 1 and got[0].startswith(f"{at}[0].rule: Invalid value: apiextensions.ValidationRule{{")
    assert "compilation failed: ERROR: <input>:1:" in got[0]
    body = cel_crd([{"rule": "self.tags.all(x, self.tags.all(y, x == y))"}])
    body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["tags"] = {
        "type": "array", "items": {"type": "string"}}
    got = await invalid(api, body)
    assert got[0] == (f"{at}[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x "
                      "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, "
                      "maps, and strings are declared)")
    assert got[-1].startswith("spec.validation.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule & "
                              "messageExpression cost total for entire OpenAPIv3 schema exceeds budget")
    with pytest.raises(errors.NotFound):
        await api("get", "customresourcedefinitions", "", "crontabs.stable.example.com", group=G, user=ADMIN)


async def test_rules_refuse_invalid_writes(env):
    api, _ = env
    await api("create", "customresourcedefinitions", body=cel_crd(RULES), group=G, user=ADMIN)

    async def established() -> bool:
        _, got = await api("get", "customresourcedefinitions", "", "crontabs.stable.example.com", group=G, user=ADMIN)
        return conditions(got).get("Established") == ("True", "InitialNamesAccepted")
    await eventually(established)
    body = {"apiVersion": f"{CT}/v1", "kind": "CronTab", "metadata": {"name": "c", "namespace": "default"},
            "spec": {"cronSpec": "* * * * */5", "image": "img", "replicas": 7}}
    with pytest.raises(errors.Invalid) as e:
        await api("create", "crontabs", "default", body=body, group=CT, user=ADMIN)
    assert e.value.message == ('CronTab.stable.example.com "c" is invalid: spec: Invalid value: "object": '
                               "at most 5 replicas")
    assert e.value.details["causes"] == [{"reason": "FieldValueInvalid", "field": "spec",
                                          "message": 'Invalid value: "object": at most 5 replicas'}]
    with pytest.raises(errors.NotFound):
        await api("get", "crontabs", "default", "c", group=CT, user=ADMIN)

    body["spec"]["replicas"] = 2
    code, obj = await api("create", "crontabs", "default", body=body, group=CT, user=ADMIN)
    assert code == 201
    changed = copy.deepcopy(obj)
    changed["spec"]["image"] = "other"
    with pytest.raises(errors.Invalid) as e:
        await api("update", "crontabs", "default", "c", body=changed, group=CT, user=ADMIN)
    assert e.value.message.endswith('spec: Invalid value: "object": image is immutable')
    with pytest.raises(errors.Invalid) as e:
        await api("patch", "crontabs", "default", "c", body=orjson.dumps({"spec": {"replicas": 9}}), group=CT,
                  user=ADMIN, content_type="application/merge-patch+json")
    assert e.value.message.endswith('spec: Invalid value: "object": at most 5 replicas')
    with pytest.raises(errors.Invalid) as e:
        await api("update", "crontabs", "default", "c", body={**obj, "status": {"replicas": -1}}, group=CT,
                  user=ADMIN, subresource="status")
    assert e.value.details["causes"] == [{"reason": "FieldValueInvalid", "field": "status.replicas",
                                          "message": 'Invalid value: "object": replicas -1 is negative'}]
    _, got = await api("get", "crontabs", "default", "c", group=CT, user=ADMIN)
    assert got["spec"] == obj["spec"] and "status" not in got
    code, _ = await api("update", "crontabs", "default", "c", body={**obj, "status": {"replicas": 1}}, group=CT,
                        user=ADMIN, subresource="status")
    assert code == 200
