"""A webhook call made in a recorded trace is a span of it, and the webhook is sent that span's `traceparent`
(services/apiserver/webhook/client.py): a loopback webhook server (tools/fakeservers.py) and a loopback OTLP
receiver (services/cluster/otlpreceiver.py)."""
from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from services.apiserver.webhook.client import WebhookClient
from services.cluster.otlpreceiver import Receiver
from services.common import tracing
from tools.fakeservers import ConversionWebhook

TRACE = "3af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    tracing.start("test", tracing.TracingConfiguration(r.endpoint, 0))
    yield r
    tracing.shutdown()
    r.stop()


async def test_a_traced_call_is_a_span_whose_context_the_webhook_is_sent(receiver: Receiver, tmp_path: Path) -> None:
    server = ConversionWebhook(tmp_path, "convert", lambda obj, version: obj).start()
    client = WebhookClient(None)
    cc = {"url": f"{server.url}/convert", "caBundle": base64.b64encode(server.ca_pem.encode()).decode()}
    body = orjson.dumps({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                         "request": {"uid": "1", "desiredAPIVersion": "stable.example.com/v2", "objects": []}})
    try:
        with tracing.root("POST", f"00-{TRACE}-{PARENT}-01", trusted=True):
            traced = await client.post(cc, body, 5, "conversion webhook", {"custom-resource-definition": "crontabs"})
        untraced = await client.post(cc, body, 5)  # no request's trace: no span, no header
    finally:
        await client.aclose()
        server.stop()
    assert traced.status == untraced.status == 200
    spans = receiver.wait_for(lambda s: s["trace_id"] == TRACE)
    (root,) = [s for s in spans if s["name"] == "POST"]
    (call,) = [s for s in spans if s["name"] == "conversion webhook"]
    assert call["parent_span_id"] == root["span_id"]
    assert call["attributes"]["custom-resource-definition"] == "crontabs"
    assert call["attributes"]["http.status_code"] == 200
    assert call["attributes"]["http.url"] == f"{server.url}/convert?timeout=5s"
    assert server.traceparents == [f"00-{TRACE}-{call['span_id']}-01", ""]
