"""The library's filters one at a time, each around a stub handler, on a bare request context."""
from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from apiary_pb import envelope_pb2 as pb
from services.apiserver.filters import ClientDisconnected
from services.apiserver.filters.authentication import with_authentication
from services.apiserver.filters.authorization import with_authorization
from services.apiserver.filters.priority_and_fairness import with_priority_and_fairness
from services.apiserver.filters.requestinfo import with_request_info
from services.apiserver.filters.timeout import Deadlines, with_request_deadline
from services.apiserver.filters.wrap import with_panic_recovery
from services.common.errors import APIError, Forbidden, ServiceUnavailable, TooManyRequests, Unauthorized

ALICE = pb.UserInfo(name="alice", groups=["system:authenticated"])


class Request:
    """The attributes of a request's context that the filters use, and the errors answered."""

    def __init__(self, path: str = "/api/v1/namespaces/a/pods", query: bytes = b"") -> None:
        self.audit_id, self.method, self.path, self.query_string = "id", "GET", path, query
        self.scope: dict[str, Any] = {"path": path, "raw_path": path.encode(), "query_string": query, "headers": []}
        self.headers: dict[bytes, bytes] = {b"authorization": b"Bearer t"}
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.client_cert = None
        self.impersonation: list[tuple[bytes, bytes]] = []
        self.extra_headers: list[tuple[bytes, bytes]] = []
        self.timings: list[str] = []
        self.code, self.response_started = 0, False
        self.info: Any = None
        self.query: dict[str, str] = {}
        self.user: pb.UserInfo | None = None
        self.user_name = ""
        self.seat: Any = None
        self.audit: Any = None
        self.failure: APIError | None = None
        self.panic = False
        self.mark = 0.0
        self.answered: list[APIError] = []

    def timing(self, stage: str, since: float) -> float:
        self.timings.append(stage)
        return time.perf_counter()

    async def race(self, aw: Any) -> Any:
        return await aw

    async def error(self, err: APIError) -> None:
        self.answered.append(err)


def handler(calls: list[Any], fail: BaseException | None = None):
    async def api(ctx: Request) -> None:
        calls.append(ctx)
        if fail is not None:
            raise fail
    return api


@pytest.mark.parametrize("raised, code, panic", [
    (Forbidden("no"), 403, False), (ValueError("bug"), 500, True), (ClientDisconnected(), 499, False)])
async def test_panic_recovery_answers_every_failure_once(raised, code, panic):
    ctx = Request()
    await with_panic_recovery(handler([], raised))(ctx)
    assert ctx.panic is panic
    if code == 499:
        assert ctx.code == 499 and ctx.answered == [] and ctx.failure is None
    else:
        assert [e.code for e in ctx.answered] == [code] and ctx.failure is ctx.answered[0]


async def test_request_info_is_parsed_once_for_the_filters_after_it():
    calls: list[Any] = []
    ctx = Request(path="/api/v1/namespaces/a/pods/p", query=b"timeout=5s")
    await with_request_info(handler(calls))(ctx)
    assert calls == [ctx] and ctx.info.verb == "get" and ctx.info.name == "p"
    assert ctx.query == {"timeout": "5s"}


class Authenticator:
    def __init__(self, fail: APIError | None = None) -> None:
        self.fail = fail

    async def authenticate(self, token: str, cert: Any, headers: Any = (), path: str = "") -> pb.UserInfo:
        if self.fail is not None:
            raise self.fail
        assert token == "t"
        return ALICE


@pytest.mark.parametrize("fail, audited", [(Unauthorized("Unauthorized"), True),
                                           (ServiceUnavailable("down"), False)])
async def test_failed_authentication_is_audited_only_when_refused(fail, audited):
    failed: list[Request] = []
    ctx = Request()
    with pytest.raises(type(fail)):
        await with_authentication(handler([]), Authenticator(fail), failed.append)(ctx)
    assert (failed == [ctx]) is audited


async def test_authentication_then_authorization_time_their_stages():
    class Authorizer:
        async def decide(self, user: pb.UserInfo, info: Any) -> tuple[bool, str]:
            return user.name == "alice", ""

    calls: list[Any] = []
    ctx = Request()
    chain = with_request_info(with_authentication(with_authorization(handler(calls), Authorizer()),
                                                  Authenticator()))
    await chain(ctx)
    assert calls == [ctx] and ctx.user is ALICE and ctx.user_name == "alice"
    assert ctx.timings == ["authn", "authz"]


async def test_authorization_denied_is_kubes_forbidden():
    class Deny:
        async def decide(self, user: pb.UserInfo, info: Any) -> tuple[bool, str]:
            return False, "no RBAC rule"

    ctx = Request()
    ctx.user = ALICE
    calls: list[Any] = []
    with pytest.raises(Forbidden) as e:
        await with_request_info(with_authorization(handler(calls), Deny()))(ctx)
    assert calls == []
    assert e.value.message == ('pods is forbidden: User "alice" cannot list resource "pods" in API group "" '
                               'in the namespace "a": no RBAC rule')


class Seats:
    def __init__(self, reject: bool = False) -> None:
        self.reject, self.held = reject, 0

    async def acquire(self, digest: pb.RequestAttributes) -> Any:
        if self.reject:
            raise TooManyRequests("Too many requests, please try again later.")
        self.held += 1
        return self

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"x-kubernetes-pf-flowschema-uid", b"fs")]

    def release(self, seat: Any) -> None:
        self.held -= 1


@pytest.mark.parametrize("fail", [None, Forbidden("no")])
async def test_the_seat_is_held_while_the_handler_runs_and_released_after(fail):
    seats = Seats()
    held: list[int] = []

    async def api(ctx: Request) -> None:
        held.append(seats.held)
        if fail is not None:
            raise fail

    ctx = Request()
    ctx.user = ALICE
    chain = with_request_info(with_priority_and_fairness(api, seats))
    if fail is None:
        await chain(ctx)
    else:
        with pytest.raises(Forbidden):
            await chain(ctx)
    assert held == [1] and seats.held == 0
    assert ctx.extra_headers == [(b"x-kubernetes-pf-flowschema-uid", b"fs")] and ctx.timings == ["apf"]


async def test_a_rejected_request_never_reaches_the_handler():
    ctx = Request()
    ctx.user = ALICE
    calls: list[Any] = []
    with pytest.raises(TooManyRequests):
        await with_request_info(with_priority_and_fairness(handler(calls), Seats(reject=True)))(ctx)
    assert calls == []


async def test_request_deadline_shortened_by_timeout_and_lifted_for_watches():
    deadlines = Deadlines(request_timeout=60)
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()

    async def api(ctx: Request) -> None:
        pass

    for query, left in [(b"timeout=10s", 10), (b"timeout=2m", 60), (b"watch=1", None)]:
        arrived = loop.time()
        deadlines.set(task, arrived + 60)
        await with_request_info(with_request_deadline(api, deadlines))(Request(query=query))
        due = deadlines._due.get(task)
        assert (due is None) if left is None else due == pytest.approx(arrived + left)
        deadlines.clear(task)
    await deadlines.stop()
