"""The admission chain's spans (issue 27): each phase, each plug-in below it, each webhook called below its
plug-in (validating ones in parallel, each its own span), against real webhook servers on loopback; none
under an unsampled request."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.admission.chain import Chain
from services.admission.webhook.dispatcher import MutatingAdmissionWebhook, ValidatingAdmissionWebhook
from services.common import tracing
from tests.unit.admission.test_admission_webhooks import Setup, attrs, patch_of

TRACE = "0af7651916cd43dd8448eb211c80319c"
SAMPLED = f"00-{TRACE}-b7ad6b7169203331-01"


@pytest.fixture
def hooks(tmp_path: Path) -> Iterator[Setup]:
    """Webhook configurations filled by hand, their servers real (test_admission_webhooks.Setup)."""
    s = Setup(tmp_path)
    yield s
    for srv in s.servers:
        srv.stop()


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.start("admission-test", tracing.TracingConfiguration("localhost:4317", 0), exporter)
    try:
        yield exporter
    finally:
        tracing.shutdown()


def finished(exporter: InMemorySpanExporter) -> list[Any]:
    tracing.flush()
    return list(exporter.get_finished_spans())


def chain_of(setup: Setup) -> Chain:
    m = setup.server(lambda req: {"allowed": True, **patch_of([{"op": "add", "path": "/data",
                                                                "value": {"k": "v"}}])})
    v1 = setup.server(lambda req: {"allowed": True})
    v2 = setup.server(lambda req: {"allowed": True})
    setup.hooks(True, setup.hook("m.hooks.test", m))
    setup.hooks(False, setup.hook("v1.hooks.test", v1), setup.hook("v2.hooks.test", v2))
    return Chain([MutatingAdmissionWebhook(setup.sources), ValidatingAdmissionWebhook(setup.sources)])


async def test_phases_plugins_and_webhooks_are_nested(hooks: Setup, exported: InMemorySpanExporter) -> None:
    chain = chain_of(hooks)
    a = attrs()
    with tracing.root("POST", SAMPLED, trusted=True):
        await chain.admit(a)
        await chain.validate(a)
    spans = finished(exported)
    assert {f"{s.context.trace_id:032x}" for s in spans} == {TRACE}
    by_id = {s.context.span_id: s for s in spans}

    def parent(s: Any) -> Any:
        return by_id[s.parent.span_id]

    # the webhook's change asks for the mutating phase's second pass (reinvocation), which calls no webhook
    mutating, again = sorted((s for s in spans if s.name == "mutating admission"), key=lambda s: s.start_time)
    (validating,) = [s for s in spans if s.name == "validating admission"]
    assert parent(mutating).name == parent(again).name == parent(validating).name == "POST"
    assert mutating.attributes["operation"] == "CREATE" and mutating.attributes["resource"] == "configmaps"
    assert (mutating.attributes["reinvocation"], again.attributes["reinvocation"]) == (False, True)
    (call,) = [s for s in spans if s.name == "Call mutating webhook"]
    assert (call.attributes["webhook"], call.attributes["configuration"]) == ("m.hooks.test", "cfg")
    assert parent(call) is mutating  # a plug-in is an event on its phase's span, the webhook calls its children
    assert "admission plugin" not in {s.name for s in spans}
    assert [(e.name, e.attributes["plugin"]) for e in mutating.events] == [("admission plugin", "MutatingAdmissionWebhook")]
    assert mutating.events[0].attributes["duration_ms"] >= 0 and mutating.events[0].timestamp >= call.end_time
    calls = [s for s in spans if s.name == "Call validating webhook"]
    assert sorted(s.attributes["webhook"] for s in calls) == ["v1.hooks.test", "v2.hooks.test"]
    assert {parent(s).context.span_id for s in calls} == {validating.context.span_id}  # called in parallel
    assert [e.attributes["plugin"] for e in validating.events] == ["ValidatingAdmissionWebhook"]


async def test_nothing_under_an_unsampled_request(hooks: Setup, exported: InMemorySpanExporter) -> None:
    chain = chain_of(hooks)
    a = attrs()
    with tracing.root("POST", SAMPLED[:-2] + "00", trusted=True):
        await chain.admit(a)
        await chain.validate(a)
    assert a.object is not None and a.object["data"] == {"k": "v"}  # admitted all the same
    assert finished(exported) == []
