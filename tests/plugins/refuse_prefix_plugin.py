"""A Python admission plugin for the tests, loaded from the apiary.admission_plugins entry point group:
refuses creating configmaps whose name starts with the configured prefix (default "forbidden-"), and
annotates the others with who created them. Written against the built-ins' interface."""
from __future__ import annotations

from services.admission.attributes import CREATE, Attributes
from services.admission.informers import shared_informers
from services.admission.plugin import Plugin
from services.common.errors import forbidden


class RefusePrefix(Plugin):
    name = "RefusePrefix"
    operations = frozenset({CREATE})

    def __init__(self, prefix: str, informers) -> None:
        self.prefix = prefix
        # what a plugin reads comes from the shared informers (here: namespaces, for their labels)
        self.namespaces = informers.informer("", "v1", "namespaces")
        self.informers = informers

    async def start(self) -> None:
        self.informers.start()

    def ready(self) -> bool:
        return self.namespaces.synced.is_set()

    async def admit(self, a: Attributes) -> None:
        if a.resource != "configmaps" or a.object is None:
            return
        obj = dict(a.object)
        meta = dict(obj.get("metadata") or {})
        meta["annotations"] = {**(meta.get("annotations") or {}), "example.com/created-by": a.user.name}
        obj["metadata"] = meta
        a.set_object(obj)

    async def validate(self, a: Attributes) -> None:
        if a.resource != "configmaps" or not a.name_for_errors().startswith(self.prefix):
            return
        ns = self.namespaces.store.get(a.namespace) or {}
        if ((ns.get("metadata") or {}).get("labels") or {}).get("example.com/allow-any-name") == "true":
            return
        raise forbidden(a.resource, a.group, a.name_for_errors(),
                        f"names starting with {self.prefix!r} are reserved")


def factory(config, registry) -> RefusePrefix:
    return RefusePrefix((config or {}).get("prefix", "forbidden-"), shared_informers(registry))
