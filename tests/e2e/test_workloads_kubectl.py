"""Pods and the workload kinds with kubectl (1.32 on the PATH, 1.27 and 1.33 beside it) and the official
Python client: create deployment|job|cronjob, run, get -o wide, scale, set image, rollout history, explain,
dry-run defaults, validation errors, strategic merge patch of containers."""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Kubectl
from tests.kubectls import namespace


def create(kctl: Kubectl, ns: str, *args: str, server_dry_run: bool = False) -> str:
    """`kubectl create <kind> ...` sent straight (kubectl 1.32 and 1.33 send the workload kinds as protobuf)."""
    extra = ["--dry-run=server", "-o", "json"] if server_dry_run else []
    return kctl.run("-n", ns, "create", *args, *extra).stdout


@pytest.fixture
def ns(kubectl: Kubectl) -> Iterator[str]:
    with namespace(kubectl, "wl") as name:
        yield name


def test_deployment_lifecycle(kctl: Kubectl, ns: str) -> None:
    create(kctl, ns, "deployment", "web", "--image=nginx:1.25", "--replicas=2", "--port=80")
    out = kctl.run("-n", ns, "get", "deploy", "-o", "wide").stdout.splitlines()
    assert out[0].split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    row = out[1].split()
    assert row[:4] == ["web", "0/2", "0", "0"] and row[5:] == ["nginx", "nginx:1.25", "app=web"]
    dep = json.loads(kctl.run("-n", ns, "get", "deploy", "web", "-o", "json").stdout)
    assert dep["metadata"]["generation"] == 1
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate",
                                       "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["imagePullPolicy"] == "IfNotPresent" and container["ports"][0]["protocol"] == "TCP"
    assert "scaled" in kctl.run("-n", ns, "scale", "deployment", "web", "--replicas=5").stdout
    scale = json.loads(kctl.run("get", "--raw",
                                f"/apis/apps/v1/namespaces/{ns}/deployments/web/scale").stdout)
    assert scale["kind"] == "Scale" and scale["spec"] == {"replicas": 5}
    assert scale["status"]["selector"] == "app=web"
    kctl.run("-n", ns, "set", "image", "deployment/web", "nginx=nginx:1.26")
    dep = json.loads(kctl.run("-n", ns, "get", "deploy", "web", "-o", "json").stdout)
    assert dep["spec"]["replicas"] == 5 and dep["metadata"]["generation"] == 3
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.26"
    # no controller has written a ReplicaSet: the history is empty, as against a bare kube-apiserver
    history = kctl.run("-n", ns, "rollout", "history", "deployment/web")
    assert history.returncode == 0 and "deployment.apps/web" in history.stdout
    # status writes do not move the generation
    kctl.run("-n", ns, "patch", "deploy", "web", "--subresource=status", "--type=merge",
             "-p", '{"status":{"readyReplicas":1,"replicas":1}}')
    dep = json.loads(kctl.run("-n", ns, "get", "deploy", "web", "-o", "json").stdout)
    assert dep["metadata"]["generation"] == 3 and dep["status"]["readyReplicas"] == 1
    # strategic merge patch on containers (merge key name) and env (merge key name)
    kctl.run("-n", ns, "patch", "deploy", "web", "-p", json.dumps({"spec": {"template": {"spec": {"containers": [
        {"name": "nginx", "env": [{"name": "A", "value": "1"}]}]}}}}))
    dep = json.loads(kctl.run("-n", ns, "get", "deploy", "web", "-o", "json").stdout)
    c = dep["spec"]["template"]["spec"]["containers"]
    assert len(c) == 1 and c[0]["image"] == "nginx:1.26" and c[0]["env"] == [{"name": "A", "value": "1"}]


def test_dry_run_defaults_and_validation(kctl: Kubectl, ns: str) -> None:
    out = create(kctl, ns, "deployment", "d", "--image=busybox", server_dry_run=True)
    dep = json.loads(out)
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["revisionHistoryLimit"] == 10
    assert dep["spec"]["progressDeadlineSeconds"] == 600
    pod_spec = dep["spec"]["template"]["spec"]
    assert {k: pod_spec[k] for k in ("dnsPolicy", "restartPolicy", "schedulerName", "securityContext",
                                     "terminationGracePeriodSeconds")} == {
        "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler",
        "securityContext": {}, "terminationGracePeriodSeconds": 30}
    assert pod_spec["containers"][0]["imagePullPolicy"] == "Always"
    assert pod_spec["containers"][0]["terminationMessagePath"] == "/dev/termination-log"
    assert kctl.run("-n", ns, "get", "deploy", "d", check=False).returncode != 0
    bad = kctl.run("-n", ns, "apply", "-f", "-", check=False, input=(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: bad\nspec:\n"
        "  selector:\n    matchLabels:\n      app: one\n  template:\n    metadata:\n      labels:\n        app: two\n"
        "    spec:\n      containers:\n      - name: Bad_Name\n        image: ''\n"))
    assert bad.returncode != 0
    assert 'The Deployment "bad" is invalid' in bad.stderr
    assert "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"two\"}: `selector` does not " \
           "match template `labels`" in bad.stderr
    assert "spec.template.spec.containers[0].image: Required value" in bad.stderr
    assert 'spec.template.spec.containers[0].name: Invalid value: "Bad_Name"' in bad.stderr


def test_run_pod_job_cronjob(kctl: Kubectl, ns: str) -> None:
    kctl.run("-n", ns, "run", "p", "--image=busybox:1.36", "--", "sleep", "3600")
    out = kctl.run("-n", ns, "get", "pods", "-o", "wide").stdout.splitlines()
    assert out[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE",
                              "READINESS", "GATES"]
    row = out[1].split()
    assert row[:4] == ["p", "0/1", "Pending", "0"] and row[5:] == ["<none>"] * 4
    pod = json.loads(kctl.run("-n", ns, "get", "pod", "p", "-o", "json").stdout)
    assert pod["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert pod["spec"]["enableServiceLinks"] is True
    assert pod["spec"]["serviceAccountName"] == "default"
    bad = kctl.run("-n", ns, "patch", "pod", "p", "--type=merge", "-p", '{"spec":{"restartPolicy":"Never"}}',
                   check=False)
    assert bad.returncode != 0 and "spec: Forbidden: pod updates may not change fields" in bad.stderr
    kctl.run("-n", ns, "set", "image", "pod/p", "p=busybox:1.37")
    create(kctl, ns, "job", "j", "--image=busybox")
    job = json.loads(kctl.run("-n", ns, "get", "job", "j", "-o", "json").stdout)
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert job["spec"]["template"]["metadata"]["labels"]["job-name"] == "j"
    assert job["spec"]["backoffLimit"] == 6 and job["spec"]["completionMode"] == "NonIndexed"
    out = kctl.run("-n", ns, "get", "jobs").stdout.splitlines()
    assert out[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert out[1].split()[:3] == ["j", "Running", "0/1"]
    create(kctl, ns, "cronjob", "cj", "--image=busybox", "--schedule=*/5 * * * *")
    out = kctl.run("-n", ns, "get", "cronjobs").stdout.splitlines()
    assert out[0].split() == ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE"]
    assert out[1].split()[:8] == ["cj", "*/5", "*", "*", "*", "*", "<none>", "False"]
    manifest = kctl.run("-n", ns, "create", "cronjob", "cj2", "--image=busybox", "--schedule=nope",
                        "--dry-run=client", "-o", "yaml").stdout
    bad = kctl.run("-n", ns, "create", "-f", "-", input=manifest, check=False)
    assert bad.returncode != 0 and "spec.schedule: Invalid value: \"nope\"" in bad.stderr


def test_explain_and_missing_service_account(kubectl: Kubectl, ns: str) -> None:
    out = kubectl.run("explain", "deployment.spec.template.spec.containers.ports").stdout
    assert "containerPort" in out and "FIELD: ports" in out
    bad = kubectl.run("-n", ns, "run", "q", "--image=busybox", "--overrides",
                      '{"spec":{"serviceAccountName":"nobody"}}', check=False)
    assert bad.returncode != 0
    assert 'pods "q" is forbidden: error looking up service account ' + ns + '/nobody: serviceaccount "nobody" ' \
           'not found' in bad.stderr


def test_python_client_deployment(stack: Any, ns: str) -> None:
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(stack.kubeconfig))
    try:
        apps = client.AppsV1Api(api_client)
        body = client.V1Deployment(
            metadata=client.V1ObjectMeta(name="py"),
            spec=client.V1DeploymentSpec(
                selector=client.V1LabelSelector(match_labels={"app": "py"}),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels={"app": "py"}),
                    spec=client.V1PodSpec(containers=[client.V1Container(
                        name="web", image="nginx", ports=[client.V1ContainerPort(container_port=80)],
                        env=[client.V1EnvVar(name="A", value="1")])]))))
        created = apps.create_namespaced_deployment(ns, body)
        assert created.spec.replicas == 1 and created.metadata.generation == 1
        patched = apps.patch_namespaced_deployment("py", ns, {"spec": {"template": {"spec": {"containers": [
            {"name": "web", "env": [{"name": "B", "value": "2"}], "ports": [{"containerPort": 443}]}]}}}})
        c = patched.spec.template.spec.containers[0]
        assert c.image == "nginx" and sorted(e.name for e in c.env) == ["A", "B"]
        assert sorted(p.container_port for p in c.ports) == [80, 443]
        scale = apps.patch_namespaced_deployment_scale("py", ns, {"spec": {"replicas": 3}})
        assert scale.spec.replicas == 3
        assert apps.read_namespaced_deployment_scale("py", ns).spec.replicas == 3
        with pytest.raises(client.ApiException) as e:
            apps.patch_namespaced_deployment("py", ns, {"spec": {"selector": {"matchLabels": {"app": "other"}}}})
        assert e.value.status == 422 and "field is immutable" in e.value.body
    finally:
        api_client.close()


def test_bootstrap_roles_cover_workloads(kubectl: Kubectl, ns: str) -> None:
    """kube's aggregated edit and view roles name the workload kinds and their subresources."""
    kubectl.run("-n", ns, "create", "rolebinding", "editor", "--clusterrole=edit", "--user=ed")
    kubectl.run("-n", ns, "create", "rolebinding", "viewer", "--clusterrole=view", "--user=vi")

    def can(user: str, *what: str) -> str:
        return kubectl.run("-n", ns, "auth", "can-i", *what, f"--as={user}", check=False).stdout.strip()

    assert can("ed", "create", "deployments.apps") == "yes"
    assert can("ed", "patch", "deployments.apps", "--subresource=scale") == "yes"
    assert can("ed", "create", "cronjobs.batch") == "yes"
    assert can("ed", "create", "pods") == "yes"
    assert can("vi", "list", "jobs.batch") == "yes"
    assert can("vi", "get", "statefulsets.apps", "--subresource=status") == "yes"
    assert can("vi", "create", "deployments.apps") == "no"
    assert can("vi", "get", "secrets") == "no"


DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: applied
spec:
  selector:
    matchLabels: {{app: applied}}
  template:
    metadata:
      labels: {{app: applied}}
    spec:
      containers:
      - name: web
        image: {image}
        ports:
        - containerPort: 80
        env:
        - name: MODE
          value: {mode}
"""


def test_apply_deployment_client_and_server_side(kctl: Kubectl, ns: str) -> None:
    first = kctl.run("-n", ns, "apply", "-f", "-", input=DEPLOYMENT.format(image="nginx:1.25", mode="a"))
    assert "deployment.apps/applied created" in first.stdout
    kctl.run("-n", ns, "apply", "-f", "-", input=DEPLOYMENT.format(image="nginx:1.26", mode="b"))
    dep = json.loads(kctl.run("-n", ns, "get", "deploy", "applied", "-o", "json").stdout)
    c = dep["spec"]["template"]["spec"]["containers"]
    assert [(x["name"], x["image"], x["env"]) for x in c] == [("web", "nginx:1.26", [{"name": "MODE", "value": "b"}])]
    assert dep["metadata"]["generation"] == 2
    ssa = kctl.run("-n", ns, "apply", "--server-side", "--force-conflicts", "-f", "-",
                   input=DEPLOYMENT.format(image="nginx:1.27", mode="c"))
    assert "serverside-applied" in ssa.stdout
    dep = json.loads(kctl.run("-n", ns, "get", "deploy", "applied", "-o", "json").stdout)
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27"
    assert dep["spec"]["replicas"] == 1 and dep["metadata"]["generation"] == 3
    pods = kctl.run("-n", ns, "get", "pods", "--field-selector=status.phase=Pending", "-o", "name").stdout
    assert pods == ""
