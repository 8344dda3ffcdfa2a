"""The webhook backend (kube's plugin/pkg/audit/webhook): events POSTed as one audit.k8s.io/v1
EventList to the server of a kubeconfig file (--audit-webhook-config-file), retried with exponential
backoff from --audit-webhook-initial-backoff when the call fails or the webhook answers 429 or 5xx;
events of a batch that could not be delivered are counted (apiserver_audit_error_total{plugin="webhook"}).

Sending is asynchronous here in every mode: in blocking modes each process() call starts its send (kube
sends in the request's goroutine; an event loop cannot wait for it there), so blocking-strict cannot
fail a request on a webhook error; batch mode (the default) is as kube's.
"""
from __future__ import annotations

import asyncio
import logging
import random

import orjson

from services.apiserver import kubeconfig
from services.apiserver.httpclient import CallError, Client

from . import Event
from .metrics import plugin_error

log = logging.getLogger(__name__)
PLUGIN = "webhook"
INITIAL_BACKOFF = 10.0  # kube's DefaultInitialBackoffDelay
BACKOFF_FACTOR, BACKOFF_JITTER, BACKOFF_STEPS = 1.5, 0.2, 5  # webhook.DefaultRetryBackoffWithInitialDelay
TIMEOUT = 30.0


class WebhookBackend:
    name = PLUGIN

    def __init__(self, config_file: str, initial_backoff: float = INITIAL_BACKOFF,
                 group_version: str = "audit.k8s.io/v1") -> None:
        self.conn = kubeconfig.load(config_file)  # ConfigError: the proxy does not start
        self.initial_backoff, self.group_version = initial_backoff, group_version
        self._headers = {"Content-Type": "application/json", "Accept": "application/json, */*"}
        self._client: Client | None = None
        self._sends: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._client = self.conn.client(TIMEOUT)

    def process(self, events: list[Event]) -> bool:
        task = asyncio.get_running_loop().create_task(self.send(list(events)))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)
        return True

    async def send(self, events: list[Event]) -> None:
        """One EventList, retried; its events counted as errors when it could not be delivered."""
        assert self._client is not None
        body = orjson.dumps({"kind": "EventList", "apiVersion": self.group_version, "metadata": {},
                             "items": events})
        delay, reason = self.initial_backoff, ""
        for attempt in range(BACKOFF_STEPS):
            try:
                r = await self._client.request("POST", "", body, self._headers)
                if r.ok:
                    return
                reason = f"the server responded with the status code {r.status}"
                if r.status != 429 and r.status < 500:
                    break  # the webhook refused this batch: sending it again will not help
            except CallError as e:
                reason = str(e)
            if attempt + 1 < BACKOFF_STEPS:
                await asyncio.sleep(delay * (1 + random.random() * BACKOFF_JITTER))
                delay *= BACKOFF_FACTOR
        plugin_error(PLUGIN, reason, events)

    async def stop(self) -> None:
        if self._sends:
            await asyncio.gather(*self._sends, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None
