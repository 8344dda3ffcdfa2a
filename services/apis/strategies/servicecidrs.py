"""Strategies of networking.k8s.io/v1 ServiceCIDR and IPAddress (kube's pkg/registry/networking/servicecidr and
ipaddress): the ranges ClusterIPs are allocated from, and one object per allocated address.

Covered: ValidateServiceCIDR (one or two CIDRs, each a valid CIDR, two only of different families), its status
written through /status only, ValidateServiceCIDRUpdate (the CIDRs cannot change, but a single-stack range may
gain its second family); ValidateIPAddress (the name an IP address in canonical form, spec.parentRef required
with a resource and a name that are path segments) and ValidateIPAddressUpdate (parentRef immutable).
"""
from __future__ import annotations

import ipaddress

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy

CIDRS = "spec.cidrs"
INVALID_CIDR = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
IMMUTABLE = "field is immutable"


def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(cidr, strict=False) if "/" in cidr else None
    except ValueError:
        return None


def _valid_cidr(path: str, cidr: str) -> list[v.Cause]:
    return [] if _network(cidr) is not None else [v.invalid(path, cidr, INVALID_CIDR)]


def _spec_go(cidrs: list[str]) -> str:
    """networking.ServiceCIDRSpec as kube's field error prints it (%#v)."""
    return "networking.ServiceCIDRSpec{CIDRs:[]string{" + ", ".join(f'"{c}"' for c in cidrs) + "}}"


def _cidrs_go(cidrs: list[str]) -> str:
    return "[]string{" + ", ".join(f'"{c}"' for c in cidrs) + "}"


class ServiceCIDRStrategy(Strategy):
    status_fields = ("status",)
    status_subresource = True

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        cidrs = (obj.get("spec") or {}).get("cidrs") or []
        if not cidrs:
            return causes + [v.required(CIDRS, "at least one CIDR required")]
        if len(cidrs) > 2:
            return causes + [v.invalid_go(CIDRS, _spec_go(cidrs), "may only hold up to 2 values")]
        for i, cidr in enumerate(cidrs):
            causes += _valid_cidr(f"{CIDRS}[{i}]", cidr)
        if len(cidrs) == 2:
            nets = [_network(c) for c in cidrs]
            if None in nets or nets[0].version == nets[1].version:  # type: ignore[union-attr]
                causes.append(v.invalid_go(CIDRS, _spec_go(cidrs), "may specify no more than one IP for each IP "
                                                                   "family, i.e 192.168.0.0/24 and 2001:db8::/64"))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = v.validate_object_meta_update(obj.get("metadata") or {}, old.get("metadata") or {})
        new, was = (obj.get("spec") or {}).get("cidrs") or [], (old.get("spec") or {}).get("cidrs") or []
        if len(new) == len(was):
            causes += [v.invalid(f"{CIDRS}[{i}]", new[i], IMMUTABLE) for i in range(len(was)) if new[i] != was[i]]
        elif len(was) == 1 and len(new) == 2:
            if new[0] != was[0]:
                causes.append(v.invalid(f"{CIDRS}[0]", new[0], IMMUTABLE))
            causes += _valid_cidr(f"{CIDRS}[1]", new[1])
        else:
            causes.append(v.invalid_go(CIDRS, _cidrs_go(new), IMMUTABLE))
        return causes


def validate_ip_address_name(name: str) -> list[str]:
    """ValidateIPAddressName: an IP address, written as Go's netip writes it."""
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return [f'ParseAddr("{name}"): unable to parse IP']
    return [] if str(ip) == name else ["must be a canonical format IP address"]


class IPAddressStrategy(Strategy):
    def validate_name(self, obj: Obj, name: str) -> list[str]:
        return validate_ip_address_name(name)

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        ref = (obj.get("spec") or {}).get("parentRef")
        if not isinstance(ref, dict):
            return causes + [v.required("spec.parentRef")]
        p = "spec.parentRef"
        group = ref.get("group") or ""
        if group:
            causes += [v.invalid(f"{p}.group", group, m) for m in v.is_dns1123_subdomain(group)]
        for f, needed in (("resource", True), ("namespace", False), ("name", True)):
            value = ref.get(f) or ""
            if not value:
                if needed:
                    causes.append(v.required(f"{p}.{f}"))
                continue
            causes += [v.invalid(f"{p}.{f}", value, m) for m in v.is_valid_path_segment_name(value)]
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = v.validate_object_meta_update(obj.get("metadata") or {}, old.get("metadata") or {})
        ref, was = (obj.get("spec") or {}).get("parentRef"), (old.get("spec") or {}).get("parentRef")
        if ref != was:
            shown = "&networking.ParentReference{" + ", ".join(
                f'{k[:1].upper()}{k[1:]}:"{(ref or {}).get(k) or ""}"' for k in ("group", "resource", "namespace",
                                                                               "name")) + "}"
            causes.append(v.invalid_go("spec.parentRef", shown, IMMUTABLE))
        return causes
