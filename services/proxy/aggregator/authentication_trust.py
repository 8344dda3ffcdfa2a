"""kube-apiserver's cluster authentication trust controller: the ConfigMap
kube-system/extension-apiserver-authentication, from which aggregated API servers learn which
client CA and which front proxy (CA, allowed names, header names) to trust.

Written at start, again whenever the ConfigMap changes away from what it should hold (edited or
deleted: an informer on kube-system's ConfigMaps sees it) and every RESYNC_PERIOD, re-reading the CA
files so that a rotated bundle is published.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import grpcutil
from services.common.background import cancel_and_wait
from services.common.backoff import Backoff
from services.common.errors import APIError, NotFound
from services.common.identity import APISERVER
from services.common.informer import Informer

log = logging.getLogger(__name__)

NAMESPACE, NAME = "kube-system", "extension-apiserver-authentication"
RESYNC_PERIOD = 60.0


def _json_list(values: Sequence[str]) -> str:
    """Go's json.Marshal of a []string, as kube writes these keys."""
    return orjson.dumps(list(values)).decode()


class AuthenticationTrust:
    def __init__(self, registry: rgrpc.RegistryStub, *, client_ca_file: str = "",
                 requestheader_client_ca_file: str = "", allowed_names: Sequence[str] = (),
                 username_headers: Sequence[str] = (), uid_headers: Sequence[str] = (),
                 group_headers: Sequence[str] = (), extra_headers_prefix: Sequence[str] = ()) -> None:
        self.registry = registry
        self.client_ca_file = client_ca_file
        self.requestheader_ca_file = requestheader_client_ca_file
        self.headers = {
            "requestheader-allowed-names": allowed_names,
            "requestheader-username-headers": username_headers,
            "requestheader-uid-headers": uid_headers,
            "requestheader-group-headers": group_headers,
            "requestheader-extra-headers-prefix": extra_headers_prefix,
        }
        self.configmaps = Informer(registry, "", "v1", "configmaps", namespace=NAMESPACE)
        self.configmaps.add_handler(self._changed)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def data(self) -> dict[str, str]:
        """What the ConfigMap should hold now (the CA files read afresh)."""
        out: dict[str, str] = {}
        if self.client_ca_file:
            out["client-ca-file"] = Path(self.client_ca_file).read_text()
        if self.requestheader_ca_file:
            out["requestheader-client-ca-file"] = Path(self.requestheader_ca_file).read_text()
            out.update({k: _json_list(v) for k, v in self.headers.items()})
        return out

    def _changed(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if (obj.get("metadata") or {}).get("name") == NAME:
            self._wake.set()

    def start(self) -> None:
        self.configmaps.start()
        self._task = asyncio.create_task(self._run(), name="authentication-trust")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        await self.configmaps.stop()

    async def _run(self) -> None:
        backoff = Backoff()
        while True:
            try:
                await self.sync()
                backoff.reset()
                try:
                    await asyncio.wait_for(self._wake.wait(), RESYNC_PERIOD)
                except TimeoutError:
                    pass
                self._wake.clear()
            except asyncio.CancelledError:
                raise
            except (APIError, OSError) as e:
                delay = backoff.delay()
                log.info("%s/%s not written: %s; retrying in %.1fs", NAMESPACE, NAME,
                         getattr(e, "message", e), delay)
                await asyncio.sleep(delay)

    async def _call(self, verb: str, name: str = "", body: dict[str, Any] | None = None) -> dict[str, Any]:
        req = rpb.APIRequest(verb=verb, version="v1", resource="configmaps", namespace=NAMESPACE, name=name,
                             body=orjson.dumps(body) if body is not None else b"",
                             content_type="application/json", user=APISERVER)
        resp = await grpcutil.call(self.registry.Handle(req, timeout=10), "registry")
        return orjson.loads(resp.body)

    async def sync(self) -> None:
        want = self.data()
        try:
            current = await self._call("get", NAME)
        except NotFound:
            await self._call("create", body={"apiVersion": "v1", "kind": "ConfigMap",
                                             "metadata": {"name": NAME, "namespace": NAMESPACE}, "data": want})
            log.info("created %s/%s", NAMESPACE, NAME)
            return
        if current.get("data") != want:
            current["data"] = want
            await self._call("update", NAME, current)
            log.info("updated %s/%s", NAMESPACE, NAME)
