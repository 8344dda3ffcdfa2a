"""Strategies of core/v1 PersistentVolume and PersistentVolumeClaim (kube's pkg/registry/core/persistentvolume
and persistentvolumeclaim), with 1.33's feature gates at their defaults (VolumeAttributesClass off: its fields
are dropped unless the stored object has them; RecoverVolumeExpansionFailure on).

Covered: SetDefaults (reclaimPolicy Retain, volumeMode Filesystem, hostPath type "", phase Pending), the
status kept apart from the spec (each has /status), PrepareForCreate (a new volume is Pending, a new claim
Pending, their status otherwise empty; a claim's dataSource and dataSourceRef filled from each other),
ValidatePersistentVolume (access modes, capacity, reclaim policy, exactly one volume source with the checks of
hostPath, nfs, local and csi, storage class, volumeMode), ValidatePersistentVolumeClaim (access modes,
selector, resources[storage], storage class, volumeMode, data sources) and the update rules (a volume's source
and volumeMode, a claim's spec but for volumeName once, storageClassName from nil, and resources.requests of
a bound claim), with kube's field paths and messages. The Forbidden of a changed spec carries a line-diff of
the JSON where kube appends Go's cmp.Diff of the structs.
"""
from __future__ import annotations

import copy
import difflib
import posixpath
from typing import Any

import orjson

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy, SubresourceStrategy, now_rfc3339
from services.common import quantity

from .workload import validate_label_selector

ACCESS_MODES = ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]
RECLAIM_POLICIES = ["Delete", "Recycle", "Retain"]
VOLUME_MODES = ["Block", "Filesystem"]
HOST_PATH_TYPES = ["", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File", "FileOrCreate",
                   "Socket"]
BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
NOT_POSITIVE = "must be greater than zero"
VAC_GATE_OFF = "update is forbidden when the VolumeAttributesClass feature gate is disabled"

# PersistentVolumeSource's members in the order ValidatePersistentVolumeSpec counts them, each with the path its
# "more than 1 volume type" error names (kube writes cephfs's as cephFS)
VOLUME_SOURCES = (
    ("hostPath", "hostPath"), ("gcePersistentDisk", "gcePersistentDisk"),
    ("awsElasticBlockStore", "awsElasticBlockStore"), ("glusterfs", "glusterfs"), ("flocker", "flocker"),
    ("nfs", "nfs"), ("rbd", "rbd"), ("quobyte", "quobyte"), ("cephfs", "cephFS"), ("iscsi", "iscsi"),
    ("cinder", "cinder"), ("fc", "fc"), ("flexVolume", "flexVolume"), ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"), ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"), ("azureDisk", "azureDisk"), ("scaleIO", "scaleIO"), ("local", "local"),
    ("storageos", "storageos"), ("csi", "csi"),
)
SOURCE_FIELDS = tuple(name for name, _ in VOLUME_SOURCES)


def _go_string(value: Any) -> str:
    """A *string (or named string) as field.Error prints it with %#v: quoted, nil as null."""
    return "null" if value is None else v.quote(str(value))


def _json_diff(old: Any, new: Any) -> str:
    """The lines that differ between two values' indented JSON (kube appends cmp.Diff's text here)."""
    a = orjson.dumps(old, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode().splitlines()
    b = orjson.dumps(new, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode().splitlines()
    return "\n".join(line for line in difflib.unified_diff(a, b, lineterm="", n=1) if not line.startswith(("---", "+++")))


def check_quantity(strategy: Strategy, value: Any) -> None:
    """A quantity kube's decoder cannot parse is a 400, before validation."""
    try:
        quantity.parse(value)
    except ValueError as e:
        raise strategy.cannot_handle(str(e)) from None


def _positive(field: str, value: Any) -> list[v.Cause]:
    return [] if quantity.parse(value) > 0 else [v.invalid(field, str(value), NOT_POSITIVE)]


def validate_access_modes(modes: list[Any], field: str, required: str) -> list[v.Cause]:
    """The access modes of a volume or a claim: at least one, each known, ReadWriteOncePod alone."""
    causes = [] if modes else [v.required(field, required)]
    rwop = other = False
    for mode in modes:
        if mode not in ACCESS_MODES:
            causes.append(v.not_supported(field, mode, ACCESS_MODES))
        elif mode == "ReadWriteOncePod":
            rwop = True
        else:
            other = True
    if rwop and other:
        causes.append(v.forbidden(field, "may not use ReadWriteOncePod with other access modes"))
    return causes


def _capacity_not_supported(capacity: Obj | None) -> v.Cause:
    """field.NotSupported of a ResourceList, which kube prints with %#v."""
    shown = "core.ResourceList(nil)" if capacity is None else \
        "core.ResourceList{" + ", ".join(f"{v.quote(k)}:{v.quote(str(q))}" for k, q in capacity.items()) + "}"
    return {"reason": "FieldValueNotSupported", "field": "spec.capacity",
            "message": f'Unsupported value: {shown}: supported values: "storage"'}


def _class_name(field: str, name: Any) -> list[v.Cause]:
    return [v.invalid(field, name, m) for m in v.is_dns1123_subdomain(str(name))]


def _no_backsteps(field: str, path: str) -> list[v.Cause]:
    parts = path.replace("\\", "/").split("/")
    return [v.invalid(field, path, "must not contain '..'")] if ".." in parts else []


def _validate_source(name: str, src: Obj, p: str) -> list[v.Cause]:
    """The checks of the sources a cluster without volume plug-ins is likely to name."""
    causes: list[v.Cause] = []
    if name in ("hostPath", "local"):
        if not src.get("path"):
            return [v.required(f"{p}.path")]
        causes += _no_backsteps(f"{p}.path", src["path"])
        if name == "hostPath" and src.get("type") not in HOST_PATH_TYPES:
            causes.append(v.not_supported(f"{p}.type", src.get("type"), HOST_PATH_TYPES))
    elif name == "nfs":
        if not src.get("server"):
            causes.append(v.required(f"{p}.server"))
        if not src.get("path"):
            causes.append(v.required(f"{p}.path"))
        elif not posixpath.isabs(src["path"]):
            causes.append(v.invalid(f"{p}.path", src["path"], "must be an absolute path"))
    elif name == "csi":
        driver = src.get("driver") or ""
        if not driver:
            causes.append(v.required(f"{p}.driver"))
        elif len(driver) > 63:
            causes.append(v.too_long(f"{p}.driver", 63))
        else:
            causes += [v.invalid(f"{p}.driver", driver, m) for m in v.is_dns1123_subdomain(driver.lower())]
        if not src.get("volumeHandle"):
            causes.append(v.required(f"{p}.volumeHandle"))
    return causes


def _drop_vac(spec: Obj, old_spec: Obj | None) -> None:
    """dropDisabledFields: volumeAttributesClassName only where the stored object already has it."""
    if "volumeAttributesClassName" in spec and (old_spec or {}).get("volumeAttributesClassName") is None:
        spec.pop("volumeAttributesClassName")


class PersistentVolumeStrategy(Strategy):
    status_fields = ("status",)
    status_subresource = True

    def canonicalize(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
            spec.setdefault("volumeMode", "Filesystem")
            if isinstance(spec.get("hostPath"), dict):
                spec["hostPath"].setdefault("type", "")
            for value in (spec.get("capacity") or {}).values():
                check_quantity(self, value)
        status = obj.get("status")
        if isinstance(status, dict) and not status.get("phase"):
            status["phase"] = "Pending"

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Pending", "lastPhaseTransitionTime": now_rfc3339()}
        _drop_vac(obj.get("spec") or {}, None)

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        super().prepare_for_update(obj, old)
        _drop_vac(obj.get("spec") or {}, old.get("spec"))

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        spec = obj.get("spec") or {}
        causes += validate_access_modes(spec.get("accessModes") or [], "spec.accessModes", "")
        capacity = spec.get("capacity")
        if not capacity:
            causes.append(v.required("spec.capacity"))
        if "storage" not in (capacity or {}) or len(capacity) > 1:
            causes.append(_capacity_not_supported(capacity))
        for name, value in (capacity or {}).items():
            causes += _positive(f"spec.capacity[{name}]", value)
        policy = spec.get("persistentVolumeReclaimPolicy")
        if policy and policy not in RECLAIM_POLICIES:
            causes.append(v.not_supported("spec.persistentVolumeReclaimPolicy", policy, RECLAIM_POLICIES))
        affinity = spec.get("nodeAffinity")
        if affinity is not None:
            if not isinstance(affinity.get("required"), dict):
                causes.append(v.required("spec.nodeAffinity.required", "must specify required node constraints"))
            elif not affinity["required"].get("nodeSelectorTerms"):
                causes.append(v.required("spec.nodeAffinity.required.nodeSelectorTerms",
                                         "must have at least one node selector term"))
        found = 0
        for name, shown in VOLUME_SOURCES:
            src = spec.get(name)
            if src is None:
                continue
            if found and name != "flexVolume":
                causes.append(v.forbidden(f"spec.{shown}", "may not specify more than 1 volume type"))
                continue
            found += 1
            causes += _validate_source(name, src if isinstance(src, dict) else {}, f"spec.{name}")
            if name == "local" and affinity is None:
                causes.append(v.required("spec.nodeAffinity", "Local volume requires node affinity"))
        if not found:
            causes.append(v.required("spec", "must specify a volume type"))
        host = spec.get("hostPath") or {}
        if host.get("path") and posixpath.normpath(host["path"]) == "/" and policy == "Recycle":
            causes.append(v.forbidden("spec.persistentVolumeReclaimPolicy",
                                      "may not be 'recycle' for a hostPath mount of '/'"))
        if spec.get("storageClassName"):
            causes += _class_name("spec.storageClassName", spec["storageClassName"])
        mode = spec.get("volumeMode")
        if mode is not None and mode not in VOLUME_MODES:
            causes.append(v.not_supported("spec.volumeMode", mode, VOLUME_MODES))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        spec, old_spec = obj.get("spec") or {}, old.get("spec") or {}
        new_src = {k: spec[k] for k in SOURCE_FIELDS if k in spec}
        old_src = {k: old_spec[k] for k in SOURCE_FIELDS if k in old_spec}
        csi, old_csi = new_src.get("csi"), old_src.get("csi")
        if isinstance(csi, dict) and isinstance(old_csi, dict) and old_csi.get("controllerExpandSecretRef") is None:
            new_src["csi"] = {k: val for k, val in csi.items() if k != "controllerExpandSecretRef"}
        if new_src != old_src:
            causes.append(v.forbidden("spec.persistentvolumesource", "spec.persistentvolumesource is immutable "
                                      f"after creation\n{_json_diff(old_src, new_src)}"))
        if spec.get("volumeMode") != old_spec.get("volumeMode"):
            causes.append(v.invalid_go("volumeMode", _go_string(spec.get("volumeMode")), "field is immutable"))
        if spec.get("volumeAttributesClassName") != old_spec.get("volumeAttributesClassName"):
            causes.append(v.forbidden("spec.volumeAttributesClassName", VAC_GATE_OFF))
        return causes

    def for_subresource(self, subresource: str) -> Strategy:
        return PersistentVolumeStatusStrategy(self) if subresource == "status" else self


class PersistentVolumeStatusStrategy(SubresourceStrategy):
    """/status: the spec is the stored one; a phase that changes gets lastPhaseTransitionTime now, unless the
    writer set a new one."""

    def __init__(self, parent: Strategy) -> None:
        super().__init__(parent, ("status",))

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        super().prepare_for_update(obj, old)
        status, old_status = obj.setdefault("status", {}), old.get("status") or {}
        if status.get("phase") != old_status.get("phase") and \
                status.get("lastPhaseTransitionTime") in (None, old_status.get("lastPhaseTransitionTime")):
            status["lastPhaseTransitionTime"] = now_rfc3339()

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        return v.validate_object_meta_update(obj.get("metadata") or {}, old.get("metadata") or {})


def normalize_data_sources(spec: Obj) -> None:
    """NormalizeDataSources: dataSource and dataSourceRef name the same thing when only one is given."""
    source, ref = spec.get("dataSource"), spec.get("dataSourceRef")
    if isinstance(source, dict) and ref is None:
        spec["dataSourceRef"] = {k: source[k] for k in ("apiGroup", "kind", "name") if k in source}
    elif isinstance(ref, dict) and source is None and not ref.get("namespace"):
        spec["dataSource"] = {k: ref[k] for k in ("apiGroup", "kind", "name") if k in ref}


def _validate_data_source(ref: Obj, p: str) -> list[v.Cause]:
    causes = []
    if not ref.get("name"):
        causes.append(v.required(f"{p}.name"))
    if not ref.get("kind"):
        causes.append(v.required(f"{p}.kind"))
    group = ref.get("apiGroup") or ""
    if not group and ref.get("kind") != "PersistentVolumeClaim":
        causes.append(v.invalid(p, ref.get("kind") or "", "must be 'PersistentVolumeClaim' when referencing the "
                                                           "default apiGroup"))
    if group:
        causes += [v.invalid(f"{p}.apiGroup", group, m) for m in v.is_dns1123_subdomain(group)]
    if ref.get("namespace"):
        causes += [v.invalid(f"{p}.namespace", ref["namespace"], m) for m in v.is_dns1123_label(ref["namespace"])]
    return causes


class PersistentVolumeClaimStrategy(Strategy):
    status_fields = ("status",)
    status_subresource = True

    def canonicalize(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.setdefault("volumeMode", "Filesystem")
            for part in ("requests", "limits"):
                for value in ((spec.get("resources") or {}).get(part) or {}).values():
                    check_quantity(self, value)
        status = obj.get("status")
        if isinstance(status, dict) and not status.get("phase"):
            status["phase"] = "Pending"

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Pending"}
        spec = obj.get("spec")
        if isinstance(spec, dict):
            _drop_vac(spec, None)
            normalize_data_sources(spec)

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        super().prepare_for_update(obj, old)
        _drop_vac(obj.get("spec") or {}, old.get("spec"))

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        spec = obj.get("spec") or {}
        causes += validate_access_modes(spec.get("accessModes") or [], "spec.accessModes",
                                        "at least 1 access mode is required")
        if spec.get("selector") is not None:
            causes += validate_label_selector(spec["selector"], "spec.selector")
        storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
        if storage is None:
            causes.append(v.required("spec.resources[storage]"))
        else:
            causes += _positive("spec.resources[storage]", storage)
        if spec.get("storageClassName"):
            causes += _class_name("spec.storageClassName", spec["storageClassName"])
        mode = spec.get("volumeMode")
        if mode is not None and mode not in VOLUME_MODES:
            causes.append(v.not_supported("spec.volumeMode", mode, VOLUME_MODES))
        source, ref = spec.get("dataSource"), spec.get("dataSourceRef")
        if isinstance(source, dict):
            causes += _validate_data_source(source, "spec.dataSource")
        if isinstance(ref, dict):
            causes += _validate_data_source(ref, "spec.dataSourceRef")
        if isinstance(ref, dict) and ref.get("namespace"):
            if source is not None:
                causes.append(v.invalid("spec", "spec.dataSource",
                                        "may not be specified when dataSourceRef.namespace is specified"))
        elif isinstance(source, dict) and isinstance(ref, dict) and \
                any(source.get(k) != ref.get(k) for k in ("apiGroup", "kind", "name")):
            causes.append(v.invalid("spec", "spec.dataSource", "must match dataSourceRef"))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        spec, old_spec = obj.get("spec") or {}, old.get("spec") or {}
        new_clone, old_clone = copy.deepcopy(spec), copy.deepcopy(old_spec)
        if not old_spec.get("volumeName"):
            old_clone["volumeName"] = new_clone.get("volumeName")  # the binder sets it once
            new_clone.setdefault("volumeName", None)
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        old_annotations = (old.get("metadata") or {}).get("annotations") or {}
        old_beta = old_annotations.get(BETA_STORAGE_CLASS)
        if old_beta is not None and old_spec.get("storageClassName") is None and \
                spec.get("storageClassName") == old_beta and annotations.get(BETA_STORAGE_CLASS) in (None, old_beta):
            new_clone.pop("storageClassName", None)
        else:
            if annotations.get(BETA_STORAGE_CLASS, "") != old_annotations.get(BETA_STORAGE_CLASS, ""):
                causes.append(v.invalid(f"metadata.annotations.{BETA_STORAGE_CLASS}",
                                        annotations.get(BETA_STORAGE_CLASS, ""), "field is immutable"))
            if spec.get("storageClassName") is not None and old_spec.get("storageClassName") is None and \
                    (old_beta is None or spec["storageClassName"] == old_beta):
                new_clone.pop("storageClassName", None)
        requests = (new_clone.get("resources") or {}).get("requests")
        if (obj.get("status") or {}).get("phase") == "Bound" and requests is not None:
            old_storage = ((old_spec.get("resources") or {}).get("requests") or {}).get("storage")
            if old_storage is None:
                requests.pop("storage", None)
            else:
                requests["storage"] = old_storage
        for clone, source in ((new_clone, old_spec), (old_clone, old_spec)):
            clone.pop("volumeAttributesClassName", None)
            if source.get("volumeAttributesClassName") is not None:
                clone["volumeAttributesClassName"] = source["volumeAttributesClassName"]
        if _semantic(new_clone) != _semantic(old_clone):
            causes.append(v.forbidden("spec", "spec is immutable after creation except resources.requests and "
                                      "volumeAttributesClassName for bound claims\n"
                                      f"{_json_diff(_semantic(old_clone), _semantic(new_clone))}"))
        new_size = _storage(spec)
        if new_size < _storage(old_spec):
            capacity = ((old.get("status") or {}).get("capacity") or {}).get("storage")
            if new_size <= (quantity.parse(capacity) if capacity is not None else 0):
                causes.append(v.forbidden("spec.resources.requests.storage",
                                          "field can not be less than status.capacity"))
        if spec.get("volumeMode") != old_spec.get("volumeMode"):
            causes.append(v.invalid_go("volumeMode", _go_string(spec.get("volumeMode")), "field is immutable"))
        if spec.get("volumeAttributesClassName") != old_spec.get("volumeAttributesClassName"):
            causes.append(v.forbidden("spec.volumeAttributesClassName", VAC_GATE_OFF))
        return causes

    def for_subresource(self, subresource: str) -> Strategy:
        return PersistentVolumeClaimStatusStrategy(self) if subresource == "status" else self


def _semantic(spec: Obj) -> Obj:
    """A spec compared as apiequality.Semantic does: unset and empty alike, quantities by value."""
    out: Obj = {}
    for k, val in spec.items():
        if val in (None, {}, [], ""):
            continue
        if k == "resources" and isinstance(val, dict):
            val = {part: {r: str(quantity.parse(q)) for r, q in (val.get(part) or {}).items()}
                   for part in val if val.get(part)}
        out[k] = val
    return out


def _storage(spec: Obj) -> Any:
    value = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    return quantity.parse(value) if value is not None else 0


class PersistentVolumeClaimStatusStrategy(SubresourceStrategy):
    """/status: the spec is the stored one (kube's ValidatePersistentVolumeClaimStatusUpdate)."""

    def __init__(self, parent: Strategy) -> None:
        super().__init__(parent, ("status",))

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = v.validate_object_meta_update(obj.get("metadata") or {}, old.get("metadata") or {})
        if not (obj.get("spec") or {}).get("accessModes"):
            causes.append(v.required("Spec.accessModes"))
        for name, value in ((obj.get("status") or {}).get("capacity") or {}).items():
            try:
                quantity.parse(value)
            except ValueError as e:
                causes.append(v.invalid(f"status.capacity[{name}]", str(value), str(e)))
        return causes


class ComponentStatusStrategy(Strategy):
    """core/v1 ComponentStatus: read-only, computed on each read (kube's registry/core/componentstatus); kube
    warns that the API is deprecated."""
    deprecation_warning = "v1 ComponentStatus is deprecated in v1.19+"
