"""networking.k8s.io/v1: Ingress, IngressClass, NetworkPolicy, ServiceCIDR, IPAddress."""
from __future__ import annotations

from typing import Any

from services.apiserver.printers import AGE, NAME, TableConvertor, age, column
from services.apiserver.resource import STATUS_VERBS, GroupVersion, ResourceInfo, SubresourceInfo

from .schemas import field_doc
from .strategies.networking import IngressClassStrategy, IngressStrategy, NetworkPolicyStrategy
from .strategies.servicecidrs import IPAddressStrategy, ServiceCIDRStrategy

Obj = dict[str, Any]
LOAD_BALANCER_WIDTH = 16


def _hosts(rules: list[Obj]) -> str:
    """formatHosts: the first three hosts, then "+ N more..."; "*" when no rule names one."""
    hosts: list[str] = []
    more = False
    for rule in rules:
        if len(hosts) == 3:
            more = True
        if not more and rule.get("host"):
            hosts.append(rule["host"])
    if not hosts:
        return "*"
    return ",".join(hosts) + (f" + {len(rules) - 3} more..." if more else "")


def _address(status: Obj, wide: bool = False) -> str:
    """ingressLoadBalancerStatusStringer (not wide: cut to 16 characters)."""
    ingress = ((status.get("loadBalancer") or {}).get("ingress")) or []
    text = ",".join(i.get("ip") or i.get("hostname") or "" for i in ingress if i.get("ip") or i.get("hostname"))
    if len(text) > LOAD_BALANCER_WIDTH and not wide:
        text = text[:LOAD_BALANCER_WIDTH - 3] + "..."
    return text


def ingress_row(o: Obj) -> list[Any]:
    spec = o.get("spec") or {}
    cls = spec.get("ingressClassName")
    return [(o.get("metadata") or {}).get("name", ""), "<none>" if cls is None else cls,
            _hosts(spec.get("rules") or []), _address(o.get("status") or {}),
            "80, 443" if spec.get("tls") else "80", age(o)]


def ingress_class_row(o: Obj) -> list[Any]:
    spec = o.get("spec") or {}
    params = spec.get("parameters")
    shown = "<none>"
    if params is not None:
        shown = params.get("kind") or ""
        if params.get("apiGroup") is not None:
            shown += "." + params["apiGroup"]
        shown += "/" + (params.get("name") or "")
    return [(o.get("metadata") or {}).get("name", ""), spec.get("controller") or "", shown, age(o)]


def format_label_selector(sel: Obj | None) -> str:
    """metav1.FormatLabelSelector: the selector's requirements sorted by key; "<none>" when empty."""
    reqs: list[tuple[str, str]] = []
    for k, val in ((sel or {}).get("matchLabels") or {}).items():
        reqs.append((k, f"{k}={val}"))
    for e in (sel or {}).get("matchExpressions") or []:
        key, op, values = e.get("key") or "", e.get("operator") or "", sorted(e.get("values") or [])
        if op == "In":
            reqs.append((key, f"{key} in ({','.join(values)})"))
        elif op == "NotIn":
            reqs.append((key, f"{key} notin ({','.join(values)})"))
        elif op == "Exists":
            reqs.append((key, key))
        elif op == "DoesNotExist":
            reqs.append((key, f"!{key}"))
    return ",".join(text for _, text in sorted(reqs, key=lambda r: r[0])) or "<none>"


INGRESS_TABLE = TableConvertor((
    NAME,
    column("Class", "string", "The name of the IngressClass resource that should be used for additional "
           "configuration"),
    column("Hosts", "string", "Hosts that incoming requests are matched against before the ingress rule"),
    column("Address", "string", "Address is a list containing ingress points for the load-balancer"),
    column("Ports", "string", "Ports of TLS configurations that open"),
    AGE,
), ingress_row)
INGRESS_CLASS_TABLE = TableConvertor((
    NAME,
    column("Controller", "string", "Controller that is responsible for handling this class"),
    column("Parameters", "string", "A reference to a resource with additional parameters"),
    AGE,
), ingress_class_row)
NETWORK_POLICY_TABLE = TableConvertor((
    NAME,
    column("Pod-Selector", "string", "podSelector selects the pods to which this NetworkPolicy object applies. The "
           "array of ingress rules is applied to any pods selected by this field. Multiple network policies can "
           "select the same set of pods. In this case, the ingress rules for each are combined additively. This "
           "field is NOT optional and follows standard label selector semantics. An empty podSelector matches all "
           "pods in this namespace."),
    AGE,
), lambda o: [(o.get("metadata") or {}).get("name", ""),
              format_label_selector((o.get("spec") or {}).get("podSelector")), age(o)])

SERVICE_CIDR_TABLE = TableConvertor((
    NAME, column("CIDRs", "string", field_doc("io.k8s.api.networking.v1.ServiceCIDRSpec", "cidrs")), AGE,
), lambda o: [(o.get("metadata") or {}).get("name", ""), ",".join((o.get("spec") or {}).get("cidrs") or []), age(o)])


def parent_ref(o: Obj) -> str:
    """printIPAddress: the parent as <resource>[.<group>][/<namespace>]/<name>; "<none>" without one."""
    ref = (o.get("spec") or {}).get("parentRef")
    if not isinstance(ref, dict):
        return "<none>"
    shown = ((ref.get("resource") or "") + ("." + ref["group"] if ref.get("group") else "")).lower()
    if ref.get("namespace"):
        shown += "/" + ref["namespace"]
    return shown + "/" + (ref.get("name") or "")


# kube prints no age for IPAddresses
IP_ADDRESS_TABLE = TableConvertor((
    NAME, column("ParentRef", "string", field_doc("io.k8s.api.networking.v1.IPAddressSpec", "parentRef")),
), lambda o: [(o.get("metadata") or {}).get("name", ""), parent_ref(o)])

_G = "networking.k8s.io"
# what a Service's ClusterIP is allocated as (the registry's ipallocator creates and deletes them)
IP_ADDRESS = ResourceInfo(
    group=_G, version="v1", kind="IPAddress", plural="ipaddresses", singular="ipaddress", namespaced=False,
    key_prefix="/registry/ipaddresses/", short_names=("ip",), strategy=IPAddressStrategy, table=IP_ADDRESS_TABLE,
)
V1 = GroupVersion(_G, "v1", 17200, 15, (
    ResourceInfo(
        group=_G, version="v1", kind="Ingress", plural="ingresses", singular="ingress", namespaced=True,
        key_prefix="/registry/ingress/", short_names=("ing",),
        subresources=(SubresourceInfo("status", "Ingress", STATUS_VERBS),),
        strategy=IngressStrategy, table=INGRESS_TABLE, protobuf="k8s.io.api.networking.v1.Ingress",
    ),
    ResourceInfo(
        group=_G, version="v1", kind="IngressClass", plural="ingressclasses", singular="ingressclass",
        namespaced=False, key_prefix="/registry/ingressclasses/", strategy=IngressClassStrategy,
        table=INGRESS_CLASS_TABLE,
        protobuf="k8s.io.api.networking.v1.IngressClass",
    ),
    ResourceInfo(
        group=_G, version="v1", kind="NetworkPolicy", plural="networkpolicies", singular="networkpolicy",
        namespaced=True, key_prefix="/registry/networkpolicies/", short_names=("netpol",),
        strategy=NetworkPolicyStrategy, table=NETWORK_POLICY_TABLE,
        protobuf="k8s.io.api.networking.v1.NetworkPolicy",
    ),
    ResourceInfo(
        group=_G, version="v1", kind="ServiceCIDR", plural="servicecidrs", singular="servicecidr",
        namespaced=False, key_prefix="/registry/servicecidrs/",
        subresources=(SubresourceInfo("status", "ServiceCIDR", STATUS_VERBS),),
        strategy=ServiceCIDRStrategy, table=SERVICE_CIDR_TABLE,
    ),
    IP_ADDRESS,
))

GROUP_VERSIONS = (V1,)
