"""Table columns the workload kinds share (kube's printers: layoutContainerCells and the selector column),
with the descriptions kube gives them (from the 1.33 API types' documentation)."""
from __future__ import annotations

from typing import Any

from services.apiserver.printers import column

Obj = dict[str, Any]

CONTAINERS = column("Containers", "string", "Names of each container in the template.", priority=1)
IMAGES = column("Images", "string", "Images referenced by each container in the template.", priority=1)


def selector_column(description: str) -> Obj:
    return column("Selector", "string", description, priority=1)


def integer(name: str, description: str) -> Obj:
    return column(name, "integer", description)


POD_DOCS = {
    "podIP": "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
    "nodeName": "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for "
                "scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this "
                "node becomes responsible for the lifecycle of this pod. This field should not be used to express a "
                "desire for the pod to be scheduled on a specific node. "
                "https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename",
    "nominatedNodeName": "nominatedNodeName is set only when this pod preempts other pods on the node, but it "
                         "cannot be scheduled right away as preemption victims receive their graceful termination "
                         "periods. This field does not guarantee that the pod will be scheduled on this node. "
                         "Scheduler may decide to place the pod elsewhere if other nodes become available sooner. "
                         "Scheduler may also decide to give the resources on this node to a higher priority pod "
                         "that is created after preemption. As a result, this field may be different than "
                         "PodSpec.nodeName when the pod is scheduled.",
    "readinessGates": "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when "
                      "all its containers are ready AND all conditions specified in the readiness gates have status "
                      "equal to \"True\" More info: "
                      "https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates",
    "nodeSelector": "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which "
                    "must match a node's labels for the pod to be scheduled on that node. More info: "
                    "https://kubernetes.io/docs/concepts/configuration/assign-pod-node/",
}
