"""Strategies of networking.k8s.io/v1: Ingress, IngressClass, NetworkPolicy (kube's pkg/registry/networking).

Covered, with kube's messages:
- Ingress: status reset on create and kept on update (/status for the controller), generation bumped on
  spec changes; ValidateIngressSpec: defaultBackend or rules, rule hosts (DNS subdomain or wildcard, not an
  IP), HTTP paths (pathType required and supported, absolute paths, the forbidden sequences), backends (one
  of service or resource, service name a DNS-1035 label, port name xor number), TLS hosts, ingressClassName.
- IngressClass: defaulting (parameters.scope Cluster), controller required, domain-prefixed, at most 250
  characters and immutable; parameters' kind, name, scope and namespace.
- NetworkPolicy: defaulting (port protocol TCP, policyTypes from the rules), generation; the pod selector,
  ports (protocol, number or name, endPort), peers (one of the selectors or ipBlock), ipBlock CIDRs,
  policyTypes.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Any

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy

from .rbac import validate_label_selector
from .services import _iana_svc_name

PATH_TYPES = ["Exact", "ImplementationSpecific", "Prefix"]
INVALID_PATH_SEQUENCES = ("//", "/./", "/../", "%2f", "%2F")
INVALID_PATH_SUFFIXES = ("/..", "/.")
_WILDCARD = r"\*\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
WILDCARD_MSG = ("a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which "
                "must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric "
                f"character (e.g. '*.example.com', regex used for validation is '{_WILDCARD}')")
PORT_NUMBER_MSG = "must be between 1 and 65535, inclusive"
MAX_CONTROLLER_LEN = 250
PARAMETER_SCOPES = ["Cluster", "Namespace"]
PROTOCOLS = ["SCTP", "TCP", "UDP"]
POLICY_TYPES = ["Egress", "Ingress"]


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def _host_errors(host: str) -> list[str]:
    if "*" in host:
        return [] if re.fullmatch(_WILDCARD, host) and len(host) <= v.DNS1123_SUBDOMAIN_MAX else [WILDCARD_MSG]
    return v.is_dns1123_subdomain(host)


def _backend(b: Obj, path: str) -> list[v.Cause]:
    svc, res = b.get("service"), b.get("resource")
    if svc is not None and res is not None:
        return [v.invalid(path, "", "cannot set both resource and service backends")]
    if res is not None:
        causes = []
        if not res.get("kind"):
            causes.append(v.required(f"{path}.resource.kind"))
        if not res.get("name"):
            causes.append(v.required(f"{path}.resource.name"))
        return causes
    if svc is None:
        return [v.invalid(path, "", "resource or service backend is required")]
    causes: list[v.Cause] = []
    name = svc.get("name") or ""
    if not name:
        causes.append(v.required(f"{path}.service.name"))
    else:
        causes += [v.invalid(f"{path}.service.name", name, m) for m in v.is_dns1035_label(name)]
    port = svc.get("port") or {}
    pname, number = port.get("name") or "", port.get("number") or 0
    if pname and number:
        causes.append(v.invalid(path, "", "cannot set both port name & port number"))
    elif pname:
        causes += [v.invalid(f"{path}.service.port.name", pname, m) for m in _iana_svc_name(pname)]
    elif number:
        if not isinstance(number, int) or not 1 <= number <= 65535:
            causes.append(v.invalid(f"{path}.service.port.number", number, PORT_NUMBER_MSG))
    else:
        causes.append(v.required(path, "port name or number is required"))
    return causes


def _http_path(p: Obj, path: str) -> list[v.Cause]:
    typ = p.get("pathType")
    if not typ:
        return [v.required(f"{path}.pathType", "pathType must be specified")]
    value = p.get("path") or ""
    causes: list[v.Cause] = []
    if typ in ("Exact", "Prefix"):
        if not value.startswith("/"):
            causes.append(v.invalid(f"{path}.path", value, "must be an absolute path"))
        if value:
            causes += [v.invalid(f"{path}.path", value, f"must not contain '{seq}'")
                       for seq in INVALID_PATH_SEQUENCES if seq in value]
            causes += [v.invalid(f"{path}.path", value, f"cannot end with '{suf}'")
                       for suf in INVALID_PATH_SUFFIXES if value.endswith(suf)]
    elif typ == "ImplementationSpecific":
        if value and not value.startswith("/"):
            causes.append(v.invalid(f"{path}.path", value, "must be an absolute path"))
    else:
        causes.append(v.not_supported(f"{path}.pathType", typ, PATH_TYPES))
    return causes + _backend(p.get("backend") or {}, f"{path}.backend")


class IngressStrategy(Strategy):
    status_fields = ("status",)
    spec_fields = ("spec",)

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        spec = obj.get("spec") or {}
        rules = spec.get("rules")
        if not rules and spec.get("defaultBackend") is None:
            rendered = "[]networking.IngressRule{}" if rules == [] else "[]networking.IngressRule(nil)"
            causes.append(v.invalid_go("spec", rendered, "either `defaultBackend` or `rules` must be specified"))
        if spec.get("defaultBackend") is not None:
            causes += _backend(spec["defaultBackend"], "spec.defaultBackend")
        for i, rule in enumerate(rules or []):
            base = f"spec.rules[{i}]"
            host = rule.get("host") or ""
            if host:
                if _is_ip(host):
                    causes.append(v.invalid(f"{base}.host", host, "must be a DNS name, not an IP address"))
                causes += [v.invalid(f"{base}.host", host, m) for m in _host_errors(host)]
            http = rule.get("http")
            if http is not None:
                paths = http.get("paths") or []
                if not paths:
                    causes.append(v.required(f"{base}.http.paths"))
                for j, p in enumerate(paths):
                    causes += _http_path(p, f"{base}.http.paths[{j}]")
        for i, tls in enumerate(spec.get("tls") or []):
            for j, host in enumerate(tls.get("hosts") or []):
                causes += [v.invalid(f"spec.tls[{i}].hosts[{j}]", host, m) for m in _host_errors(host)]
        cls = spec.get("ingressClassName")
        if cls is not None:
            causes += [v.invalid("spec.ingressClassName", cls, m) for m in v.is_dns1123_subdomain(cls)]
        for i, ing in enumerate(((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []):
            if ing.get("ip") and not _is_ip(ing["ip"]):
                causes.append(v.invalid(f"status.loadBalancer.ingress[{i}].ip", ing["ip"],
                                        "must be a valid IP address"))
        return causes

    status_subresource = True


class IngressClassStrategy(Strategy):
    def canonicalize(self, obj: Obj) -> None:
        params = (obj.get("spec") or {}).get("parameters")
        if isinstance(params, dict) and not params.get("scope"):
            params["scope"] = "Cluster"

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        spec = obj.get("spec") or {}
        ctl = spec.get("controller") or ""
        if len(ctl) > MAX_CONTROLLER_LEN:
            causes.append(v.too_long("spec.controller", MAX_CONTROLLER_LEN))
        if not ctl:
            causes.append(v.required("spec.controller"))
        elif "/" not in ctl:
            causes.append(v.invalid("spec.controller", ctl, 'must be a domain-prefixed path (such as "acme.io/foo")'))
        else:
            host = ctl.split("/", 1)[0]
            causes += [v.invalid("spec.controller", host, m) for m in v.is_dns1123_subdomain(host)]
        params = spec.get("parameters")
        if params is not None:
            p = "spec.parameters"
            if not params.get("kind"):
                causes.append(v.required(f"{p}.kind", "kind is required"))
            if not params.get("name"):
                causes.append(v.required(f"{p}.name", "name is required"))
            scope, ns = params.get("scope"), params.get("namespace")
            if scope not in PARAMETER_SCOPES:
                causes.append(v.not_supported(f"{p}.scope", scope, PARAMETER_SCOPES))
            elif scope == "Namespace" and not ns:
                causes.append(v.required(f"{p}.namespace", "`parameters.scope` is set to 'Namespace'"))
            elif scope == "Cluster" and ns:
                causes.append(v.forbidden(f"{p}.namespace", "`parameters.scope` is set to 'Cluster'"))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        ctl = (obj.get("spec") or {}).get("controller") or ""
        if ctl != ((old.get("spec") or {}).get("controller") or ""):
            causes.append(v.immutable("spec.controller", ctl))
        return causes


def _policy_port(port: Obj, path: str) -> list[v.Cause]:
    causes: list[v.Cause] = []
    proto = port.get("protocol")
    if proto not in PROTOCOLS:
        causes.append(v.not_supported(f"{path}.protocol", proto, PROTOCOLS))
    number, end = port.get("port"), port.get("endPort")
    if isinstance(number, int) and not isinstance(number, bool):
        if not 1 <= number <= 65535:
            causes.append(v.invalid(f"{path}.port", number, PORT_NUMBER_MSG))
        if end is not None:
            if not isinstance(end, int) or not 1 <= end <= 65535:
                causes.append(v.invalid(f"{path}.endPort", end, PORT_NUMBER_MSG))
            elif end < number:
                causes.append(v.invalid(f"{path}.endPort", end, "must be greater than or equal to `port`"))
    elif isinstance(number, str):
        causes += [v.invalid(f"{path}.port", number, m) for m in _iana_svc_name(number)]
        if end is not None:
            causes.append(v.invalid(f"{path}.endPort", end, "may not be specified when `port` is non-numeric"))
    elif end is not None:
        causes.append(v.required(f"{path}.port", "must be specified when `endPort` is specified"))
    return causes


def _network(cidr: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(cidr, strict=False) if isinstance(cidr, str) and "/" in cidr else None
    except ValueError:
        return None


CIDR_MSG = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"


def _peer(peer: Obj, path: str) -> list[v.Cause]:
    present = [k for k in ("podSelector", "namespaceSelector", "ipBlock") if peer.get(k) is not None]
    if not present:
        return [v.required(path, "must specify a peer")]
    if "ipBlock" in present and len(present) > 1:
        return [v.forbidden(path, "may not specify both ipBlock and another peer")]
    causes: list[v.Cause] = []
    for k in ("podSelector", "namespaceSelector"):
        if peer.get(k) is not None:
            causes += validate_label_selector(peer[k], f"{path}.{k}")
    block = peer.get("ipBlock")
    if block is not None:
        cidr = block.get("cidr") or ""
        net = _network(cidr)
        if not cidr:
            causes.append(v.required(f"{path}.ipBlock.cidr"))
        elif net is None:
            causes.append(v.invalid(f"{path}.ipBlock.cidr", cidr, CIDR_MSG))
        for i, exc in enumerate(block.get("except") or []):
            sub = _network(exc)
            if sub is None:
                causes.append(v.invalid(f"{path}.ipBlock.except[{i}]", exc, CIDR_MSG))
            elif net is not None and (sub.version != net.version or not sub.subnet_of(net) or sub == net):  # type: ignore[arg-type]
                causes.append(v.invalid(f"{path}.ipBlock.except[{i}]", exc, "must be a strict subset of `cidr`"))
    return causes


class NetworkPolicyStrategy(Strategy):
    spec_fields = ("spec",)

    def canonicalize(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        for direction in ("ingress", "egress"):
            for rule in spec.get(direction) or []:
                for port in (rule or {}).get("ports") or []:
                    if isinstance(port, dict) and not port.get("protocol"):
                        port["protocol"] = "TCP"
        if not spec.get("policyTypes"):
            spec["policyTypes"] = ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        spec = obj.get("spec") or {}
        causes += validate_label_selector(spec.get("podSelector") or {}, "spec.podSelector")
        for direction, peers in (("ingress", "from"), ("egress", "to")):
            for i, rule in enumerate(spec.get(direction) or []):
                base = f"spec.{direction}[{i}]"
                for j, port in enumerate((rule or {}).get("ports") or []):
                    causes += _policy_port(port or {}, f"{base}.ports[{j}]")
                for j, peer in enumerate((rule or {}).get(peers) or []):
                    causes += _peer(peer or {}, f"{base}.{peers}[{j}]")
        types = spec.get("policyTypes") or []
        for i, t in enumerate(types):
            if t not in POLICY_TYPES:
                causes.append(v.not_supported(f"spec.policyTypes[{i}]", t, POLICY_TYPES))
        if len(types) > 2:
            causes.append(v.invalid_go("spec.policyTypes", "[]networking.PolicyType{" + ", ".join(
                f'"{t}"' for t in types) + "}", "may not specify more than two policyTypes"))
        return causes
