"""DefaultStorageClass and StorageObjectInUseProtection: kube's default-on storage plug-ins."""
from __future__ import annotations

from typing import Any

from services.admission.plugins.default_storage_class import DefaultStorageClass, default_class
from services.admission.plugins.storage_object_in_use_protection import StorageObjectInUseProtection
from tests.unit.admission.test_admission_pod_priority import _NoRegistry, attributes


def sc(name: str, created: str, default: str | None = "true", beta: bool = False) -> dict[str, Any]:
    key = "storageclass.beta.kubernetes.io/is-default-class" if beta else "storageclass.kubernetes.io/is-default-class"
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if default is not None:
        meta["annotations"] = {key: default}
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": meta, "provisioner": "x"}


def pvc(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c", "namespace": "team"},
            "spec": {"accessModes": ["ReadWriteOnce"], **spec}}


def test_default_class_is_the_newest_default():
    classes = [sc("old", "2024-01-01T00:00:00Z"), sc("new-b", "2025-01-01T00:00:00Z", beta=True),
               sc("new-a", "2025-01-01T00:00:00Z"), sc("newest", "2026-01-01T00:00:00Z", default="false")]
    assert default_class(classes)["metadata"]["name"] == "new-a"
    assert default_class([sc("plain", "2024-01-01T00:00:00Z", default=None)]) is None


async def test_default_storage_class_sets_only_an_unset_class():
    plugin = DefaultStorageClass(_NoRegistry())  # type: ignore[arg-type]  # informer created, never started
    plugin.informer.store["gold"] = sc("gold", "2024-01-01T00:00:00Z")
    a = attributes(pvc(), resource="persistentvolumeclaims")
    await plugin.admit(a)
    assert a.object["spec"]["storageClassName"] == "gold"
    for given in (pvc(storageClassName=""), pvc(storageClassName="silver")):
        a = attributes(given, resource="persistentvolumeclaims")
        await plugin.admit(a)
        assert a.object["spec"]["storageClassName"] == given["spec"]["storageClassName"]
    beta = pvc()
    beta["metadata"]["annotations"] = {"volume.beta.kubernetes.io/storage-class": "old"}
    a = attributes(beta, resource="persistentvolumeclaims")
    await plugin.admit(a)
    assert "storageClassName" not in a.object["spec"]


async def test_storage_object_in_use_protection_adds_the_finalizers():
    plugin = StorageObjectInUseProtection()
    a = attributes(pvc(), resource="persistentvolumeclaims")
    await plugin.admit(a)
    assert a.object["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "v", "finalizers": ["mine"]},
          "spec": {}}
    a = attributes(pv, resource="persistentvolumes")
    await plugin.admit(a)
    assert a.object["metadata"]["finalizers"] == ["mine", "kubernetes.io/pv-protection"]
