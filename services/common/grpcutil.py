"""gRPC bootstrap: mutual-TLS servers and channels, APIError <-> gRPC status mapping, and the
batched writing side of long-lived streams."""
from __future__ import annotations

import asyncio
import functools
import inspect
import ipaddress
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from prometheus_client import Counter, Gauge

from . import auditid, tracing
from .config import TLSFiles
from .errors import APIError, InternalError, error_from_rpc

log = logging.getLogger(__name__)

MAX_MESSAGE = 256 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # A restarted peer is reconnected within about 0.3 s of listening again (gRPC adds +-20 % jitter):
    # on loopback a refused connection costs next to nothing, so retrying often is cheap.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 250),
]
SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
]


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def request_metadata() -> tuple[tuple[str, str], ...] | None:
    """The metadata of a unary call made while handling a request: its audit ID and the trace it
    continues (None without either)."""
    md = auditid.metadata()
    if tracing.ENABLED:
        md = (md or ()) + tracing.metadata() or None
    return md


GRPC_STARTED = Counter("grpc_server_started_total", "gRPC calls started on this server.", ["grpc_method"])


STREAMS_OPEN = Gauge("grpc_server_streams_open", "Streaming gRPC calls open on this server (the long-lived "
                     "Calls, Watches and Seats streams among them).", ["grpc_method"])


class _CountCalls(grpc.aio.ServerInterceptor):
    """Counts every call by method, so `make bench` can report gRPC hops per request, and the
    streams open now (a dashboard's "open streams")."""

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[no-untyped-def]
        method = handler_call_details.method.rsplit("/", 1)[-1]
        GRPC_STARTED.labels(method).inc()
        # this call's task: its log lines carry the caller's audit ID (auditid.metadata())
        if aid := auditid.from_metadata(handler_call_details.invocation_metadata):
            auditid.AUDIT_ID.set(aid)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("call %s", method)
        if tracing.ENABLED:  # the caller's trace goes on in this call (request_metadata())
            tracing.attach(tracing.from_metadata(handler_call_details.invocation_metadata))
        handler = await continuation(handler_call_details)
        if handler is None or not handler.response_streaming:
            return handler
        return _counted_stream(handler, STREAMS_OPEN.labels(method))


def _counted_stream(handler: grpc.RpcMethodHandler, gauge: Any) -> grpc.RpcMethodHandler:
    """The same streaming handler, counted in `gauge` while it runs."""
    fn = handler.stream_stream if handler.request_streaming else handler.unary_stream
    if not inspect.isasyncgenfunction(fn):
        return handler

    async def behavior(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        gauge.inc()
        try:
            async for item in fn(request, context):
                yield item
        finally:
            gauge.dec()

    make = grpc.stream_stream_rpc_method_handler if handler.request_streaming else grpc.unary_stream_rpc_method_handler
    return make(behavior, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)


def make_server(tls: TLSFiles | None, address: str) -> grpc.aio.Server:
    server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=[_CountCalls()])
    if tls is None:
        server.add_insecure_port(address)
    else:
        creds = grpc.ssl_server_credentials(
            [(_read(tls.key), _read(tls.cert))], root_certificates=_read(tls.ca), require_client_auth=True
        )
        server.add_secure_port(address, creds)
    return server


@dataclass(frozen=True)
class Target:
    """Where a peer's replicas are (a --<peer>-address): the gRPC target and its channel options.

    One IP address and port is the peer as it always was (one connection, nothing added). Several,
    comma-separated, or a DNS name (resolving to several addresses, as a Kubernetes headless
    Service does) make a round_robin channel: each new call or stream goes to the next replica
    that is connected, and one that dies is left out until it is back. `replicas` is how many
    there are now (how many long-lived streams a caller opens to spread its calls over them)."""

    target: str
    replicas: int
    options: tuple[tuple[str, Any], ...] = ()


def _host_port(address: str) -> tuple[str, str]:
    host, _, port = address.strip().rpartition(":")
    return host.strip("[]"), port


def _is_ip(host: str, version: int | None = None) -> bool:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return version is None or ip.version == version


def target(address: str) -> Target:
    parts = [a.strip() for a in address.split(",") if a.strip()]
    if not parts:
        raise ValueError("no address")
    if len(parts) == 1:
        host, port = _host_port(parts[0])
        if _is_ip(host) or address.startswith(("dns:", "ipv4:", "ipv6:", "unix:")):
            return Target(parts[0], 1)
        try:
            found = {ai[4][0] for ai in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
        except OSError:
            found = set()
        return Target(f"dns:///{host}:{port}", max(1, len(found)), (("grpc.lb_policy_name", "round_robin"),))
    hosts = [_host_port(p) for p in parts]
    for version, scheme in ((4, "ipv4"), (6, "ipv6")):
        if all(_is_ip(h, version) for h, _ in hosts):
            listed = ",".join(f"{h}:{p}" if version == 4 else f"[{h}]:{p}" for h, p in hosts)
            # the name its certificate is checked against: the address of the first replica
            return Target(f"{scheme}:{listed}", len(parts), (("grpc.lb_policy_name", "round_robin"),
                                                             ("grpc.ssl_target_name_override", hosts[0][0])))
    raise ValueError(f"{address!r}: several replicas are IP addresses of one family, or one DNS name")


def make_channel(tls: TLSFiles | None, address: str) -> grpc.aio.Channel:
    where = target(address)
    options = CHANNEL_OPTIONS + list(where.options) if where.options else CHANNEL_OPTIONS
    if tls is None:
        return grpc.aio.insecure_channel(where.target, options=options)
    creds = grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca), private_key=_read(tls.key), certificate_chain=_read(tls.cert)
    )
    return grpc.aio.secure_channel(where.target, creds, options=options)


def peer_name(context: grpc.aio.ServicerContext) -> str | None:
    """The CN of the caller's verified certificate; None on a plaintext channel."""
    ctx = context.auth_context()
    names = ctx.get("x509_common_name") or []
    return names[0].decode() if names else None


T = TypeVar("T")
M = TypeVar("M")


def api_method(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Servicer decorator for unary methods: APIError -> gRPC status carrying the Status."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> T:
        try:
            return await fn(self, request, context)
        except APIError as e:
            await context.abort(e.grpc_code(), e.message, trailing_metadata=e.grpc_trailers())
        except grpc.aio.AbortError:
            raise
        except Exception as e:  # noqa: BLE001 - anything else is a 500, never a crash
            log.exception("%s failed", fn.__name__)
            err = InternalError(f"{type(e).__name__}: {e}")
            await context.abort(err.grpc_code(), err.message, trailing_metadata=err.grpc_trailers())
        raise AssertionError("unreachable")

    return wrapper


def api_stream(fn: Callable[..., AsyncIterator[T]]) -> Callable[..., AsyncIterator[T]]:
    """Servicer decorator for server-streaming methods."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[T]:
        try:
            async for item in fn(self, request, context):
                yield item
        except APIError as e:
            await context.abort(e.grpc_code(), e.message, trailing_metadata=e.grpc_trailers())
        except grpc.aio.AbortError:
            raise
        except Exception as e:  # noqa: BLE001
            log.exception("%s failed", fn.__name__)
            err = InternalError(f"{type(e).__name__}: {e}")
            await context.abort(err.grpc_code(), err.message, trailing_metadata=err.grpc_trailers())

    return wrapper


async def call(coro: Awaitable[T], peer: str = "") -> T:
    """Await a unary call; a peer's failure comes back as the APIError it raised."""
    try:
        return await coro
    except grpc.aio.AioRpcError as e:
        raise error_from_rpc(e, peer) from None


async def stream(it: Any, peer: str = "") -> AsyncIterator[Any]:
    """Iterate a server stream; a peer's failure comes back as an APIError."""
    try:
        async for item in it:
            yield item
    except grpc.aio.AioRpcError as e:
        raise error_from_rpc(e, peer) from None


async def batches(queue: asyncio.Queue[T | None], make: Callable[[list[T]], M],
                  one_turn: bool = False) -> AsyncIterator[M]:
    """The writing side of a long-lived stream: everything queued since the previous write, as one
    message made by make(items); None ends the stream after what was queued before it. A stream
    write costs about as much as the message it carries, so a busy peer pays one write for many
    items (mux's Calls, watchmux's Watches and apf's Seats streams all write this way). one_turn:
    the write waits one event-loop turn after the first item, so that what the other tasks of that
    turn queue goes with it (apf's Seats, whose items are tiny and whose every request sends two)."""
    while (first := await queue.get()) is not None:
        if one_turn:
            await asyncio.sleep(0)
        items = [first]
        ended = False
        while not queue.empty():
            more = queue.get_nowait()
            if more is None:
                ended = True
                break
            items.append(more)
        yield make(items)
        if ended:
            return
