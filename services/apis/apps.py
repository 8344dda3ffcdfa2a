"""apps/v1: Deployment, ReplicaSet, StatefulSet, DaemonSet, ControllerRevision."""
from __future__ import annotations

from typing import Any

from services.apiserver.printers import AGE, NAME, TableConvertor, age, column
from services.apiserver.resource import GroupVersion, ResourceInfo

from .kinds import workload
from .schemas import field_doc
from .strategies.apps import (
    ControllerRevisionStrategy,
    DaemonSetStrategy,
    DeploymentStrategy,
    ReplicaSetStrategy,
    StatefulSetStrategy,
)
from .strategies.workload import containers_images, selector_string
from .workload_columns import CONTAINERS, IMAGES, POD_DOCS, integer, selector_column

Obj = dict[str, Any]
GROUP = "apps"


def _name(o: Obj) -> str:
    return (o.get("metadata") or {}).get("name", "")


def _wide(o: Obj) -> list[Any]:
    spec = o.get("spec") or {}
    names, images = containers_images(spec.get("template"))
    return [names, images, selector_string(spec.get("selector")) or "<none>"]


def deployment_row(o: Obj) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    desired = spec.get("replicas", 1) if spec.get("replicas") is not None else 1
    return [_name(o), f"{status.get('readyReplicas') or 0}/{desired}", status.get("updatedReplicas") or 0,
            status.get("availableReplicas") or 0, age(o), *_wide(o)]


def replicaset_row(o: Obj) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    return [_name(o), spec.get("replicas") or 0, status.get("replicas") or 0, status.get("readyReplicas") or 0,
            age(o), *_wide(o)]


def statefulset_row(o: Obj) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    names, images = containers_images(spec.get("template"))
    return [_name(o), f"{status.get('readyReplicas') or 0}/{spec.get('replicas') or 0}", age(o), names, images]


def daemonset_row(o: Obj) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    selector = ((spec.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
    node_selector = ",".join(f"{k}={selector[k]}" for k in sorted(selector)) or "<none>"
    return [_name(o), status.get("desiredNumberScheduled") or 0, status.get("currentNumberScheduled") or 0,
            status.get("numberReady") or 0, status.get("updatedNumberScheduled") or 0,
            status.get("numberAvailable") or 0, node_selector, age(o), *_wide(o)]


DEPLOYMENT_TABLE = TableConvertor((
    NAME,
    column("Ready", "string", "Number of the pod with ready state"),
    integer("Up-to-date", "Total number of non-terminating pods targeted by this deployment that have the desired "
            "template spec."),
    integer("Available", "Total number of available non-terminating pods (ready for at least minReadySeconds) "
            "targeted by this deployment."),
    AGE, CONTAINERS, IMAGES,
    selector_column("Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the "
                    "ones affected by this deployment. It must match the pod template's labels."),
), deployment_row)

REPLICASET_TABLE = TableConvertor((
    NAME,
    integer("Desired", "Replicas is the number of desired pods. This is a pointer to distinguish between explicit "
            "zero and unspecified. Defaults to 1. More info: "
            "https://kubernetes.io/docs/concepts/workloads/controllers/replicaset"),
    integer("Current", "Replicas is the most recently observed number of non-terminating pods. More info: "
            "https://kubernetes.io/docs/concepts/workloads/controllers/replicaset"),
    integer("Ready", "The number of non-terminating pods targeted by this ReplicaSet with a Ready Condition."),
    AGE, CONTAINERS, IMAGES,
    selector_column("Selector is a label query over pods that should match the replica count. Label keys and "
                    "values that must match in order to be controlled by this replica set. It must match the pod "
                    "template's labels. More info: "
                    "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
), replicaset_row)

STATEFULSET_TABLE = TableConvertor((
    NAME, column("Ready", "string", "Number of the pod with ready state"), AGE, CONTAINERS, IMAGES,
), statefulset_row)

_DS = "More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/"
DAEMONSET_TABLE = TableConvertor((
    NAME,
    integer("Desired", "The total number of nodes that should be running the daemon pod (including nodes "
            f"correctly running the daemon pod). {_DS}"),
    integer("Current", "The number of nodes that are running at least 1 daemon pod and are supposed to run the "
            f"daemon pod. {_DS}"),
    integer("Ready", "numberReady is the number of nodes that should be running the daemon pod and have one or "
            "more of the daemon pod running with a Ready Condition."),
    integer("Up-to-date", "The total number of nodes that are running updated daemon pod"),
    integer("Available", "The number of nodes that should be running the daemon pod and have one or more of the "
            "daemon pod running and available (ready for at least spec.minReadySeconds)"),
    column("Node Selector", "string", POD_DOCS["nodeSelector"]),
    AGE, CONTAINERS, IMAGES,
    selector_column("A label query over pods that are managed by the daemon set. Must match in order to be "
                    "controlled. It must match the pod template's labels. More info: "
                    "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
), daemonset_row)

def controller_name(o: Obj) -> str:
    """printControllerRevision: the controller as <kind>.<group>/<name>, lowercased; "<none>" without one."""
    for ref in (o.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            group = (ref.get("apiVersion") or "").rpartition("/")[0]
            kind = ref.get("kind") or ""
            return (f"{kind}.{group}" if group else kind).lower() + "/" + (ref.get("name") or "")
    return "<none>"


CONTROLLER_REVISION_TABLE = TableConvertor((
    NAME,
    column("Controller", "string", "Controller of the object"),
    column("Revision", "string", field_doc("io.k8s.api.apps.v1.ControllerRevision", "revision")),
    AGE,
), lambda o: [_name(o), controller_name(o), o.get("revision") or 0, age(o)])

V1 = GroupVersion(GROUP, "v1", 17800, 15, (
    ResourceInfo(
        group=GROUP, version="v1", kind="ControllerRevision", plural="controllerrevisions",
        singular="controllerrevision", namespaced=True, key_prefix="/registry/controllerrevisions/",
        strategy=ControllerRevisionStrategy, table=CONTROLLER_REVISION_TABLE,
    ),
    workload(GROUP, "DaemonSet", DaemonSetStrategy, DAEMONSET_TABLE, ("ds",)),
    workload(GROUP, "Deployment", DeploymentStrategy, DEPLOYMENT_TABLE, ("deploy",), scale=True),
    workload(GROUP, "ReplicaSet", ReplicaSetStrategy, REPLICASET_TABLE, ("rs",), scale=True),
    workload(GROUP, "StatefulSet", StatefulSetStrategy, STATEFULSET_TABLE, ("sts",), scale=True),
))

GROUP_VERSIONS = (V1,)
