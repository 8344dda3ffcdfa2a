"""PersistentVolumes, PersistentVolumeClaims and componentstatuses through kubectl (issue 26): create, get with
kube's columns, explain, apply --server-side, delete; the binder binding a claim to a volume (both Bound),
Released then Failed or kept after the claim's deletion, the protection finalizers, the default StorageClass,
`kubectl apply --prune` over kubectl's default allowlist, `kubectl get cs`, and bad input with kube's 422."""
from __future__ import annotations

import json
import re

import pytest

from tests.conftest import Kubectl
from tests.kubectls import RUN, refused, tag
from tests.waiting import wait_for

pytestmark = pytest.mark.stack
NS = f"volumes-e2e-{RUN}"


@pytest.fixture(scope="module", autouse=True)
def ns(kubectl):
    kubectl.run("create", "namespace", NS)
    yield NS
    kubectl.run("delete", "namespace", NS, "--wait=false", check=False)



def pv_yaml(name: str, size: str = "1Gi", policy: str = "Retain", sc: str = "", labels: str = "{}",
            claim: str = "") -> str:
    ref = f"\n  claimRef: {{namespace: {NS}, name: {claim}}}" if claim else ""
    return f"""apiVersion: v1
kind: PersistentVolume
metadata: {{name: {name}, labels: {labels}}}
spec:
  capacity: {{storage: {size}}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: {policy}
  storageClassName: "{sc}"
  hostPath: {{path: /tmp/{name}}}{ref}
"""


def pvc_yaml(name: str, size: str = "1Gi", sc: str | None = "", extra: str = "") -> str:
    class_line = "" if sc is None else f'\n  storageClassName: "{sc}"'
    return f"""apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {name}, namespace: {NS}}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: {size}}}}}{class_line}{extra}
"""


def events(kctl: Kubectl, namespace: str, name: str) -> list[tuple[str, str, str]]:
    """The (type, reason, message) of the events about the object `name` in namespace."""
    got = kctl.get_json("events", "-n", namespace, "--field-selector", f"involvedObject.name={name}")
    return [(e["type"], e["reason"], e["message"]) for e in (got or {}).get("items", [])]


def phase(kctl: Kubectl, *args: str) -> str:
    obj = kctl.get_json(*args)
    return "" if obj is None else (obj.get("status") or {}).get("phase", "")


def test_pv_and_pvc_columns_explain_and_delete(kctl):
    t = tag(kctl)
    out = kctl.run("create", "-f", "-", input=pv_yaml(f"pv-{t}", sc=f"none-{t}"))
    assert f"persistentvolume/pv-{t} created" in out.stdout
    pv = wait_for(lambda: phase(kctl, "pv", f"pv-{t}") == "Available" and kctl.get_json("pv", f"pv-{t}"),
                  what="the volume Available")
    assert pv["spec"]["volumeMode"] == "Filesystem" and pv["metadata"]["finalizers"] == ["kubernetes.io/pv-protection"]
    header, rows = kctl.table("pv", f"pv-{t}")
    assert header == ["NAME", "CAPACITY", "ACCESS MODES", "RECLAIM POLICY", "STATUS", "CLAIM", "STORAGECLASS",
                      "VOLUMEATTRIBUTESCLASS", "REASON", "AGE"]
    assert rows[0][:6] == [f"pv-{t}", "1Gi", "RWO", "Retain", "Available", f"none-{t}"]
    header, _ = kctl.table("pv", f"pv-{t}", "-o", "wide")
    assert header[-1] == "VOLUMEMODE"

    kctl.run("create", "-f", "-", input=pvc_yaml(f"lonely-{t}", sc=f"none-{t}", size="5Gi"))
    header, rows = kctl.table("-n", NS, "pvc", f"lonely-{t}")
    assert header == ["NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS",
                      "VOLUMEATTRIBUTESCLASS", "AGE"]
    assert rows[0][:3] == [f"lonely-{t}", "Pending", f"none-{t}"]  # no volume holds 5Gi: it waits
    wait_for(lambda: ("Warning", "ProvisioningFailed", f'storageclass.storage.k8s.io "none-{t}" not found')
             in events(kctl, NS, f"lonely-{t}"), what="the ProvisioningFailed event")

    explained = " ".join(kctl.run("explain", "pvc.spec.volumeName").stdout.split())
    assert "volumeName is the binding reference to the PersistentVolume backing this claim." in explained
    assert "persistentVolumeReclaimPolicy" in kctl.run("explain", "pv.spec").stdout

    out = kctl.run("delete", "-n", NS, f"pvc/lonely-{t}", f"pv/pv-{t}", "--wait", timeout=60)
    assert f'persistentvolumeclaim "lonely-{t}" deleted' in out.stdout
    assert kctl.get_json("pv", f"pv-{t}") is None


def test_binding_then_release_and_reclaim(kctl):
    t = tag(kctl)
    sc = f"manual-{t}"
    kctl.run("apply", "-f", "-", input=pv_yaml(f"big-{t}", "10Gi", "Delete", sc) + "---\n" +
             pv_yaml(f"small-{t}", "2Gi", "Delete", sc) + "---\n" + pv_yaml(f"kept-{t}", "3Gi", "Retain", sc))
    for name in (f"big-{t}", f"small-{t}", f"kept-{t}"):  # only Available volumes are matched, as in kube
        wait_for(lambda name=name: phase(kctl, "pv", name) == "Available", what=f"{name} Available")
    kctl.run("create", "-f", "-", input=pvc_yaml(f"data-{t}", "1500Mi", sc))
    claim = wait_for(lambda: phase(kctl, "-n", NS, "pvc", f"data-{t}") == "Bound" and
                     kctl.get_json("-n", NS, "pvc", f"data-{t}"), what="the claim Bound")
    assert claim["spec"]["volumeName"] == f"small-{t}"  # the smallest that holds it
    assert claim["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] == "yes"
    assert claim["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"
    assert claim["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    assert claim["status"]["capacity"] == {"storage": "2Gi"} and claim["status"]["accessModes"] == ["ReadWriteOnce"]
    volume = wait_for(lambda: phase(kctl, "pv", f"small-{t}") == "Bound" and kctl.get_json("pv", f"small-{t}"),
                      what="the volume Bound")
    assert volume["spec"]["claimRef"]["name"] == f"data-{t}" and volume["spec"]["claimRef"]["uid"] == \
        claim["metadata"]["uid"]
    assert volume["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"
    _, rows = kctl.table("pv", f"small-{t}")
    assert rows[0][4:7] == ["Bound", f"{NS}/data-{t}", sc]
    _, rows = kctl.table("-n", NS, "pvc", f"data-{t}")
    assert rows[0][:6] == [f"data-{t}", "Bound", f"small-{t}", "2Gi", "RWO", sc]
    described = kctl.run("describe", "-n", NS, "pvc", f"data-{t}").stdout
    assert re.search(r"Status:\s+Bound", described) and re.search(rf"Volume:\s+small-{t}", described)
    described = kctl.run("describe", "pv", f"small-{t}").stdout
    assert re.search(rf"Claim:\s+{NS}/data-{t}", described) and re.search(r"Reclaim Policy:\s+Delete", described)

    # a claim naming its volume is bound to it (pre-bound), however large
    kctl.run("create", "-f", "-", input=pvc_yaml(f"named-{t}", "1Gi", sc, f"\n  volumeName: kept-{t}"))
    wait_for(lambda: phase(kctl, "pv", f"kept-{t}") == "Bound", what="the named volume Bound")
    assert phase(kctl, "-n", NS, "pvc", f"named-{t}") == "Bound"

    # a deleting volume in use keeps its finalizer
    kctl.run("delete", "pv", f"kept-{t}", "--wait=false")
    assert kctl.get_json("pv", f"kept-{t}")["metadata"]["finalizers"] == ["kubernetes.io/pv-protection"]
    _, rows = kctl.table("pv", f"kept-{t}")
    assert rows[0][4] == "Terminating"

    # the claims go (no pod uses them): Delete without a deleter plug-in fails, Retain stays Released
    kctl.run("delete", "-n", NS, f"pvc/data-{t}", f"pvc/named-{t}", "--wait", timeout=60)
    failed = wait_for(lambda: phase(kctl, "pv", f"small-{t}") == "Failed" and kctl.get_json("pv", f"small-{t}"),
                      what="the Delete volume Failed")
    assert failed["status"]["message"] == (f'error getting deleter volume plugin for volume "small-{t}": '
                                           "no deletable volume plugin matched")
    wait_for(lambda: ("Warning", "VolumeFailedDelete", failed["status"]["message"])
             in events(kctl, "default", f"small-{t}"), what="the VolumeFailedDelete event")
    # the Retain volume was Released, then deleted (its pv-protection finalizer went once it was not Bound)
    wait_for(lambda: kctl.get_json("pv", f"kept-{t}") is None, what="the released, deleted volume gone")
    assert phase(kctl, "pv", f"big-{t}") == "Available"
    kctl.run("delete", "pv", f"big-{t}", f"small-{t}", "--wait", timeout=60)


def test_retained_volume_stays_released(kctl):
    t = tag(kctl)
    kctl.run("create", "-f", "-", input=pv_yaml(f"ret-{t}", sc=f"ret-{t}"))
    kctl.run("create", "-f", "-", input=pvc_yaml(f"ret-{t}", sc=f"ret-{t}"))
    wait_for(lambda: phase(kctl, "pv", f"ret-{t}") == "Bound", what="the volume Bound")
    kctl.run("delete", "-n", NS, f"pvc/ret-{t}", "--wait", timeout=60)
    wait_for(lambda: phase(kctl, "pv", f"ret-{t}") == "Released", what="the volume Released")
    _, rows = kctl.table("pv", f"ret-{t}")
    assert rows[0][3:6] == ["Retain", "Released", f"{NS}/ret-{t}"]
    kctl.run("delete", "pv", f"ret-{t}", "--wait", timeout=60)


def test_default_storage_class(kctl):
    t = tag(kctl)
    kctl.run("apply", "-f", "-", input=f"""apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: default-{t}
  annotations: {{storageclass.kubernetes.io/is-default-class: "true"}}
provisioner: example.com/none
""")
    try:
        kctl.run("create", "-f", "-", input=pvc_yaml(f"dflt-{t}", sc=None))
        got = kctl.get_json("-n", NS, "pvc", f"dflt-{t}")
        assert got["spec"]["storageClassName"] == f"default-{t}"
        # no volume fits: the claim is handed over to the class's external provisioner
        got = wait_for(lambda: (c := kctl.get_json("-n", NS, "pvc", f"dflt-{t}"))["metadata"].get("annotations")
                       and c, what="the provisioner annotation")
        assert got["metadata"]["annotations"]["volume.kubernetes.io/storage-provisioner"] == "example.com/none"
        wait_for(lambda: any(e[1] == "ExternalProvisioning" and "'example.com/none'" in e[2]
                             for e in events(kctl, NS, f"dflt-{t}")), what="the ExternalProvisioning event")
        kctl.run("create", "-f", "-", input=pvc_yaml(f"empty-{t}", sc=""))
        assert kctl.get_json("-n", NS, "pvc", f"empty-{t}")["spec"]["storageClassName"] == ""
        wait_for(lambda: ("Normal", "FailedBinding", "no persistent volumes available for this claim and no storage "
                          "class is set") in events(kctl, NS, f"empty-{t}"), what="the FailedBinding event")
    finally:
        kctl.run("delete", "sc", f"default-{t}")
    kctl.run("delete", "-n", NS, f"pvc/dflt-{t}", f"pvc/empty-{t}", "--wait", timeout=60)


def test_server_side_apply_and_immutable_spec(kctl):
    t = tag(kctl)
    manifest = pvc_yaml(f"ssa-{t}", sc=f"ssa-{t}")
    out = kctl.run("apply", "--server-side", "-f", "-", input=manifest)
    assert f"persistentvolumeclaim/ssa-{t} serverside-applied" in out.stdout
    got = kctl.get_json("-n", NS, "pvc", f"ssa-{t}", "--show-managed-fields")
    assert any(m["manager"] == "kubectl" and m["operation"] == "Apply" for m in got["metadata"]["managedFields"])
    err = refused(kctl, "apply", "--server-side", "-f", "-", input=manifest.replace("ReadWriteOnce", "ReadWriteMany"))
    assert (f'PersistentVolumeClaim "ssa-{t}" is invalid: spec: Forbidden: spec is immutable after creation '
            "except resources.requests and volumeAttributesClassName for bound claims") in err
    dry = kctl.run("create", "--dry-run=server", "-o", "json", "-f", "-", input=pv_yaml(f"dry-{t}"))
    assert json.loads(dry.stdout)["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert kctl.get_json("pv", f"dry-{t}") is None
    kctl.run("delete", "-n", NS, f"pvc/ssa-{t}", "--wait", timeout=60)


def test_bad_input_is_a_422_with_kube_field_paths(kctl):
    t = tag(kctl)
    err = refused(kctl, "create", "-f", "-", input=f"""apiVersion: v1
kind: PersistentVolume
metadata: {{name: bad-{t}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [Sometimes]
  persistentVolumeReclaimPolicy: Keep
""")
    assert f'PersistentVolume "bad-{t}" is invalid' in err
    assert 'spec.accessModes: Unsupported value: "Sometimes"' in err
    assert 'spec.persistentVolumeReclaimPolicy: Unsupported value: "Keep": supported values: "Delete", ' \
           '"Recycle", "Retain"' in err
    assert "spec: Required value: must specify a volume type" in err
    err = refused(kctl, "create", "-f", "-", input=f"""apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: bad-{t}, namespace: {NS}}}
spec:
  volumeMode: Raw
""")
    assert "spec.accessModes: Required value: at least 1 access mode is required" in err
    assert "spec.resources[storage]: Required value" in err
    assert 'spec.volumeMode: Unsupported value: "Raw": supported values: "Block", "Filesystem"' in err
    proc = kctl.run("create", "-v=6", "-f", "-", input=pvc_yaml(f"bad-{t}", "-1Gi"), check=False)
    assert "422" in proc.stderr and 'spec.resources[storage]: Invalid value: "-1Gi": must be greater than zero' \
        in proc.stderr


def test_apply_prune_with_the_default_allowlist(kctl, tmp_path):
    t = tag(kctl)
    label = f"prune-{t}"
    (tmp_path / "a.yaml").write_text(f"""apiVersion: v1
kind: ConfigMap
metadata: {{name: keep-{t}, namespace: {NS}, labels: {{app: {label}}}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: drop-{t}, namespace: {NS}, labels: {{app: {label}}}}}
---
{pvc_yaml(f"claim-{t}", sc=f"prune-{t}").replace("metadata: {", f"metadata: {{labels: {{app: {label}}}, ")}""")
    kctl.run("apply", "-n", NS, "-l", f"app={label}", "-f", str(tmp_path))
    (tmp_path / "a.yaml").write_text(f"""apiVersion: v1
kind: ConfigMap
metadata: {{name: keep-{t}, namespace: {NS}, labels: {{app: {label}}}}}
""")
    out = kctl.run("apply", "-n", NS, "--prune", "-l", f"app={label}", "-f", str(tmp_path))
    assert f"configmap/drop-{t} pruned" in out.stdout and f"persistentvolumeclaim/claim-{t} pruned" in out.stdout
    assert kctl.get_json("-n", NS, "configmap", f"drop-{t}") is None
    kctl.run("delete", "-n", NS, f"configmap/keep-{t}")


def test_component_statuses(kctl):
    proc = kctl.run("get", "cs")
    assert "v1 ComponentStatus is deprecated in v1.19+" in proc.stderr
    lines = [re.split(r"\s{2,}", line.strip()) for line in proc.stdout.splitlines()]
    assert lines[0] == ["NAME", "STATUS", "MESSAGE", "ERROR"] and lines[1] == ["etcd-0", "Healthy", "ok"]
    got = kctl.get_json("componentstatus", "etcd-0")
    assert got["conditions"] == [{"type": "Healthy", "status": "True", "message": "ok"}]
    err = refused(kctl, "delete", "cs", "etcd-0")
    assert "MethodNotAllowed" in err or "not allowed" in err or "not supported" in err


def test_claim_in_use_by_a_pod_is_kept_until_the_pod_goes(kctl):
    t = tag(kctl)
    kctl.run("create", "-f", "-", input=pvc_yaml(f"used-{t}", sc=f"used-{t}"))
    pod = f"""apiVersion: v1
kind: Pod
metadata: {{name: user-{t}, namespace: {NS}}}
spec:
  nodeName: node-{t}
  containers: [{{name: c, image: busybox}}]
  volumes: [{{name: data, persistentVolumeClaim: {{claimName: used-{t}}}}}]
"""
    wait_for(lambda: kctl.run("create", "-f", "-", input=pod, check=False).returncode == 0,
             what="the pod created (its namespace's default ServiceAccount exists)")
    kctl.run("delete", "-n", NS, f"pvc/used-{t}", "--wait=false")
    _, rows = kctl.table("-n", NS, "pvc", f"used-{t}")
    assert rows[0][1] == "Terminating"
    assert kctl.get_json("-n", NS, "pvc", f"used-{t}")["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    kctl.run("delete", "-n", NS, f"pod/user-{t}", "--grace-period=0", "--force", "--wait", timeout=60)
    wait_for(lambda: kctl.get_json("-n", NS, "pvc", f"used-{t}") is None, what="the claim gone with its pod")
