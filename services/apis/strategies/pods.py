"""core/v1 Pod, PodTemplate and ReplicationController (kube's registry/core/pod, podtemplate,
replicationcontroller). No kubelet runs anything here: a pod stays Pending until something writes its
status."""
from __future__ import annotations

import copy
from typing import Any, ClassVar

from services.apiserver import validation as v
from services.apiserver.printers import age
from services.apiserver.registry.rest import Obj, Strategy, SubresourceStrategy

from ..kinds import body_kind
from . import podspec
from .workload import WorkloadStrategy, go_map, raw_invalid, selector_matches

POD_UPDATE_FORBIDDEN = ("pod updates may not change fields other than `spec.containers[*].image`,"
                        "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                        "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                        "(allow it to be set to 1 if it was previously negative)")


def _mutable_view(spec: Obj) -> Obj:
    """The pod spec without what an update may change (ValidatePodUpdate's mungedPodSpec)."""
    out = copy.deepcopy(spec)
    for _, _, c in podspec.visit_containers(out, (podspec.INIT_CONTAINERS, podspec.CONTAINERS)):
        c.pop("image", None)
    out.pop("activeDeadlineSeconds", None)
    out.pop("tolerations", None)
    out.pop("terminationGracePeriodSeconds", None)
    out.pop("ephemeralContainers", None)
    return out


class PodStrategy(Strategy):
    """ValidatePodCreate/ValidatePodUpdate, a subset (podspec's docstring names it): on update only the
    images, activeDeadlineSeconds (not raised), tolerations (added) and terminationGracePeriodSeconds may
    change; status only through /status, ephemeral containers only through /ephemeralcontainers."""

    status_fields = ("status",)
    # 1.33 populates a pod's generation (KEP 5067) and moves it with the spec
    spec_fields = ("spec",)

    def canonicalize(self, obj: Obj) -> None:
        podspec.default_pod(obj)

    # v1 clients of old sent spec.host for spec.nodeName; kube still converts it
    field_label_aliases: ClassVar[dict[str, str]] = {"spec.host": "spec.nodeName"}

    def selectable_fields(self, obj: Obj) -> dict[str, str]:
        """PodToSelectableFields. status.podIPs is a field label kube accepts but never fills: it selects as
        the empty string does."""
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        ips = status.get("podIPs") or []
        return super().selectable_fields(obj) | {
            "spec.nodeName": spec.get("nodeName") or "",
            "spec.restartPolicy": spec.get("restartPolicy") or "",
            "spec.schedulerName": spec.get("schedulerName") or "",
            "spec.serviceAccountName": spec.get("serviceAccountName") or "",
            "spec.hostNetwork": "true" if spec.get("hostNetwork") else "false",
            "status.phase": status.get("phase") or "",
            "status.podIP": ips[0].get("ip", "") if ips else status.get("podIP") or "",
            "status.podIPs": "",
            "status.nominatedNodeName": status.get("nominatedNodeName") or "",
        }

    def prepare_for_create(self, obj: Obj) -> None:
        spec = obj.get("spec") or {}
        obj["status"] = {"phase": "Pending", "qosClass": podspec.qos_class(spec)}

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        super().prepare_for_update(obj, old)
        spec, old_spec = obj.get("spec"), old.get("spec") or {}
        if isinstance(spec, dict):
            if "ephemeralContainers" in old_spec:
                spec["ephemeralContainers"] = copy.deepcopy(old_spec["ephemeralContainers"])
            else:
                spec.pop("ephemeralContainers", None)

    def validate(self, obj: Obj) -> list[v.Cause]:
        return super().validate(obj) + podspec.validate_pod_spec(obj.get("spec"), "spec")

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        spec, old_spec = obj.get("spec") or {}, old.get("spec") or {}
        if _mutable_view(spec) != _mutable_view(old_spec):
            causes.append(v.forbidden("spec", POD_UPDATE_FORBIDDEN))
        old_ads, ads = old_spec.get("activeDeadlineSeconds"), spec.get("activeDeadlineSeconds")
        if old_ads is not None and (ads is None or ads > old_ads):
            causes.append(v.invalid("spec.activeDeadlineSeconds", ads if ads is not None else 0,
                                    "must be less than or equal to previous value"))
        return causes

    def for_subresource(self, subresource: str) -> Strategy:
        if subresource == "status":
            return SubresourceStrategy(self, ("status",))
        if subresource == "ephemeralcontainers":
            return EphemeralContainersStrategy(self)
        if subresource == "binding":
            return BindingUpdateStrategy(self)
        return self


class BindingUpdateStrategy(SubresourceStrategy):
    """pods/binding's write: spec.nodeName, the PodScheduled condition and the binding's annotations, which the
    handler sets; nothing else of the pod changes (metadata.generation does not move)."""

    def __init__(self, parent: Strategy) -> None:
        super().__init__(parent, ("spec", "status"))
        self.spec_fields = ()

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        annotations = (obj.get("metadata") or {}).get("annotations")
        super().prepare_for_update(obj, old)
        if annotations is not None:
            obj["metadata"]["annotations"] = annotations

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        return v.validate_object_meta_update(obj.get("metadata") or {}, old.get("metadata") or {})


class BindingStrategy(Strategy):
    """core/v1 Binding, the body of pods/binding: ValidatePodBinding."""

    def validate(self, obj: Obj) -> list[v.Cause]:
        target = obj.get("target") or {}
        causes: list[v.Cause] = []
        if target.get("kind") not in (None, "", "Node"):
            causes.append(v.not_supported("target.kind", target.get("kind"), ["Node", "<empty>"]))
        if not target.get("name"):
            causes.append(v.required("target.name"))
        return causes


class EvictionStrategy(Strategy):
    """policy/v1 Eviction, the body of pods/eviction: decoding only."""

    def validate(self, obj: Obj) -> list[v.Cause]:
        return []


class EphemeralContainersStrategy(SubresourceStrategy):
    """pods/ephemeralcontainers: only spec.ephemeralContainers changes, and none is removed or changed."""

    def __init__(self, parent: Strategy) -> None:
        super().__init__(parent, ("spec",))

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        new_ephemeral = (obj.get("spec") or {}).get("ephemeralContainers")
        super().prepare_for_update(obj, old)
        spec = copy.deepcopy(old.get("spec") or {})
        if new_ephemeral is None:
            spec.pop("ephemeralContainers", None)
        else:
            spec["ephemeralContainers"] = new_ephemeral
        obj["spec"] = spec
        obj["status"] = copy.deepcopy(old.get("status") or {})

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        """ValidatePodEphemeralContainersUpdate: the metadata update and the new spec (its ephemeral containers
        among them), then no existing ephemeral container changed."""
        spec = obj.get("spec") or {}
        causes = v.validate_object_meta_update(obj.get("metadata") or {}, old.get("metadata") or {})
        causes += podspec.validate_pod_spec(spec, "spec")
        new = {c["name"]: c for _, _, c in podspec.visit_containers(spec, (podspec.EPHEMERAL_CONTAINERS,))
               if c.get("name")}
        for _, f, c in podspec.visit_containers(old.get("spec") or {}, (podspec.EPHEMERAL_CONTAINERS,)):
            if new.get(c.get("name")) != c:
                causes.append(v.forbidden(f, "existing ephemeral containers may not be changed"))
        return causes


class PodTemplateStrategy(Strategy):
    """core/v1 PodTemplate: ValidatePodTemplate (the template's metadata and spec)."""

    def canonicalize(self, obj: Obj) -> None:
        podspec.default_template(obj.get("template"))

    def validate(self, obj: Obj) -> list[v.Cause]:
        return super().validate(obj) + podspec.validate_template(obj.get("template"), "template")


class ReplicationControllerStrategy(WorkloadStrategy):
    """core/v1 ReplicationController: SetDefaults_ReplicationController (selector and labels from the
    template's labels, replicas 1) and ValidateReplicationController (a map selector matching the template)."""

    initial_status: ClassVar[Obj] = {"replicas": 0}
    selectable_status: ClassVar[dict[str, str]] = {"status.replicas": "replicas"}

    def canonicalize(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        template = spec.get("template")
        labels = ((template or {}).get("metadata") or {}).get("labels") if isinstance(template, dict) else None
        if labels:
            if not spec.get("selector"):
                spec["selector"] = dict(labels)
            meta = obj.setdefault("metadata", {})
            if not meta.get("labels"):
                meta["labels"] = dict(labels)
        spec.setdefault("replicas", 1)
        super().canonicalize(obj)

    def validate_selector(self, spec: Obj) -> list[v.Cause]:
        sel = spec.get("selector") or {}
        causes = v.validate_labels(sel, "spec.selector")
        if not sel:
            causes.append(v.required("spec.selector"))
            return causes
        template = spec.get("template")
        labels = ((template or {}).get("metadata") or {}).get("labels") or {}
        if isinstance(template, dict) and not selector_matches({"matchLabels": sel}, labels):
            causes.append(raw_invalid("spec.template.metadata.labels", go_map(labels),
                                      "`selector` does not match template `labels`"))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        # a ReplicationController's selector may change (ValidateReplicationControllerUpdate)
        return Strategy.validate(self, obj) + v.validate_object_meta_update(obj.get("metadata") or {},
                                                                            old.get("metadata") or {}) \
            + self.validate_spec(obj)

    def scale_selector(self, obj: Obj) -> str:
        sel = (obj.get("spec") or {}).get("selector") or {}
        return ",".join(f"{k}={sel[k]}" for k in sorted(sel))


def pod_row(o: Obj) -> list[Any]:
    """printPod: ready/total containers, the reason (Terminating once deleting), restarts, then the wide
    columns."""
    meta, spec, status = o.get("metadata") or {}, o.get("spec") or {}, o.get("status") or {}
    total = len(spec.get("containers") or [])
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    reason = status.get("reason") or status.get("phase") or ""
    for c in statuses:
        state = c.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
    if meta.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    gates = spec.get("readinessGates") or []
    if gates:
        conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        gates_text = f"{sum(1 for g in gates if conds.get(g.get('conditionType')) == 'True')}/{len(gates)}"
    else:
        gates_text = "<none>"
    ips = status.get("podIPs") or []
    ip = ips[0].get("ip") if ips else status.get("podIP")
    return [meta.get("name", ""), f"{ready}/{total}", reason, str(restarts), age(o), ip or "<none>",
            spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>", gates_text]


BINDING = BindingStrategy(body_kind("", "v1", "Binding", BindingStrategy))
EVICTION = EvictionStrategy(body_kind("policy", "v1", "Eviction", EvictionStrategy))
