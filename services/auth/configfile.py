"""A configuration file kube-apiserver reloads without a restart (AuthenticationConfiguration,
AuthorizationConfiguration): polled every RELOAD_INTERVAL, a changed file that validates replaces
the running configuration, a broken one keeps the last good one; both are counted in kube's
apiserver_<kind>_config_controller_* metrics and said in a log line."""
from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge

from services.common.background import cancel_and_wait

from .authenticators.jwks import APISERVER_ID_HASH

log = logging.getLogger(__name__)

RELOAD_INTERVAL = 1.0


def content_hash(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _metrics(kind: str) -> tuple[Counter, Gauge, Gauge]:
    return (
        Counter(f"apiserver_{kind}_config_controller_automatic_reloads",
                f"Total number of automatic reloads of {kind} configuration split by status and apiserver identity.",
                ["status", "apiserver_id_hash"]),
        Gauge(f"apiserver_{kind}_config_controller_automatic_reload_last_timestamp_seconds",
              f"Timestamp of the last automatic reload of {kind} configuration split by status and apiserver "
              "identity.", ["status", "apiserver_id_hash"]),
        Gauge(f"apiserver_{kind}_config_controller_last_config_info",
              f"Information about the last applied {kind} configuration with hash as label, split by apiserver "
              "identity.", ["apiserver_id_hash", "hash"]),
    )


_METRICS = {kind: _metrics(kind) for kind in ("authentication", "authorization")}


class ReloadedFile:
    """The file of one kind ("authentication", "authorization"); on_change(data) is called (and
    awaited when it returns an awaitable) with every content that differs from the last one read,
    and reports back through failed() or loaded()."""

    def __init__(self, kind: str, path: str, data: bytes, on_change: Callable[[bytes], Any]) -> None:
        self.kind, self.path, self.data, self.on_change = kind, path, data, on_change
        self.reloads, self.reload_last, self.config_info = _METRICS[kind]
        self._task: asyncio.Task[None] | None = None
        if path:
            self.config_info.labels(APISERVER_ID_HASH, content_hash(data)).set(1)

    def start(self) -> None:
        if self.path and self._task is None:
            self._task = asyncio.create_task(self._watch(), name=f"{self.kind}-config")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(RELOAD_INTERVAL)
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except OSError as e:
                log.error("%s config %s: cannot read the file, keeping the last one: %s", self.kind, self.path, e)
                continue
            if data != self.data:
                result = self.on_change(data)
                if inspect.isawaitable(result):
                    await result

    def failed(self, data: bytes, error: Exception) -> bool:
        """A changed file that does not validate: the last good configuration stays."""
        self.data = data
        log.error("%s config %s was not loaded, keeping the last good one: %s", self.kind, self.path, error)
        self.reloads.labels("failure", APISERVER_ID_HASH).inc()
        self.reload_last.labels("failure", APISERVER_ID_HASH).set(time.time())
        return False

    def loaded(self, data: bytes, summary: str) -> bool:
        self.data = data
        self.config_info.clear()
        self.config_info.labels(APISERVER_ID_HASH, content_hash(data)).set(1)
        self.reloads.labels("success", APISERVER_ID_HASH).inc()
        self.reload_last.labels("success", APISERVER_ID_HASH).set(time.time())
        log.info("%s config %s reloaded: %s", self.kind, self.path, summary)
        return True
