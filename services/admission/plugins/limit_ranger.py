"""LimitRanger (kube's plugin/pkg/admission/limitranger) for Pods: the namespace's LimitRanges, read from
an informer, default each container's requests and limits (mutating phase) and bound them (validating).

Covered: on Pod CREATE (kube skips updates and subresources but resize), the Container items' `default`
(limits) and `defaultRequest` (requests) set where a container has none, with kube's
kubernetes.io/limit-ranger annotation; then the Container items' min, max and maxLimitRequestRatio for
each container, refused with kube's messages (403). Not covered: Pod-type items (sums over the pod) and
PersistentVolumeClaims. Pods themselves are served by another part of the registry: until they are,
this plugin has nothing to admit.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any

from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import errors, quantity

from ..attributes import CREATE, Attributes
from ..informers import InformerFactory, shared_informers
from ..plugin import PODS, Plugin, PluginConfig

Obj = dict[str, Any]
ANNOTATION = "kubernetes.io/limit-ranger"


def _containers(pod: Obj) -> list[tuple[str, Obj]]:
    spec = pod.get("spec") or {}
    return [("init container", c) for c in spec.get("initContainers") or [] if isinstance(c, dict)] + \
           [("container", c) for c in spec.get("containers") or [] if isinstance(c, dict)]


def _q(value: Any) -> Decimal | None:
    try:
        return quantity.parse(value)
    except ValueError:
        return None


class LimitRanger(Plugin):
    name = "LimitRanger"
    operations = frozenset({CREATE})
    resources = frozenset({PODS})
    subresources = False

    def __init__(self, informers: InformerFactory) -> None:
        self.informers = informers
        self.ranges = informers.informer("", "v1", "limitranges")

    def ready(self) -> bool:
        return self.ranges.synced.is_set()

    def handles(self, operation: str) -> bool:
        return operation == CREATE and bool(self.ranges.store)

    def _items(self, namespace: str) -> list[Obj]:
        """The Container items of the namespace's LimitRanges, in name order."""
        out = []
        for key in sorted(self.ranges.store):
            lr = self.ranges.store[key]
            if (lr.get("metadata") or {}).get("namespace") == namespace:
                out += [i for i in (lr.get("spec") or {}).get("limits") or [] if i.get("type") == "Container"]
        return out

    async def admit(self, a: Attributes) -> None:
        items = self._items(a.namespace)
        pod = a.object
        if not items or pod is None:
            return
        limits: Obj = {}
        requests: Obj = {}
        for item in items:  # defaultContainerResourceRequirements: the last item naming a resource wins
            limits.update(item.get("default") or {})
            requests.update(item.get("defaultRequest") or {})
        notes: list[str] = []
        for what, c in _containers(pod):  # in place, as kube's plug-ins (Attributes.patch diffs)
            res = c.get("resources") or {}  # decoding refused any other type than a map or null
            set_requests = sorted(k for k in requests if k not in (res.get("requests") or {}))
            set_limits = sorted(k for k in limits if k not in (res.get("limits") or {}))
            if not set_requests and not set_limits:
                continue
            c["resources"] = res  # a key added only with a value set in it
            if set_requests:
                res["requests"] = {**(res.get("requests") or {}), **{k: requests[k] for k in set_requests}}
                notes.append(f"{', '.join(set_requests)} request for {what} {c.get('name', '')}")
            if set_limits:
                res["limits"] = {**(res.get("limits") or {}), **{k: limits[k] for k in set_limits}}
                notes.append(f"{', '.join(set_limits)} limit for {what} {c.get('name', '')}")
        if notes:
            meta = pod.setdefault("metadata", {})
            meta["annotations"] = {**(meta.get("annotations") or {}),
                                   ANNOTATION: "LimitRanger plugin set: " + "; ".join(notes)}
            a.set_object(pod)

    async def validate(self, a: Attributes) -> None:
        pod = a.object
        items = self._items(a.namespace)
        if not items or pod is None:
            return
        errs: list[str] = []
        for item in items:
            for _, c in _containers(pod):
                res = c.get("resources") or {}
                req, lim = res.get("requests") or {}, res.get("limits") or {}
                for k, bound in (item.get("min") or {}).items():
                    if k not in req:
                        errs.append(f"minimum {k} usage per Container is {bound}.  No request is specified")
                    elif (_q(req[k]) or 0) < (_q(bound) or 0):
                        errs.append(f"minimum {k} usage per Container is {bound}, but request is {req[k]}")
                for k, bound in (item.get("max") or {}).items():
                    if k not in lim:
                        errs.append(f"maximum {k} usage per Container is {bound}.  No limit is specified")
                    elif (_q(lim[k]) or 0) > (_q(bound) or 0):
                        errs.append(f"maximum {k} usage per Container is {bound}, but limit is {lim[k]}")
                for k, bound in (item.get("maxLimitRequestRatio") or {}).items():
                    r, l_ = _q(req.get(k)), _q(lim.get(k))
                    if r and l_ is not None and l_ / r > (_q(bound) or 0):
                        errs.append(f"{k} max limit to request ratio per Container is {bound}, but provided "
                                    f"ratio is {float(l_ / r):f}")
        if errs:
            why = errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
            raise errors.forbidden("pods", "", a.name_for_errors(), why)

    async def start(self) -> None:
        self.informers.start()

    async def stop(self) -> None:
        await self.informers.stop()


def factory(config: PluginConfig, registry: rgrpc.RegistryStub | None) -> LimitRanger:
    return LimitRanger(shared_informers(registry))
