"""The built-in admission plugins, in the one order the chain runs them.

As in kube-apiserver, the order of --enable-admission-plugins does not matter:
enabled plugins run in ORDER. DEFAULT_ON are enabled unless disabled.
"""
from __future__ import annotations

from collections.abc import Callable

from apiary_pb import registry_pb2_grpc as rgrpc

from ..plugin import Plugin, PluginConfig
from ..webhook import dispatcher as webhooks
from . import namespace_lifecycle

Factory = Callable[[PluginConfig, "rgrpc.RegistryStub | None"], Plugin]

ORDER: tuple[str, ...] = ("NamespaceLifecycle", "MutatingAdmissionWebhook", "ValidatingAdmissionWebhook")
DEFAULT_ON: frozenset[str] = frozenset({"NamespaceLifecycle", "MutatingAdmissionWebhook",
                                        "ValidatingAdmissionWebhook"})
FACTORIES: dict[str, Factory] = {
    "NamespaceLifecycle": namespace_lifecycle.factory,
    "MutatingAdmissionWebhook": webhooks.mutating_factory,
    "ValidatingAdmissionWebhook": webhooks.validating_factory,
}


def _names(value: str) -> list[str]:
    return [n.strip() for n in value.split(",") if n.strip()]


def enabled_plugins(enable: str, disable: str) -> list[str]:
    """The plugins to run, in ORDER. Raises ValueError for unknown or contradictory names."""
    on, off = _names(enable), _names(disable)
    for flag, names in (("enable-admission-plugins", on), ("disable-admission-plugins", off)):
        for n in names:
            if n not in FACTORIES:
                raise ValueError(f"{flag} plugin {n!r} is unknown")
    both = sorted(set(on) & set(off))
    if both:
        raise ValueError(f"{both} in enable-admission-plugins and disable-admission-plugins overlapped")
    chosen = (DEFAULT_ON | set(on)) - set(off)
    return [n for n in ORDER if n in chosen]
