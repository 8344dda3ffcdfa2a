"""Delegated authentication and authorization against a core API server answering in place of the
library's client: what is trusted, what is asked, what is cached."""
from __future__ import annotations

from typing import Any

import orjson
import pytest

from services.apiserver.filters.requestheader import RequestHeaderConfig
from services.apiserver.httpclient import CallError, Response
from services.apiserver.requestinfo import parse
from services.common.errors import Forbidden, Unauthorized
from services.common.identity import user_pb
from services.kit import authz as authz_mod
from services.kit.authn import Authenticator
from services.kit.authz import Authorizer
from tests.fakeclock import FakeClock

RH = RequestHeaderConfig.from_flags(allowed_names=["front-proxy-client"])


class Apiary:
    """The reviews a core API server would answer, counting the calls."""

    def __init__(self, allowed: set[str] = frozenset(), tokens: dict[str, str] | None = None) -> None:
        self.allowed, self.tokens, self.calls = set(allowed), tokens or {}, 0

    async def post_json(self, url: str, body: dict[str, Any], **_: Any) -> Response:
        self.calls += 1
        if body["kind"] == "TokenReview":
            name = self.tokens.get(body["spec"]["token"])
            status: dict[str, Any] = {"authenticated": bool(name)}
            if name:
                status["user"] = {"username": name, "groups": ["system:authenticated"]}
        else:
            ok = body["spec"]["user"] in self.allowed
            status = {"allowed": ok, **({} if ok else {"reason": "no RBAC policy matched"})}
        return Response(201, orjson.dumps({**body, "status": status}))

    def client(self) -> Any:
        return self


def scope(tls: dict | None = None, headers: list[tuple[bytes, bytes]] = ()) -> dict[str, Any]:
    return {"headers": list(headers), "extensions": {"tls": tls} if tls else {}}


FRONT_PROXY = {"cn": "front-proxy-client", "o": [], "ca": ["requestheader"]}
IDENTITY = [(b"x-remote-user", b"alice"), (b"x-remote-group", b"cooks"), (b"x-remote-extra-scopes", b"pizza")]


async def test_request_headers_count_only_from_an_allowed_front_proxy_certificate() -> None:
    a = Authenticator(RH, None)
    user = await a.authenticate(scope(FRONT_PROXY, IDENTITY))
    assert user.name == "alice" and list(user.groups) == ["cooks", "system:authenticated"]
    assert list(user.extra["scopes"].values) == ["pizza"]
    with pytest.raises(Unauthorized):
        await a.authenticate(scope({**FRONT_PROXY, "cn": "someone-else"}, IDENTITY))
    assert await a.authenticate(scope(None, IDENTITY)) is None  # headers alone say nothing
    client = {"cn": "bob", "o": ["team"], "ca": ["client"]}
    user = await a.authenticate(scope(client, IDENTITY))
    assert user.name == "bob" and list(user.groups) == ["team", "system:authenticated"]
    with pytest.raises(Unauthorized):
        await a.authenticate(scope({"cn": "x", "o": [], "ca": []}))  # a certificate no trusted CA issued


def test_only_an_allowed_front_proxy_certificate_is_a_front_proxy() -> None:
    a = Authenticator(RH, None)
    assert a.front_proxy(FRONT_PROXY)
    assert not a.front_proxy({**FRONT_PROXY, "cn": "someone-else"})
    assert not a.front_proxy({"cn": "front-proxy-client", "o": [], "ca": ["client"]})  # the client CA's
    assert not a.front_proxy(None)
    assert not Authenticator(None, None).front_proxy(FRONT_PROXY)  # no request-header configuration


async def test_tokens_are_reviewed_once_per_ttl_and_failures_too() -> None:
    apiary = Apiary(tokens={"good": "carol"})
    a = Authenticator(RH, apiary.client())
    for _ in range(3):
        user = await a.authenticate(scope(headers=[(b"authorization", b"Bearer good")]))
        assert user.name == "carol"
    for _ in range(2):
        with pytest.raises(Unauthorized):
            await a.authenticate(scope(headers=[(b"authorization", b"Bearer bad")]))
    assert apiary.calls == 2


async def test_an_unreachable_token_reviewer_is_401_and_not_cached() -> None:
    class Down:
        async def post_json(self, url: str, body: dict[str, Any], **_: Any) -> Response:
            raise CallError("POST", "https://apiary" + url, "connect: connection refused")

    a = Authenticator(RH, Down())  # type: ignore[arg-type]
    with pytest.raises(Unauthorized):
        await a.authenticate(scope(headers=[(b"authorization", b"Bearer good")]))
    assert not a.tokens._entries


async def test_decisions_are_cached_and_denials_say_why() -> None:
    apiary = Apiary(allowed={"alice"})
    z = Authorizer(apiary.client(), authorized_ttl=10, unauthorized_ttl=10)
    info = parse("GET", "/apis/restaurant.programming-kubernetes.info/v1beta1/namespaces/ns/pizzas")
    for _ in range(3):
        await z.authorize(user_pb("alice", ["system:authenticated"]), info)
    with pytest.raises(Forbidden) as e:
        await z.authorize(user_pb("eve", ["system:authenticated"]), info)
    assert e.value.message == (
        'pizzas.restaurant.programming-kubernetes.info is forbidden: User "eve" cannot list resource "pizzas" in API '
        'group "restaurant.programming-kubernetes.info" in the namespace "ns": no RBAC policy matched')
    with pytest.raises(Forbidden):
        await z.authorize(user_pb("eve", ["system:authenticated"]), info)
    await z.authorize(user_pb("root", ["system:masters"]), info)  # never asked
    assert apiary.calls == 2


async def test_the_cache_holds_1024_decisions() -> None:
    apiary = Apiary(allowed={f"u{i}" for i in range(1100)})
    z = Authorizer(apiary.client())
    info = parse("GET", "/apis/g.example.com/v1/things")
    for i in range(1100):
        await z.authorize(user_pb(f"u{i}"), info)
    assert len(z._cache) == authz_mod.CACHE_SIZE == 1024
    calls = apiary.calls
    await z.authorize(user_pb("u1099"), info)  # recent: cached
    await z.authorize(user_pb("u0"), info)  # evicted: asked again
    assert apiary.calls == calls + 1


async def test_expired_decisions_are_asked_again() -> None:
    apiary = Apiary(allowed={"alice"})
    clock = FakeClock()
    z = Authorizer(apiary.client(), authorized_ttl=5, unauthorized_ttl=1, clock=clock)
    info = parse("GET", "/apis/g.example.com/v1/things")
    await z.authorize(user_pb("alice"), info)
    clock.advance(4)
    await z.authorize(user_pb("alice"), info)
    assert apiary.calls == 1
    clock.advance(2)
    await z.authorize(user_pb("alice"), info)
    assert apiary.calls == 2


def test_always_allowed_paths() -> None:
    z = Authorizer(None, always_allow_paths=["/healthz", "/readyz", "/livez", "/debug/*"])
    assert z.always_allowed("/healthz") and z.always_allowed("/debug/pprof")
    assert not z.always_allowed("/healthz/etcd") and not z.always_allowed("/metrics")
