"""When discovery may have changed: a CustomResourceDefinition or APIService event. kube's garbage collector and
quota controller read discovery again every 30 s and re-sync their monitors when it changed; these events make
that prompt (a custom resource is collected and counted a moment after its CRD is established), the 30 s
re-read still mending anything they miss. What the controllers learn still comes from discovery alone."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .client import Client, Resource

Obj = dict[str, Any]
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
                frozenset())
APISERVICES = Resource("apiregistration.k8s.io", "v1", "apiservices", "APIService", False, frozenset())


def _established(crd: Obj) -> bool:
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])


class DiscoveryChanges:
    def __init__(self, client: Client, on_change: Callable[[], None]) -> None:
        self.crds = client.informer(CRDS)
        self.apiservices = client.informer(APISERVICES)
        for inf in (self.crds, self.apiservices):
            inf.add_handler(lambda *_: on_change())

    def start(self) -> None:
        self.crds.start()
        self.apiservices.start()

    async def stop(self) -> None:
        await self.crds.stop()
        await self.apiservices.stop()

    def missing(self, resources: Iterable[Resource]) -> set[tuple[str, str]]:
        """The (group, resource) of established CRDs that discovery did not list (yet: the proxy refreshes its
        discovery on the same CRD event, a moment later)."""
        found = {(r.group, r.resource) for r in resources}
        expected = {((crd.get("spec") or {}).get("group") or "",
                     ((crd.get("status") or {}).get("acceptedNames") or {}).get("plural") or "")
                    for crd in self.crds.store.values()
                    if _established(crd) and not (crd.get("metadata") or {}).get("deletionTimestamp")}
        return expected - found
