"""core/v1 componentstatuses (kube's pkg/registry/core/componentstatus): get and list only, computed on each
read from the health of the etcd behind the storage service, which that service reports over gRPC
(EtcdHealth). An unknown name is a 404 (kube answers it with a 500 "Component not found"). kube-apiserver 1.33 lists the scheduler and controller-manager too, probed on their local ports;
apiary serves no scheduler and its controller-manager is a client like any other, so etcd is what it reports."""
from __future__ import annotations

import orjson

from services.apiserver import printers
from services.apiserver.endpoints.request import Request, Response
from services.common import envelope, errors
from services.common.selectors import SelectionPredicate

from .storage_client import StorageClient


class ComponentStatusREST:
    def __init__(self, store: StorageClient) -> None:
        self.store = store

    async def statuses(self) -> list[dict]:
        """One ComponentStatus per etcd server, named etcd-<i> as kube names them: Healthy "ok" when it
        answers, else the error."""
        out = []
        for i, server in enumerate(await self.store.etcd_health()):
            condition = {"type": "Healthy", "status": "True" if server.healthy else "False",
                         "message": "ok" if server.healthy else ""}
            if not server.healthy:
                condition["error"] = server.error
            out.append({"kind": "ComponentStatus", "apiVersion": "v1", "metadata": {"name": f"etcd-{i}"},
                        "conditions": [condition]})
        return out

    async def get(self, r: Request) -> Response:
        found = [s for s in await self.statuses() if s["metadata"]["name"] == r.req.name]
        if not found:
            raise errors.not_found("componentstatuses", "", r.req.name)
        if r.req.table:
            return self.table(r, found, {})
        return Response(200, orjson.dumps(found[0]))

    async def list(self, r: Request) -> Response:
        """Every status the request's label and field selectors match (kube filters them as any list)."""
        predicate = SelectionPredicate.parse(r.query.get("labelSelector", ""), r.field_selector)
        items = [o for o in await self.statuses() if predicate.matches(envelope.to_envelope(o))]
        if r.req.table:
            return self.table(r, items, {})
        return Response(200, orjson.dumps({"kind": "ComponentStatusList", "apiVersion": "v1", "metadata": {},
                                           "items": items}))

    def table(self, r: Request, items: list[dict], list_meta: dict) -> Response:
        convertor = r.info.table or printers.DEFAULT_TABLE
        envs = [envelope.to_envelope(o) for o in items]
        return Response(200, orjson.dumps(printers.table(convertor, envs, list_meta,
                                                         r.query.get("includeObject", "Metadata"))))
