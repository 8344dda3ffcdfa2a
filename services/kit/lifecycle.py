"""NamespaceLifecycle, as every kube aggregated server runs it (RecommendedOptions' admission):
nothing is created in a namespace the core API server does not have, nor in one being terminated.

Namespaces come from an informer on the core API server (services/common/informer.py's Informer over
an HTTPListWatch: list, then watch over HTTPS, relist on 410); a namespace the informer has not seen is
looked up with one GET before the create is refused, because it may have been made just now.
"""
from __future__ import annotations

import orjson

from services.apiserver.restclient import RESTClient
from services.common.errors import APIError, Forbidden, InternalError, NotFound
from services.common.informer import HTTPListWatch, Informer

from .api import CREATE, AdmissionPlugin, Attributes

NAMESPACES = "/api/v1/namespaces"


class NamespaceLifecycle(AdmissionPlugin):
    name = "NamespaceLifecycle"
    operations = (CREATE,)

    def __init__(self, client: RESTClient) -> None:
        self.client = client
        self.namespaces = Informer.over(HTTPListWatch(client, NAMESPACES), "", "v1", "namespaces")

    def handles(self, a: Attributes) -> bool:
        return a.operation == CREATE and a.kind.namespaced

    def ready(self) -> bool:
        return self.namespaces.synced.is_set()

    async def validate(self, a: Attributes) -> None:
        ns = self.namespaces.store.get(a.namespace)
        if ns is None:  # as kube's plug-in: a namespace that is not there is NotFound, any other failure internal
            try:
                ns = orjson.loads(await self.client.request("GET", f"{NAMESPACES}/{a.namespace}"))
            except NotFound:
                raise NotFound(f'namespaces "{a.namespace}" not found',
                               details={"name": a.namespace, "kind": "namespaces"}) from None
            except APIError as e:
                raise InternalError(e.message) from None
        if (ns.get("status") or {}).get("phase") == "Terminating":
            raise Forbidden(f"{a.kind.plural}.{a.group} \"{a.name}\" is forbidden: unable to create new content in "
                            f"namespace {a.namespace} because it is being terminated",
                            details={"name": a.name, "group": a.group, "kind": a.kind.plural,
                                     "causes": [{"reason": "NamespaceTerminating",
                                                 "message": f"namespace {a.namespace} is being terminated",
                                                 "field": "metadata.namespace"}]})
