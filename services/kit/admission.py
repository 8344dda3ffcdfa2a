"""The kit's admission plug-ins as the library's handlers run admission (endpoints.handlers.Admission):
each plug-in that handles the request sees it in hub form (kit.Attributes), mutating plug-ins first,
in order, then the validating ones once the strategy has validated."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from apiary_pb import envelope_pb2 as pb
from services.apiserver.registry.scope import Obj, Scope
from services.common import envelope

from .api import AdmissionPlugin, Attributes, Kind
from .kinds import hub, served


class PluginAdmission:
    """Admission of one write (operation) through the server's plug-ins."""

    def __init__(self, plugins: Sequence[AdmissionPlugin], kinds: Mapping[str, Kind], operation: str) -> None:
        self.plugins, self.kinds, self.operation = plugins, kinds, operation

    def _attributes(self, r: Scope, name: str, obj: Obj | None, old: Obj | None) -> Attributes:
        kind = self.kinds[r.info.plural]
        version = r.info.version
        return Attributes(self.operation, kind, r.info.group, version, r.namespace, name,
                          hub(kind, version, obj) if obj is not None else None,
                          hub(kind, version, old) if old is not None else None, r.req.user, r.dry_run)

    async def admit(self, r: Scope, name: str, obj: Obj | None, old: pb.Object | None) -> Obj | None:
        if not r.admit:
            return obj
        a = self._attributes(r, name, obj, envelope.from_envelope(old) if old is not None else None)
        for plugin in self.plugins:
            if plugin.handles(a):
                await plugin.admit(a)
        if obj is None or a.obj is None:
            return obj
        return served(a.kind, r.info.group, r.info.version, a.obj)

    async def validate(self, r: Scope, name: str, obj: pb.Object | None, old: pb.Object | None) -> None:
        if not r.admit:
            return
        a = self._attributes(r, name, envelope.from_envelope(obj) if obj is not None else None,
                             envelope.from_envelope(old) if old is not None else None)
        for plugin in self.plugins:
            if plugin.handles(a):
                await plugin.validate(a)
