"""services/apiserver/filters/traces.py: the root span's code for a failed request, the stage spans under
it, authentication an event on the root timed by its Server-Timing stage, a step an event, a watch traced for its setup only; nothing when off."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from apiary_pb import envelope_pb2 as pb
from services.apiserver.filters import traces
from services.apiserver.requestinfo import RequestInfo
from services.common import tracing
from services.common.errors import InternalError, NotFound

TRUSTED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Ctx:
    """The attributes of a RequestContext the tracing filters read."""

    def __init__(self, traceparent: str = TRUSTED) -> None:
        self.headers = {b"traceparent": traceparent.encode()} if traceparent else {}
        self.user = pb.UserInfo(name="admin", groups=["system:masters"])
        self.audit_id, self.method, self.path, self.code = "aid", "GET", "/api/v1/namespaces/ns/configmaps", 0
        self.info = RequestInfo(path=self.path, verb="list", is_resource_request=True, api_prefix="api",
                                api_version="v1", namespace="ns", resource="configmaps")
        self.started = time.perf_counter() - 0.010
        self.mark = time.perf_counter() - 0.002
        self.timings = [("authn", 5.0)]


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.start("test", tracing.TracingConfiguration(), exporter)
    yield exporter
    tracing.shutdown()


def spans(exporter: InMemorySpanExporter) -> dict[str, Any]:
    tracing.flush()
    return {s.name: s for s in exporter.get_finished_spans()}


def chain(api: Any) -> Any:
    return traces.with_tracing(api)


def test_off_nothing_is_in_the_chain() -> None:
    async def api(ctx: Any) -> None: ...
    assert not tracing.ENABLED
    assert traces.with_tracing(api) is api


async def test_the_stages_and_authentication_under_the_root(exported: InMemorySpanExporter) -> None:
    async def api(ctx: Any) -> None:
        with traces.stage("authorization"):  # a stage that calls another service
            pass
        ctx.code = 200

    ctx = Ctx()
    await chain(api)(ctx)
    got = spans(exported)
    assert set(got) == {"GET /api/v1/namespaces/{:namespace}/configmaps", "authorization"}
    root = got["GET /api/v1/namespaces/{:namespace}/configmaps"]
    assert root.parent.span_id == 0xb7ad6b7169203331
    assert traces.trace_id() == "0af7651916cd43dd8448eb211c80319c"  # the exemplar, after the request
    (authn,), stage = root.events, got["authorization"]
    assert authn.name == "authentication" and dict(authn.attributes) == {"duration_ms": 5.0}
    assert stage.parent.span_id == root.context.span_id
    assert root.start_time <= authn.timestamp <= stage.start_time
    assert dict(root.attributes) == {"audit-id": "aid", "http.method": "GET",
                                     "http.target": "/api/v1/namespaces/ns/configmaps", "http.status_code": 200}


@pytest.mark.parametrize("error,code,status", [
    (NotFound("nope"), 404, StatusCode.UNSET), (InternalError("boom"), 500, StatusCode.ERROR),
    (ValueError("a bug"), 500, StatusCode.ERROR), (asyncio.CancelledError(), 504, StatusCode.ERROR)])
async def test_a_failed_request_has_its_code(exported: InMemorySpanExporter, error: BaseException, code: int,
                                             status: StatusCode) -> None:
    async def api(ctx: Any) -> None:
        raise error

    with pytest.raises(type(error)):
        await chain(api)(Ctx())
    root = spans(exported)["GET /api/v1/namespaces/{:namespace}/configmaps"]
    assert root.attributes["http.status_code"] == code and root.status.status_code == status


async def test_a_watch_is_traced_for_its_setup(exported: InMemorySpanExporter) -> None:
    async def api(ctx: Any) -> None:
        ctx.code = 200
        with traces.stage("apf wait"):
            traces.established()
            # streaming: the setup's spans are over, though the request goes on
            assert {"GET /api/v1/namespaces/{:namespace}/configmaps", "apf wait"} <= set(spans(exported))

    ctx = Ctx()
    ctx.info.verb = "watch"
    await chain(api)(ctx)
    got = spans(exported)
    assert len(exported.get_finished_spans()) == len(got) == 2  # each ended once
    root = got["GET /api/v1/namespaces/{:namespace}/configmaps"]
    assert root.attributes["http.status_code"] == 200


async def test_an_unsampled_request_makes_no_spans(exported: InMemorySpanExporter) -> None:
    async def api(ctx: Any) -> None:
        with traces.stage("apf execution") as s:
            assert s is None
        ctx.code = 200

    await chain(api)(Ctx(traceparent=""))  # rate 0 and no parent: not sampled
    assert spans(exported) == {} and traces.trace_id() == ""


async def test_a_step_is_an_event_on_the_current_span(exported: InMemorySpanExporter) -> None:
    async def api(ctx: Any) -> None:
        with traces.stage("apf execution"):
            with traces.step("authorization", {"a": "b"}) as step:
                step.set_attributes({"decision": "allow"})
            with pytest.raises(NotFound), traces.step("lookup"):
                raise NotFound("nope")
        ctx.code = 200

    await chain(api)(Ctx())
    got = spans(exported)
    assert "authorization" not in got
    authz, lookup = got["apf execution"].events
    assert authz.name == "authorization" and authz.attributes["decision"] == "allow" and authz.attributes["a"] == "b"
    assert authz.attributes["duration_ms"] >= 0
    assert lookup.name == "lookup" and lookup.attributes["error"] == "NotFound"


def test_a_step_of_an_unsampled_request_is_nothing() -> None:
    with traces.step("authorization") as step:
        assert step is None
