"""Strategies of core/v1 Service and Endpoints and discovery.k8s.io/v1 EndpointSlice.

Defaulting and validation follow kube's pkg/apis/core/v1/defaults.go and validation.go for the
fields these kinds carry here. A Service's ClusterIP comes from the allocator the registry gives the
Service strategy (its etcd-backed ipallocator.py) in begin_create, as kube's Service storage allocates in
its BeginCreate hook, and goes back to it in after_delete.
"""
from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy
from services.common import errors

SERVICE_TYPES = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]
PROTOCOLS = ["SCTP", "TCP", "UDP"]
ADDRESS_TYPES = ["FQDN", "IPv4", "IPv6"]
_IANA_SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_HAS_LETTER = re.compile(r"[a-z]")


# The shapes of the fields these strategies read (their schemas are open until they are generated
# from kube's definitions), checked at decoding as encoding/json would: a wrong type is a 400.
Shape = Any
_PORT = {"name": "string", "protocol": "string", "appProtocol": "string", "port": "int32",
         "targetPort": "intstr", "nodePort": "int32"}
SERVICE_SHAPE: Shape = {"spec": {
    "ports": ("array", _PORT), "selector": ("map", "string"), "clusterIP": "string",
    "clusterIPs": ("array", "string"), "type": "string", "externalIPs": ("array", "string"),
    "sessionAffinity": "string", "externalName": "string", "ipFamilies": ("array", "string"),
    "ipFamilyPolicy": "string", "internalTrafficPolicy": "string", "externalTrafficPolicy": "string"},
    "status": {"loadBalancer": {"ingress": ("array", {"ip": "string", "hostname": "string"})}}}
_ADDRESS = {"ip": "string", "hostname": "string", "nodeName": "string"}
ENDPOINTS_SHAPE: Shape = {"subsets": ("array", {
    "addresses": ("array", _ADDRESS), "notReadyAddresses": ("array", _ADDRESS),
    "ports": ("array", {"name": "string", "port": "int32", "protocol": "string", "appProtocol": "string"})})}
ENDPOINTSLICE_SHAPE: Shape = {
    "addressType": "string",
    "endpoints": ("array", {"addresses": ("array", "string"),
                            "conditions": {"ready": "boolean", "serving": "boolean", "terminating": "boolean"},
                            "hostname": "string", "nodeName": "string", "zone": "string"}),
    "ports": ("array", {"name": "string", "port": "int32", "protocol": "string", "appProtocol": "string"})}
_JSON_KIND = {dict: "object", list: "array", str: "string", bool: "bool", int: "number", float: "number"}
_GO_TYPE = {"string": "string", "int32": "int32", "boolean": "bool", "intstr": "intstr.IntOrString"}


def shape_error(value: Any, shape: Shape, path: str, kind: str) -> str | None:
    """encoding/json's first "cannot unmarshal" error for value against shape, or None."""
    if value is None:
        return None
    if isinstance(shape, dict) or isinstance(shape, tuple):
        want = "object" if isinstance(shape, dict) or shape[0] == "map" else "array"
        go = {"object": "map" if isinstance(shape, tuple) else "struct", "array": "[]"}[want]
    else:
        want, go = shape, _GO_TYPE[shape]
    ok = {
        "object": isinstance(value, dict), "array": isinstance(value, list), "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "int32": isinstance(value, int) and not isinstance(value, bool) and -2**31 <= value < 2**31,
        "intstr": isinstance(value, str) or isinstance(value, int) and not isinstance(value, bool),
    }[want]
    if not ok:
        got = _JSON_KIND.get(type(value), "value")
        return f"json: cannot unmarshal {got} into Go struct field {kind}.{path} of type {go}"
    if isinstance(shape, dict):
        for k, sub in shape.items():
            if (err := shape_error(value.get(k), sub, f"{path}.{k}" if path else k, kind)) is not None:
                return err
    elif isinstance(shape, tuple):
        items = value.values() if shape[0] == "map" else value
        for item in items:
            if (err := shape_error(item, shape[1], path, kind)) is not None:
                return err
    return None


def _port_number(field: str, port: Any) -> list[v.Cause]:
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        return [v.invalid(field, port, "must be between 1 and 65535, inclusive")]
    return []


def _iana_svc_name(value: str) -> list[str]:
    """validation.IsValidPortName."""
    errs = []
    if len(value) > 15:
        errs.append("must be no more than 15 characters")
    if not _IANA_SVC_NAME.match(value):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if "--" in value:
        errs.append("must not contain consecutive hyphens")
    if not _HAS_LETTER.search(value):
        errs.append("must contain at least one letter (a-z)")
    return errs


def _protocol(field: str, value: Any) -> list[v.Cause]:
    if not value:
        return [v.required(field)]
    return [] if value in PROTOCOLS else [v.not_supported(field, value, PROTOCOLS)]


def _ip_errors(ip: Any) -> list[str]:
    try:
        ipaddress.ip_address(ip)
        return []
    except (ValueError, TypeError):
        return ["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"]


def _port_names(ports: list[Any], base: str) -> list[v.Cause]:
    """Names: required when there are several, DNS labels, unique (kube's rules for ports of both kinds)."""
    causes: list[v.Cause] = []
    seen: set[str] = set()
    for i, p in enumerate(ports):
        name = p.get("name") or ""
        field = f"{base}[{i}].name"
        if not name:
            if len(ports) > 1:
                causes.append(v.required(field))
            continue
        causes += [v.invalid(field, name, m) for m in v.is_dns1123_label(name)]
        if name in seen:
            causes.append(v.duplicate(field, name))
        seen.add(name)
    return causes


class ClusterIPAllocator(Protocol):
    """What the Service strategy needs of kube's ipallocator (the registry's ipallocator.ClusterIPAllocator)."""

    async def allocate(self, ip: str, namespace: str, name: str, dry_run: bool = False) -> str: ...

    async def allocate_next(self, namespace: str, name: str, dry_run: bool = False) -> str: ...

    async def release(self, ip: str) -> None: ...


class ServiceStrategy(Strategy):
    status_fields = ("status",)

    def selectable_fields(self, obj: Obj) -> dict[str, str]:
        spec = obj.get("spec") or {}
        return super().selectable_fields(obj) | {"spec.clusterIP": spec.get("clusterIP") or "",
                                                 "spec.type": spec.get("type") or ""}

    def canonicalize(self, obj: Obj) -> None:
        if (err := shape_error(obj, SERVICE_SHAPE, "", self.info.kind)) is not None:
            raise self.cannot_handle(err)
        spec = obj.get("spec")
        if spec is None:
            spec = obj["spec"] = {}
        # core/v1 SetDefaults_Service
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec["sessionAffinity"] == "None":
            spec.pop("sessionAffinityConfig", None)
        if spec["type"] in ("ClusterIP", "NodePort", "LoadBalancer"):
            spec.setdefault("internalTrafficPolicy", "Cluster")
        if spec["type"] in ("NodePort", "LoadBalancer"):
            spec.setdefault("externalTrafficPolicy", "Cluster")
        if spec["type"] == "LoadBalancer":
            spec.setdefault("allocateLoadBalancerNodePorts", True)
        for p in spec.get("ports") or []:
            p.setdefault("protocol", "TCP")
            if p.get("targetPort") in (None, 0, ""):
                p["targetPort"] = p.get("port")
        # clusterIP and clusterIPs are one field in two shapes (kube keeps them in step)
        ip, ips = spec.get("clusterIP"), spec.get("clusterIPs")
        if ip and not ips:
            spec["clusterIPs"] = [ip]
        elif ips and not ip:
            spec["clusterIP"] = ips[0]

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"loadBalancer": {}}

    def validate_name(self, obj: Obj, name: str) -> list[str]:
        return v.is_dns1035_label(name)

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        spec = obj.get("spec") or {}
        typ = spec.get("type")
        if typ not in SERVICE_TYPES:
            causes.append(v.not_supported("spec.type", typ, SERVICE_TYPES))
        ports = spec.get("ports") or []
        headless = spec.get("clusterIP") == "None"
        if typ == "ExternalName":
            name = spec.get("externalName") or ""
            if not name:
                causes.append(v.required("spec.externalName"))
            else:
                causes += [v.invalid("spec.externalName", name, m)
                           for m in v.is_dns1123_subdomain(name.rstrip("."))]
            if spec.get("clusterIPs"):
                causes.append(v.forbidden("spec.clusterIPs", "may not be set for ExternalName services"))
        elif not ports and not headless:
            causes.append(v.required("spec.ports"))
        if typ != "ExternalName":
            for i, ip in enumerate(spec.get("clusterIPs") or []):
                if ip != "None" and (errs := _ip_errors(ip)):
                    causes += [v.invalid(f"spec.clusterIPs[{i}]", ip, m) for m in errs]
        causes += _port_names(ports, "spec.ports")
        for i, p in enumerate(ports):
            base = f"spec.ports[{i}]"
            causes += _port_number(f"{base}.port", p.get("port"))
            causes += _protocol(f"{base}.protocol", p.get("protocol"))
            tp = p.get("targetPort")
            if isinstance(tp, str):
                causes += [v.invalid(f"{base}.targetPort", tp, m) for m in _iana_svc_name(tp)]
            elif tp is not None:
                causes += _port_number(f"{base}.targetPort", tp)
        affinity = spec.get("sessionAffinity")
        if affinity not in ("ClientIP", "None"):
            causes.append(v.not_supported("spec.sessionAffinity", affinity, ["ClientIP", "None"]))
        for k, val in (spec.get("selector") or {}).items():
            causes += [v.invalid("spec.selector", k, m) for m in v.is_qualified_name(k)]
            causes += [v.invalid("spec.selector", val, m) for m in v.is_valid_label_value(val)]
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        new_spec, old_spec = obj.get("spec") or {}, old.get("spec") or {}
        # a ClusterIP stays as long as the Service is not turned into an ExternalName one
        if new_spec.get("type") != "ExternalName" and old_spec.get("clusterIP"):
            if new_spec.get("clusterIP") != old_spec.get("clusterIP"):
                causes.append(v.invalid("spec.clusterIPs[0]", new_spec.get("clusterIP") or "",
                                        "may not change once set"))
        return causes

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        super().prepare_for_update(obj, old)
        spec, old_spec = obj.setdefault("spec", {}), old.get("spec") or {}
        if spec.get("type") == "ExternalName":
            # kube's dropTypeDependentFields: turned into an ExternalName Service, the allocated
            # addresses go (after the write, in begin_update's finish)
            if spec.get("clusterIP") == old_spec.get("clusterIP"):
                for k in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
                    spec.pop(k, None)
        elif not spec.get("clusterIP") and old_spec.get("clusterIP"):
            # an update that leaves clusterIP out keeps it (kube's PatchAllocatedValues)
            spec["clusterIP"] = old_spec["clusterIP"]
            spec["clusterIPs"] = list(old_spec.get("clusterIPs") or [old_spec["clusterIP"]])


class ServiceAllocators:
    """What a Service claims in storage besides itself, as kube's Service REST storage does in its hooks
    (registry/core/service/storage/alloc.go): its ClusterIP, from the allocator the registry gives it. Its
    methods are the Service Store's BeginCreate, BeginUpdate and AfterDelete."""

    def __init__(self, allocator: ClusterIPAllocator) -> None:
        self.allocator = allocator

    @staticmethod
    def _allocated(spec: Obj) -> str:
        ip = spec.get("clusterIP") or ""
        return ip if spec.get("type") != "ExternalName" and ip != "None" else ""

    async def begin_update(self, obj: Obj, old: Obj) -> Callable[[bool], Awaitable[None]] | None:
        spec, old_spec = obj.setdefault("spec", {}), old.get("spec") or {}
        had = self._allocated(old_spec)
        if spec.get("type") == "ExternalName":
            if not had:
                return None

            async def release(success: bool) -> None:
                if success:
                    await self.allocator.release(had)
            return release
        if had or spec.get("clusterIP") == "None":
            return None
        # from ExternalName to a type with a ClusterIP: allocated as at create
        return await self.begin_create(obj, False)

    async def begin_create(self, obj: Obj, dry_run: bool) -> Callable[[bool], Awaitable[None]] | None:
        spec = obj.setdefault("spec", {})
        if spec.get("type") == "ExternalName" or spec.get("clusterIP") == "None":
            if spec.get("clusterIP") == "None":
                spec["clusterIPs"] = ["None"]
            return None
        alloc = self.allocator
        wanted = spec.get("clusterIP") or ""
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace") or "", meta.get("name") or ""
        if wanted:
            try:
                ip = await alloc.allocate(wanted, namespace, name, dry_run)
            except ValueError as e:
                raise errors.invalid("Service", "", name, [
                    v.invalid("spec.clusterIPs", spec.get("clusterIPs") or [wanted], str(e))]) from None
        else:
            ip = await alloc.allocate_next(namespace, name, dry_run)
        spec["clusterIP"], spec["clusterIPs"] = ip, [ip]
        spec.setdefault("ipFamilies", ["IPv6" if ":" in ip else "IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")

        async def finish(success: bool) -> None:
            if not success and not dry_run:
                await alloc.release(ip)
        return finish

    async def after_delete(self, obj: Obj) -> None:
        ip = (obj.get("spec") or {}).get("clusterIP") or ""
        if ip and ip != "None":
            await self.allocator.release(ip)


class EndpointsStrategy(Strategy):

    def canonicalize(self, obj: Obj) -> None:
        if (err := shape_error(obj, ENDPOINTS_SHAPE, "", self.info.kind)) is not None:
            raise self.cannot_handle(err)
        for subset in obj.get("subsets") or []:
            for p in subset.get("ports") or []:
                p.setdefault("protocol", "TCP")

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        for i, subset in enumerate(obj.get("subsets") or []):
            base = f"subsets[{i}]"
            addresses = subset.get("addresses") or []
            not_ready = subset.get("notReadyAddresses") or []
            if not addresses and not not_ready:
                causes.append(v.required(base, "must specify `addresses` or `notReadyAddresses`"))
            for key, items in (("addresses", addresses), ("notReadyAddresses", not_ready)):
                for j, a in enumerate(items):
                    ip = a.get("ip") or ""
                    causes += [v.invalid(f"{base}.{key}[{j}].ip", ip, m) for m in _ip_errors(ip)]
                    if a.get("hostname"):
                        causes += [v.invalid(f"{base}.{key}[{j}].hostname", a["hostname"], m)
                                   for m in v.is_dns1123_label(a["hostname"])]
            ports = subset.get("ports") or []
            causes += _port_names(ports, f"{base}.ports")
            for j, p in enumerate(ports):
                causes += _port_number(f"{base}.ports[{j}].port", p.get("port"))
                causes += _protocol(f"{base}.ports[{j}].protocol", p.get("protocol"))
        return causes


class EndpointSliceStrategy(Strategy):

    def canonicalize(self, obj: Obj) -> None:
        if (err := shape_error(obj, ENDPOINTSLICE_SHAPE, "", self.info.kind)) is not None:
            raise self.cannot_handle(err)
        # discovery/v1 SetDefaults_EndpointPort: both are pointers that clients dereference
        for p in obj.get("ports") or []:
            p.setdefault("name", "")
            p.setdefault("protocol", "TCP")

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        typ = obj.get("addressType")
        if not typ:
            causes.append(v.required("addressType"))
        elif typ not in ADDRESS_TYPES:
            causes.append(v.not_supported("addressType", typ, ADDRESS_TYPES))
        endpoints = obj.get("endpoints") or []
        if len(endpoints) > 1000:
            causes.append({"reason": "FieldValueTooMany", "field": "endpoints",
                           "message": f"Too many: {len(endpoints)}: must have at most 1000 items"})
        for i, ep in enumerate(endpoints):
            addrs = ep.get("addresses") or []
            field = f"endpoints[{i}].addresses"
            if not addrs:
                causes.append(v.required(field, "must contain at least 1 address"))
            elif len(addrs) > 100:
                causes.append({"reason": "FieldValueTooMany", "field": field,
                               "message": f"Too many: {len(addrs)}: must have at most 100 items"})
            for j, a in enumerate(addrs):
                if typ == "FQDN":
                    errs = v.is_dns1123_subdomain(a)
                elif typ in ("IPv4", "IPv6"):
                    errs = _ip_errors(a)
                    if not errs and (":" in a) != (typ == "IPv6"):
                        errs = [f"must be an {typ} address"]
                else:
                    errs = []
                causes += [v.invalid(f"{field}[{j}]", a, m) for m in errs]
        ports = obj.get("ports") or []
        if len(ports) > 100:
            causes.append({"reason": "FieldValueTooMany", "field": "ports",
                           "message": f"Too many: {len(ports)}: must have at most 100 items"})
        seen: set[str] = set()
        for i, p in enumerate(ports):
            name = p.get("name") or ""
            if name:
                causes += [v.invalid(f"ports[{i}].name", name, m) for m in v.is_dns1123_label(name)]
            if name in seen:
                causes.append(v.duplicate(f"ports[{i}].name", name))
            seen.add(name)
            port = p.get("port")
            if port is not None and (not isinstance(port, int) or not 0 <= port <= 65535):
                causes.append(v.invalid(f"ports[{i}].port", port, "must be between 0 and 65535, inclusive"))
            causes += _protocol(f"ports[{i}].protocol", p.get("protocol"))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        if obj.get("addressType") != old.get("addressType"):
            causes.append(v.immutable("addressType", obj.get("addressType") or ""))
        return causes
