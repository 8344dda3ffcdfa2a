"""Whom the server trusts: the client CA, the request-header CA and its header names and allowed
names, from the flags or else from the ConfigMap kube-system/extension-apiserver-authentication
that the core API server publishes — and kept current when they come from the ConfigMap, as kube's
dynamic CA and request-header controllers do (polled every `interval` seconds)."""
from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from services.apiserver.filters.requestheader import (
    DEFAULT_EXTRA_PREFIXES,
    DEFAULT_GROUP_HEADERS,
    DEFAULT_UID_HEADERS,
    DEFAULT_USERNAME_HEADERS,
    RequestHeaderConfig,
)
from services.apiserver.httpclient import CallError, Client

log = logging.getLogger(__name__)
EXTENSION_CONFIGMAP = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"


@dataclass(frozen=True)
class Trust:
    client_ca_file: str
    requestheader_ca_file: str
    requestheader: RequestHeaderConfig | None


def _pem_file(pem: str) -> str:
    fd, path = tempfile.mkstemp(prefix="kit-ca-", suffix=".crt")
    with os.fdopen(fd, "w") as f:
        f.write(pem)
    return path


def resolve(args: Any, published: dict[str, str]) -> Trust:
    """The flags first, the ConfigMap's data for what they leave out."""

    def listed(flag: list[str] | None, key: str, default: Sequence[str]) -> Sequence[str]:
        if flag is not None:
            return flag
        if key in published:
            return orjson.loads(published[key]) or []
        return default

    client_ca, rh_ca = args.client_ca_file, args.requestheader_client_ca_file
    if not client_ca and published.get("client-ca-file"):
        client_ca = _pem_file(published["client-ca-file"])
    if not rh_ca and published.get("requestheader-client-ca-file"):
        rh_ca = _pem_file(published["requestheader-client-ca-file"])
    requestheader = None
    if rh_ca:
        requestheader = RequestHeaderConfig.from_flags(
            listed(args.requestheader_username_headers, "requestheader-username-headers", DEFAULT_USERNAME_HEADERS),
            listed(args.requestheader_uid_headers, "requestheader-uid-headers", DEFAULT_UID_HEADERS),
            listed(args.requestheader_group_headers, "requestheader-group-headers", DEFAULT_GROUP_HEADERS),
            listed(args.requestheader_extra_headers_prefix, "requestheader-extra-headers-prefix",
                   DEFAULT_EXTRA_PREFIXES),
            listed(args.requestheader_allowed_names, "requestheader-allowed-names", ()),
        )
    return Trust(client_ca, rh_ca, requestheader)


async def published(client: Client) -> dict[str, str] | None:
    """The ConfigMap's data; None when it cannot be read (kube's servers then go on without it)."""
    try:
        r = await client.get(EXTENSION_CONFIGMAP)
    except CallError as e:
        log.warning("unable to get configmap/extension-apiserver-authentication in kube-system: %s", e)
        return None
    if r.status != 200:
        log.warning("unable to get configmap/extension-apiserver-authentication in kube-system: %s %s",
                    r.status, r.text[:200])
        return None
    return r.json().get("data") or {}


class Reloader:
    """Polls the ConfigMap; when its data changes, hands the new Trust to `apply`."""

    def __init__(self, client: Client, args: Any, seen: dict[str, str],
                 apply: Callable[[Trust], None], interval: float = 30.0) -> None:
        self.client, self.args, self.seen, self.apply, self.interval = client, args, seen, apply, interval
        self._task: asyncio.Task[None] | None = None

    async def check(self) -> bool:
        """Whether the ConfigMap changed (and the change was applied)."""
        data = await published(self.client)
        if data is None or data == self.seen:
            return False
        trust = resolve(self.args, data)
        self.apply(trust)
        self.seen = data
        log.info("the trust of extension-apiserver-authentication changed: applied")
        return True

    def start(self) -> None:
        async def run() -> None:
            while True:
                await asyncio.sleep(self.interval)
                try:
                    await self.check()
                except Exception as e:  # noqa: BLE001 - a bad ConfigMap keeps the trust as it was
                    log.warning("extension-apiserver-authentication: %s", e)

        self._task = asyncio.create_task(run(), name="extension-apiserver-authentication")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
