"""meta.k8s.io/v1 Table output, with the columns kube-apiserver prints for each kind."""
from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from services.common import envelope
from apiary_pb import envelope_pb2 as pb

Obj = dict[str, Any]

NAME_DESC = ("Name must be unique within a namespace. Is required when creating resources, although some resources "
             "may allow a client to request the generation of an appropriate name automatically. Name is primarily "
             "intended for creation idempotence and configuration definition. Cannot be updated. More info: "
             "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names")
AGE_DESC = ("CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
            "guaranteed to be set in happens-before order across separate operations. Clients may not set this "
            "value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null "
            "for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/"
            "api-conventions.md#metadata")


def column(name: str, typ: str, description: str, fmt: str = "", priority: int = 0) -> Obj:
    return {"name": name, "type": typ, "format": fmt, "description": description, "priority": priority}


NAME = column("Name", "string", NAME_DESC, "name")
AGE = column("Age", "string", AGE_DESC)


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 60 * 2:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def age(obj: Obj, now: datetime.datetime | None = None) -> str:
    ts = (obj.get("metadata") or {}).get("creationTimestamp")
    if not ts:
        return "<unknown>"
    try:
        created = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return "<unknown>"
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return human_duration((now - created).total_seconds())


def _apiservice_service(obj: Obj) -> str:
    svc = (obj.get("spec") or {}).get("service")
    return f"{svc.get('namespace', '')}/{svc.get('name', '')}" if svc else "Local"


def _apiservice_available(obj: Obj) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Available":
            status = c.get("status") or ""
            return status if status == "True" else f"{status} ({c.get('reason', '')})"
    return "Unknown"


Printer = tuple[list[Obj], Callable[[Obj], list[Any]]]

PRINTERS: dict[tuple[str, str], Printer] = {
    ("", "namespaces"): (
        [column("Status", "string", "The status of the namespace")],
        lambda o: [(o.get("status") or {}).get("phase", "")],
    ),
    ("", "configmaps"): (
        [column("Data", "string", "Data contains the configuration data. Each key must consist of alphanumeric "
                "characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. "
                "The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced "
                "during validation process.")],
        lambda o: [len(o.get("data") or {}) + len(o.get("binaryData") or {})],
    ),
    ("", "secrets"): (
        [column("Type", "string", "Used to facilitate programmatic handling of secret data. More info: "
                "https://kubernetes.io/docs/concepts/configuration/secret/#secret-types"),
         column("Data", "string", "Data contains the secret data. Each key must consist of alphanumeric "
                "characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, "
                "representing the arbitrary (possibly non-string) data value here. Described in "
                "https://tools.ietf.org/html/rfc4648#section-4")],
        lambda o: [o.get("type") or "", len(o.get("data") or {})],
    ),
    ("", "serviceaccounts"): (
        [column("Secrets", "string", "Secrets is a list of the secrets in the same namespace that pods running "
                "using this ServiceAccount are allowed to use. More info: "
                "https://kubernetes.io/docs/concepts/configuration/secret")],
        lambda o: [len(o.get("secrets") or [])],
    ),
    ("apiregistration.k8s.io", "apiservices"): (
        [column("Service", "string", "The reference to the service that hosts this API endpoint."),
         column("Available", "string", "Whether this service is available.")],
        lambda o: [_apiservice_service(o), _apiservice_available(o)],
    ),
}


def _created_at(obj: Obj) -> str:
    return (obj.get("metadata") or {}).get("creationTimestamp") or ""


def _subjects(obj: Obj) -> list[str]:
    """rbac.SubjectsStrings: users, groups and namespace/name service accounts, each joined by ", "."""
    users, groups, sas = [], [], []
    for s in obj.get("subjects") or []:
        kind, name = s.get("kind"), s.get("name") or ""
        if kind == "User":
            users.append(name)
        elif kind == "Group":
            groups.append(name)
        elif kind == "ServiceAccount":
            sas.append(f"{s.get('namespace') or ''}/{name}")
    return [", ".join(users), ", ".join(groups), ", ".join(sas)]


def _binding_row(o: Obj) -> list[Any]:
    ref = o.get("roleRef") or {}
    return [(o.get("metadata") or {}).get("name", ""), f"{ref.get('kind', '')}/{ref.get('name', '')}", age(o),
            *_subjects(o)]


_ROLE_COLUMNS = [NAME, column("Created At", "date", AGE_DESC)]
_BINDING_COLUMNS = [
    NAME,
    column("Role", "string", "RoleRef can reference a Role in the current namespace or a ClusterRole in the "
           "global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error. This field "
           "is immutable."),
    AGE,
    column("Users", "string", "Users in the roleBinding", priority=1),
    column("Groups", "string", "Groups in the roleBinding", priority=1),
    column("ServiceAccounts", "string", "ServiceAccounts in the roleBinding", priority=1),
]

def _parse_time(ts: Any) -> datetime.datetime | None:
    """A metav1.Time or MicroTime as stored (UTC, "Z"); None when unset or unreadable (Go's zero time)."""
    if not ts or not isinstance(ts, str):
        return None
    try:
        t = datetime.datetime.fromisoformat(ts)
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=datetime.timezone.utc)


def _since(ts: Any, now: datetime.datetime | None = None) -> str:
    """translateTimestampSince / translateMicroTimestampSince."""
    t = _parse_time(ts)
    if t is None:
        return "<unknown>"
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return human_duration((now - t).total_seconds())


def _event_source(o: Obj) -> str:
    """formatEventSource: component (else reportingComponent), then ", host" (else reportingInstance)."""
    src = o.get("source") or {}
    component = src.get("component") or o.get("reportingComponent") or ""
    instance = src.get("host") or o.get("reportingInstance") or ""
    return f"{component}, {instance}" if instance else component


def event_row(o: Obj, now: datetime.datetime | None = None) -> list[Any]:
    """printEvent with Wide set, as the server's TableConvertor always generates it."""
    first = _since(o.get("firstTimestamp"), now) if _parse_time(o.get("firstTimestamp")) \
        else _since(o.get("eventTime"), now)
    last = _since(o.get("lastTimestamp"), now) if _parse_time(o.get("lastTimestamp")) else first
    count = o.get("count") or 0
    series = o.get("series")
    if series is not None:
        last = _since(series.get("lastObservedTime"), now)
        count = series.get("count") or 0
    elif count == 0:
        count = 1  # singleton events have no count in the new API
    ref = o.get("involvedObject") or {}
    kind = (ref.get("kind") or "").lower()
    target = f"{kind}/{ref['name']}" if ref.get("name") else kind
    return [last, o.get("type") or "", o.get("reason") or "", target, ref.get("fieldPath") or "",
            _event_source(o), (o.get("message") or "").strip(), first, count,
            (o.get("metadata") or {}).get("name", "")]


_EVENT_COLUMNS = [
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
]

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


def _first_three(addresses: list[str]) -> str:
    """kube's formatEndpoints and formatEndpointSlice: three at most, then "+ N more..."."""
    if not addresses:
        return "<none>"
    text = ",".join(addresses[:3])
    return text + f" + {len(addresses) - 3} more..." if len(addresses) > 3 else text


def endpoints_row(o: Obj) -> list[Any]:
    out: list[str] = []
    for subset in o.get("subsets") or []:
        ports = subset.get("ports") or []
        for a in subset.get("addresses") or []:
            ip = a.get("ip") or ""
            if not ports:
                out.append(ip)
            out += [f"{ip}:{p.get('port')}" for p in ports]
    return [(o.get("metadata") or {}).get("name", ""), _first_three(out), age(o)]


def endpointslice_row(o: Obj) -> list[Any]:
    ports = ",".join(str(p.get("port")) if p.get("port") is not None else "<unset>"
                     for p in o.get("ports") or []) or "<unset>"
    addresses = [a for ep in o.get("endpoints") or [] for a in ep.get("addresses") or []]
    return [(o.get("metadata") or {}).get("name", ""), o.get("addressType") or "", ports,
            "<unset>" if not addresses else _first_three(addresses), age(o)]


_SERVICE_COLUMNS = [
    NAME,
    column("Type", "string", "type determines how the Service is exposed."),
    column("Cluster-IP", "string", "clusterIP is the IP address of the service and is usually assigned randomly."),
    column("External-IP", "string", "externalIPs is a list of IP addresses for which nodes in the cluster will "
           "also accept traffic for this service."),
    column("Port(s)", "string", "The list of ports that are exposed by this service."),
    AGE,
    column("Selector", "string", "Route service traffic to pods with label keys and values matching this "
           "selector.", priority=1),
]
_ENDPOINTS_COLUMNS = [NAME, column("Endpoints", "string", "Endpoints of the service"), AGE]
_ENDPOINTSLICE_COLUMNS = [
    NAME,
    column("AddressType", "string", "addressType specifies the type of address carried by this EndpointSlice."),
    column("Ports", "string", "ports specifies the list of network ports exposed by each endpoint in this slice."),
    column("Endpoints", "string", "endpoints is a list of unique endpoints in this slice."),
    AGE,
]

# Kinds whose columns are not Name, <extra>, Age: every column and every cell, in order.
FULL_PRINTERS: dict[tuple[str, str], Printer] = {
    ("", "events"): (_EVENT_COLUMNS, event_row),
    ("", "services"): (_SERVICE_COLUMNS, service_row),
    ("", "endpoints"): (_ENDPOINTS_COLUMNS, endpoints_row),
    ("discovery.k8s.io", "endpointslices"): (_ENDPOINTSLICE_COLUMNS, endpointslice_row),
    ("rbac.authorization.k8s.io", "roles"): (_ROLE_COLUMNS, lambda o: [(o.get("metadata") or {}).get("name", ""),
                                                                       _created_at(o)]),
    ("rbac.authorization.k8s.io", "clusterroles"): (_ROLE_COLUMNS, lambda o: [
        (o.get("metadata") or {}).get("name", ""), _created_at(o)]),
    ("rbac.authorization.k8s.io", "rolebindings"): (_BINDING_COLUMNS, _binding_row),
    ("rbac.authorization.k8s.io", "clusterrolebindings"): (_BINDING_COLUMNS, _binding_row),
}


def column_definitions(group: str, resource: str) -> list[Obj]:
    if (group, resource) in FULL_PRINTERS:
        return list(FULL_PRINTERS[(group, resource)][0])
    extra, _ = PRINTERS.get((group, resource), ([], None))
    return [NAME, *extra, AGE]


def row(group: str, resource: str, obj: Obj, env: pb.Object, include_object: str) -> Obj:
    full = FULL_PRINTERS.get((group, resource))
    if full is not None:
        cells = full[1](obj)
    else:
        _, cells_of = PRINTERS.get((group, resource), ([], lambda o: []))
        cells = [(obj.get("metadata") or {}).get("name", ""), *cells_of(obj), age(obj)]
    out: Obj = {"cells": cells}
    if include_object == "Object":
        out["object"] = obj
    elif include_object != "None":
        out["object"] = envelope.partial_metadata(env)
    return out


def table(group: str, resource: str, items: list[pb.Object], list_meta: Obj, include_object: str,
          with_columns: bool = True) -> Obj:
    rows = [row(group, resource, envelope.from_envelope(e), e, include_object) for e in items]
    return {
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
        "columnDefinitions": column_definitions(group, resource) if with_columns else [],
        "rows": rows,
    }
