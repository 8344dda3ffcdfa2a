"""Strategy of apiregistration.k8s.io/v1 APIService (kube-aggregator's registry/apiservice)."""
from __future__ import annotations

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy, now_rfc3339


def local_available_condition() -> dict[str, str]:
    return {"type": "Available", "status": "True", "lastTransitionTime": now_rfc3339(), "reason": "Local",
            "message": "Local APIServices are always available"}


class APIServiceStrategy(Strategy):
    status_fields = ("status",)

    def canonicalize(self, obj: Obj) -> None:
        service = (obj.get("spec") or {}).get("service")
        if isinstance(service, dict) and not service.get("port"):
            service["port"] = 443

    def prepare_for_create(self, obj: Obj) -> None:
        # Local APIServices are available from the moment they exist.
        obj["status"] = {}
        if (obj.get("spec") or {}).get("service") is None:
            obj["status"] = {"conditions": [local_available_condition()]}

    def validate_name(self, obj: Obj, name: str) -> list[str]:
        if errs := v.is_valid_path_segment_name(name):
            return errs
        spec = obj.get("spec") or {}
        want = f"{spec.get('version') or ''}.{spec.get('group') or ''}"
        return [] if name == want else [f'must be `spec.version+"."+spec.group`: "{want}"']

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        spec = obj.get("spec") or {}
        group, version = spec.get("group") or "", spec.get("version") or ""
        if not group and version != "v1":
            causes.append(v.required("spec.group", "only v1 may have an empty group and it better be legacy kube"))
        if group:
            causes += [v.invalid("spec.group", group, m) for m in v.is_dns1123_subdomain(group)]
        causes += [v.invalid("spec.version", version, m) for m in v.is_dns1035_label(version)]
        gpm, vp = spec.get("groupPriorityMinimum") or 0, spec.get("versionPriority") or 0
        if gpm <= 0 or gpm > 20000:
            causes.append(v.invalid("spec.groupPriorityMinimum", gpm, "must be positive and less than 20000"))
        if vp <= 0 or vp > 1000:
            causes.append(v.invalid("spec.versionPriority", vp, "must be positive and less than 1000"))
        service = spec.get("service")
        ca = spec.get("caBundle") or ""
        if service is None:
            if ca:
                causes.append(v.invalid("spec.caBundle", f"{len(ca) * 3 // 4} bytes",
                                        "local APIServices may not have a caBundle"))
            if spec.get("insecureSkipTLSVerify"):
                causes.append(v.invalid("spec.insecureSkipTLSVerify", True,
                                        "local APIServices may not have insecureSkipTLSVerify"))
            return causes
        if not service.get("namespace"):
            causes.append(v.required("spec.service.namespace"))
        if not service.get("name"):
            causes.append(v.required("spec.service.name"))
        port = service.get("port")
        if not isinstance(port, int) or not 1 <= port <= 65535:
            causes.append(v.invalid("spec.service.port", port, "must be between 1 and 65535, inclusive"))
        if spec.get("insecureSkipTLSVerify") and ca:
            causes.append(v.invalid("spec.insecureSkipTLSVerify", True, "may not be true if caBundle is present"))
        return causes

    status_subresource = True
