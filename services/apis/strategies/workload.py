"""What the workload kinds share: label selectors (validation, matching, printing), the pod template
checks, status kept on updates of the main resource, and the autoscaling/v1 Scale subresource
(kube's registry/apps/*/storage ScaleREST): a Scale is read from and written into the parent's
spec.replicas, selector and status.replicas.
"""
from __future__ import annotations

import copy
from typing import Any, ClassVar

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy

from ..kinds import body_kind
from . import podspec

SELECTOR_OPERATORS = ["In", "NotIn", "Exists", "DoesNotExist"]


def raw_invalid(field: str, shown: str, detail: str) -> v.Cause:
    """field.Invalid with a value Go prints itself (%#v of a struct), not quoted as a string."""
    return {"reason": "FieldValueInvalid", "message": f"Invalid value: {shown}: {detail}", "field": field}


def go_map(m: dict[str, str] | None) -> str:
    if m is None:
        return "map[string]string(nil)"
    return "map[string]string{" + ", ".join(f'"{k}":"{m[k]}"' for k in sorted(m)) + "}"


def go_selector(sel: Obj | None) -> str:
    """A metav1.LabelSelector as Go's %#v shows it in field errors (kube's well-known "field is immutable"
    message on a Deployment's selector)."""
    if sel is None:
        return "(*v1.LabelSelector)(nil)"
    labels = sel.get("matchLabels")
    exprs = sel.get("matchExpressions")
    if exprs is None:
        shown = "[]v1.LabelSelectorRequirement(nil)"
    else:
        parts = []
        for e in exprs:
            values = e.get("values")
            vals = "[]string(nil)" if values is None else "[]string{" + ", ".join(f'"{x}"' for x in values) + "}"
            parts.append(f'v1.LabelSelectorRequirement{{Key:"{e.get("key", "")}", '
                         f'Operator:"{e.get("operator", "")}", Values:{vals}}}')
        shown = "[]v1.LabelSelectorRequirement{" + ", ".join(parts) + "}"
    return f"v1.LabelSelector{{MatchLabels:{go_map(labels)}, MatchExpressions:{shown}}}"


def validate_label_selector(sel: Any, path: str) -> list[v.Cause]:
    """ValidateLabelSelector: valid matchLabels, known operators, values only with In and NotIn."""
    if not isinstance(sel, dict):
        return []
    causes = v.validate_labels(sel.get("matchLabels") or {}, f"{path}.matchLabels")
    for val in (sel.get("matchLabels") or {}).values():
        causes += [v.invalid(f"{path}.matchLabels", val, m) for m in v.is_valid_label_value(str(val))]
    for i, e in enumerate(sel.get("matchExpressions") or []):
        f = f"{path}.matchExpressions[{i}]"
        op = e.get("operator") or ""
        values = e.get("values") or []
        if op in ("In", "NotIn") and not values:
            causes.append(v.required(f"{f}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist") and values:
            causes.append(v.forbidden(f"{f}.values", "may not be specified when `operator` is 'Exists' or "
                                      "'DoesNotExist'"))
        elif op not in SELECTOR_OPERATORS:
            causes.append(v.invalid(f"{f}.operator", op, "not a valid selector operator"))
        causes += [v.invalid(f"{f}.key", e.get("key") or "", m) for m in v.is_qualified_name(e.get("key") or "")]
    return causes


def selector_matches(sel: Obj, labels: dict[str, str]) -> bool:
    """LabelSelectorAsSelector(sel).Matches(labels)."""
    for k, val in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != val:
            return False
    for e in sel.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def selector_string(sel: Obj | None) -> str:
    """LabelSelectorAsSelector(sel).String(): requirements sorted by key."""
    if not sel:
        return ""
    reqs: list[tuple[str, str]] = []
    for k, val in (sel.get("matchLabels") or {}).items():
        reqs.append((k, f"{k}={val}"))
    for e in sel.get("matchExpressions") or []:
        key, op, values = e.get("key") or "", e.get("operator"), sorted(e.get("values") or [])
        text = {"In": f"{key} in ({','.join(values)})", "NotIn": f"{key} notin ({','.join(values)})",
                "Exists": key, "DoesNotExist": f"!{key}"}.get(op or "", key)
        reqs.append((key, text))
    return ",".join(t for _, t in sorted(reqs, key=lambda r: r[0]))


def containers_images(template: Obj | None) -> tuple[str, str]:
    """layoutContainerCells: the template's container names and images, comma-separated."""
    containers = ((template or {}).get("spec") or {}).get("containers") or []
    return (",".join(c.get("name") or "" for c in containers), ",".join(c.get("image") or "" for c in containers))


def non_negative(obj: Obj, field: str) -> list[v.Cause]:
    """ValidateNonnegativeField on spec.<field>."""
    val = (obj.get("spec") or {}).get(field)
    if isinstance(val, int) and not isinstance(val, bool) and val < 0:
        return [v.invalid(f"spec.{field}", val, "must be greater than or equal to 0")]
    return []


class WorkloadStrategy(Strategy):
    """A kind with a spec, a status and a pod template (and for most a selector and a scale)."""

    status_fields = ("status",)
    spec_fields = ("spec",)
    # What the strategy names the kind in "empty selector is invalid for <kind>"
    selector_kind = ""
    # The initial status PrepareForCreate sets (v1's non-omitempty status fields).
    initial_status: ClassVar[Obj] = {}
    # Restart policies the template may have (Always for controllers that keep pods running).
    restart_policies: tuple[str, ...] = ("Always",)

    # Status fields a field selector may name (ReplicaSetToSelectableFields and kin): label -> status key
    selectable_status: ClassVar[dict[str, str]] = {}

    def selectable_fields(self, obj: Obj) -> dict[str, str]:
        status = obj.get("status") or {}
        return super().selectable_fields(obj) | {label: str(status.get(key) or 0)
                                                 for label, key in self.selectable_status.items()}

    def template(self, obj: Obj) -> Any:
        return (obj.get("spec") or {}).get("template")

    def template_path(self) -> str:
        return "spec.template"

    def canonicalize(self, obj: Obj) -> None:
        podspec.default_template(self.template(obj))

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = copy.deepcopy(self.initial_status)

    def validate(self, obj: Obj) -> list[v.Cause]:
        return super().validate(obj) + self.validate_spec(obj)

    def validate_spec(self, obj: Obj) -> list[v.Cause]:
        """The spec's rules, on create and on update."""
        spec = obj.get("spec") or {}
        return self.validate_selector(spec) + self.validate_template(obj) + non_negative(obj, "replicas") \
            + non_negative(obj, "minReadySeconds") + non_negative(obj, "revisionHistoryLimit")

    def validate_selector(self, spec: Obj) -> list[v.Cause]:
        """ValidateDeploymentSpec and kin: selector required, not empty, matching the template's labels."""
        sel = spec.get("selector")
        if sel is None:
            return [v.required("spec.selector")]
        causes = validate_label_selector(sel, "spec.selector")
        if not sel.get("matchLabels") and not sel.get("matchExpressions"):
            causes.append(raw_invalid("spec.selector", go_selector(sel),
                                      f"empty selector is invalid for {self.selector_kind}"))
            return causes
        template = spec.get("template")
        labels = ((template or {}).get("metadata") or {}).get("labels") or {}
        if isinstance(template, dict) and not selector_matches(sel, labels):
            causes.append(raw_invalid(f"{self.template_path()}.metadata.labels", go_map(labels),
                                      "`selector` does not match template `labels`"))
        return causes

    def validate_template(self, obj: Obj) -> list[v.Cause]:
        path = self.template_path()
        template = self.template(obj)
        if template is None:
            return [v.required(path)]
        causes = podspec.validate_template(template, path)
        restart = ((template or {}).get("spec") or {}).get("restartPolicy")
        if restart and restart in podspec.RESTART_POLICIES and restart not in self.restart_policies:
            causes.append(v.not_supported(f"{path}.spec.restartPolicy", restart, list(self.restart_policies)))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = Strategy.validate(self, obj) + v.validate_object_meta_update(obj.get("metadata") or {},
                                                                              old.get("metadata") or {})
        causes += self.validate_spec(obj)
        new_sel, old_sel = (obj.get("spec") or {}).get("selector"), (old.get("spec") or {}).get("selector")
        if new_sel != old_sel:
            causes.append(raw_invalid("spec.selector", go_selector(new_sel), "field is immutable"))
        return causes

    status_subresource = True

    # Scale ---------------------------------------------------------------------------------

    def scale_selector(self, obj: Obj) -> str:
        return selector_string((obj.get("spec") or {}).get("selector"))

    def scale_into(self, obj: Obj, replicas: int) -> None:
        """A Scale's spec.replicas written into the object (kube's scaleUpdatedObjectInfo)."""
        obj.setdefault("spec", {})["replicas"] = replicas

    def to_scale(self, obj: Obj) -> Obj:
        """The object's autoscaling/v1 Scale."""
        meta = obj.get("metadata") or {}
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        scale_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                      if k in meta}
        scale_status: Obj = {"replicas": status.get("replicas") or 0}
        selector = self.scale_selector(obj)
        if selector:
            scale_status["selector"] = selector
        return {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": scale_meta,
                "spec": {"replicas": spec.get("replicas") or 0}, "status": scale_status}


class ScaleStrategy(Strategy):
    """autoscaling/v1 Scale, the kind of <workload>/scale: decoding and ValidateScale."""

    def validate(self, obj: Obj) -> list[v.Cause]:
        return non_negative(obj, "replicas")


SCALE = ScaleStrategy(body_kind("autoscaling", "v1", "Scale", ScaleStrategy))
