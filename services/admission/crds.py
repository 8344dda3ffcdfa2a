"""The custom resources in the admission service's Catalogue: an informer on CustomResourceDefinitions adds the
definitions of every established CRD's served versions (services/apis/apiextensions.custom_resources, as the
registry serves them) and their published schemas, and removes them when the CRD goes, so that matchPolicy
Equivalent finds a CRD's other versions, a policy's paramKind may be a custom kind, and type checking reads custom
kinds' schemas (kube's admission reads the same RESTMapper, EquivalentResourceMapper and OpenAPI that the CRD
handler fills)."""
from __future__ import annotations

from typing import Any

import orjson

from apiary_pb import registry_pb2_grpc as rgrpc
from services.apis import schemas
from services.apis.apiextensions import GROUP, custom_resources, published_schema
from services.apiserver.catalogue import Catalogue
from services.apiserver.resource import GroupVersion
from services.common.informer import Informer

Obj = dict[str, Any]


def established(crd: Obj) -> bool:
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])


def _signature(crd: Obj) -> bytes:
    """What the definitions are made of: a CRD event that changes neither keeps them."""
    return orjson.dumps([crd["metadata"].get("generation"), (crd.get("status") or {}).get("acceptedNames")],
                        option=orjson.OPT_SORT_KEYS)


class CustomResourceKinds:
    def __init__(self, registry: rgrpc.RegistryStub, catalogue: Catalogue) -> None:
        self.catalogue = catalogue
        self.informer = Informer(registry, GROUP, "v1", "customresourcedefinitions")
        self.informer.add_handler(self._on_event)
        self._installed: dict[str, tuple[bytes, list[GroupVersion]]] = {}

    def start(self) -> None:
        self.informer.start()

    async def stop(self) -> None:
        await self.informer.stop()

    async def synced(self) -> bool:
        return self.informer.synced.is_set()

    def _on_event(self, kind: str, crd: Obj, old: Obj | None) -> None:
        name = crd["metadata"].get("name") or ""
        if kind == "DELETED" or not established(crd):
            self._uninstall(name)
            return
        signature = _signature(crd)
        current = self._installed.get(name)
        if current is not None and current[0] == signature:
            return
        self._uninstall(name)
        group_versions = custom_resources(crd)
        for gv in group_versions:
            for info in gv.resources:
                schemas.register_custom(info.group, info.version, info.kind, published_schema(crd, info.version))
        self.catalogue.add(*group_versions)  # names accepted: none the catalogue already has
        self._installed[name] = (signature, group_versions)

    def _uninstall(self, name: str) -> None:
        current = self._installed.pop(name, None)
        if current is not None:
            infos = [info for gv in current[1] for info in gv.resources]
            for info in infos:
                schemas.unregister_custom(info.group, info.version, info.kind)
            self.catalogue.remove(*infos)
