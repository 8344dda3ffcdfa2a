"""CustomResourceDefinitions end to end with kubectl and the official Python client: kube's CronTab example
from the CRD documentation (create, Established, pruning, defaults, get by plural and short name with its
printer columns, explain, kubectl scale, a 422 with kube's message, protobuf refused, deletion of the CRD and
its objects), and kubectl's client-side validation, which lists CRDs."""
from __future__ import annotations

import json
import time

import pytest
import yaml
from kubernetes import client, config

from k8s_pb import runtime_pb2 as runtime
from services.proxy.protobuf import MAGIC
from tests.kubectls import RUN, refused
from tests.waiting import wait_for

pytestmark = pytest.mark.stack
NS = f"crd-e2e-{RUN}"
GROUP = f"stable{RUN}.example.com"
NAME = f"crontabs.{GROUP}"
PB = "application/vnd.kubernetes.protobuf"

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": NAME},
    "spec": {
        "group": GROUP, "scope": "Namespaced",
        "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab", "shortNames": ["ct"]},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object", "properties": {"spec": {"type": "object", "properties": {
                "cronSpec": {"type": "string", "description": "The schedule, in cron format.",
                             "pattern": r"^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$"},
                "image": {"type": "string"},
                "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1}}}}}},
            "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                                     "statusReplicasPath": ".status.replicas"}},
            "additionalPrinterColumns": [
                {"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"},
                {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                {"name": "Image", "type": "string", "jsonPath": ".spec.image", "priority": 1},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]}],
    },
}


def crontab(name: str, **spec: object) -> str:
    return yaml.safe_dump({"apiVersion": f"{GROUP}/v1", "kind": "CronTab", "metadata": {"name": name},
                           "spec": {"cronSpec": "* * * * */5", "image": "my-awesome-cron-image", **spec}})


@pytest.fixture(scope="module", autouse=True)
def ns(kubectl):
    kubectl.run("create", "namespace", NS)
    yield NS
    kubectl.run("delete", "namespace", NS, "--wait=false", check=False)
    kubectl.run("delete", "crd", NAME, "--wait=false", check=False)


def test_single_review_passes_client_side_validation(kubectl):
    """kubectl create -f lists CRDs to validate a kind it does not know from discovery's OpenAPI."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": "alice", "resourceAttributes": {"verb": "get", "resource": "pods"}}}
    out = kubectl.run("create", "-f", "-", "-o", "json", input=json.dumps(review))
    assert json.loads(out.stdout)["status"]["allowed"] is False


def protobuf_checks(admin) -> None:
    """kube refuses protobuf for custom resources: a body with 415, an Accept without JSON with 406; an Accept
    that also takes JSON is answered in JSON."""
    path = f"/apis/{GROUP}/v1/namespaces/{NS}/crontabs"
    unknown = runtime.Unknown(raw=b"\n\x00")
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind = f"{GROUP}/v1", "CronTab"
    r = admin.post(path, content=MAGIC + unknown.SerializeToString(), headers={"Content-Type": PB})
    assert r.status_code == 415, r.content
    assert r.json()["message"] == ("the body of the request was in an unknown format - accepted media types "
                                   "include: application/json, application/yaml")
    r = admin.get(path, headers={"Accept": PB})
    assert r.status_code == 406, r.content
    r = admin.get(path, headers={"Accept": f"{PB}, application/json"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    assert r.json()["kind"] == "CronTabList"


def test_crontab_end_to_end(kubectl, stack, admin):
    start = time.monotonic()
    assert "created" in kubectl.run("apply", "-f", "-", input=json.dumps(CRD)).stdout
    kubectl.run("wait", "--for=condition=Established", f"crd/{NAME}", "--timeout=30s")
    # servable: discovery has it (kubectl get resolves the short name through it)
    wait_for(lambda: kubectl.run("-n", NS, "get", "ct", check=False).returncode == 0, 10, "crontabs served")
    servable = time.monotonic() - start
    assert servable < 10, servable
    crd = json.loads(kubectl.run("get", "crd", NAME, "-o", "json").stdout)
    conds = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conds == {"NamesAccepted": "True", "Established": "True"}
    assert crd["status"]["acceptedNames"]["shortNames"] == ["ct"]
    # the schema is published in /openapi/v3: kubectl explain reads it
    explained = kubectl.run("explain", "crontabs.spec.cronSpec").stdout
    assert "The schedule, in cron format." in explained, explained
    header = kubectl.run("get", "crd", NAME).stdout.splitlines()[0].split()
    assert header == ["NAME", "CREATED", "AT"]

    # an unknown field is pruned (a warning with --validate=warn, refused with strict validation)
    out = kubectl.run("-n", NS, "create", "--validate=warn", "-f", "-",
                      input=crontab("my-new-cron-object", someRandomField=42))
    assert 'unknown field "spec.someRandomField"' in out.stderr
    err = refused(kubectl, "-n", NS, "create", "--validate=strict", "-f", "-", input=crontab("strict", other=1))
    assert 'unknown field "spec.other"' in err
    obj = json.loads(kubectl.run("-n", NS, "get", "crontab", "my-new-cron-object", "-o", "json").stdout)
    assert obj["spec"] == {"cronSpec": "* * * * */5", "image": "my-awesome-cron-image", "replicas": 1}
    for resource in ("crontabs", "ct", f"crontabs.{GROUP}"):
        lines = kubectl.run("-n", NS, "get", resource).stdout.splitlines()
        assert lines[0].split() == ["NAME", "SPEC", "REPLICAS", "AGE"]
        assert lines[1].split()[:7] == ["my-new-cron-object", "*", "*", "*", "*", "*/5", "1"]
    wide = kubectl.run("-n", NS, "get", "ct", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "SPEC", "REPLICAS", "IMAGE", "AGE"]
    assert wide[1].split()[7] == "my-awesome-cron-image"

    # the scale subresource
    assert "scaled" in kubectl.run("-n", NS, "scale", "crontab", "my-new-cron-object", "--replicas=3").stdout
    assert kubectl.run("-n", NS, "get", "ct", "my-new-cron-object", "-o", "jsonpath={.spec.replicas}").stdout == "3"

    err = refused(kubectl, "-n", NS, "create", "-f", "-", input=crontab("bad", replicas=0, cronSpec="x"))
    assert 'The CronTab "bad" is invalid: ' in err
    assert "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1" in err
    assert 'spec.cronSpec: Invalid value: "x": spec.cronSpec in body should match' in err
    assert "NotFound" in refused(kubectl, "-n", NS, "get", "crontab", "bad")

    protobuf_checks(admin)

    # the official Python client's CustomObjectsApi
    api_client = config.new_client_from_config(config_file=str(stack.kubeconfig))
    try:
        custom = client.CustomObjectsApi(api_client)
        body = yaml.safe_load(crontab("from-python", replicas=3))
        created = custom.create_namespaced_custom_object(GROUP, "v1", NS, "crontabs", body)
        assert created["spec"]["replicas"] == 3 and created["metadata"]["uid"]
        got = custom.get_namespaced_custom_object(GROUP, "v1", NS, "crontabs", "from-python")
        assert got["metadata"]["uid"] == created["metadata"]["uid"]
        listed = custom.list_namespaced_custom_object(GROUP, "v1", NS, "crontabs")
        assert sorted(i["metadata"]["name"] for i in listed["items"]) == ["from-python", "my-new-cron-object"]
        assert listed["kind"] == "CronTabList"
    finally:
        api_client.close()

    # deleting the CRD deletes its objects first, then the resource leaves discovery
    kubectl.run("delete", "crd", NAME, "--timeout=30s")
    assert "NotFound" in refused(kubectl, "get", "crd", NAME)
    wait_for(lambda: GROUP not in [g["name"] for g in json.loads(kubectl.run("get", "--raw", "/apis").stdout)
                                   ["groups"]], 10, "the group gone from discovery")
    # (kubectl's discovery cache may still name the resource: then the list is what is not found)
    err = refused(kubectl, "-n", NS, "get", "crontabs")
    assert "doesn't have a resource type" in err or "the server could not find the requested resource" in err, err
