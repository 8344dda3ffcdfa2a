"""services/common/tracing.py: kube's TracingConfiguration, the front door's trust rule, propagation over a
hop, and nothing at all without a configuration; spans exported to a real OTLP receiver on loopback."""
from __future__ import annotations

import subprocess
import sys

import pytest

from services.cluster.otlpreceiver import Receiver
from services.common import tracing

HEAD = "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: TracingConfiguration\n"


def test_defaults_and_both_versions() -> None:
    assert tracing.decode(HEAD) == tracing.TracingConfiguration("localhost:4317", 0)
    cfg = tracing.decode(HEAD.replace("v1beta1", "v1alpha1") + "endpoint: unix:///tmp/otlp.sock\n"
                         "samplingRatePerMillion: 1000000\n")
    assert cfg == tracing.TracingConfiguration("unix:///tmp/otlp.sock", 1_000_000)


@pytest.mark.parametrize("body,words", [
    ("samplingRatePerMillion: -1\n", "sampling rate must be positive"),
    ("samplingRatePerMillion: 1000001\n", "less than or equal to one million"),
    ("endpoint: http://collector:4317\n", "unsupported scheme: http"),
    ("samplingRate: 5\n", 'unknown field "samplingRate"'),
    ("samplingRatePerMillion: lots\n", "expected an integer"),
])
def test_refused_as_kube_refuses(body: str, words: str) -> None:
    with pytest.raises(tracing.ConfigError, match=words):
        tracing.decode(HEAD + body)


def test_unknown_version_and_garbage_are_refused() -> None:
    with pytest.raises(tracing.ConfigError, match="no kind"):
        tracing.decode(HEAD.replace("v1beta1", "v1"))
    with pytest.raises(tracing.ConfigError, match="unable to decode"):
        tracing.decode("{: nope")


def test_a_refused_file_stops_the_service_with_the_reason(tmp_path) -> None:
    bad = tmp_path / "tracing.yaml"
    bad.write_text(HEAD + "samplingRatePerMillion: -3\n")
    run = subprocess.run([sys.executable, "-m", "services.storage", "--insecure-internal",
                          "--tracing-config-file", str(bad)], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "--tracing-config-file" in run.stderr and "sampling rate must be positive" in run.stderr


def test_off_does_nothing() -> None:
    assert not tracing.ENABLED
    with tracing.root("GET", "00-" + "a" * 32 + "-" + "b" * 16 + "-01", trusted=True) as s:
        assert s is None
        assert tracing.traceparent() == "" and tracing.metadata() == () and tracing.headers() == {}
        with tracing.span("child") as c:
            assert c is None


@pytest.fixture(scope="module")
def receiver():
    r = Receiver().start()
    tracing.start("test", tracing.TracingConfiguration(r.endpoint, 0))
    yield r
    tracing.shutdown()
    r.stop()


TRUSTED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_sampling_is_decided_at_the_front_door(receiver) -> None:
    # rate 0: a request of its own is not sampled, so no span below it is made
    with tracing.root("GET") as s:
        assert s is None and not tracing.recording()
        with tracing.span("child") as c:
            assert c is None
    # a trusted caller's sampled parent is continued; the hop carries this trace onward
    with tracing.root("GET", TRUSTED, trusted=True, attributes={"audit-id": "x"}) as s:
        assert s is not None
        tp = tracing.traceparent()
        assert tp.startswith("00-0af7651916cd43dd8448eb211c80319c-") and tp.endswith("-01")
        assert tracing.metadata() == (("traceparent", tp),) and tracing.headers() == {"traceparent": tp}
        with tracing.span("registry", {"verb": "get"}):
            pass
    spans = receiver.wait_for(lambda s: s["trace_id"] == "0af7651916cd43dd8448eb211c80319c")
    by_name = {s["name"]: s for s in spans}
    assert by_name["GET"]["parent_span_id"] == "b7ad6b7169203331"
    assert by_name["GET"]["attributes"] == {"audit-id": "x"}
    assert by_name["registry"]["parent_span_id"] == by_name["GET"]["span_id"]


def test_an_untrusted_parent_is_only_linked(receiver) -> None:
    tracing._provider.sampler._root = tracing._provider.sampler._root.__class__(1.0)  # sample every root
    tracing._rate = tracing.MAX_SAMPLING_RATE
    try:
        with tracing.root("GET", TRUSTED.replace("0af7", "1af7"), trusted=False) as s:
            assert s is not None
            own = f"{s.get_span_context().trace_id:032x}"
    finally:
        tracing._provider.sampler._root = tracing._provider.sampler._root.__class__(0.0)
        tracing._rate = 0
    assert own != "1af7651916cd43dd8448eb211c80319c"
    (span,) = receiver.wait_for(lambda s: s["trace_id"] == own)
    assert span["parent_span_id"] == ""
    assert span["links"] == [{"trace_id": "1af7651916cd43dd8448eb211c80319c", "span_id": "b7ad6b7169203331"}]


@pytest.mark.parametrize("header", ["", "garbage", "00-" + "0" * 32 + "-b7ad6b7169203331-01",
                                    "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
                                    "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"])
def test_a_malformed_traceparent_is_ignored(receiver, header: str) -> None:
    assert tracing.parse(header) is None
    with tracing.root("GET", header, trusted=True) as s:  # a new root at rate 0: not sampled, no failure
        assert s is None


async def test_a_hop_continues_the_trace(receiver) -> None:
    import asyncio

    with tracing.root("POST", TRUSTED.replace("0af7", "2af7"), trusted=True):
        tp = tracing.traceparent()

    async def receiving_side() -> str:  # another task, as a gRPC call's or a mux frame's
        tracing.attach(tp)
        with tracing.span("storage"):
            return tracing.traceparent()

    downstream = await asyncio.create_task(receiving_side())
    assert downstream.split("-")[1] == tp.split("-")[1] and downstream != tp
    spans = receiver.wait_for(lambda s: s["trace_id"] == "2af7651916cd43dd8448eb211c80319c")
    by_name = {s["name"]: s for s in spans}
    assert by_name["storage"]["parent_span_id"] == by_name["POST"]["span_id"]


def test_an_unsampled_request_goes_on_only_over_http(receiver) -> None:
    # rate 0: the front door makes nothing for a request without a trusted parent
    assert not tracing.may_record(False) and tracing.may_record(True)
    with tracing.root("GET", TRUSTED, trusted=False) as s:
        assert s is None and tracing.headers() == {} and tracing.traceparent() == ""
    # a trusted caller's unsampled parent: no span below it, no traceparent between apiary's services, but a
    # webhook or an aggregated server is told the trace and its decision (flags 00), as kube tells it
    unsampled = TRUSTED.replace("0af7", "3af7")[:-2] + "00"
    with tracing.root("GET", unsampled, trusted=True) as s:
        assert s is None and not tracing.recording()
        assert tracing.traceparent() == "" and tracing.metadata() == ()
        (tp,) = tracing.headers().values()
        assert tp.startswith("00-3af7651916cd43dd8448eb211c80319c-") and tp.endswith("-00")


def test_a_failing_block_ends_its_span_with_the_error(receiver) -> None:
    with pytest.raises(KeyError), tracing.root("GET", TRUSTED.replace("0af7", "4af7"), trusted=True):
        with tracing.span("registry"):
            raise KeyError("gone")
    assert tracing.traceparent() == ""  # both spans left the context
    spans = receiver.wait_for(lambda s: s["trace_id"] == "4af7651916cd43dd8448eb211c80319c")
    assert sorted(s["name"] for s in spans) == ["GET", "registry"]
    by_name = {s["name"]: s for s in spans}
    assert by_name["registry"]["status"] == 2  # STATUS_CODE_ERROR
    # the root's caller says how the request ended (with_tracing: only a 5xx is the server's error)
    assert by_name["GET"]["status"] == 0
