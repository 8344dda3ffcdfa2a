"""core/v1 PersistentVolume, PersistentVolumeClaim and ComponentStatus (issue 26): kube 1.33's defaults,
validation and update rules with its field paths and messages, /status apart from the spec, Table cells."""
from __future__ import annotations

from typing import Any

import pytest

from services.apis.volumes import access_modes, pv_row, pvc_row

from .test_kinds import cells, obj, refused

Obj = dict[str, Any]


def pv(name: str = "pv1", **spec: Any) -> Obj:
    return obj("v1", "PersistentVolume", name, spec={"capacity": {"storage": "1Gi"},
                                                     "accessModes": ["ReadWriteOnce"],
                                                     "hostPath": {"path": "/tmp/pv"}, **spec})


def pvc(name: str = "c1", **spec: Any) -> Obj:
    return obj("v1", "PersistentVolumeClaim", name, "default",
               spec={"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, **spec})


async def test_pv_defaults_status_and_table(api):
    code, got = await api("create", "persistentvolumes", body={**pv(), "status": {"phase": "Bound"}})
    assert code == 201
    assert got["spec"]["persistentVolumeReclaimPolicy"] == "Retain" and got["spec"]["volumeMode"] == "Filesystem"
    assert got["spec"]["hostPath"] == {"path": "/tmp/pv", "type": ""}
    assert got["status"]["phase"] == "Pending" and got["status"]["lastPhaseTransitionTime"]
    got["status"] = {"phase": "Available"}
    code, upd = await api("update", "persistentvolumes", "", "pv1", body=got, subresource="status")
    assert code == 200 and upd["status"]["phase"] == "Available" and upd["status"]["lastPhaseTransitionTime"]
    upd["status"] = {"phase": "Failed"}  # an update of the volume keeps its status
    code, again = await api("update", "persistentvolumes", "", "pv1", body=upd)
    assert code == 200 and again["status"]["phase"] == "Available"
    rows = await cells(api, "persistentvolumes")
    assert rows[0][:9] == ["pv1", "1Gi", "RWO", "Retain", "Available", "", "", "<unset>", ""]
    assert rows[0][10] == "Filesystem"


async def test_pv_validation(api):
    bad = obj("v1", "PersistentVolume", "x", spec={"accessModes": ["Sometimes"], "persistentVolumeReclaimPolicy": "Keep"})
    assert await refused(api, "create", "persistentvolumes", body=bad) == [
        'spec.accessModes: Unsupported value: "Sometimes": supported values: "ReadOnlyMany", "ReadWriteMany", '
        '"ReadWriteOnce", "ReadWriteOncePod"',
        "spec.capacity: Required value",
        'spec.capacity: Unsupported value: core.ResourceList(nil): supported values: "storage"',
        'spec.persistentVolumeReclaimPolicy: Unsupported value: "Keep": supported values: "Delete", "Recycle", '
        '"Retain"',
        "spec: Required value: must specify a volume type"]
    two = pv(nfs={"server": "", "path": "rel"}, capacity={"storage": "0"}, accessModes=["ReadWriteOncePod", "ReadWriteOnce"])
    assert await refused(api, "create", "persistentvolumes", body=two) == [
        "spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes",
        'spec.capacity[storage]: Invalid value: "0": must be greater than zero',
        "spec.nfs: Forbidden: may not specify more than 1 volume type"]
    local = pv("l", hostPath=None, local={"path": "/mnt"})
    assert await refused(api, "create", "persistentvolumes", body=local) == [
        "spec.nodeAffinity: Required value: Local volume requires node affinity"]


async def test_pv_source_and_volume_mode_are_immutable(api):
    code, got = await api("create", "persistentvolumes", body=pv())
    got["spec"]["hostPath"]["path"] = "/tmp/other"
    got["spec"]["volumeMode"] = "Block"
    got["spec"]["capacity"] = {"storage": "2Gi"}  # capacity may change
    causes = await refused(api, "update", "persistentvolumes", "", "pv1", body=got)
    assert causes[0].startswith("spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable "
                                "after creation\n")
    assert causes[1:] == ['volumeMode: Invalid value: "Block": field is immutable']


async def test_pvc_defaults_validation_and_table(api):
    code, got = await api("create", "persistentvolumeclaims", "default", body=pvc())
    assert code == 201 and got["spec"]["volumeMode"] == "Filesystem" and got["status"] == {"phase": "Pending"}
    assert (await cells(api, "persistentvolumeclaims", "default"))[0] == [
        "c1", "Pending", "", "", "", "", "<unset>", (await cells(api, "persistentvolumeclaims", "default"))[0][7],
        "Filesystem"]
    bad = obj("v1", "PersistentVolumeClaim", "bad", "default",
              spec={"storageClassName": "Fast_Disk", "volumeMode": "Raw", "selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}})
    assert await refused(api, "create", "persistentvolumeclaims", "default", body=bad) == [
        "spec.accessModes: Required value: at least 1 access mode is required",
        'spec.selector.matchExpressions[0].operator: Invalid value: "Near": not a valid selector operator',
        "spec.resources[storage]: Required value",
        'spec.storageClassName: Invalid value: "Fast_Disk": a lowercase RFC 1123 subdomain must consist of lower '
        "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
        "'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        'spec.volumeMode: Unsupported value: "Raw": supported values: "Block", "Filesystem"']


async def test_pvc_spec_is_immutable_but_for_binding_and_expansion(api):
    code, got = await api("create", "persistentvolumeclaims", "default", body=pvc())
    got["spec"]["volumeName"] = "pv1"  # the binder's one change
    got["spec"]["storageClassName"] = "fast"  # from nil: allowed
    code, got = await api("update", "persistentvolumeclaims", "default", "c1", body=got)
    assert code == 200 and got["spec"]["volumeName"] == "pv1"
    got["spec"]["resources"]["requests"]["storage"] = "2Gi"  # not bound yet: refused
    causes = await refused(api, "update", "persistentvolumeclaims", "default", "c1", body=got)
    assert causes[0].startswith("spec: Forbidden: spec is immutable after creation except resources.requests and "
                                "volumeAttributesClassName for bound claims\n")
    got["status"] = {"phase": "Bound", "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]}
    code, got = await api("update", "persistentvolumeclaims", "default", "c1", body=got, subresource="status")
    assert code == 200
    got["spec"]["resources"]["requests"]["storage"] = "2Gi"
    code, got = await api("update", "persistentvolumeclaims", "default", "c1", body=got)
    assert code == 200 and got["spec"]["resources"]["requests"]["storage"] == "2Gi"
    got["spec"]["resources"]["requests"]["storage"] = "512Mi"
    got["spec"]["volumeMode"] = "Block"
    causes = await refused(api, "update", "persistentvolumeclaims", "default", "c1", body=got)
    assert causes[0].endswith('-  "volumeMode": "Filesystem",\n+  "volumeMode": "Block",\n   "volumeName": "pv1"')
    assert causes[1:] == ["spec.resources.requests.storage: Forbidden: field can not be less than status.capacity",
                          'volumeMode: Invalid value: "Block": field is immutable']


async def test_pvc_volume_attributes_class_is_dropped_while_the_gate_is_off(api):
    code, got = await api("create", "persistentvolumeclaims", "default",
                          body=pvc(volumeAttributesClassName="gold"))
    assert code == 201 and "volumeAttributesClassName" not in got["spec"]


async def test_bad_quantity_is_a_400(api):
    from services.common import errors
    with pytest.raises(errors.BadRequest) as e:
        await api("create", "persistentvolumes", body=pv(capacity={"storage": "lots"}))
    assert e.value.message.startswith('PersistentVolume in version "v1" cannot be handled as a PersistentVolume: '
                                      "quantities must match")


def test_rows():
    bound = {"metadata": {"name": "v", "creationTimestamp": "2020-01-01T00:00:00Z"},
             "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
                      "claimRef": {"namespace": "ns", "name": "c"}, "storageClassName": "slow",
                      "persistentVolumeReclaimPolicy": "Delete"},
             "status": {"phase": "Failed", "reason": "VolumeFailedDelete"}}
    assert pv_row(bound)[:9] == ["v", "5Gi", "RWO,RWX", "Delete", "Failed", "ns/c", "slow", "<unset>",
                                 "VolumeFailedDelete"]
    claim = {"metadata": {"name": "c", "deletionTimestamp": "2020-01-01T00:00:00Z"},
             "spec": {"volumeName": "v", "storageClassName": "slow", "volumeMode": "Block"},
             "status": {"phase": "Bound", "capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOncePod"]}}
    assert pvc_row(claim)[:7] == ["c", "Terminating", "v", "5Gi", "RWOP", "slow", "<unset>"]
    assert access_modes(["ReadOnlyMany", "ReadWriteOnce"]) == "RWO,ROX"


async def test_component_statuses(api):
    code, got = await api("list", "componentstatuses")
    assert code == 200 and got["items"] == [{"kind": "ComponentStatus", "apiVersion": "v1",
                                             "metadata": {"name": "etcd-0"},
                                             "conditions": [{"type": "Healthy", "status": "True",
                                                             "message": "ok"}]}]
    assert api.last_warnings == ["v1 ComponentStatus is deprecated in v1.19+"]
    assert await cells(api, "componentstatuses") == [["etcd-0", "Healthy", "ok", ""]]
    code, got = await api("list", "componentstatuses", query={"fieldSelector": "metadata.name=etcd-1"})
    assert got["items"] == []
    from services.common import errors
    with pytest.raises(errors.NotFound):
        await api("get", "componentstatuses", "", "scheduler")
    with pytest.raises(errors.MethodNotAllowed):
        await api("create", "componentstatuses", body=obj("v1", "ComponentStatus", "x"))


async def test_component_status_of_an_unhealthy_etcd(api, storage, monkeypatch):
    from apiary_pb import storage_pb2 as spb

    async def down(req, timeout=None):
        return spb.EtcdHealthResponse(servers=[spb.EtcdServerHealth(endpoint="127.0.0.1:2379", healthy=False,
                                                                    error="etcd request timed out")])
    monkeypatch.setattr(storage, "EtcdHealth", down)
    code, got = await api("get", "componentstatuses", "", "etcd-0")
    assert got["conditions"] == [{"type": "Healthy", "status": "False", "message": "",
                                  "error": "etcd request timed out"}]
    assert await cells(api, "componentstatuses") == [["etcd-0", "Unhealthy", "", "etcd request timed out"]]
