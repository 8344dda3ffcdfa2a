"""Two controllers that keep one object in every active namespace: the serviceaccount controller (the
`default` ServiceAccount) and the root-ca-cert-publisher (ConfigMap `kube-root-ca.crt` holding the
cluster CA under ca.crt), each recreated when deleted and, for the ConfigMap, restored when changed."""
from __future__ import annotations

import abc
import logging
from typing import Any

from services.common.errors import AlreadyExists, Conflict, Forbidden, NotFound

from .client import Client, Resource
from .namespace import NAMESPACES
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

Obj = dict[str, Any]
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", True, frozenset())
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", True, frozenset())
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
ROOT_CA_DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using internal "
                       "endpoints such as the internal service IP or kubernetes.default.svc. No other usage is "
                       "guaranteed across distributions of Kubernetes clusters.")
DESCRIPTION = "kubernetes.io/description"


def _active(ns: Obj | None) -> bool:
    return ns is not None and not (ns.get("metadata") or {}).get("deletionTimestamp")


class PerNamespaceController(abc.ABC):
    """Keeps one named object of one resource in every namespace that is not being deleted."""

    def __init__(self, client: Client, queue_name: str, resource: Resource, name: str, workers: int = 1) -> None:
        self.client, self.resource, self.name = client, resource, name
        self.namespaces = client.informer(NAMESPACES)
        self.objects = client.informer(resource, params={"fieldSelector": f"metadata.name={name}"})
        self.namespaces.add_handler(self._on_namespace)
        self.objects.add_handler(self._on_object)
        self.queue = WorkQueue(queue_name, self._sync, workers)

    async def start(self) -> None:
        self.namespaces.start()
        self.objects.start()
        await self.namespaces.synced.wait()
        await self.objects.synced.wait()
        self.queue.start()

    async def stop(self) -> None:
        await self.queue.stop()
        await self.objects.stop()
        await self.namespaces.stop()

    def _on_namespace(self, typ: str, obj: Obj, _old: Obj | None) -> None:
        if typ != "DELETED" and _active(obj):
            self.queue.add(obj["metadata"]["name"])

    def _on_object(self, typ: str, obj: Obj, _old: Obj | None) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("name") == self.name and (typ == "DELETED" or not self.wanted(obj)):
            self.queue.add(meta.get("namespace", ""))

    def wanted(self, obj: Obj) -> bool:
        """Whether the object as it is needs no change (only its existence is checked by default)."""
        return True

    @abc.abstractmethod
    def desired(self, namespace: str) -> Obj:
        """The object as the controller makes it in namespace."""

    async def _sync(self, namespace: str) -> None:
        if not _active(self.namespaces.store.get(namespace)):
            return
        current = self.objects.store.get(f"{namespace}/{self.name}")
        if current is not None and self.wanted(current):
            return
        desired = self.desired(namespace)
        try:
            if current is None:
                await self.client.create(self.resource, namespace, desired)
                log.info("%s: created %s %s/%s", self.queue.name, self.resource.resource, namespace, self.name)
            else:
                obj = {**current, **{k: v for k, v in desired.items() if k != "metadata"}}
                obj["metadata"] = {**current["metadata"], **desired["metadata"],
                                   "resourceVersion": current["metadata"].get("resourceVersion")}
                await self.client.update(self.resource, obj)
        except AlreadyExists:
            pass  # the informer has not seen it yet; its event brings it back here if it needs more
        except Forbidden as e:
            if "being terminated" not in e.message:  # NamespaceLifecycle: the namespace is going
                raise
        except (NotFound, Conflict):
            self.queue.add_after(namespace, 0.5)


class ServiceAccountsController(PerNamespaceController):
    def __init__(self, client: Client) -> None:
        super().__init__(client, "serviceaccount", SERVICEACCOUNTS, "default")

    def desired(self, namespace: str) -> Obj:
        return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": namespace}}


class RootCACertPublisher(PerNamespaceController):
    def __init__(self, client: Client, root_ca: str) -> None:
        super().__init__(client, "root_ca_cert_publisher", CONFIGMAPS, ROOT_CA_CONFIGMAP)
        self.root_ca = root_ca

    def desired(self, namespace: str) -> Obj:
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": namespace,
                             "annotations": {DESCRIPTION: ROOT_CA_DESCRIPTION}},
                "data": {"ca.crt": self.root_ca}}

    def wanted(self, obj: Obj) -> bool:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        return obj.get("data") == {"ca.crt": self.root_ca} and annotations.get(DESCRIPTION) == ROOT_CA_DESCRIPTION
