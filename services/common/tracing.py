"""Tracing in every service: kube's component-base/tracing (KEP-647) over the OpenTelemetry SDK.

`--tracing-config-file` names an apiserver.config.k8s.io TracingConfiguration (v1alpha1 or v1beta1, as
kube-apiserver 1.33 reads it): `endpoint` (default localhost:4317, an OTLP/gRPC collector) and
`samplingRatePerMillion` (default 0: no request is sampled unless a trusted caller's sampled parent says
so). Without the flag nothing here does any work: every helper returns at its first test of ENABLED.

One trace per request across the processes: the proxy decides sampling once at the front door (root()),
and every hop carries the W3C `traceparent` of the span that makes the call: gRPC metadata on unary calls
(metadata()), the `traceparent` field of a mux Frame and of APF's SeatRequest, the HTTP header of
webhooks and aggregated API servers (headers()). The receiving side continues it (attach()); its
sampler follows the parent's decision (ParentBased), so a downstream service never samples on its own
what the front door dropped. A child span (span()) is only made under a recording parent: under an
unsampled one it would be dropped anyway, and making it costs a request's worth of microseconds. One span
per service a request crosses: a stage that makes no call to another service is an event of the current
span with its duration (step()), as kube's utiltrace steps are (a span costs the SDK some 40 µs of CPU to
make and encode, an event a third of that), and a call's client side makes no span of its own (the next
service's span is the caller's span's child).

What an unsampled request costs (tools/bench_tracing.py measures it): at samplingRatePerMillion 0 the front
door makes no span at all unless a trusted caller sent a traceparent (may_record()), and the hops between
apiary's own services carry a trace only when it is sampled (traceparent()), so the services below never
parse one; an HTTP call out (a webhook, an aggregated server) still carries an unsampled context, as kube's
does, so a server that traces on its own follows the front door's decision.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

import yaml

log = logging.getLogger(__name__)

GROUP = "apiserver.config.k8s.io"
VERSIONS = ("v1alpha1", "v1beta1")
KIND = "TracingConfiguration"
DEFAULT_ENDPOINT = "localhost:4317"
MAX_SAMPLING_RATE = 1_000_000
HEADER = "traceparent"
# How long a finished span waits in the batch before it is exported: kube's batcher waits 5 s; a person
# following one request wants to see it sooner, and the tests look for it.
EXPORT_DELAY_MS = 500

ENABLED = False
_tracer: Any = None
_provider: Any = None
_rate = 0  # the front door's samplingRatePerMillion
# opentelemetry's trace and context modules once tracing is on (imported by start(): not at all when it is off)
_trace: Any = None
_context: Any = None
_NULL = contextlib.nullcontext()
# W3C trace context, version 00 (and later versions' first four fields): version-traceid-parentid-flags
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


class ConfigError(ValueError):
    """A tracing configuration kube would refuse (the message says why, as kube's does)."""


@dataclass(frozen=True)
class TracingConfiguration:
    endpoint: str = DEFAULT_ENDPOINT
    sampling_rate_per_million: int = 0


def decode(data: bytes | str) -> TracingConfiguration:
    """The configuration a file holds, decoded strictly and validated as kube does (ConfigError else)."""
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError as e:
        raise ConfigError(f"unable to decode tracing configuration data: {e}") from None
    if not isinstance(doc, dict):
        raise ConfigError("unable to decode tracing configuration data: not a TracingConfiguration object")
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    group, _, version = str(api_version or "").rpartition("/")
    if kind != KIND or group != GROUP or version not in VERSIONS:
        raise ConfigError(f"unable to decode tracing configuration data: no kind {kind!r} is registered for "
                          f"version {api_version!r} (known: {', '.join(f'{GROUP}/{v}' for v in VERSIONS)})")
    unknown = sorted(set(doc) - {"apiVersion", "kind", "endpoint", "samplingRatePerMillion"})
    if unknown:
        raise ConfigError("unable to decode tracing configuration data: strict decoding error: "
                          + ", ".join(f'unknown field "{k}"' for k in unknown))
    endpoint = doc.get("endpoint")
    rate = doc.get("samplingRatePerMillion")
    if endpoint is not None and not isinstance(endpoint, str):
        raise ConfigError("unable to decode tracing configuration data: endpoint: expected a string")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int)):
        raise ConfigError("unable to decode tracing configuration data: samplingRatePerMillion: expected an integer")
    errors = []
    if rate is not None and rate < 0:
        errors.append(f"samplingRatePerMillion: Invalid value: {rate}: sampling rate must be positive")
    if rate is not None and rate > MAX_SAMPLING_RATE:
        errors.append(f"samplingRatePerMillion: Invalid value: {rate}: sampling rate per million must be less "
                      "than or equal to one million")
    if endpoint is not None:
        errors += _endpoint_errors(endpoint)
    if errors:
        raise ConfigError("invalid tracing configuration: " + ", ".join(errors))
    return TracingConfiguration(endpoint if endpoint is not None else DEFAULT_ENDPOINT, rate or 0)


def _endpoint_errors(endpoint: str) -> list[str]:
    """kube's endpoint rule: a gRPC target whose scheme is dns (the default), unix or unix-abstract."""
    target = endpoint if "//" in endpoint else "dns://" + endpoint
    scheme = target.split("://", 1)[0] if "://" in target else ""
    if scheme in ("dns", "unix", "unix-abstract"):
        return []
    return [f'endpoint: Invalid value: "{target}": unsupported scheme: {scheme}.  Options are none, dns, unix, '
            "or unix-abstract.  See https://github.com/grpc/grpc/blob/master/doc/naming.md"]


def read(path: str) -> TracingConfiguration:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"unable to read tracing configuration from {path!r}: {e.strerror}") from None
    return decode(data)


def setup(service: str, path: str) -> None:
    """Tracing for this process from the file at `path` ("": none, and nothing is ever traced); a refused
    file ends the process with kube's message, as a bad flag does."""
    if not path:
        return
    try:
        cfg = read(path)
    except ConfigError as e:
        raise SystemExit(f"{service}: --tracing-config-file: {e}") from None
    start(service, cfg)


def start(service: str, cfg: TracingConfiguration, exporter: Any = None) -> None:
    """Export this process's spans to cfg.endpoint (or to `exporter`), sampled as cfg says."""
    global ENABLED, _tracer, _provider, _rate, _trace, _context
    if _provider is not None:  # a compact host's second service: one provider per process, the first's
        return
    from opentelemetry import context, trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    if exporter is None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=cfg.endpoint, insecure=True)
    class HashedResource(Resource):
        """The process's Resource, its hash computed once: the OTLP exporter groups every span it encodes
        by its resource, and Resource's own hash is a json.dumps of the attributes each time."""

        def __init__(self, resource: Resource) -> None:
            super().__init__(resource.attributes, resource.schema_url)
            self._hash = super().__hash__()

        def __hash__(self) -> int:
            return self._hash

        __eq__ = Resource.__eq__

    provider = TracerProvider(resource=HashedResource(Resource.create({"service.name": f"apiary-{service}"})),
                              sampler=ParentBased(TraceIdRatioBased(cfg.sampling_rate_per_million / MAX_SAMPLING_RATE)))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=EXPORT_DELAY_MS))
    _provider, _tracer = provider, provider.get_tracer("apiary")
    _trace, _context, _rate = trace, context, cfg.sampling_rate_per_million
    ENABLED = True
    log.info("tracing: exporting to %s, sampling %d per million", cfg.endpoint, cfg.sampling_rate_per_million)


def shutdown() -> None:
    """Export what is still batched (a stopping service's last spans), then stop exporting: the process is
    as before start() (a test's next start() makes a new provider)."""
    global ENABLED, _provider, _tracer
    if _provider is not None:
        ENABLED = False
        _provider.shutdown()
        _provider = _tracer = None


def flush(timeout_millis: int = 30_000) -> bool:
    """Export every span ended so far now, not on the batch's schedule (a test reading what was sent);
    False if the exporter did not finish in time. Nothing to do without tracing."""
    return _provider.force_flush(timeout_millis) if _provider is not None else True


def recording() -> bool:
    """Whether the current trace is sampled (its spans are worth making), here or in the caller's process."""
    if not ENABLED:
        return False
    return bool(_trace.get_current_span().get_span_context().trace_flags.sampled)


def may_record(trusted_parent: bool) -> bool:
    """Whether a request's root span may be sampled: at rate 0 only one a trusted caller's traceparent
    continues can be (so the front door makes nothing at all for the others)."""
    return ENABLED and (_rate > 0 or trusted_parent)


class _Current:
    """A span made current for a block and ended after it, an exception recorded on it as the SDK's
    start_as_current_span records one: the same work without its two generator layers, a fifth of a span's
    cost, paid by every span of a sampled request."""

    __slots__ = ("_entered", "_owned", "_span", "_token")

    def __init__(self, span: Any, entered: Any, owned: bool = True) -> None:
        self._span, self._entered, self._owned = span, entered, owned

    def __enter__(self) -> Any:
        self._token = _context.attach(_trace.set_span_in_context(self._span))
        return self._entered

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        try:
            if exc is not None and self._owned and self._span.is_recording():
                self._span.record_exception(exc)
                self._span.set_status(_trace.Status(_trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        finally:
            _context.detach(self._token)
            if self._owned or self._span.is_recording():
                self._span.end()


def span(name: str, attributes: Mapping[str, Any] | None = None) -> contextlib.AbstractContextManager[Any]:
    """A child of the current span for the block (the span, or None where nothing is recorded)."""
    if not ENABLED or not recording():
        return _NULL
    s = _tracer.start_span(name, attributes=attributes)
    return _Current(s, s)


class Step:
    """A stage that makes no call to another service (served from a cache, decided in process): an event
    with its duration on the current span, as kube's utiltrace steps are, not a span of its own (a span
    costs several times as much to make and export, and says nothing more). What the block sets on it
    (set_attributes(), as on a span) goes with the event; an exception escaping it is named in it."""

    __slots__ = ("_attributes", "_name", "_start")
    quiet: tuple[type[BaseException], ...] = ()  # exceptions that are no failure of the stage's

    def __init__(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        self._name = name
        self._attributes = dict(attributes) if attributes else {}

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self._attributes.update(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        self._attributes[key] = value

    def __enter__(self) -> Self:
        self._start = time.perf_counter()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self._attributes["duration_ms"] = round((time.perf_counter() - self._start) * 1e3, 3)
        if exc is not None and not isinstance(exc, self.quiet):
            self._attributes["error"] = type(exc).__name__
        add_event(self._name, self._attributes)


def step(name: str, attributes: Mapping[str, Any] | None = None) -> contextlib.AbstractContextManager[Any]:
    """A stage of a sampled request that makes no call to another service: an event with its duration on the
    current span (the Step, for set_attributes()), or None where nothing is recorded."""
    if not ENABLED or not recording():
        return _NULL
    return Step(name, attributes)


def set_attributes(attributes: Mapping[str, Any]) -> None:
    """Attributes of the current span (known only once the work is done: a response code, a revision)."""
    if ENABLED:
        current = _trace.get_current_span()
        if current.is_recording():  # a span of this process's (a caller's remote one records nothing)
            current.set_attributes(attributes)


def parse(traceparent: str) -> Any:
    """The span context a `traceparent` names (remote), or None when it is absent or malformed: W3C says
    a receiver ignores a header it cannot parse, and so does kube."""
    if not traceparent or not ENABLED:
        return None
    m = _TRACEPARENT.match(traceparent.strip())
    if m is None or m.group(1) == "ff" or (m.group(1) == "00" and m.group(5)):
        return None
    ctx = _trace.SpanContext(int(m.group(2), 16), int(m.group(3), 16), True,
                             _trace.TraceFlags(int(m.group(4), 16) & 1))
    return ctx if ctx.is_valid else None


def root(name: str, traceparent: str = "", trusted: bool = False, start_time: int | None = None,
         attributes: Mapping[str, Any] | None = None) -> contextlib.AbstractContextManager[Any]:
    """The span of one request at the front door (None where nothing is recorded). A trusted caller's
    `traceparent` is its parent (kube 1.33 trusts system:masters and system:monitoring); anyone else's
    becomes a link of a new root, so no client picks trace IDs or sampling. `start_time` (ns since the
    epoch) backdates it to the request's arrival when it is made after authentication."""
    if not may_record(trusted and bool(traceparent)):
        return _NULL
    trace = _trace
    remote = parse(traceparent)
    parent = _context.Context()
    links = None
    if remote is not None and trusted:
        parent = trace.set_span_in_context(trace.NonRecordingSpan(remote), parent)
    elif remote is not None:
        links = [trace.Link(remote)]
    s = _tracer.start_span(name, context=parent, links=links, start_time=start_time, attributes=attributes,
                           kind=trace.SpanKind.SERVER)
    # an unsampled one (a trusted caller's unsampled parent) is current too: an HTTP call out tells its decision.
    # The caller says how the request ended (a 404 raised through it is no error of the server's), and may
    # end it before the block does (a watch, once established): the block ends it only if it is still open.
    return _Current(s, s if s.is_recording() else None, owned=False)


def start_span(name: str, attributes: Mapping[str, Any] | None = None, traceparent: str | None = None,
          start_time: int | None = None) -> Any:
    """A span the caller ends (end()), begun now or at `start_time` (ns since the epoch, for a stage timed
    before its trace existed): a child of the current span, or of the remote span a `traceparent` names
    (a call among others on one stream, whose own context is not the current one). None where nothing
    is recorded."""
    if not ENABLED:
        return None
    trace = _trace
    parent = None
    if traceparent is None:
        if not recording():
            return None
    else:
        remote = parse(traceparent)
        if remote is None or not remote.trace_flags.sampled:
            return None
        parent = trace.set_span_in_context(trace.NonRecordingSpan(remote))
    s = _tracer.start_span(name, context=parent, attributes=attributes, start_time=start_time)
    return s if s.is_recording() else None


def use(span: Any) -> contextlib.AbstractContextManager[Any]:
    """`span` (from start_span()) as the current span for the block, which neither ends it nor marks it
    failed: its owner does, knowing how the work ended."""
    return _trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False)


def make_current(span: Any) -> object:
    """Make `span` current (use()'s work without its generator), for restore() with the token it returns."""
    return _context.attach(_trace.set_span_in_context(span))


def restore(token: object) -> None:
    """The span current before make_current() is current again."""
    _context.detach(token)


def add_event(name: str, attributes: Mapping[str, Any], timestamp: int | None = None) -> None:
    """An event on the current span (a short step that is not worth a span of its own), if it records."""
    if ENABLED:
        current = _trace.get_current_span()
        if current.is_recording():
            current.add_event(name, attributes, timestamp)


def end(span: Any, error: str = "", end_time: int | None = None) -> None:
    """End a span from start_span() or root() unless it has ended already; `error` marks it failed (a 5xx)."""
    if span.is_recording():
        if error:
            span.set_status(_trace.Status(_trace.StatusCode.ERROR, error))
        span.end(end_time)


def attach(traceparent: str) -> None:
    """Continue the caller's trace in this task (the receiving side of a hop; the task is the call's own,
    so nothing needs detaching)."""
    if not ENABLED or not traceparent:
        return
    remote = parse(traceparent)
    if remote is not None:
        _context.attach(_trace.set_span_in_context(_trace.NonRecordingSpan(remote)))


def detached() -> contextvars.Context | None:
    """The context for a background task started while a request is served (a watch cache's etcd feed,
    a read shared by many requests): the current one without its span, so that the task's work never
    lands in that request's trace (None without tracing: create_task copies the current context)."""
    if not ENABLED:
        return None
    ctx = contextvars.copy_context()
    ctx.run(_context.attach, _context.Context())
    return ctx


def traceparent() -> str:
    """The current span's `traceparent` to send on a hop to another of apiary's services ("" when there is
    no sampled trace to continue: below an unsampled one no span is made, so the hop need not carry it)."""
    if not ENABLED:
        return ""
    ctx = _trace.get_current_span().get_span_context()
    if not ctx.trace_flags.sampled:
        return ""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-01"


def headers() -> dict[str, str]:
    """HTTP headers continuing the trace on an outbound call (a webhook, an aggregated server): sampled or
    not, as kube sends it, so a server with its own sampler follows the front door's decision."""
    if not ENABLED:
        return {}
    ctx = _trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return {}
    return {HEADER: f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags) & 1:02x}"}


def metadata() -> tuple[tuple[str, str], ...]:
    """gRPC metadata continuing the trace on a unary call (empty when there is none)."""
    tp = traceparent()
    return ((HEADER, tp),) if tp else ()


def from_metadata(md: object) -> str:
    """The `traceparent` among a call's invocation metadata ("" without one)."""
    for item in md or ():  # type: ignore[attr-defined]
        if item[0] == HEADER:
            return item[1] if isinstance(item[1], str) else item[1].decode()
    return ""


def trace_id() -> str:
    """The current sampled trace's ID in hex, for an exemplar ("" when nothing is recorded)."""
    if not ENABLED:
        return ""
    ctx = _trace.get_current_span().get_span_context()
    return f"{ctx.trace_id:032x}" if ctx.is_valid and ctx.trace_flags.sampled else ""
