"""Priority (kube's plugin/pkg/admission/priority): pods get their priority from a PriorityClass, and at most
one PriorityClass is the cluster's globalDefault.

Pods (CREATE, pods proper):
- spec.priorityClassName names a class: spec.priority and spec.preemptionPolicy become the class's value and
  preemptionPolicy; an unknown class is refused (403) "no PriorityClass with name <name> was found";
- no spec.priorityClassName: the globalDefault class's name, value and preemptionPolicy (when several are
  globalDefault after a race, the lowest value, as kube), else priority 0 and PreemptLowerPriority;
- a spec.priority or spec.preemptionPolicy the pod sets itself that differs from the computed one is refused
  (403) with kube's text.
Pods (UPDATE): a priority or preemptionPolicy the stored pod has and the new one omits is kept (an update
cannot drop what this plugin set on create; pod validation refuses other changes).

PriorityClasses (CREATE and UPDATE, validating phase): a class marked globalDefault while another is already
the default is refused (403) "PriorityClass <other> is marked as default. Only one default can exist".

Classes are read from an informer; a class named by a pod and not in it yet is read live (one created a
moment ago). The default is the informer's view only, as kube's lister.
"""
from __future__ import annotations

from typing import Any

from apiary_pb import registry_pb2_grpc as rgrpc
from services.common.errors import forbidden

from ..attributes import CREATE, UPDATE, Attributes
from ..informers import cached_or_live
from ..plugin import PODS, InformerPlugin, PluginConfig

GROUP = "scheduling.k8s.io"
DEFAULT_PRIORITY = 0  # scheduling.DefaultPriorityWhenNoDefaultClassExists
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PRIORITY_CLASSES = (GROUP, "priorityclasses")


class Priority(InformerPlugin):
    name = "Priority"
    operations = frozenset({CREATE, UPDATE})
    resources = frozenset({PODS})  # pods are admitted, ...
    validated_resources = frozenset({PRIORITY_CLASSES})  # ... classes validated
    subresources = False

    def __init__(self, registry: rgrpc.RegistryStub) -> None:
        super().__init__(registry, GROUP, "v1", "priorityclasses")

    def default_class(self) -> dict[str, Any] | None:
        """getDefaultPriorityClass: the globalDefault class, the lowest value when a race made several."""
        found = None
        for pc in self.informer.store.values():
            if pc.get("globalDefault") and (found is None or found.get("value", 0) > pc.get("value", 0)):
                found = pc
        return found

    async def admit(self, a: Attributes) -> None:
        if a.object is None:
            return
        pod = a.object  # changed in place, as kube's plug-ins (Attributes.patch diffs against the request)
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            return
        if a.operation == UPDATE:
            old_spec = (a.old_object or {}).get("spec") or {}
            changed = False
            for f in ("priority", "preemptionPolicy"):
                if old_spec.get(f) is not None and spec.get(f) is None:
                    spec[f], changed = old_spec[f], True
            if changed:
                a.set_object(pod)
            return
        name = spec.get("priorityClassName") or ""
        if not name:
            pc = self.default_class()
            if pc is not None:
                spec["priorityClassName"] = pc["metadata"]["name"]
        else:
            pc = await cached_or_live(self.registry, self.informer, "", name)
            if pc is None:
                raise forbidden(a.resource, a.group, a.name_for_errors(),
                                f"no PriorityClass with name {name} was found")
        priority = pc.get("value", 0) if pc is not None else DEFAULT_PRIORITY
        policy = pc.get("preemptionPolicy") if pc is not None else PREEMPT_LOWER_PRIORITY
        computed = [("priority", "integer value of priority", priority)]
        if policy:
            computed.append(("preemptionPolicy", "string value of PreemptionPolicy", policy))
        for field, what, value in computed:  # kube's messages: a value given in the spec must be the computed one
            given = spec.get(field)
            if given is not None and given != value:
                raise forbidden(a.resource, a.group, a.name_for_errors(),
                                f"the {what} ({given}) must not be provided in pod spec; priority admission "
                                f"controller computed {value} from the given PriorityClass name")
            spec[field] = value
        a.set_object(pod)

    async def validate(self, a: Attributes) -> None:
        if a.object is None or not a.object.get("globalDefault"):
            return
        current = self.default_class()
        if current is None:
            return
        if a.operation == CREATE or current["metadata"]["name"] != a.object["metadata"].get("name"):
            raise forbidden(a.resource, a.group, a.name_for_errors(),
                            f"PriorityClass {current['metadata']['name']} is marked as default. "
                            "Only one default can exist")


def factory(config: PluginConfig, registry: rgrpc.RegistryStub | None) -> Priority:
    if registry is None:
        raise ValueError("Priority needs the registry (--registry-address)")
    return Priority(registry)
