"""The persistentvolume-binder (kube's pkg/controller/volume/persistentvolume), for a cluster without volume
plug-ins or provisioners: a Pending claim is bound to the smallest Available volume that satisfies it
(storage class, selector, volumeMode, capacity, access modes; a volume pre-bound to the claim through its
claimRef, or a claim naming its volumeName, first), both become Bound with kube's annotations
(pv.kubernetes.io/bind-completed, pv.kubernetes.io/bound-by-controller); a volume whose claim is gone becomes
Released, then as its reclaimPolicy says: Retain keeps it Released, Delete and Recycle find no plug-in and
mark it Failed with kube's message. A claim whose volume is gone, or bound elsewhere, is Lost. A claim no
volume fits waits: one of a class whose provisioner is external is annotated for that provisioner
(volume.kubernetes.io/storage-provisioner), as kube hands it over. kube's events say each of these.

Volumes and claims are synced from their informers as kube's two work queues do, every object again each
--pvclaimbinder-sync-period; a volume that changes also wakes the claims still waiting for one."""
from __future__ import annotations

import asyncio
import copy
import logging
from decimal import Decimal
from typing import Any

from services.common import quantity
from services.common.background import cancel_and_wait
from services.common.errors import Conflict, NotFound
from services.common.selectors import label_selector_from_dict

from .client import Client, Resource
from .events import EventRecorder
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

Obj = dict[str, Any]
PERSISTENT_VOLUMES = Resource("", "v1", "persistentvolumes", "PersistentVolume", False, frozenset())
PERSISTENT_VOLUME_CLAIMS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, frozenset())

BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
BETA_STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"
COMPONENT = "persistentvolume-controller"
NORMAL, WARNING = "Normal", "Warning"
BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
BIND_MODE_WAIT = "WaitForFirstConsumer"


def _annotations(obj: Obj) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def volume_class(volume: Obj) -> str:
    """GetPersistentVolumeClass: the beta annotation, else spec.storageClassName."""
    return _annotations(volume).get(BETA_STORAGE_CLASS, (volume.get("spec") or {}).get("storageClassName") or "")


def claim_class(claim: Obj) -> str:
    """GetPersistentVolumeClaimClass."""
    return _annotations(claim).get(BETA_STORAGE_CLASS, (claim.get("spec") or {}).get("storageClassName") or "")


def _storage(resources: Obj | None) -> Decimal:
    value = (resources or {}).get("storage")
    try:
        return quantity.parse(value) if value is not None else Decimal(0)
    except ValueError:
        return Decimal(0)


def bound_to_claim(volume: Obj, claim: Obj) -> bool:
    """IsVolumeBoundToClaim: the volume's claimRef names the claim (and its uid, once set)."""
    ref = (volume.get("spec") or {}).get("claimRef") or {}
    meta = claim.get("metadata") or {}
    return ref.get("name") == meta.get("name") and ref.get("namespace") == meta.get("namespace") and \
        ref.get("uid") in (None, "", meta.get("uid"))


def _mode(spec: Obj) -> str:
    return spec.get("volumeMode") or "Filesystem"


def find_matching_volume(claim: Obj, volumes: list[Obj], delay_binding: bool = False) -> Obj | None:
    """FindMatchingVolume: the volume pre-bound to the claim, else the smallest Available, unclaimed volume of
    the claim's class and volumeMode, matching its selector, holding its request and every access mode it
    asks; a claim whose class waits for its first consumer is bound only to a volume pre-bound to it."""
    spec = claim.get("spec") or {}
    requested = _storage((spec.get("resources") or {}).get("requests"))
    wanted_modes = set(spec.get("accessModes") or ())
    selector = label_selector_from_dict(spec["selector"]) if spec.get("selector") is not None else None
    best: Obj | None = None
    best_size = Decimal(0)
    for volume in volumes:
        vspec = volume.get("spec") or {}
        if _mode(vspec) != _mode(spec) or (volume.get("metadata") or {}).get("deletionTimestamp"):
            continue
        if bound_to_claim(volume, claim):
            return volume
        if delay_binding or (volume.get("status") or {}).get("phase") != "Available" or vspec.get("claimRef"):
            continue
        if selector is not None and not selector.matches((volume.get("metadata") or {}).get("labels") or {}):
            continue
        if volume_class(volume) != claim_class(claim):
            continue
        size = _storage(vspec.get("capacity"))
        if size < requested or not wanted_modes <= set(vspec.get("accessModes") or ()):
            continue
        if best is None or size < best_size:
            best, best_size = volume, size
    return best


def satisfies(volume: Obj, claim: Obj) -> str:
    """checkVolumeSatisfyClaim: why a volume the claim names cannot hold it ("" when it can)."""
    spec, vspec = claim.get("spec") or {}, volume.get("spec") or {}
    if _storage(vspec.get("capacity")) < _storage((spec.get("resources") or {}).get("requests")):
        return "requested PV is too small"
    if volume_class(volume) != claim_class(claim):
        return "storageClassName does not match"
    if _mode(vspec) != _mode(spec):
        return "incompatible volumeMode"
    if not set(spec.get("accessModes") or ()) <= set(vspec.get("accessModes") or ()):
        return "incompatible accessMode"
    return ""


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class PersistentVolumeBinder:
    def __init__(self, client: Client, sync_period: float = 15.0) -> None:
        self.client, self.sync_period = client, sync_period
        self.volumes = client.informer(PERSISTENT_VOLUMES)
        self.claims = client.informer(PERSISTENT_VOLUME_CLAIMS)
        self.classes = client.informer(Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False,
                                                frozenset()))
        self.volumes.add_handler(self._on_volume)
        self.claims.add_handler(self._on_claim)
        self.recorder = EventRecorder(client, COMPONENT)
        self.volume_queue = WorkQueue("volumes", self._sync_volume)
        self.claim_queue = WorkQueue("claims", self._sync_claim)
        self._resync: asyncio.Task[None] | None = None

    async def start(self) -> None:
        for inf in (self.volumes, self.claims, self.classes):
            inf.start()
        for inf in (self.volumes, self.claims, self.classes):
            await inf.synced.wait()
        self.volume_queue.start()
        self.claim_queue.start()
        self._resync = asyncio.create_task(self._resync_loop(), name="pv-binder-resync")

    async def stop(self) -> None:
        if self._resync is not None:
            await cancel_and_wait(self._resync)
            self._resync = None
        await self.claim_queue.stop()
        await self.volume_queue.stop()
        for inf in (self.classes, self.claims, self.volumes):
            await inf.stop()

    async def _resync_loop(self) -> None:
        while True:
            for volume in list(self.volumes.store.values()):
                self.volume_queue.add(volume["metadata"]["name"])
            for claim in list(self.claims.store.values()):
                self.claim_queue.add(_key(claim))
            await asyncio.sleep(self.sync_period)

    def _on_volume(self, typ: str, obj: Obj, _old: Obj | None) -> None:
        if typ != "DELETED":
            self.volume_queue.add(obj["metadata"]["name"])
        ref = (obj.get("spec") or {}).get("claimRef")
        if ref:
            self.claim_queue.add(f"{ref.get('namespace', '')}/{ref.get('name', '')}")
        for claim in list(self.claims.store.values()):  # a claim waiting for a volume may fit this one now
            if (claim.get("status") or {}).get("phase") == "Pending":
                self.claim_queue.add(_key(claim))

    def _on_claim(self, typ: str, obj: Obj, _old: Obj | None) -> None:
        if typ != "DELETED":
            self.claim_queue.add(_key(obj))
        name = (obj.get("spec") or {}).get("volumeName")
        if name:
            self.volume_queue.add(name)
        for volume in list(self.volumes.store.values()):  # the volumes bound to a deleted claim are released
            if bound_to_claim(volume, obj):
                self.volume_queue.add(volume["metadata"]["name"])

    # Claims ----------------------------------------------------------------------------------------------

    async def _sync_claim(self, key: str) -> None:
        claim = self.claims.store.get(key)
        if claim is None or (claim.get("metadata") or {}).get("deletionTimestamp"):
            return
        try:
            if _annotations(claim).get(BIND_COMPLETED) is None:
                await self._sync_unbound_claim(claim)
            else:
                await self._sync_bound_claim(claim)
        except (Conflict, NotFound):
            self.claim_queue.add_after(key, 0.5)  # the informer brings the newer object; sync that

    def _delay_binding(self, claim: Obj) -> bool:
        sc = self.classes.store.get(claim_class(claim))
        return sc is not None and sc.get("volumeBindingMode") == BIND_MODE_WAIT

    async def _sync_unbound_claim(self, claim: Obj) -> None:
        spec = claim.get("spec") or {}
        name = spec.get("volumeName")
        if not name:
            delay = self._delay_binding(claim)
            volume = find_matching_volume(claim, list(self.volumes.store.values()), delay)
            if volume is not None:
                await self._bind(volume, claim)
                return
            if delay:
                await self._event(claim, NORMAL, "WaitForFirstConsumer",
                                  "waiting for first consumer to be created before binding")
            elif claim_class(claim):
                await self._provision(claim)
                return
            else:
                await self._event(claim, NORMAL, "FailedBinding",
                                  "no persistent volumes available for this claim and no storage class is set")
            await self._claim_phase(claim, "Pending")
            return
        volume = self.volumes.store.get(name)
        if volume is None:
            await self._claim_phase(claim, "Pending")
            return
        ref = (volume.get("spec") or {}).get("claimRef")
        if not ref:
            if why := satisfies(volume, claim):
                await self._event(claim, WARNING, "VolumeMismatch", f'Cannot bind to requested volume "{name}": {why}')
                await self._claim_phase(claim, "Pending")
                return
            await self._bind(volume, claim)
        elif bound_to_claim(volume, claim):
            await self._bind(volume, claim)
        else:
            await self._event(claim, WARNING, "FailedBinding", f'volume "{name}" already bound to a different claim.')
            await self._claim_phase(claim, "Pending")

    async def _provision(self, claim: Obj) -> None:
        """provisionClaim with no in-tree plug-in: a kubernetes.io/ provisioner is unknown; any other is an
        external one, named on the claim for it to act on, and the claim waits for it."""
        name = claim_class(claim)
        sc = self.classes.store.get(name)
        if sc is None:
            await self._event(claim, WARNING, "ProvisioningFailed", f'storageclass.storage.k8s.io "{name}" not found')
            return
        provisioner = sc.get("provisioner") or ""
        if provisioner.startswith("kubernetes.io/"):
            await self._event(claim, WARNING, "ProvisioningFailed", f"no volume plugin matched name: {provisioner}")
            return
        annotations = _annotations(claim)
        if annotations.get(STORAGE_PROVISIONER) != provisioner or annotations.get(BETA_STORAGE_PROVISIONER) != provisioner:
            claim = copy.deepcopy(claim)
            claim["metadata"]["annotations"] = {**annotations, STORAGE_PROVISIONER: provisioner,
                                                BETA_STORAGE_PROVISIONER: provisioner}
            claim = await self.client.update(PERSISTENT_VOLUME_CLAIMS, claim)
        await self._event(claim, NORMAL, "ExternalProvisioning",
                          f"Waiting for a volume to be created either by the external provisioner '{provisioner}' "
                          "or manually by the system administrator. If volume creation is delayed, please verify "
                          "that the provisioner is running and correctly registered.")

    async def _sync_bound_claim(self, claim: Obj) -> None:
        name = (claim.get("spec") or {}).get("volumeName")
        volume = self.volumes.store.get(name) if name else None
        if volume is None:
            lost = "its PersistentVolume" if name else "reference to PersistentVolume"
            await self._claim_phase(claim, "Lost", ("ClaimLost", f"Bound claim has lost {lost}. Data on the volume "
                                                    "is lost!"))
        elif (volume.get("spec") or {}).get("claimRef") and not bound_to_claim(volume, claim):
            await self._claim_phase(claim, "Lost", ("ClaimMisbound", "Two claims are bound to the same volume, this "
                                                    "one is bound incorrectly"))
        else:
            await self._bind(volume, claim)

    # Volumes ---------------------------------------------------------------------------------------------

    async def _sync_volume(self, name: str) -> None:
        volume = self.volumes.store.get(name)
        if volume is None:
            return
        try:
            await self._sync_one_volume(volume)
        except (Conflict, NotFound):
            self.volume_queue.add_after(name, 0.5)

    async def _sync_one_volume(self, volume: Obj) -> None:
        ref = (volume.get("spec") or {}).get("claimRef")
        if not ref or not ref.get("uid"):  # unbound, or pre-bound and waiting for its claim
            await self._volume_phase(volume, "Available")
            return
        claim = self.claims.store.get(f"{ref.get('namespace', '')}/{ref.get('name', '')}")
        if claim is not None and claim["metadata"].get("uid") != ref.get("uid"):
            claim = None  # the claim of that name is a new one
        if claim is None:
            await self._release(volume)
            return
        claimed = (claim.get("spec") or {}).get("volumeName")
        if not claimed:
            self.claim_queue.add(_key(claim))  # the binding is not complete: the claim's sync finishes it
        elif claimed == volume["metadata"]["name"]:
            await self._volume_phase(volume, "Bound")
        else:  # the claim is bound to another volume: this one is free again
            await self._unbind(volume)

    async def _release(self, volume: Obj) -> None:
        """The claim is gone: Released, then reclaimVolume without a plug-in."""
        phase = (volume.get("status") or {}).get("phase")
        if phase not in ("Released", "Failed"):
            volume = await self._volume_phase(volume, "Released")
            phase = "Released"
        policy = (volume.get("spec") or {}).get("persistentVolumeReclaimPolicy") or "Retain"
        if phase != "Released" or policy == "Retain":
            return
        if policy == "Recycle":
            await self._volume_phase(volume, "Failed", "No recycler plugin found for the volume!",
                                     "VolumeFailedRecycle")
        elif policy == "Delete" and not _annotations(volume).get(PROVISIONED_BY):
            # an external provisioner's volume is deleted by it; any other finds no deleter plug-in
            await self._volume_phase(volume, "Failed", f'error getting deleter volume plugin for volume '
                                     f'"{volume["metadata"]["name"]}": no deletable volume plugin matched',
                                     "VolumeFailedDelete")

    async def _unbind(self, volume: Obj) -> None:
        """unbindVolume: a volume the controller bound loses its claimRef, one a user bound keeps the name."""
        volume = copy.deepcopy(volume)
        annotations = volume["metadata"].get("annotations") or {}
        if annotations.pop(BOUND_BY_CONTROLLER, None) is not None:
            volume["spec"].pop("claimRef", None)
        else:
            volume["spec"]["claimRef"].pop("uid", None)
        volume["metadata"]["annotations"] = annotations
        volume = await self.client.update(PERSISTENT_VOLUMES, volume)
        await self._volume_phase(volume, "Available")

    # Binding ---------------------------------------------------------------------------------------------

    async def _bind(self, volume: Obj, claim: Obj) -> None:
        """bind: the volume's claimRef, the volume Bound, the claim's volumeName and annotations, the claim
        Bound with the volume's access modes and capacity; each write only when it changes something."""
        meta = claim["metadata"]
        ref = (volume.get("spec") or {}).get("claimRef") or {}
        if ref.get("uid") != meta.get("uid") or ref.get("name") != meta.get("name"):
            volume = copy.deepcopy(volume)
            if not ref:
                volume["metadata"].setdefault("annotations", {})[BOUND_BY_CONTROLLER] = "yes"
            volume["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": meta.get("namespace"),
                                          "name": meta.get("name"), "uid": meta.get("uid"), "apiVersion": "v1",
                                          "resourceVersion": meta.get("resourceVersion")}
            volume = await self.client.update(PERSISTENT_VOLUMES, volume)
            log.info("bound volume %s to claim %s", volume["metadata"]["name"], _key(claim))
        volume = await self._volume_phase(volume, "Bound")
        name = volume["metadata"]["name"]
        annotations = _annotations(claim)
        if (claim.get("spec") or {}).get("volumeName") != name or annotations.get(BIND_COMPLETED) != "yes":
            claim = copy.deepcopy(claim)
            claim_annotations = claim["metadata"].setdefault("annotations", {})
            if claim["spec"].get("volumeName") != name:
                claim["spec"]["volumeName"] = name
                claim_annotations[BOUND_BY_CONTROLLER] = "yes"
            claim_annotations[BIND_COMPLETED] = "yes"
            claim = await self.client.update(PERSISTENT_VOLUME_CLAIMS, claim)
        vspec, status = volume.get("spec") or {}, claim.get("status") or {}
        capacity = {"storage": (vspec.get("capacity") or {}).get("storage")}
        if status.get("phase") != "Bound" or status.get("accessModes") != vspec.get("accessModes") or \
                status.get("capacity") != capacity:
            claim = copy.deepcopy(claim)
            claim["status"] = {**status, "phase": "Bound", "accessModes": vspec.get("accessModes"),
                               "capacity": capacity}
            await self.client.update(PERSISTENT_VOLUME_CLAIMS, claim, "status")

    async def _volume_phase(self, volume: Obj, phase: str, message: str = "", warning: str = "") -> Obj:
        """updateVolumePhase(WithEvent): the phase and its message; a Warning `warning` when it changes."""
        status = volume.get("status") or {}
        if status.get("phase") == phase and (status.get("message") or "") == message:
            return volume
        volume = copy.deepcopy(volume)
        volume["status"] = {k: val for k, val in status.items() if k not in ("phase", "message")} | \
            {"phase": phase} | ({"message": message} if message else {})
        volume = await self.client.update(PERSISTENT_VOLUMES, volume, "status")
        if warning:
            await self.recorder.event({**volume, "kind": "PersistentVolume", "apiVersion": "v1"}, WARNING, warning,
                                      message)
        return volume

    async def _claim_phase(self, claim: Obj, phase: str, warning: tuple[str, str] | None = None) -> None:
        """updateClaimStatus(WithEvent): the phase; a Warning (reason, message) when it changes."""
        status = claim.get("status") or {}
        if status.get("phase") == phase:
            return
        claim = copy.deepcopy(claim)
        claim["status"] = {**status, "phase": phase}
        claim = await self.client.update(PERSISTENT_VOLUME_CLAIMS, claim, "status")
        if warning:
            await self._event(claim, WARNING, *warning)

    async def _event(self, claim: Obj, typ: str, reason: str, message: str) -> None:
        await self.recorder.event({**claim, "kind": "PersistentVolumeClaim", "apiVersion": "v1"}, typ, reason,
                                  message)
