"""ServiceAccount (kube's plugin/pkg/admission/serviceaccount), the parts a pod create goes through:

- a pod without spec.serviceAccountName gets `default`;
- the ServiceAccount must exist, else the pod is refused (403) with kube's words, "error looking up service
  account <ns>/<name>: serviceaccount "<name>" not found" (the informer first, then a live read, so an
  account created a moment ago is found);
- unless the pod or its ServiceAccount opts out (automountServiceAccountToken: false), the projected
  `kube-api-access-<random>` volume (a bound token, kube-root-ca.crt, the namespace) is added and mounted
  read-only at /var/run/secrets/kubernetes.io/serviceaccount in every container and init container.

Mirror pods (kubernetes.io/config.mirror) are left alone; pulling image pull secrets from the account and
the ephemeral-container checks are not done.
"""
from __future__ import annotations

import random
from typing import Any

from apiary_pb import registry_pb2_grpc as rgrpc
from services.common.errors import forbidden

from ..attributes import CREATE, Attributes
from ..informers import cached_or_live
from ..plugin import PODS, InformerPlugin, PluginConfig

DEFAULT_ACCOUNT = "default"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_EXPIRATION = 3607  # kube's warnOnlyBoundTokenExpirationSeconds
VOLUME_PREFIX = "kube-api-access-"
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def access_volume(name: str) -> dict[str, Any]:
    return {"name": name, "projected": {"defaultMode": 0o644, "sources": [
        {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}}


class ServiceAccount(InformerPlugin):
    name = "ServiceAccount"
    operations = frozenset({CREATE})
    resources = frozenset({PODS})
    subresources = False

    def __init__(self, registry: rgrpc.RegistryStub) -> None:
        super().__init__(registry, "", "v1", "serviceaccounts")

    async def admit(self, a: Attributes) -> None:
        pod = a.object
        if pod is None:
            return
        meta = pod.get("metadata") or {}
        if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            return
        spec = pod.setdefault("spec", {})
        account_name = spec.get("serviceAccountName") or DEFAULT_ACCOUNT
        spec["serviceAccountName"] = account_name
        account = await cached_or_live(self.registry, self.informer, a.namespace, account_name)
        if account is None:
            raise forbidden(a.resource, a.group, a.name_for_errors(),
                            f"error looking up service account {a.namespace}/{account_name}: "
                            f'serviceaccount "{account_name}" not found')
        if spec.get("automountServiceAccountToken") is not False and \
                account.get("automountServiceAccountToken") is not False:
            self._mount_token(spec)
        a.set_object(pod)

    @staticmethod
    def _mount_token(spec: dict[str, Any]) -> None:
        containers = [c for k in ("initContainers", "containers") for c in spec.get(k) or [] if isinstance(c, dict)]
        if any(m.get("mountPath") == MOUNT_PATH for c in containers for m in c.get("volumeMounts") or []):
            return  # the pod mounts something there itself
        volumes = spec.setdefault("volumes", [])
        name = VOLUME_PREFIX + "".join(random.choice(_ALPHABET) for _ in range(5))
        volumes.append(access_volume(name))
        for c in containers:
            c.setdefault("volumeMounts", []).append({"name": name, "readOnly": True, "mountPath": MOUNT_PATH})


def factory(config: PluginConfig, registry: rgrpc.RegistryStub | None) -> ServiceAccount:
    if registry is None:
        raise ValueError("ServiceAccount needs the registry (--registry-address)")
    return ServiceAccount(registry)
