"""DefaultTolerationSeconds (kube's plugin/pkg/admission/defaulttolerationseconds): a pod that does not
tolerate the node.kubernetes.io/not-ready or node.kubernetes.io/unreachable NoExecute taints gets a
toleration of each for a bounded time (300 s unless the admission service's
--default-not-ready-toleration-seconds / --default-unreachable-toleration-seconds say otherwise), so that
its pods leave a failed node after that time instead of at once.

As kube: on Pod CREATE and UPDATE (pods proper, not subresources); a toleration with an empty key or an
empty effect counts as tolerating the taint; an existing toleration is never changed.
"""
from __future__ import annotations

from typing import Any

from apiary_pb import registry_pb2_grpc as rgrpc

from ..attributes import CREATE, UPDATE, Attributes
from ..plugin import PODS, Plugin, PluginConfig

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
DEFAULT_SECONDS = 300
NOT_READY_KEY = "defaultNotReadyTolerationSeconds"  # the plugin's config keys (the service's flags fill them)
UNREACHABLE_KEY = "defaultUnreachableTolerationSeconds"


def _tolerates(tolerations: list[Any], taint: str) -> bool:
    return any(isinstance(t, dict) and t.get("key", "") in (taint, "") and t.get("effect", "") in ("NoExecute", "")
               for t in tolerations)


class DefaultTolerationSeconds(Plugin):
    name = "DefaultTolerationSeconds"
    operations = frozenset({CREATE, UPDATE})
    resources = frozenset({PODS})
    subresources = False

    def __init__(self, not_ready_seconds: int = DEFAULT_SECONDS,
                 unreachable_seconds: int = DEFAULT_SECONDS) -> None:
        self.defaults = ((NOT_READY_TAINT, not_ready_seconds), (UNREACHABLE_TAINT, unreachable_seconds))

    async def admit(self, a: Attributes) -> None:
        pod = a.object
        if pod is None:
            return
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            return
        tolerations = spec.get("tolerations") or []
        missing = [(taint, seconds) for taint, seconds in self.defaults if not _tolerates(tolerations, taint)]
        if not missing:
            return
        spec["tolerations"] = list(tolerations) + [  # in place, as kube's plug-ins (Attributes.patch diffs)
            {"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
            for taint, seconds in missing]
        a.set_object(pod)


def factory(config: PluginConfig, registry: rgrpc.RegistryStub | None) -> DefaultTolerationSeconds:
    config = config or {}
    seconds = []
    for key in (NOT_READY_KEY, UNREACHABLE_KEY):
        value = config.get(key, DEFAULT_SECONDS)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"DefaultTolerationSeconds: {key} must be an integer, got {value!r}")  # noqa: TRY004
        seconds.append(value)
    return DefaultTolerationSeconds(*seconds)
