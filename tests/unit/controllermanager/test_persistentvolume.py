"""The persistentvolume-binder's matching (kube's FindMatchingVolume, checkVolumeSatisfyClaim) and the
pvc-protection controller's idea of a claim in use."""
from __future__ import annotations

from typing import Any

from services.controllermanager.persistentvolume import find_matching_volume, satisfies
from services.controllermanager.volumeprotection import pod_uses_claim

Obj = dict[str, Any]


def volume(name: str, size: str, modes: tuple[str, ...] = ("ReadWriteOnce",), phase: str = "Available",
           labels: dict[str, str] | None = None, **spec: Any) -> Obj:
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"capacity": {"storage": size}, "accessModes": list(modes), "volumeMode": "Filesystem", **spec},
            "status": {"phase": phase}}


def claim(size: str = "1Gi", modes: tuple[str, ...] = ("ReadWriteOnce",), **spec: Any) -> Obj:
    return {"metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
            "spec": {"accessModes": list(modes), "resources": {"requests": {"storage": size}},
                     "volumeMode": "Filesystem", **spec}}


def name(v: Obj | None) -> str | None:
    return None if v is None else v["metadata"]["name"]


def test_smallest_volume_that_fits():
    vols = [volume("big", "10Gi"), volume("small", "500Mi"), volume("fit", "2Gi"), volume("fit1", "1Gi")]
    assert name(find_matching_volume(claim(), vols)) == "fit1"
    assert name(find_matching_volume(claim("1500Mi"), vols)) == "fit"
    assert name(find_matching_volume(claim("20Gi"), vols)) is None


def test_phase_class_modes_selector_and_volume_mode_filter():
    vols = [volume("bound", "1Gi", phase="Bound"), volume("ro", "1Gi", ("ReadOnlyMany",)),
            volume("slow", "1Gi", storageClassName="slow"), volume("block", "1Gi", volumeMode="Block"),
            volume("labelled", "5Gi", labels={"tier": "db"}), volume("plain", "2Gi")]
    assert name(find_matching_volume(claim(), vols)) == "plain"
    assert name(find_matching_volume(claim(storageClassName="slow"), vols)) == "slow"
    assert name(find_matching_volume(claim(volumeMode="Block"), vols)) == "block"
    assert name(find_matching_volume(claim(modes=("ReadOnlyMany",)), vols)) == "ro"
    assert name(find_matching_volume(claim(selector={"matchLabels": {"tier": "db"}}), vols)) == "labelled"
    assert name(find_matching_volume(claim(modes=("ReadWriteOnce", "ReadWriteMany")), vols)) is None


def test_pre_bound_volume_wins_and_delayed_binding_waits():
    pre = volume("pre", "10Gi", phase="Available", claimRef={"namespace": "ns", "name": "c"})
    other = volume("other", "1Gi", claimRef={"namespace": "ns", "name": "c", "uid": "another"})
    vols = [volume("fit", "1Gi"), other, pre]
    assert name(find_matching_volume(claim(), vols)) == "pre"
    assert name(find_matching_volume(claim(), [volume("fit", "1Gi")], delay_binding=True)) is None


def test_satisfies():
    assert satisfies(volume("v", "1Gi"), claim()) == ""
    assert satisfies(volume("v", "1Gi"), claim("2Gi")) == "requested PV is too small"
    assert satisfies(volume("v", "1Gi", storageClassName="x"), claim()) == "storageClassName does not match"
    assert satisfies(volume("v", "1Gi", ("ReadOnlyMany",)), claim()) == "incompatible accessMode"


def test_pod_uses_claim():
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": "c"}}, {"name": "scratch", "ephemeral": {}}]},
           "status": {"phase": "Running"}}
    assert pod_uses_claim(pod, "c") and pod_uses_claim(pod, "p-scratch") and not pod_uses_claim(pod, "d")
    assert not pod_uses_claim({**pod, "status": {"phase": "Succeeded"}}, "c")
    assert not pod_uses_claim({**pod, "spec": {**pod["spec"], "nodeName": ""}}, "c")
