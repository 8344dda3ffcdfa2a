"""storage.k8s.io/v1: StorageClass, CSIDriver, CSINode, CSIStorageCapacity, VolumeAttachment."""
from __future__ import annotations

from typing import Any

from services.apiserver.printers import AGE, NAME, TableConvertor, age, column
from services.apiserver.resource import GroupVersion, ResourceInfo

from .kinds import status
from .schemas import field_doc
from .strategies.storage import (
    CSIDriverStrategy,
    CSINodeStrategy,
    CSIStorageCapacityStrategy,
    StorageClassStrategy,
    VolumeAttachmentStrategy,
)

Obj = dict[str, Any]
DEFAULT_CLASS_ANNOTATIONS = ("storageclass.kubernetes.io/is-default-class",
                             "storageclass.beta.kubernetes.io/is-default-class")


def storage_class_row(o: Obj) -> list[Any]:
    """printStorageClass: "(default)" after the name of the default class (IsDefaultAnnotation)."""
    meta = o.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    name = meta.get("name", "")
    if any(annotations.get(a) == "true" for a in DEFAULT_CLASS_ANNOTATIONS):
        name += " (default)"
    return [name, o.get("provisioner") or "", o.get("reclaimPolicy") or "Delete",
            o.get("volumeBindingMode") or "Immediate", bool(o.get("allowVolumeExpansion")), age(o)]


STORAGE_CLASS_TABLE = TableConvertor((
    NAME,
    column("Provisioner", "string", "provisioner indicates the type of the provisioner."),
    column("ReclaimPolicy", "string", "reclaimPolicy controls the reclaimPolicy for dynamically provisioned "
           "PersistentVolumes of this storage class. Defaults to Delete."),
    column("VolumeBindingMode", "string", "volumeBindingMode indicates how PersistentVolumeClaims should be "
           "provisioned and bound.  When unset, VolumeBindingImmediate is used. This field is only honored by "
           "servers that enable the VolumeScheduling feature."),
    column("AllowVolumeExpansion", "string", "allowVolumeExpansion shows whether the storage class allow volume "
           "expand."),
    AGE,
), storage_class_row)

def csi_driver_row(o: Obj) -> list[Any]:
    """printCSIDriver."""
    spec = o.get("spec") or {}
    modes = ",".join(spec.get("volumeLifecycleModes") or []) or "<none>"
    tokens = ",".join(t.get("audience") or "" for t in spec.get("tokenRequests") or []) or "<unset>"
    attach = spec.get("attachRequired")
    return [(o.get("metadata") or {}).get("name", ""), True if attach is None else bool(attach),
            bool(spec.get("podInfoOnMount")), bool(spec.get("storageCapacity")), tokens,
            bool(spec.get("requiresRepublish")), modes, age(o)]


# The columns' descriptions are CSIDriverSpec's field docs, as kube's printer takes them (SwaggerDoc)
_CSI_SPEC_DOCS = {
    'attachRequired': 'attachRequired indicates this CSI volume driver requires an attach operation (because it implements the CSI ControllerPublishVolume() method), and that the Kubernetes attach detach controller should call the attach volume interface which checks the volumeattachment status and waits until the volume is attached before proceeding to mounting. The CSI external-attacher coordinates with CSI volume driver and updates the volumeattachment status when the attach operation is complete. If the CSIDriverRegistry feature gate is enabled and the value is specified to false, the attach operation will be skipped. Otherwise the attach operation will be called.\n\nThis field is immutable.',
    'podInfoOnMount': 'podInfoOnMount indicates this CSI volume driver requires additional pod information (like podName, podUID, etc.) during mount operations, if set to true. If set to false, pod information will not be passed on mount. Default is false.\n\nThe CSI driver specifies podInfoOnMount as part of driver deployment. If true, Kubelet will pass pod information as VolumeContext in the CSI NodePublishVolume() calls. The CSI driver is responsible for parsing and validating the information passed in as VolumeContext.\n\nThe following VolumeContext will be passed if podInfoOnMount is set to true. This list might grow, but the prefix will be used. "csi.storage.k8s.io/pod.name": pod.Name "csi.storage.k8s.io/pod.namespace": pod.Namespace "csi.storage.k8s.io/pod.uid": string(pod.UID) "csi.storage.k8s.io/ephemeral": "true" if the volume is an ephemeral inline volume\n                                defined by a CSIVolumeSource, otherwise "false"\n\n"csi.storage.k8s.io/ephemeral" is a new feature in Kubernetes 1.16. It is only required for drivers which support both the "Persistent" and "Ephemeral" VolumeLifecycleMode. Other drivers can leave pod info disabled and/or ignore this field. As Kubernetes 1.15 doesn\'t support this field, drivers can only support one mode when deployed on such a cluster and the deployment determines which mode that is, for example via a command line parameter of the driver.\n\nThis field was immutable in Kubernetes < 1.29 and now is mutable.',
    'storageCapacity': 'storageCapacity indicates that the CSI volume driver wants pod scheduling to consider the storage capacity that the driver deployment will report by creating CSIStorageCapacity objects with capacity information, if set to true.\n\nThe check can be enabled immediately when deploying a driver. In that case, provisioning new volumes with late binding will pause until the driver deployment has published some suitable CSIStorageCapacity object.\n\nAlternatively, the driver can be deployed with the field unset or false and it can be flipped later when storage capacity information has been published.\n\nThis field was immutable in Kubernetes <= 1.22 and now is mutable.',
    'tokenRequests': 'tokenRequests indicates the CSI driver needs pods\' service account tokens it is mounting volume for to do necessary authentication. Kubelet will pass the tokens in VolumeContext in the CSI NodePublishVolume calls. The CSI driver should parse and validate the following VolumeContext: "csi.storage.k8s.io/serviceAccount.tokens": {\n  "<audience>": {\n    "token": <token>,\n    "expirationTimestamp": <expiration timestamp in RFC3339>,\n  },\n  ...\n}\n\nNote: Audience in each TokenRequest should be different and at most one token is empty string. To receive a new token after expiry, RequiresRepublish can be used to trigger NodePublishVolume periodically.',
    'requiresRepublish': 'requiresRepublish indicates the CSI driver wants `NodePublishVolume` being periodically called to reflect any possible change in the mounted volume. This field defaults to false.\n\nNote: After a successful initial NodePublishVolume call, subsequent calls to NodePublishVolume should only update the contents of the volume. New mount points will not be seen by a running container.',
    'volumeLifecycleModes': 'volumeLifecycleModes defines what kind of volumes this CSI volume driver supports. The default if the list is empty is "Persistent", which is the usage defined by the CSI specification and implemented in Kubernetes via the usual PV/PVC mechanism.\n\nThe other mode is "Ephemeral". In this mode, volumes are defined inline inside the pod spec with CSIVolumeSource and their lifecycle is tied to the lifecycle of that pod. A driver has to be aware of this because it is only going to get a NodePublishVolume call for such a volume.\n\nFor more information about implementing this mode, see https://kubernetes-csi.github.io/docs/ephemeral-local-volumes.html A driver can support one or more of these modes and more modes may be added in the future.\n\nThis field is beta. This field is immutable.',
}

CSI_DRIVER_TABLE = TableConvertor((
    NAME,
    column('AttachRequired', 'boolean', _CSI_SPEC_DOCS['attachRequired']),
    column('PodInfoOnMount', 'boolean', _CSI_SPEC_DOCS['podInfoOnMount']),
    column('StorageCapacity', 'boolean', _CSI_SPEC_DOCS['storageCapacity']),
    column('TokenRequests', 'string', _CSI_SPEC_DOCS['tokenRequests']),
    column('RequiresRepublish', 'boolean', _CSI_SPEC_DOCS['requiresRepublish']),
    column('Modes', 'string', _CSI_SPEC_DOCS['volumeLifecycleModes']),
    AGE,
), csi_driver_row)

def _name(o: Obj) -> str:
    return (o.get("metadata") or {}).get("name", "")


CSI_NODE_TABLE = TableConvertor((
    NAME, column("Drivers", "integer", "Drivers indicates the number of CSI drivers registered on the node"), AGE,
), lambda o: [_name(o), len((o.get("spec") or {}).get("drivers") or []), age(o)])

_CAPACITY = "io.k8s.api.storage.v1.CSIStorageCapacity"
CSI_STORAGE_CAPACITY_TABLE = TableConvertor((
    NAME,
    column("StorageClassName", "string", field_doc(_CAPACITY, "storageClassName")),
    column("Capacity", "string", field_doc(_CAPACITY, "capacity")),
), lambda o: [_name(o), o.get("storageClassName") or "",
              "<unset>" if o.get("capacity") is None else str(o["capacity"])])


def volume_attachment_row(o: Obj) -> list[Any]:
    """printVolumeAttachment: the PV's name when the source names one."""
    spec = o.get("spec") or {}
    return [_name(o), spec.get("attacher") or "", (spec.get("source") or {}).get("persistentVolumeName") or "",
            spec.get("nodeName") or "", bool((o.get("status") or {}).get("attached")), age(o)]


_VA = "io.k8s.api.storage.v1.VolumeAttachment"
VOLUME_ATTACHMENT_TABLE = TableConvertor((
    NAME,
    column("Attacher", "string", field_doc(_VA + "Spec", "attacher"), "name"),
    column("PV", "string", field_doc(_VA + "Source", "persistentVolumeName")),
    column("Node", "string", field_doc(_VA + "Spec", "nodeName")),
    column("Attached", "boolean", field_doc(_VA + "Status", "attached")),
    AGE,
), volume_attachment_row)

V1 = GroupVersion("storage.k8s.io", "v1", 16800, 15, (
    ResourceInfo(
        group="storage.k8s.io", version="v1", kind="CSIDriver", plural="csidrivers", singular="csidriver",
        namespaced=False, key_prefix="/registry/csidrivers/", strategy=CSIDriverStrategy, table=CSI_DRIVER_TABLE,
    ),
    ResourceInfo(
        group="storage.k8s.io", version="v1", kind="CSINode", plural="csinodes", singular="csinode",
        namespaced=False, key_prefix="/registry/csinodes/", strategy=CSINodeStrategy, table=CSI_NODE_TABLE,
    ),
    ResourceInfo(
        group="storage.k8s.io", version="v1", kind="CSIStorageCapacity", plural="csistoragecapacities",
        singular="csistoragecapacity", namespaced=True, key_prefix="/registry/csistoragecapacities/",
        strategy=CSIStorageCapacityStrategy, table=CSI_STORAGE_CAPACITY_TABLE,
    ),
    ResourceInfo(
        group="storage.k8s.io", version="v1", kind="StorageClass", plural="storageclasses", singular="storageclass",
        namespaced=False, key_prefix="/registry/storageclasses/", short_names=("sc",),
        strategy=StorageClassStrategy, table=STORAGE_CLASS_TABLE,
        protobuf="k8s.io.api.storage.v1.StorageClass", return_deleted_object=True,
    ),
    ResourceInfo(
        group="storage.k8s.io", version="v1", kind="VolumeAttachment", plural="volumeattachments",
        singular="volumeattachment", namespaced=False, key_prefix="/registry/volumeattachments/",
        subresources=(status("VolumeAttachment"),), strategy=VolumeAttachmentStrategy,
        table=VOLUME_ATTACHMENT_TABLE,
    ),
))

GROUP_VERSIONS = (V1,)
