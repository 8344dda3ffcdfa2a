"""x-kubernetes-validations end to end with kubectl and the official Python client, on kube's CronTab example
with CEL rules: a rule that does not compile and one that costs too much refused at CRD create (422), a rule
refusing an invalid object with its message, a transition rule (oldSelf) refusing a change, messageExpression."""
from __future__ import annotations

import copy
import json

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.kubectls import RUN, refused

pytestmark = pytest.mark.stack
NS = f"crd-cel-{RUN}"
GROUP = f"celstable{RUN}.example.com"
NAME = f"crontabs.{GROUP}"  # also the resource kubectl is given: test_crd_kubectl serves crontabs in another
# group, and kubectl's cached discovery must not resolve a bare "crontab" or "ct" to this one once it is gone
AT = "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations"

SPEC = {
    "type": "object",
    "properties": {
        "cronSpec": {"type": "string", "maxLength": 64},
        "image": {"type": "string", "maxLength": 256,
                  "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "image is immutable"}]},
        "replicas": {"type": "integer", "default": 1},
        "minReplicas": {"type": "integer", "default": 0},
        "tags": {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 32}},
    },
    "x-kubernetes-validations": [
        {"rule": "self.minReplicas <= self.replicas",
         "messageExpression": "'replicas (' + string(self.replicas) + ') should be greater than or equal to "
                              "minReplicas (' + string(self.minReplicas) + ')'"},
        {"rule": "self.tags.all(t, t.matches('^[a-z]+$'))", "message": "tags are lowercase words",
         "fieldPath": ".tags", "reason": "FieldValueForbidden"},
    ],
}


def crd(spec_schema: dict) -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": NAME},
        "spec": {"group": GROUP, "scope": "Namespaced",
                 "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "properties": {"spec": spec_schema}}}}]},
    }


def crontab(name: str, **spec: object) -> str:
    return yaml.safe_dump({"apiVersion": f"{GROUP}/v1", "kind": "CronTab", "metadata": {"name": name},
                           "spec": {"cronSpec": "* * * * */5", "image": "my-awesome-cron-image", "tags": [],
                                    **spec}})


@pytest.fixture(scope="module", autouse=True)
def ns(kubectl):
    kubectl.run("create", "namespace", NS)
    yield NS
    kubectl.run("delete", "namespace", NS, "--wait=false", check=False)
    kubectl.run("delete", "crd", NAME, "--wait=false", check=False)


@pytest.fixture(scope="module")
def apis(stack):
    api_client = config.new_client_from_config(config_file=str(stack.kubeconfig))
    yield client.ApiextensionsV1Api(api_client), client.CustomObjectsApi(api_client)
    api_client.close()


def test_rules_refused_at_crd_create(kubectl, apis):
    bad = copy.deepcopy(SPEC)
    bad["x-kubernetes-validations"] = [{"rule": "self.replicas >"}]
    err = refused(kubectl, "apply", "-f", "-", input=json.dumps(crd(bad)))
    assert f'The CustomResourceDefinition "{NAME}" is invalid: {AT}[0].rule: Invalid value: ' in err, err
    assert "compilation failed: ERROR: <input>:1:" in err

    costly = copy.deepcopy(SPEC)
    costly["properties"]["tags"] = {"type": "array", "items": {"type": "string"}}
    costly["x-kubernetes-validations"] = [{"rule": "self.tags.all(x, self.tags.all(y, x == y))"}]
    extensions, _ = apis
    with pytest.raises(ApiException) as e:
        extensions.create_custom_resource_definition(crd(costly))
    assert e.value.status == 422
    status = json.loads(e.value.body)
    assert status["reason"] == "Invalid"
    assert {"reason": "FieldValueForbidden", "field": f"{AT}[0].rule",
            "message": "Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying "
                       "the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings "
                       "are declared)"} in status["details"]["causes"]
    assert "NotFound" in refused(kubectl, "get", "crd", NAME)


def test_rules_refuse_invalid_objects_and_changes(kubectl, apis):
    assert "created" in kubectl.run("apply", "-f", "-", input=json.dumps(crd(SPEC))).stdout
    kubectl.run("wait", "--for=condition=Established", f"crd/{NAME}", "--timeout=30s")

    err = refused(kubectl, "-n", NS, "create", "-f", "-", input=crontab("bad", replicas=1, minReplicas=3))
    assert ('The CronTab "bad" is invalid: spec: Invalid value: "object": replicas (1) should be greater than or '
            "equal to minReplicas (3)") in err, err
    err = refused(kubectl, "-n", NS, "create", "-f", "-", input=crontab("bad", tags=["Upper"]))
    assert 'The CronTab "bad" is invalid: spec.tags: Forbidden: tags are lowercase words' in err, err
    assert "NotFound" in refused(kubectl, "-n", NS, "get", NAME, "bad")

    kubectl.run("-n", NS, "create", "-f", "-", input=crontab("good", replicas=2, tags=["nightly"]))
    # the transition rule: image may not change
    err = refused(kubectl, "-n", NS, "patch", NAME, "good", "--type=merge", "-p", '{"spec":{"image":"other"}}')
    assert 'The CronTab "good" is invalid: spec.image: Invalid value: "string": image is immutable' in err, err
    kubectl.run("-n", NS, "patch", NAME, "good", "--type=merge", "-p", '{"spec":{"replicas":3}}')

    _, custom = apis
    with pytest.raises(ApiException) as e:
        custom.patch_namespaced_custom_object(GROUP, "v1", NS, "crontabs", "good", {"spec": {"minReplicas": 5}})
    assert e.value.status == 422
    assert json.loads(e.value.body)["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "field": "spec",
         "message": 'Invalid value: "object": replicas (3) should be greater than or equal to minReplicas (5)'}]
    got = custom.get_namespaced_custom_object(GROUP, "v1", NS, "crontabs", "good")
    assert got["spec"]["replicas"] == 3 and got["spec"]["minReplicas"] == 0
    assert got["spec"]["image"] == "my-awesome-cron-image"
    kubectl.run("delete", "crd", NAME, "--timeout=30s")
