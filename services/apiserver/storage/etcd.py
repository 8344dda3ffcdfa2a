"""The etcd v3 client side: one gRPC channel to every member, deadlines, errors mapped to API errors.

Requests go through aetcd's generated KV and Watch stubs directly because the store needs what its
helpers leave out: ranges at a revision with a limit or a modification-revision filter, nested
transactions, and watch responses with their headers. The channel is ours, not aetcd.Client's: that
one dials a single host:port, while a cluster's client must know every member (etcd_target).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import grpc
from aetcd import rpc

from services.common import tracing
from services.common.errors import APIError, InternalError, RequestEntityTooLarge, ServiceUnavailable, Timeout
from services.common.grpcutil import CHANNEL_OPTIONS

from . import metrics
from .keys import range_end

log = logging.getLogger(__name__)


class Compacted(Exception):
    """The revision asked for has been compacted away."""

    def __init__(self, compact_revision: int = 0) -> None:
        super().__init__(f"required revision has been compacted (compacted at {compact_revision})")
        self.compact_revision = compact_revision


class FutureRevision(Exception):
    """The revision asked for is newer than etcd's."""


def parse_servers(servers: str) -> list[tuple[str, int]]:
    """Every member of --etcd-servers (a comma list of URLs, as kube's flag) as (host, port)."""
    members = []
    for server in filter(None, (s.strip() for s in servers.split(","))):
        url = urlsplit(server if "://" in server else f"http://{server}")
        if url.scheme != "http":
            raise SystemExit(f"--etcd-servers: only http:// endpoints are supported, got {server!r}")
        members.append((url.hostname or "127.0.0.1", url.port or 2379))
    if not members:
        raise SystemExit("--etcd-servers: no endpoint given")
    return members


def etcd_target(members: list[tuple[str, int]]) -> str:
    """The gRPC target that names every member: one host:port as it is (DNS resolves it, again on
    each reconnect), several as gRPC's address list "ipv4:a:p,b:p" (or "ipv6:[a]:p,..."), a host
    name among them resolved here, once, since such a list holds addresses only."""
    if len(members) == 1:
        host, port = members[0]
        return f"{host}:{port}"
    addresses = [(_address(host), port) for host, port in members]
    if all(a.version == 4 for a, _ in addresses):
        return "ipv4:" + ",".join(f"{a}:{port}" for a, port in addresses)
    if all(a.version == 6 for a, _ in addresses):
        return "ipv6:" + ",".join(f"[{a}]:{port}" for a, port in addresses)
    raise SystemExit("--etcd-servers: the members must all be IPv4 or all IPv6")


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        try:
            return ipaddress.ip_address(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
        except OSError as e:
            raise SystemExit(f"--etcd-servers: cannot resolve {host!r}: {e}") from None


def _api_error(e: grpc.aio.AioRpcError) -> Exception:
    code, details = e.code(), e.details() or ""
    if code == grpc.StatusCode.OUT_OF_RANGE:
        if "future" in details:
            return FutureRevision(details)
        return Compacted()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Timeout(
            "Timeout: request did not complete within requested timeout - context deadline exceeded",
            details={"retryAfterSeconds": 1},
            headers={"Retry-After": "1"},
        )
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return ServiceUnavailable(
            f"etcd is unavailable: {details}", details={"retryAfterSeconds": 1}, headers={"Retry-After": "1"}
        )
    if "request is too large" in details:
        return RequestEntityTooLarge(f"etcdserver: {details.removeprefix('etcdserver: ')}")
    return InternalError(f"etcd: {details}")


class Etcd:
    """The members of one etcd cluster behind one channel; every unary request has the request
    timeout as its deadline.

    The channel balances round robin over the members, as etcd's own client (clientv3) does: every
    member keeps a connection, so when one dies the next request goes to a live one at once (with
    pick_first the channel would first have to notice the loss and dial the next address), and the
    reads spread over the members (each read is linearizable on any member: etcd's ReadIndex). A
    request on the member that dies fails (503, Retry-After); the watch cache's etcd watch resumes
    on another member from its last revision."""

    def __init__(self, servers: str, timeout: float) -> None:
        members = parse_servers(servers)
        self.endpoint = ",".join(f"{host}:{port}" for host, port in members)
        self.target = etcd_target(members)
        self.timeout = timeout
        # etcd refuses keepalive pings on a connection without streams (PermitWithoutStream=false).
        self.options = [*(dict(CHANNEL_OPTIONS) | {"grpc.keepalive_permit_without_calls": 0}).items(),
                        ("grpc.lb_policy_name", "round_robin")]
        self.channel: grpc.aio.Channel | None = None
        self.kv: rpc.KVStub | None = None
        self._revisions: dict[str, RevisionReads] = {}

    async def connect(self) -> rpc.KVStub:
        """The KV stub, on a channel made on first use (a channel belongs to the running loop)."""
        if self.kv is None:
            self.channel = grpc.aio.insecure_channel(self.target, options=self.options)
            self.kv = rpc.KVStub(self.channel)
        return self.kv

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close()
            self.channel = self.kv = None

    async def _unary(
        self, method: str, request: object, op: str, resource: str, timeout: float | None = None
    ):
        stub = getattr(await self.connect(), method)
        start = time.perf_counter()
        try:
            if tracing.ENABLED and tracing.recording():
                return await _traced(stub, method, request, op, resource, timeout or self.timeout)
            return await stub(request, timeout=timeout or self.timeout)
        except grpc.aio.AioRpcError as e:
            raise _api_error(e) from None
        finally:
            metrics.child(metrics.ETCD_DURATION, op, resource).observe(time.perf_counter() - start)

    async def range(
        self,
        key: bytes,
        end: bytes | None = None,
        *,
        revision: int = 0,
        limit: int = 0,
        count_only: bool = False,
        keys_only: bool = False,
        min_mod_revision: int = 0,
        op: str = "get",
        resource: str = "",
        timeout: float | None = None,
    ) -> rpc.RangeResponse:
        req = rpc.RangeRequest(
            key=key, range_end=end or b"", revision=revision, limit=limit, count_only=count_only,
            keys_only=keys_only, min_mod_revision=min_mod_revision,
        )
        return await self._unary("Range", req, op, resource, timeout)

    async def range_prefix(
        self, prefix: bytes, *, revision: int = 0, op: str = "list", resource: str = ""
    ) -> rpc.RangeResponse:
        return await self.range(prefix, range_end(prefix), revision=revision, op=op, resource=resource)

    async def txn(
        self,
        compare: list[rpc.Compare],
        success: list[rpc.RequestOp],
        failure: list[rpc.RequestOp],
        *,
        op: str,
        resource: str,
    ) -> rpc.TxnResponse:
        req = rpc.TxnRequest(compare=compare, success=success, failure=failure)
        return await self._unary("Txn", req, op, resource)

    async def ping(self) -> bool:
        """Readiness: etcd answers a read of one key."""
        return not await self.health_error()

    async def health_error(self) -> str:
        """Why etcd does not answer a read of one key ("" when it does): kube's etcd prober."""
        try:
            await self.range(b"health", count_only=True, op="get", resource="health", timeout=2.0)
        except APIError as e:
            return e.message
        return ""

    async def current_revision(self, resource: str = "") -> int:
        """etcd's current revision, as of a read sent after this call began (RevisionReads: the
        callers of one moment share it)."""
        reads = self._revisions.get(resource)
        if reads is None:
            reads = self._revisions[resource] = RevisionReads(lambda: self._read_revision(resource))
        return await reads.current()

    async def _read_revision(self, resource: str) -> int:
        """From the header of the cheapest read there is."""
        resp = await self.range(b"compact_rev_key", count_only=True, op="get", resource=resource or "revision")
        return resp.header.revision

    async def compact(self, revision: int) -> None:
        start = time.perf_counter()
        try:
            await (await self.connect()).Compact(
                rpc.CompactionRequest(revision=revision, physical=False), timeout=self.timeout
            )
        except grpc.aio.AioRpcError as e:
            raise _api_error(e) from None
        finally:
            metrics.ETCD_DURATION.labels("compact", "").observe(time.perf_counter() - start)

    async def watch(self, prefix: bytes, start_revision: int) -> AsyncIterator[rpc.WatchResponse]:
        """Responses of one etcd watch on prefix from start_revision (with prev_kv). Raises Compacted
        when start_revision is gone, APIError when the stream breaks."""
        await self.connect()
        stub = rpc.WatchStub(self.channel)
        create = rpc.WatchRequest(
            create_request=rpc.WatchCreateRequest(
                key=prefix,
                range_end=range_end(prefix),
                start_revision=start_revision,
                prev_kv=True,
            )
        )
        done = asyncio.Event()

        async def requests() -> AsyncIterator[rpc.WatchRequest]:
            yield create
            await done.wait()

        call = stub.Watch(requests())
        try:
            async for resp in call:
                if resp.compact_revision:
                    raise Compacted(resp.compact_revision)
                if resp.canceled:
                    raise ServiceUnavailable(f"etcd canceled the watch: {resp.cancel_reason}")
                if resp.created and not resp.events:
                    continue
                yield resp
            raise ServiceUnavailable("etcd closed the watch stream")
        except grpc.aio.AioRpcError as e:
            raise _api_error(e) from None
        finally:
            done.set()
            call.cancel()


async def _traced(stub: Callable[..., Awaitable[Any]], method: str, request: Any, op: str, resource: str,
                  timeout: float) -> Any:
    """An etcd call of a sampled request: an event of the current span (the storage service's) named as kube's
    etcd client (otelgrpc) names its span ("etcdserverpb.KV/Range", "etcdserverpb.KV/Txn"), with its
    duration, the trace carried on to etcd: the key (a transaction's first compared key), the operation
    and resource of the metric, and the revision etcd answered at (a write's new resourceVersion). Not a
    span: etcd sends none of its own, and a span here would cost more than the rest of the trace's work in
    the service."""
    key = request.compare[0].key if method == "Txn" and request.compare else getattr(request, "key", b"")
    attributes = {"key": key.decode(errors="replace"), "op": op, "resource": resource}
    if method == "Range":
        if request.range_end:
            attributes["range_end"] = request.range_end.decode(errors="replace")
        if request.revision:
            attributes["at_revision"] = request.revision
        if request.limit:
            attributes["limit"] = request.limit
    with tracing.step(f"etcdserverpb.KV/{method}", attributes) as span:
        resp = await stub(request, timeout=timeout, metadata=tracing.metadata())
        if span is not None:
            span.set_attribute("revision", resp.header.revision)
            if method == "Txn":
                span.set_attribute("succeeded", resp.succeeded)
            elif method == "Range":
                span.set_attribute("count", resp.count)
        return resp


class RevisionReads:
    """etcd's current revision for many readers at once, one etcd read per group of them.

    A consistent read (kube's consistent reads from cache) needs a revision read after it began:
    any write it could have seen is then at or below it. Readers join the read that has not been
    sent yet (there is at most one waiting and one in flight); it is sent once the one in flight is
    answered, so it began after each of its readers did. Under load each etcd round trip serves
    every read that arrived meanwhile, instead of one etcd read (and its CPU) per request."""

    def __init__(self, read: Callable[[], Awaitable[int]]) -> None:
        self._read = read
        self._waiting: asyncio.Future[int] | None = None
        self._task: asyncio.Task[None] | None = None

    async def current(self) -> int:
        fut = self._waiting
        if fut is None:
            fut = self._waiting = asyncio.get_running_loop().create_future()
            # a reader that gives up (cancelled) must not retrieve nothing of a shared failure
            fut.add_done_callback(_retrieve)
            if self._task is None:
                # shared by every reader: in no one request's trace
                self._task = asyncio.create_task(self._run(), name="etcd-revision", context=tracing.detached())
        return await asyncio.shield(fut)

    async def _run(self) -> None:
        try:
            while (fut := self._waiting) is not None:
                self._waiting = None
                try:
                    fut.set_result(await self._read())
                except asyncio.CancelledError:
                    fut.cancel()
                    raise
                except Exception as e:  # noqa: BLE001 - the readers of this read get its error
                    fut.set_exception(e)
        finally:
            self._task = None
            if self._waiting is not None:  # cancelled with readers waiting: they fail, not hang
                self._waiting.cancel()
                self._waiting = None


def _retrieve(fut: asyncio.Future[int]) -> None:
    if not fut.cancelled():
        fut.exception()


def compare_version(key: bytes, version: int, result: int = rpc.Compare.EQUAL) -> rpc.Compare:
    return rpc.Compare(key=key, target=rpc.Compare.VERSION, result=result, version=version)


def compare_mod(key: bytes, revision: int) -> rpc.Compare:
    return rpc.Compare(key=key, target=rpc.Compare.MOD, result=rpc.Compare.EQUAL, mod_revision=revision)


def compare_value(key: bytes, value: bytes) -> rpc.Compare:
    return rpc.Compare(key=key, target=rpc.Compare.VALUE, result=rpc.Compare.EQUAL, value=value)


def op_put(key: bytes, value: bytes) -> rpc.RequestOp:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))


def op_get(key: bytes) -> rpc.RequestOp:
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=key))


def op_delete(key: bytes) -> rpc.RequestOp:
    return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key, prev_kv=True))


def op_txn(
    compare: list[rpc.Compare], success: list[rpc.RequestOp], failure: list[rpc.RequestOp]
) -> rpc.RequestOp:
    return rpc.RequestOp(request_txn=rpc.TxnRequest(compare=compare, success=success, failure=failure))
