"""API approval of CustomResourceDefinitions in the community's protected groups (k8s.io, kubernetes.io and their
subdomains; kube's apihelpers.GetAPIApprovalState, validateAPIApproval and the apiapproval controller): the
`api-approved.kubernetes.io` annotation must hold the URL of the approving pull request, or a reason starting
with "unapproved"; the KubernetesAPIApprovalPolicyConformant condition says which."""
from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from services.apiserver import validation as v

Obj = dict[str, Any]
ANNOTATION = "api-approved.kubernetes.io"
CONDITION = "KubernetesAPIApprovalPolicyConformant"
INVALID, APPROVED, BYPASSED, MISSING = "Invalid", "Approved", "Bypassed", "Missing"
_SEE = "see https://github.com/kubernetes/enhancements/pull/1111"
# the condition's status and reason in each state
_CONDITIONS = {INVALID: ("False", "InvalidAnnotation"), MISSING: ("False", "MissingAnnotation"),
               APPROVED: ("True", "ApprovedAnnotation"), BYPASSED: ("False", "UnapprovedAnnotation")}


def protected(group: str) -> bool:
    return any(group == g or group.endswith("." + g) for g in ("k8s.io", "kubernetes.io"))


def _is_url(value: str) -> bool:
    """Go's url.ParseRequestURI accepting the value, with a scheme and a host."""
    if not value or (not value.startswith("/") and ":" not in value) or any(c in value for c in " \x7f") or \
            any(ord(c) < 0x20 for c in value):
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return bool(parts.scheme and parts.netloc)


def state(annotations: Obj | None) -> tuple[str, str]:
    """The approval state of a CRD's annotations, and kube's reason for it."""
    value = (annotations or {}).get(ANNOTATION) or ""
    if not value:
        return MISSING, f'protected groups must have approval annotation "{ANNOTATION}", {_SEE}'
    if value.startswith("unapproved"):
        return BYPASSED, f'not approved: "{value}"'
    if _is_url(value):
        return APPROVED, f"approved in {value}"
    return INVALID, (f'protected groups must have approval annotation "{ANNOTATION}" with either a URL or a reason '
                     f'starting with "unapproved", {_SEE}')


def validate(crd: Obj, old: Obj | None) -> list[v.Cause]:
    """validateAPIApproval: a CRD of a protected group needs a valid annotation, unless an update leaves its state
    as it was (a controller writing the spec of an old CRD is not refused)."""
    if not protected((crd.get("spec") or {}).get("group") or ""):
        return []
    new_state, reason = state((crd.get("metadata") or {}).get("annotations"))
    if old is not None and state((old.get("metadata") or {}).get("annotations"))[0] == new_state:
        return []
    field = f"metadata.annotations[{ANNOTATION}]"
    if new_state == MISSING:
        return [v.required(field, reason)]
    if new_state == INVALID:
        return [v.invalid(field, ((crd.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION), reason)]
    return []


def condition(crd: Obj) -> tuple[str, str, str] | None:
    """(status, reason, message) of the KubernetesAPIApprovalPolicyConformant condition; None outside the
    protected groups."""
    if not protected((crd.get("spec") or {}).get("group") or ""):
        return None
    s, reason = state((crd.get("metadata") or {}).get("annotations"))
    return (*_CONDITIONS[s], reason)
