"""The admission plugins: the built-in ones, in the one order the chain runs them, and plugins written in
Python, found by name in the `apiary.admission_plugins` entry point group.

As in kube-apiserver, the order of --enable-admission-plugins does not matter for the built-in plugins:
they run in ORDER. DEFAULT_ON are enabled unless disabled. Entry point plugins are never on by default and
run after the built-in ones, in the order the flag names them.

An entry point names a factory with the built-ins' signature, factory(config, registry) -> Plugin (see
plugin.py; services.admission.informers.shared_informers(registry) gives the informers a plugin reads):

    [project.entry-points."apiary.admission_plugins"]
    MyPlugin = "my_package.admission:factory"
"""
from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points

from apiary_pb import registry_pb2_grpc as rgrpc

from ..plugin import Plugin, PluginConfig
from ..webhook import dispatcher as webhooks
from . import (
    certificates,
    default_storage_class,
    default_toleration_seconds,
    limit_ranger,
    mutating_admission_policy,
    namespace_lifecycle,
    priority,
    resource_quota,
    service_account,
    storage_object_in_use_protection,
    validating_admission_policy,
)

Factory = Callable[[PluginConfig, "rgrpc.RegistryStub | None"], Plugin]

# kube's order (AllOrderedPlugins): NamespaceLifecycle, LimitRanger, ServiceAccount, ... Priority,
# DefaultTolerationSeconds, ..., DefaultStorageClass, StorageObjectInUseProtection, ..., CertificateApproval,
# CertificateSigning, CertificateSubjectRestriction, ..., mutating policies, mutating webhooks, validating policies,
# validating webhooks, quota.
ORDER: tuple[str, ...] = ("NamespaceLifecycle", "LimitRanger", "ServiceAccount", "Priority",
                          "DefaultTolerationSeconds", "DefaultStorageClass", "StorageObjectInUseProtection",
                          "CertificateApproval", "CertificateSigning", "CertificateSubjectRestriction",
                          "MutatingAdmissionPolicy", "MutatingAdmissionWebhook",
                          "ValidatingAdmissionPolicy", "ValidatingAdmissionWebhook", "ResourceQuota")
DEFAULT_ON: frozenset[str] = frozenset(ORDER)
FACTORIES: dict[str, Factory] = {
    "NamespaceLifecycle": namespace_lifecycle.factory,
    "LimitRanger": limit_ranger.factory,
    "ServiceAccount": service_account.factory,
    "Priority": priority.factory,
    "DefaultTolerationSeconds": default_toleration_seconds.factory,
    "DefaultStorageClass": default_storage_class.factory,
    "StorageObjectInUseProtection": storage_object_in_use_protection.factory,
    "CertificateApproval": certificates.approval_factory,
    "CertificateSigning": certificates.signing_factory,
    "CertificateSubjectRestriction": certificates.subject_restriction_factory,
    "MutatingAdmissionPolicy": mutating_admission_policy.factory,
    "MutatingAdmissionWebhook": webhooks.mutating_factory,
    "ValidatingAdmissionPolicy": validating_admission_policy.factory,
    "ValidatingAdmissionWebhook": webhooks.validating_factory,
    "ResourceQuota": resource_quota.factory,
}


ENTRY_POINT_GROUP = "apiary.admission_plugins"


def external_plugins() -> dict[str, object]:
    """Plugin name -> its entry point (loaded only when enabled)."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def factory_for(name: str) -> Factory:
    if name in FACTORIES:
        return FACTORIES[name]
    ep = external_plugins()[name]
    try:
        factory = ep.load()  # type: ignore[attr-defined]
    except Exception as e:  # noqa: BLE001 - a plugin that cannot load stops the service with its reason
        raise ValueError(f"admission plugin {name!r} ({ep.value}) failed to load: {e}") from None  # type: ignore
    if not callable(factory):
        raise ValueError(f"admission plugin {name!r}: {ep.value} is not a factory")  # type: ignore[attr-defined]
    return factory


def _names(value: str) -> list[str]:
    return [n.strip() for n in value.split(",") if n.strip()]


def enabled_plugins(enable: str, disable: str) -> list[str]:
    """The plugins to run, in ORDER. Raises ValueError for unknown or contradictory names."""
    on, off = _names(enable), _names(disable)
    external = external_plugins() if any(n not in FACTORIES for n in on + off) else {}
    for flag, names in (("enable-admission-plugins", on), ("disable-admission-plugins", off)):
        for n in names:
            if n not in FACTORIES and n not in external:
                raise ValueError(f"{flag} plugin {n!r} is unknown")
    both = sorted(set(on) & set(off))
    if both:
        raise ValueError(f"{both} in enable-admission-plugins and disable-admission-plugins overlapped")
    chosen = (DEFAULT_ON | set(on)) - set(off)
    return [n for n in ORDER if n in chosen] + [n for n in dict.fromkeys(on) if n not in FACTORIES]
