"""admissionregistration.k8s.io: the admission extension points' configuration kinds.

Blocks by kind family (each engineer's part of issue 13 in its own block; GROUP_VERSIONS at the end
gathers them).
"""
from __future__ import annotations

from typing import Any

from services.apiserver.conversion import Conversion, same_fields
from services.apiserver.printers import column, name_age
from services.apiserver.resource import STATUS_VERBS, GroupVersion, ResourceInfo, SubresourceInfo

Obj = dict[str, Any]
GROUP = "admissionregistration.k8s.io"

# ---------------------------------------------------------------------------------------------------------
# Admission policies: ValidatingAdmissionPolicy(+Binding) v1, MutatingAdmissionPolicy(+Binding) v1, v1beta1
# and v1alpha1 (the same fields in each: one storage, each read given the version asked for)
# ---------------------------------------------------------------------------------------------------------
from .strategies.admissionregistration import (
    AdmissionPolicyBindingStrategy,
    AdmissionPolicyStrategy,
    MutatingAdmissionPolicyBindingStrategy,
    MutatingAdmissionPolicyStrategy,
)


def _param_kind(o: Obj) -> str:
    pk = (o.get("spec") or {}).get("paramKind")
    return f"{pk.get('apiVersion', '')}/{pk.get('kind', '')}" if pk else "<unset>"


def _param_ref(o: Obj) -> str:
    ref = (o.get("spec") or {}).get("paramRef")
    if not ref:
        return "<unset>"
    target = ref.get("name") or "*"
    return f"{ref['namespace']}/{target}" if ref.get("namespace") else target


POLICY_TABLE = name_age(
    [column("Validations", "integer", "Validations indicates the number of validation rules defined in this "
            "configuration"),
     column("ParamKind", "string", "ParamKind specifies the kind of resources used to parameterize this policy")],
    lambda o: [len((o.get("spec") or {}).get("validations") or []), _param_kind(o)])
MUTATING_POLICY_TABLE = name_age(
    [column("Mutations", "integer", "Mutations indicates the number of mutations rules defined in this "
            "configuration"),
     column("ParamKind", "string", "ParamKind specifies the kind of resources used to parameterize this policy")],
    lambda o: [len((o.get("spec") or {}).get("mutations") or []), _param_kind(o)])
BINDING_TABLE = name_age(
    [column("PolicyName", "string", "PolicyName indicates the policy definition which the policy binding binded to"),
     column("ParamRef", "string", "ParamRef indicates the param resource which sets the configration param")],
    lambda o: [(o.get("spec") or {}).get("policyName", ""), _param_ref(o)])


# kube keeps the version before GA as the storage version for a release after the new one is served.
MUTATING_POLICY_STORAGE_VERSION = "v1beta1"
MUTATING_POLICY_VERSIONS = ("v1", "v1beta1", "v1alpha1")


def _same_fields(kind: str) -> Conversion:
    """The mutating policies' versions have the same fields: stored as v1beta1, and objects stored by older code
    in any served version (v1alpha1, with or without its type meta) read as they are."""
    return same_fields(f"{GROUP}/{MUTATING_POLICY_STORAGE_VERSION}", kind,
                       tuple(f"{GROUP}/{v}" for v in MUTATING_POLICY_VERSIONS))


def _policy_kinds(version: str, mutating: bool) -> tuple[ResourceInfo, ResourceInfo]:
    kind = "MutatingAdmissionPolicy" if mutating else "ValidatingAdmissionPolicy"
    plural = kind.lower()[:-1] + "ies"
    return (
        ResourceInfo(
            group=GROUP, version=version, kind=kind, plural=plural, singular=kind.lower(), namespaced=False,
            key_prefix=f"/registry/{plural}/", categories=("api-extensions",),
            subresources=() if mutating else (SubresourceInfo("status", kind, STATUS_VERBS),),
            strategy=MutatingAdmissionPolicyStrategy if mutating else AdmissionPolicyStrategy,
            table=MUTATING_POLICY_TABLE if mutating else POLICY_TABLE,
            conversion=_same_fields(kind) if mutating else None),
        ResourceInfo(
            group=GROUP, version=version, kind=kind + "Binding", plural=kind.lower() + "bindings",
            singular=kind.lower() + "binding", namespaced=False,
            key_prefix=f"/registry/{kind.lower()}bindings/", categories=("api-extensions",),
            strategy=MutatingAdmissionPolicyBindingStrategy if mutating else AdmissionPolicyBindingStrategy,
            table=BINDING_TABLE, conversion=_same_fields(kind + "Binding") if mutating else None),
    )


POLICY_KINDS_V1 = _policy_kinds("v1", mutating=False)
MUTATING_POLICY_KINDS = {v: _policy_kinds(v, mutating=True) for v in MUTATING_POLICY_VERSIONS}

# ---------------------------------------------------------------------------------------------------------
# Webhooks: MutatingWebhookConfiguration, ValidatingWebhookConfiguration (v1)
# ---------------------------------------------------------------------------------------------------------
from .strategies.admissionregistration import (
    MutatingWebhookConfigurationStrategy,
    ValidatingWebhookConfigurationStrategy,
)


def _webhook_count(obj: Obj) -> list[Any]:
    return [len(obj.get("webhooks") or [])]


_WEBHOOKS_TABLE = name_age([column("Webhooks", "integer", "Webhooks indicates the number of webhooks.")],
                           _webhook_count)

WEBHOOK_KINDS = (
    ResourceInfo(
        group=GROUP, version="v1", kind="MutatingWebhookConfiguration",
        plural="mutatingwebhookconfigurations", singular="mutatingwebhookconfiguration",
        namespaced=False, key_prefix="/registry/mutatingwebhookconfigurations/",
        categories=("api-extensions",), strategy=MutatingWebhookConfigurationStrategy, table=_WEBHOOKS_TABLE,
    ),
    ResourceInfo(
        group=GROUP, version="v1", kind="ValidatingWebhookConfiguration",
        plural="validatingwebhookconfigurations", singular="validatingwebhookconfiguration",
        namespaced=False, key_prefix="/registry/validatingwebhookconfigurations/",
        categories=("api-extensions",), strategy=ValidatingWebhookConfigurationStrategy, table=_WEBHOOKS_TABLE,
    ),
)


# ---------------------------------------------------------------------------------------------------------
# The group's versions (kube-aggregator's priorities: group 16700; v1 15, v1beta1 12, v1alpha1 9)
# ---------------------------------------------------------------------------------------------------------

GROUP_VERSIONS = (
    GroupVersion(GROUP, "v1", 16700, 15, POLICY_KINDS_V1 + MUTATING_POLICY_KINDS["v1"] + WEBHOOK_KINDS),
    GroupVersion(GROUP, "v1beta1", 16700, 12, MUTATING_POLICY_KINDS["v1beta1"]),
    GroupVersion(GROUP, "v1alpha1", 16700, 9, MUTATING_POLICY_KINDS["v1alpha1"]),
)
