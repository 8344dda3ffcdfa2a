"""Pods and the workload kinds through the registry's handlers: kube's defaults, validation messages,
update rules, status and scale subresources, and metadata.generation."""
from __future__ import annotations

from typing import Any

import pytest

from services.apis.strategies import podspec
from services.apis.strategies.workload import selector_string

from .conftest import Client


@pytest.fixture
def api(status_api: Client) -> Client:
    """This module's calls read errors as Status bodies."""
    return status_api


def pod(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "nginx"}], **spec}}


def deployment(name: str = "d", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    labels = labels or {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": dict(labels)},
                     "template": {"metadata": {"labels": dict(labels)},
                                  "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}, **spec}}


def test_pod_spec_defaults() -> None:
    spec = {"containers": [{"name": "a", "image": "nginx", "ports": [{"containerPort": 80}],
                            "readinessProbe": {"httpGet": {"port": 80}}},
                           {"name": "b", "image": "reg:5000/x:v1"}, {"name": "c", "image": "x@sha256:ab"}],
            "volumes": [{"name": "v"}, {"name": "s", "secret": {"secretName": "s"}}]}
    podspec.default_pod_spec(spec)
    a, b, c = spec["containers"]
    assert [a["imagePullPolicy"], b["imagePullPolicy"], c["imagePullPolicy"]] == ["Always", "IfNotPresent",
                                                                                   "IfNotPresent"]
    assert a["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert a["readinessProbe"] == {"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1,
                                   "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
    assert a["resources"] == {} and a["terminationMessagePolicy"] == "File"
    assert spec["volumes"] == [{"name": "v", "emptyDir": {}},
                               {"name": "s", "secret": {"secretName": "s", "defaultMode": 420}}]
    assert (spec["restartPolicy"], spec["dnsPolicy"], spec["schedulerName"], spec["securityContext"],
            spec["terminationGracePeriodSeconds"]) == ("Always", "ClusterFirst", "default-scheduler", {}, 30)
    assert "enableServiceLinks" not in spec  # SetDefaults_Pod's, not the templates'


def test_selector_string() -> None:
    assert selector_string({"matchLabels": {"b": "2", "a": "1"},
                            "matchExpressions": [{"key": "c", "operator": "In", "values": ["y", "x"]},
                                                 {"key": "d", "operator": "DoesNotExist"}]}) == \
        "a=1,b=2,c in (x,y),!d"


async def test_pod_create_defaults_and_status(api) -> None:
    code, body = await api("create", "pods", "default", body=pod(
        containers=[{"name": "c", "image": "nginx", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]))
    assert code == 201
    assert body["status"] == {"phase": "Pending", "qosClass": "Guaranteed"}
    assert body["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert body["spec"]["enableServiceLinks"] is True and body["metadata"]["generation"] == 1
    code, t = await api("get", "pods", "default", "p", table=True)
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Ready", "Status", "Restarts", "Age", "IP",
                                                           "Node", "Nominated Node", "Readiness Gates"]
    cells = t["rows"][0]["cells"]
    assert cells[:4] == ["p", "0/1", "Pending", "0"] and cells[5:] == ["<none>"] * 4


async def test_pod_validation_messages(api) -> None:
    bad = pod(containers=[{"name": "c", "image": "", "ports": [{"containerPort": 70000, "protocol": "TCPX"}],
                           "env": [{"name": "A=B"}], "volumeMounts": [{"name": "nope", "mountPath": "/x"}],
                           "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}},
                          {"name": "c", "image": "x"}], restartPolicy="Sometimes")
    code, body = await api("create", "pods", "default", body=bad)
    assert code == 422
    causes = {(c["field"], c["message"]) for c in body["details"]["causes"]}
    assert ("spec.containers[0].image", "Required value") in causes
    assert ("spec.containers[0].ports[0].containerPort",
            "Invalid value: 70000: must be between 1 and 65535, inclusive") in causes
    assert ("spec.containers[0].ports[0].protocol",
            'Unsupported value: "TCPX": supported values: "SCTP", "TCP", "UDP"') in causes
    assert ("spec.containers[0].env[0].name", 'Invalid value: "A=B": ' + podspec.ENV_NAME_MSG) in causes
    assert ("spec.containers[0].volumeMounts[0].name", 'Not found: "nope"') in causes
    assert ("spec.containers[0].resources.requests",
            'Invalid value: "2": must be less than or equal to cpu limit of 1') in causes
    assert ("spec.containers[1].name", 'Duplicate value: "c"') in causes
    assert ("spec.restartPolicy",
            'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"') in causes
    code, body = await api("create", "pods", "default", body=pod(containers=[]))
    assert code == 422 and body["details"]["causes"][0]["field"] == "spec.containers"


async def test_pod_update_rules(api) -> None:
    await api("create", "pods", "default", body=pod())
    code, body = await api("patch", "pods", "default", "p", body={"spec": {"containers": [
        {"name": "c", "image": "nginx:2"}]}}, content_type="application/strategic-merge-patch+json")
    assert code == 200 and body["spec"]["containers"][0]["image"] == "nginx:2"
    assert body["metadata"]["generation"] == 2
    code, body = await api("patch", "pods", "default", "p", body={"spec": {"restartPolicy": "Never"}},
                           content_type="application/merge-patch+json")
    assert code == 422 and body["details"]["causes"][0]["message"].startswith(
        "Forbidden: pod updates may not change fields other than `spec.containers[*].image`")
    code, body = await api("patch", "pods", "default", "p", subresource="status",
                           body={"status": {"phase": "Running", "podIP": "10.0.0.1"}},
                           content_type="application/merge-patch+json")
    assert code == 200 and body["status"]["phase"] == "Running" and body["metadata"]["generation"] == 2
    code, body = await api("patch", "pods", "default", "p", subresource="ephemeralcontainers",
                           body={"spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox"}]}},
                           content_type="application/strategic-merge-patch+json")
    assert code == 200 and body["spec"]["ephemeralContainers"][0]["name"] == "debug"
    assert body["spec"]["containers"][0]["image"] == "nginx:2"


async def test_ephemeral_container_messages(api) -> None:
    """validateEphemeralContainers' causes: names unique across the three lists, an image, no ports, probes or
    lifecycle; an existing ephemeral container never changes."""
    await api("create", "pods", "default", body=pod(initContainers=[{"name": "i", "image": "busybox"}]))
    ephemeral = [{"name": "c", "image": "busybox"}, {"name": "i", "image": "busybox"},
                 {"name": "e", "ports": [{"containerPort": 80}], "readinessProbe": {"exec": {"command": ["x"]}}}]
    code, body = await api("patch", "pods", "default", "p", subresource="ephemeralcontainers",
                           body={"spec": {"ephemeralContainers": ephemeral}},
                           content_type="application/strategic-merge-patch+json")
    assert code == 422
    causes = [(c["field"], c["message"]) for c in body["details"]["causes"]]
    assert causes == [("spec.ephemeralContainers[0].name", 'Duplicate value: "c"'),
                      ("spec.ephemeralContainers[1].name", 'Duplicate value: "i"'),
                      ("spec.ephemeralContainers[2].image", "Required value"),
                      ("spec.ephemeralContainers[2].ports", "Forbidden: cannot be set for an Ephemeral Container"),
                      ("spec.ephemeralContainers[2].readinessProbe",
                       "Forbidden: cannot be set for an Ephemeral Container")]
    code, _ = await api("patch", "pods", "default", "p", subresource="ephemeralcontainers",
                        body={"spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox"}]}},
                        content_type="application/strategic-merge-patch+json")
    assert code == 200
    code, body = await api("patch", "pods", "default", "p", subresource="ephemeralcontainers",
                           body={"spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox:2"}]}},
                           content_type="application/merge-patch+json")
    assert code == 422
    assert [(c["field"], c["message"]) for c in body["details"]["causes"]] == [
        ("spec.ephemeralContainers[0]", "Forbidden: existing ephemeral containers may not be changed")]


async def test_deployment_defaults_generation_and_scale(api) -> None:
    code, body = await api("create", "deployments", "default", body=deployment())
    assert code == 201, body
    assert body["metadata"]["generation"] == 1 and body["status"] == {}
    assert body["spec"]["strategy"] == {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    assert body["spec"]["template"]["metadata"]["creationTimestamp"] is None
    code, scale = await api("get", "deployments", "default", "d", subresource="scale")
    assert scale == {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": scale["metadata"],
                     "spec": {"replicas": 1}, "status": {"replicas": 0, "selector": "app=d"}}
    code, scale = await api("update", "deployments", "default", "d", subresource="scale", body={
        "apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "d", "namespace": "default"},
        "spec": {"replicas": 4}})
    assert code == 200 and scale["spec"]["replicas"] == 4
    code, scale = await api("patch", "deployments", "default", "d", subresource="scale",
                            body={"spec": {"replicas": 6}}, content_type="application/merge-patch+json")
    assert code == 200 and scale["spec"]["replicas"] == 6
    code, body = await api("patch", "deployments", "default", "d", subresource="scale",
                           body={"spec": {"replicas": -1}}, content_type="application/merge-patch+json")
    assert code == 422 and body["details"]["causes"][0] == {
        "reason": "FieldValueInvalid", "field": "spec.replicas",
        "message": "Invalid value: -1: must be greater than or equal to 0"}
    code, body = await api("get", "deployments", "default", "d")
    assert body["spec"]["replicas"] == 6 and body["metadata"]["generation"] == 3
    code, body = await api("patch", "deployments", "default", "d", subresource="status",
                           body={"status": {"replicas": 6}}, content_type="application/merge-patch+json")
    assert code == 200 and body["metadata"]["generation"] == 3
    code, scale = await api("get", "deployments", "default", "d", subresource="scale")
    assert scale["status"]["replicas"] == 6
    code, body = await api("patch", "deployments", "default", "d",
                           body={"metadata": {"labels": {"x": "y"}}}, content_type="application/merge-patch+json")
    assert code == 200 and body["metadata"]["generation"] == 3


async def test_deployment_validation(api) -> None:
    code, body = await api("create", "deployments", "default",
                           body=deployment(labels={"app": "a"}) | {"metadata": {"name": "x"}})
    assert code == 201
    bad = deployment("y")
    bad["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    bad["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    bad["spec"]["strategy"] = {"type": "Recreate", "rollingUpdate": {}}
    code, body = await api("create", "deployments", "default", body=bad)
    assert code == 422
    causes = {(c["field"], c["message"]) for c in body["details"]["causes"]}
    mismatch = 'Invalid value: map[string]string{"app":"other"}: `selector` does not match template `labels`'
    assert ("spec.template.metadata.labels", mismatch) in causes
    assert ("spec.template.spec.restartPolicy", 'Unsupported value: "Never": supported values: "Always"') in causes
    assert ("spec.strategy.rollingUpdate",
            "Forbidden: may not be specified when strategy `type` is 'Recreate'") in causes
    code, body = await api("patch", "deployments", "default", "x",
                           body={"spec": {"selector": {"matchLabels": {"app": "b"}}}},
                           content_type="application/merge-patch+json")
    assert code == 422
    assert {"field": "spec.selector", "reason": "FieldValueInvalid", "message": (
        'Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"app":"b"}, '
        "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable")} in body["details"]["causes"]
    empty = deployment("z")
    empty["spec"]["selector"] = {}
    code, body = await api("create", "deployments", "default", body=empty)
    assert code == 422 and "empty selector is invalid for deployment" in body["message"]


async def test_job_selector_generated_and_restart_policy(api) -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "c", "image": "busybox"}]}}}}
    code, body = await api("create", "jobs", "default", body=job)
    assert code == 201, body
    uid = body["metadata"]["uid"]
    assert body["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert body["spec"]["template"]["metadata"]["labels"] == {
        "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "j", "controller-uid": uid,
        "job-name": "j"}
    assert (body["spec"]["completions"], body["spec"]["parallelism"], body["spec"]["backoffLimit"],
            body["spec"]["podReplacementPolicy"]) == (1, 1, 6, "TerminatingOrFailed")
    code, t = await api("get", "jobs", "default", "j", table=True)
    assert t["rows"][0]["cells"][:4] == ["j", "Running", "0/1", ""]
    job["metadata"]["name"] = "k"
    del job["spec"]["template"]["spec"]["restartPolicy"]
    code, body = await api("create", "jobs", "default", body=job)
    assert code == 422 and body["details"]["causes"][0]["message"] == \
        'Unsupported value: "Always": supported values: "OnFailure", "Never"'


async def test_cronjob_and_replication_controller(api) -> None:
    cj = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj"},
          "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {
              "restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}}}}}}
    code, body = await api("create", "cronjobs", "default", body=cj)
    assert code == 201, body
    assert (body["spec"]["concurrencyPolicy"], body["spec"]["suspend"], body["spec"]["successfulJobsHistoryLimit"],
            body["spec"]["failedJobsHistoryLimit"]) == ("Allow", False, 3, 1)
    code, t = await api("get", "cronjobs", "default", "cj", table=True)
    assert t["rows"][0]["cells"][:6] == ["cj", "*/5 * * * *", "<none>", "False", 0, "<none>"]
    cj["metadata"]["name"], cj["spec"]["schedule"] = "bad", "* * *"
    code, body = await api("create", "cronjobs", "default", body=cj)
    assert code == 422 and body["details"]["causes"][0]["field"] == "spec.schedule"
    rc = {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc"},
          "spec": {"template": {"metadata": {"labels": {"app": "rc"}},
                                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    code, body = await api("create", "replicationcontrollers", "default", body=rc)
    assert code == 201, body
    assert body["spec"]["selector"] == {"app": "rc"} and body["metadata"]["labels"] == {"app": "rc"}
    assert body["spec"]["replicas"] == 1 and body["status"] == {"replicas": 0}
    code, scale = await api("get", "replicationcontrollers", "default", "rc", subresource="scale")
    assert scale["status"] == {"replicas": 0, "selector": "app=rc"}


async def test_pod_binding_and_eviction(api) -> None:
    await api("create", "pods", "default", body=pod())
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
               "target": {"kind": "Node", "name": "node-1"}}
    code, body = await api("create", "pods", "default", "p", subresource="binding", body=binding)
    assert code == 201 and body["status"] == "Success"
    code, body = await api("get", "pods", "default", "p")
    assert body["spec"]["nodeName"] == "node-1" and body["metadata"]["generation"] == 1
    assert body["status"]["conditions"][0]["type"] == "PodScheduled"
    code, body = await api("create", "pods", "default", "p", subresource="binding", body=binding)
    assert code == 409 and body["message"] == \
        'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "node-1"'
    code, body = await api("create", "pods", "default", "p", subresource="binding",
                           body={**binding, "target": {}})
    assert code == 422 and body["details"]["causes"][0]["field"] == "target.name"
    code, body = await api("create", "pods", "default", "p", subresource="eviction", body={
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}})
    assert code == 201
    code, body = await api("get", "pods", "default", "p")
    assert code == 404


async def test_statefulset_and_daemonset(api) -> None:
    sts = deployment("s") | {"apiVersion": "apps/v1", "kind": "StatefulSet"}
    sts["spec"]["serviceName"] = "s"
    code, body = await api("create", "statefulsets", "default", body=sts)
    assert code == 201, body
    spec = body["spec"]
    assert (spec["replicas"], spec["podManagementPolicy"], spec["updateStrategy"], spec["revisionHistoryLimit"],
            spec["persistentVolumeClaimRetentionPolicy"]) == (
        1, "OrderedReady", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}, 10,
        {"whenDeleted": "Retain", "whenScaled": "Retain"})
    assert body["status"] == {"replicas": 0, "availableReplicas": 0}
    code, body = await api("patch", "statefulsets", "default", "s", body={"spec": {"serviceName": "other"}},
                           content_type="application/merge-patch+json")
    assert code == 422 and "updates to statefulset spec for fields other than 'replicas'" in body["message"]
    code, scale = await api("patch", "statefulsets", "default", "s", subresource="scale",
                            body={"spec": {"replicas": 3}}, content_type="application/merge-patch+json")
    assert code == 200 and scale["spec"]["replicas"] == 3
    ds = deployment("ds") | {"apiVersion": "apps/v1", "kind": "DaemonSet"}
    code, body = await api("create", "daemonsets", "default", body=ds)
    assert code == 201, body
    assert body["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    assert body["status"] == {"currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0,
                              "numberReady": 0}
    code, t = await api("get", "daemonsets", "default", "ds", table=True)
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Desired", "Current", "Ready", "Up-to-date",
                                                           "Available", "Node Selector", "Age", "Containers",
                                                           "Images", "Selector"]
    assert t["rows"][0]["cells"][:7] == ["ds", 0, 0, 0, 0, 0, "<none>"]
    code, body = await api("get", "daemonsets", "default", "ds", subresource="scale")
    assert code == 404


@pytest.mark.parametrize("kind, resource, key", [("Deployment", "deployments", "strategy"),
                                                 ("DaemonSet", "daemonsets", "updateStrategy")])
async def test_rolling_update_limits(api, kind: str, resource: str, key: str) -> None:
    """ValidateRollingUpdateDeployment and ValidateRollingUpdateDaemonSet: int or percent, not both 0."""
    body = deployment("r") | {"apiVersion": "apps/v1", "kind": kind}
    body["spec"][key] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "0%", "maxSurge": 0}}
    code, out = await api("create", resource, "default", body=body)
    path = f"spec.{key}.rollingUpdate"
    assert code == 422 and [(c["field"], c["message"]) for c in out["details"]["causes"]] == [
        (f"{path}.maxUnavailable", 'Invalid value: "0%": may not be 0 when `maxSurge` is 0')]
    body["spec"][key]["rollingUpdate"] = {"maxUnavailable": "150%", "maxSurge": -1}
    code, out = await api("create", resource, "default", body=body)
    assert code == 422 and [(c["field"], c["message"]) for c in out["details"]["causes"]] == [
        (f"{path}.maxUnavailable", 'Invalid value: "150%": must not be greater than 100%'),
        (f"{path}.maxSurge", "Invalid value: -1: must be greater than or equal to 0")]
