"""The core group (""), v1: ConfigMap, Endpoints, Event, LimitRange, Namespace, Node, Pod, PodTemplate,
ReplicationController, ResourceQuota, Secret, Service, ServiceAccount; PersistentVolume, PersistentVolumeClaim
and ComponentStatus (volumes.py)."""
from __future__ import annotations

import datetime
from typing import Any

from services.apiserver.printers import (AGE, CREATED_AT_TABLE, NAME, NAME_DESC, TableConvertor, age, column,
                                         first_three, name_age, parse_time, since)
from services.apiserver.resource import STATUS_VERBS, GroupVersion, ResourceInfo, SubresourceInfo

from .strategies.core import (ConfigMapStrategy, EventStrategy, LimitRangeStrategy, NamespaceStrategy,
                              NodeStrategy, ResourceQuotaStrategy, SecretStrategy, ServiceAccountStrategy)
from .strategies.pods import PodStrategy, PodTemplateStrategy, ReplicationControllerStrategy, pod_row
from .strategies.services import EndpointsStrategy, ServiceStrategy
from .strategies.workload import containers_images
from .volumes import RESOURCES as VOLUME_RESOURCES
from .workload_columns import CONTAINERS, IMAGES, POD_DOCS, integer, selector_column

Obj = dict[str, Any]
_PB = "k8s.io.api.core.v1."


def _event_source(o: Obj) -> str:
    """formatEventSource: component (else reportingComponent), then ", host" (else reportingInstance)."""
    src = o.get("source") or {}
    component = src.get("component") or o.get("reportingComponent") or ""
    instance = src.get("host") or o.get("reportingInstance") or ""
    return f"{component}, {instance}" if instance else component


def event_row(o: Obj, now: datetime.datetime | None = None) -> list[Any]:
    """printEvent with Wide set, as the server's TableConvertor always generates it."""
    first = since(o.get("firstTimestamp"), now) if parse_time(o.get("firstTimestamp")) \
        else since(o.get("eventTime"), now)
    last = since(o.get("lastTimestamp"), now) if parse_time(o.get("lastTimestamp")) else first
    count = o.get("count") or 0
    series = o.get("series")
    if series is not None:
        last = since(series.get("lastObservedTime"), now)
        count = series.get("count") or 0
    elif count == 0:
        count = 1  # singleton events have no count in the new API
    ref = o.get("involvedObject") or {}
    kind = (ref.get("kind") or "").lower()
    target = f"{kind}/{ref['name']}" if ref.get("name") else kind
    return [last, o.get("type") or "", o.get("reason") or "", target, ref.get("fieldPath") or "",
            _event_source(o), (o.get("message") or "").strip(), first, count,
            (o.get("metadata") or {}).get("name", "")]


EVENT_TABLE = TableConvertor((
    column("Last Seen", "string", "The time at which the most recent occurrence of this event was recorded."),
    column("Type", "string", "Type of this event (Normal, Warning), new types could be added in the future"),
    column("Reason", "string", "This should be a short, machine understandable string that gives the reason for "
           "the transition into the object's current status."),
    column("Object", "string", "The object that this event is about."),
    column("Subobject", "string", "If referring to a piece of an object instead of an entire object, this string "
           "should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. "
           "For example, if the object reference is to a container within a pod, this would take on a value like: "
           "\"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the "
           "event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this "
           "pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.",
           priority=1),
    column("Source", "string", "The component reporting this event. Should be a short machine understandable "
           "string.", priority=1),
    column("Message", "string", "A human-readable description of the status of this operation."),
    column("First Seen", "string", "The time at which the event was first recorded. (Time of server receipt is "
           "in TypeMeta.)", priority=1),
    column("Count", "string", "The number of times this event has occurred.", priority=1),
    column("Name", "string", NAME_DESC, "name", priority=1),
), event_row)

def _service_external_ip(spec: Obj, status: Obj) -> str:
    """kube's getServiceExternalIP (printers.go)."""
    typ = spec.get("type") or "ClusterIP"
    external = list(spec.get("externalIPs") or [])
    if typ == "ExternalName":
        return spec.get("externalName") or "<none>"
    if typ == "LoadBalancer":
        ingress = [i.get("ip") or i.get("hostname") or "" for i in (status.get("loadBalancer") or {})
                   .get("ingress") or []]
        ips = [i for i in ingress if i] + external
        return ",".join(ips) if ips else "<pending>"
    return ",".join(external) if external else "<none>"


def _service_ports(ports: list[Obj]) -> str:
    out = []
    for p in ports:
        port = f"{p.get('port')}/{p.get('protocol') or 'TCP'}"
        if p.get("nodePort"):
            port = f"{p.get('port')}:{p['nodePort']}/{p.get('protocol') or 'TCP'}"
        out.append(port)
    return ",".join(out) if out else "<none>"


def _selector(selector: Obj | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((selector or {}).items())) or "<none>"


def service_row(o: Obj) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    ip = spec.get("clusterIP") or ""
    return [(o.get("metadata") or {}).get("name", ""), spec.get("type") or "ClusterIP",
            ip or "<none>", _service_external_ip(spec, status), _service_ports(spec.get("ports") or []),
            age(o), _selector(spec.get("selector"))]


def endpoints_row(o: Obj) -> list[Any]:
    out: list[str] = []
    for subset in o.get("subsets") or []:
        ports = subset.get("ports") or []
        for a in subset.get("addresses") or []:
            ip = a.get("ip") or ""
            if not ports:
                out.append(ip)
            out += [f"{ip}:{p.get('port')}" for p in ports]
    return [(o.get("metadata") or {}).get("name", ""), first_three(out), age(o)]


SERVICE_TABLE = TableConvertor((
    NAME,
    column("Type", "string", "type determines how the Service is exposed."),
    column("Cluster-IP", "string", "clusterIP is the IP address of the service and is usually assigned randomly."),
    column("External-IP", "string", "externalIPs is a list of IP addresses for which nodes in the cluster will "
           "also accept traffic for this service."),
    column("Port(s)", "string", "The list of ports that are exposed by this service."),
    AGE,
    column("Selector", "string", "Route service traffic to pods with label keys and values matching this "
           "selector.", priority=1),
), service_row)
ENDPOINTS_TABLE = TableConvertor((NAME, column("Endpoints", "string", "Endpoints of the service"), AGE),
                                 endpoints_row)


def _quota_usage(o: Obj, limits: bool) -> str:
    """printResourceQuota: "name: used/hard" of each hard resource, requests and limits apart, sorted."""
    status = o.get("status") or {}
    hard, used = status.get("hard") or {}, status.get("used") or {}
    parts = [f"{k}: {used.get(k, '0')}/{hard[k]}" for k in sorted(hard) if k.startswith("limits.") == limits]
    return ", ".join(parts)


RESOURCE_QUOTA_TABLE = TableConvertor((
    NAME, AGE,
    column("Request", "string", "Request represents a minimum amount of cpu/memory that a container may consume."),
    column("Limit", "string", "Limits control the maximum amount of cpu/memory that a container may use "
           "independent of contention on the node."),
), lambda o: [(o.get("metadata") or {}).get("name", ""), age(o), _quota_usage(o, False), _quota_usage(o, True)])


NODE_ROLE_PREFIX = "node-role.kubernetes.io/"


def _node_roles(labels: dict[str, str]) -> str:
    """findNodeRoles: node-role.kubernetes.io/<role> labels, and kubernetes.io/role's value."""
    roles = set()
    for k, val in labels.items():
        if k.startswith(NODE_ROLE_PREFIX) and k[len(NODE_ROLE_PREFIX):]:
            roles.add(k[len(NODE_ROLE_PREFIX):])
        elif k == "kubernetes.io/role" and val:
            roles.add(val)
    return ",".join(sorted(roles)) or "<none>"


def _node_address(status: Obj, typ: str) -> str:
    for a in status.get("addresses") or []:
        if a.get("type") == typ:
            return a.get("address") or ""
    return "<none>"


def node_row(o: Obj) -> list[Any]:
    """printNode, wide: Ready/NotReady/Unknown (+ SchedulingDisabled), roles, kubelet version, addresses."""
    meta, spec, status = o.get("metadata") or {}, o.get("spec") or {}, o.get("status") or {}
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    state = ["Unknown"] if not ready else ["Ready" if ready[-1].get("status") == "True" else "NotReady"]
    if spec.get("unschedulable"):
        state.append("SchedulingDisabled")
    info = status.get("nodeInfo") or {}
    return [meta.get("name", ""), ",".join(state), _node_roles(meta.get("labels") or {}), age(o),
            info.get("kubeletVersion") or "", _node_address(status, "InternalIP"),
            _node_address(status, "ExternalIP"), info.get("osImage") or "<unknown>",
            info.get("kernelVersion") or "<unknown>", info.get("containerRuntimeVersion") or "<unknown>"]


_ADDRESSES = ("List of addresses reachable to the node. Queried from cloud provider, if available. More info: "
              "https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as "
              "mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is "
              "merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an "
              "example. Consumers should assume that addresses can change during the lifetime of a Node. However, "
              "there are some exceptions where this may not be possible, such as Pods that inherit a Node's address "
              "in its own status or consumers of the downward API (status.hostIP).")
NODE_TABLE = TableConvertor((
    NAME,
    column("Status", "string", "The status of the node"),
    column("Roles", "string", "The roles of the node"),
    AGE,
    column("Version", "string", "Kubelet Version reported by the node."),
    column("Internal-IP", "string", _ADDRESSES, priority=1),
    column("External-IP", "string", _ADDRESSES, priority=1),
    column("OS-Image", "string", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 "
           "(wheezy)).", priority=1),
    column("Kernel-Version", "string", "Kernel Version reported by the node from 'uname -r' (e.g. "
           "3.16.0-0.bpo.4-amd64).", priority=1),
    column("Container-Runtime", "string", "ContainerRuntime Version reported by the node through runtime remote "
           "API (e.g. containerd://1.4.2).", priority=1),
), node_row)


POD_TABLE = TableConvertor((
    NAME,
    column("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
    column("Status", "string", "The aggregate status of the containers in this pod."),
    column("Restarts", "string", "The number of times the containers in this pod have been restarted and when the "
           "last container in this pod has restarted."),
    AGE,
    column("IP", "string", POD_DOCS["podIP"], priority=1),
    column("Node", "string", POD_DOCS["nodeName"], priority=1),
    column("Nominated Node", "string", POD_DOCS["nominatedNodeName"], priority=1),
    column("Readiness Gates", "string", POD_DOCS["readinessGates"], priority=1),
), pod_row)


def _pod_template_row(o: Obj) -> list[Any]:
    template = o.get("template") or {}
    names, images = containers_images(template)
    labels = (template.get("metadata") or {}).get("labels") or {}
    return [(o.get("metadata") or {}).get("name", ""), names, images,
            ",".join(f"{k}={labels[k]}" for k in sorted(labels)) or "<none>"]


POD_TEMPLATE_TABLE = TableConvertor((
    NAME,
    column("Containers", "string", "Names of each container in the template."),
    column("Images", "string", "Images referenced by each container in the template."),
    column("Pod Labels", "string", "The labels for the pod template."),
), _pod_template_row)

_RC = "More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller" \
      "#what-is-a-replicationcontroller"


def _rc_row(o: Obj) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    names, images = containers_images(spec.get("template"))
    return [(o.get("metadata") or {}).get("name", ""), spec.get("replicas") or 0, status.get("replicas") or 0,
            status.get("readyReplicas") or 0, age(o), names, images, _selector(spec.get("selector"))]


RC_TABLE = TableConvertor((
    NAME,
    integer("Desired", "Replicas is the number of desired replicas. This is a pointer to distinguish between "
            f"explicit zero and unspecified. Defaults to 1. {_RC}"),
    integer("Current", f"Replicas is the most recently observed number of replicas. {_RC}"),
    integer("Ready", "The number of ready replicas for this replication controller."),
    AGE, CONTAINERS, IMAGES,
    selector_column("Selector is a label query over pods that should match the Replicas count. If Selector is "
                    "empty, it is defaulted to the labels present on the Pod template. Label keys and values that "
                    "must match in order to be controlled by this replication controller, if empty defaulted to "
                    "labels on Pod template. More info: "
                    "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
), _rc_row)


V1 = GroupVersion("", "v1", 18000, 1, (
    ResourceInfo(
        group="", version="v1", kind="ConfigMap", plural="configmaps", singular="configmap", namespaced=True,
        key_prefix="/registry/configmaps/", short_names=("cm",), strategy=ConfigMapStrategy,
        protobuf=_PB + "ConfigMap",
        table=name_age(
            [column("Data", "string", "Data contains the configuration data. Each key must consist of "
                    "alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the "
                    "BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData "
                    "field, this is enforced during validation process.")],
            lambda o: [len(o.get("data") or {}) + len(o.get("binaryData") or {})]),
    ),
    ResourceInfo(
        group="", version="v1", kind="Event", plural="events", singular="event", namespaced=True,
        key_prefix="/registry/events/", short_names=("ev",), strategy=EventStrategy, table=EVENT_TABLE,
        protobuf=_PB + "Event",
    ),
    ResourceInfo(
        group="", version="v1", kind="Namespace", plural="namespaces", singular="namespace", namespaced=False,
        key_prefix="/registry/namespaces/", short_names=("ns",),
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        subresources=(
            SubresourceInfo("finalize", "Namespace", ("update",)),
            SubresourceInfo("status", "Namespace", STATUS_VERBS),
        ),
        strategy=NamespaceStrategy, protobuf=_PB + "Namespace", return_deleted_object=True,
        table=name_age([column("Status", "string", "The status of the namespace")],
                       lambda o: [(o.get("status") or {}).get("phase", "")]),
    ),
    ResourceInfo(
        # kube has no printer for LimitRanges: the default Table (Name, Created At)
        group="", version="v1", kind="LimitRange", plural="limitranges", singular="limitrange", namespaced=True,
        key_prefix="/registry/limitranges/", short_names=("limits",), strategy=LimitRangeStrategy,
        table=CREATED_AT_TABLE,
        protobuf=_PB + "LimitRange",
    ),
    ResourceInfo(
        group="", version="v1", kind="Node", plural="nodes", singular="node", namespaced=False,
        key_prefix="/registry/minions/", short_names=("no",),
        subresources=(SubresourceInfo("status", "Node", STATUS_VERBS),),
        strategy=NodeStrategy, table=NODE_TABLE,
        protobuf=_PB + "Node",
    ),
    ResourceInfo(
        group="", version="v1", kind="Pod", plural="pods", singular="pod", namespaced=True,
        key_prefix="/registry/pods/", short_names=("po",), categories=("all",),
        subresources=(
            SubresourceInfo("binding", "Binding", ("create",)),
            SubresourceInfo("ephemeralcontainers", "Pod", STATUS_VERBS),
            SubresourceInfo("eviction", "Eviction", ("create",), "policy", "v1"),
            SubresourceInfo("status", "Pod", STATUS_VERBS),
        ),
        strategy=PodStrategy, table=POD_TABLE, protobuf=_PB + "Pod", return_deleted_object=True,
    ),
    ResourceInfo(
        group="", version="v1", kind="PodTemplate", plural="podtemplates", singular="podtemplate",
        namespaced=True, key_prefix="/registry/podtemplates/", strategy=PodTemplateStrategy,
        table=POD_TEMPLATE_TABLE, protobuf=_PB + "PodTemplate",
    ),
    ResourceInfo(
        group="", version="v1", kind="ReplicationController", plural="replicationcontrollers",
        singular="replicationcontroller", namespaced=True, key_prefix="/registry/controllers/",
        short_names=("rc",), categories=("all",),
        subresources=(
            SubresourceInfo("scale", "Scale", STATUS_VERBS, "autoscaling", "v1"),
            SubresourceInfo("status", "ReplicationController", STATUS_VERBS),
        ),
        strategy=ReplicationControllerStrategy, table=RC_TABLE, protobuf=_PB + "ReplicationController",
    ),
    ResourceInfo(
        group="", version="v1", kind="ResourceQuota", plural="resourcequotas", singular="resourcequota",
        namespaced=True, key_prefix="/registry/resourcequotas/", short_names=("quota",),
        subresources=(SubresourceInfo("status", "ResourceQuota", STATUS_VERBS),),
        strategy=ResourceQuotaStrategy, protobuf=_PB + "ResourceQuota", return_deleted_object=True,
        table=RESOURCE_QUOTA_TABLE,
    ),
    ResourceInfo(
        group="", version="v1", kind="Secret", plural="secrets", singular="secret", namespaced=True,
        key_prefix="/registry/secrets/", strategy=SecretStrategy, protobuf=_PB + "Secret",
        table=name_age(
            [column("Type", "string", "Used to facilitate programmatic handling of secret data. More info: "
                    "https://kubernetes.io/docs/concepts/configuration/secret/#secret-types"),
             column("Data", "string", "Data contains the secret data. Each key must consist of alphanumeric "
                    "characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded "
                    "string, representing the arbitrary (possibly non-string) data value here. Described in "
                    "https://tools.ietf.org/html/rfc4648#section-4")],
            lambda o: [o.get("type") or "", len(o.get("data") or {})]),
    ),
    ResourceInfo(
        group="", version="v1", kind="Endpoints", plural="endpoints", singular="endpoints", namespaced=True,
        key_prefix="/registry/services/endpoints/", short_names=("ep",), strategy=EndpointsStrategy,
        table=ENDPOINTS_TABLE,
    ),
    ResourceInfo(
        group="", version="v1", kind="Service", plural="services", singular="service", namespaced=True,
        key_prefix="/registry/services/specs/", short_names=("svc",), categories=("all",),
        subresources=(SubresourceInfo("status", "Service", STATUS_VERBS),),
        strategy=ServiceStrategy, protobuf=_PB + "Service", return_deleted_object=True, table=SERVICE_TABLE,
    ),
    ResourceInfo(
        group="", version="v1", kind="ServiceAccount", plural="serviceaccounts", singular="serviceaccount",
        namespaced=True, key_prefix="/registry/serviceaccounts/", short_names=("sa",),
        subresources=(SubresourceInfo("token", "TokenRequest", ("create",), "authentication.k8s.io", "v1"),),
        strategy=ServiceAccountStrategy, protobuf=_PB + "ServiceAccount", return_deleted_object=True,
        table=name_age(
            [column("Secrets", "string", "Secrets is a list of the secrets in the same namespace that pods "
                    "running using this ServiceAccount are allowed to use. More info: "
                    "https://kubernetes.io/docs/concepts/configuration/secret")],
            lambda o: [len(o.get("secrets") or [])]),
    ),
    *VOLUME_RESOURCES,
))

GROUP_VERSIONS = (V1,)
