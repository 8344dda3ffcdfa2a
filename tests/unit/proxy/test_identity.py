"""Who a request acts as: request-header trust, impersonation, and the authorization cache's invalidation."""
import asyncio
import logging

import httpx
import pytest

from apiary_pb import apf_pb2_grpc as fgrpc
from apiary_pb import auth_pb2 as apb
from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver.filters.impersonation import impersonation_requests, split_service_account
from services.apiserver.filters.requestheader import RequestHeaderConfig, unescape_extra_key
from services.apiserver.requestinfo import RequestInfo
from services.common import grpcutil
from services.proxy.app import ProxyApp
from services.proxy.authz_invalidation import RepeatFilter
from services.proxy.filters.authz import Authorizer
from tests.fakeclock import FakeClock
from tests.waiting import until

from .fakes import start_fakes, with_cert

ADMIN = [("Authorization", "Bearer admin-token")]
ALICE = [("Authorization", "Bearer alice-token")]
IMP = [("Authorization", "Bearer imp-token")]
FRONT_PROXY = [("X-Test-Cert", "front-proxy-client/"), ("X-Test-CA", "requestheader")]
CM = "/api/v1/namespaces/demo/configmaps/c"


class Stack:
    pass


@pytest.fixture
async def stack():
    server, addr, auth, apf, registry = await start_fakes()
    channels = {name: grpcutil.make_channel(None, addr) for name in ("auth", "apf", "registry")}
    proxy = ProxyApp(agrpc.AuthStub(channels["auth"]), fgrpc.FlowControlStub(channels["apf"]),
                     rgrpc.RegistryStub(channels["registry"]), channels=channels,
                     request_header=RequestHeaderConfig.from_flags(allowed_names=["front-proxy-client"]))
    s = Stack()
    s.proxy, s.auth, s.apf, s.registry, s.server = proxy, auth, apf, registry, server
    s.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=with_cert(proxy.app)), base_url="https://t")

    async def start(serve_rbac=False):
        registry.serve_rbac = serve_rbac
        proxy.start()
        await asyncio.wait_for(proxy.apiservices.synced.wait(), 5)
        await asyncio.wait_for(proxy.discovery.loaded.wait(), 5)
        if serve_rbac:
            for inf in proxy.authz_invalidation.informers:
                await asyncio.wait_for(inf.synced.wait(), 5)
    s.start = start
    yield s
    await s.client.aclose()
    await proxy.stop()
    for ch in channels.values():
        await ch.close()
    await server.stop(None)


def _user(req):
    return (req.user.name, list(req.user.groups), req.user.uid, {k: list(v.values) for k, v in req.user.extra.items()})


# request-header authentication -----------------------------------------------------------------

async def test_request_header_certificate_with_allowed_name_is_trusted(stack):
    await stack.start()
    r = await stack.client.get(CM, headers=FRONT_PROXY + [
        ("X-Remote-User", "alice"), ("X-Remote-Uid", "u-1"), ("X-Remote-Group", "dev"), ("X-Remote-Group", "ops"),
        ("X-Remote-Extra-Scopes", "a"), ("X-Remote-Extra-Scopes", "b"), ("X-Remote-Extra-Acme.com%2Fproject", "p")])
    assert r.status_code == 200
    assert _user(stack.registry.requests[-1]) == (
        "alice", ["dev", "ops", "system:authenticated"], "u-1", {"scopes": ["a", "b"], "acme.com/project": ["p"]})
    assert stack.auth.authn_calls == 0  # formed in the proxy
    r = await stack.client.get("/api/v1/namespaces/other/configmaps/c", headers=FRONT_PROXY + [("X-Remote-User", "alice")])
    assert r.status_code == 403 and 'User "alice" cannot get' in r.json()["message"]


async def test_request_header_certificate_with_other_name_is_not_trusted(stack):
    await stack.start()
    mallory = [("X-Test-Cert", "mallory/"), ("X-Test-CA", "requestheader"), ("X-Remote-User", "alice")]
    # not an x509 identity either: without other credentials the certificate is an error (kube: 401)
    assert (await stack.client.get(CM, headers=mallory)).status_code == 401
    r = await stack.client.get(CM, headers=mallory + ADMIN)
    assert r.status_code == 200 and stack.registry.requests[-1].user.name == "admin"


async def test_request_header_certificate_without_user_header_falls_through(stack):
    await stack.start()
    assert (await stack.client.get(CM, headers=FRONT_PROXY)).status_code == 401
    r = await stack.client.get(CM, headers=FRONT_PROXY + ALICE + [("X-Remote-User", "")])
    assert r.status_code == 200 and stack.registry.requests[-1].user.name == "alice"


async def test_client_certificate_headers_are_ignored(stack):
    await stack.start()
    r = await stack.client.get(CM, headers=[("X-Test-Cert", "carol/system:masters"), ("X-Remote-User", "alice"),
                                            ("X-Remote-Group", "dev")])
    assert r.status_code == 200
    assert _user(stack.registry.requests[-1])[:2] == ("carol", ["system:masters", "system:authenticated"])


async def test_headers_without_certificate_are_ignored(stack):
    await stack.start()
    r = await stack.client.get("/api/v1/namespaces/other/configmaps/c",
                               headers=ALICE + [("X-Remote-User", "admin"), ("X-Remote-Group", "system:masters")])
    assert r.status_code == 403 and 'User "alice"' in r.json()["message"]
    r = await stack.client.get(CM, headers=[("X-Remote-User", "admin"), ("X-Remote-Group", "system:masters")])
    assert r.status_code == 401  # no credentials (the fake auth service has no anonymous)


async def test_both_bundles_prefer_request_header_then_x509(stack):
    await stack.start()
    both = [("X-Test-Cert", "front-proxy-client/system:masters"), ("X-Test-CA", "client,requestheader")]
    await stack.client.get(CM, headers=both + [("X-Remote-User", "alice")])
    assert stack.registry.requests[-1].user.name == "alice"
    await stack.client.get(CM, headers=both)
    assert stack.registry.requests[-1].user.name == "front-proxy-client"


def test_request_header_config_rules():
    rh = RequestHeaderConfig.from_flags(["X-User", "X-Other-User"], [], ["X-Group"], ["X-Extra-", "X-More-"])
    assert rh.allows("anyone")  # an empty allowed list allows every CN the CA issued
    assert not RequestHeaderConfig.from_flags(allowed_names=["a"]).allows("b")
    headers = [(b"x-user", b""), (b"x-other-user", b"bob"), (b"x-group", b""), (b"x-group", b"a, b"),
               (b"x-more-k", b"2"), (b"x-extra-k", b"1"), (b"x-extra-bad%zz", b"v"), (b"x-extra-%e2%9c%93", b"ok")]
    u = rh.user(headers)
    assert u.name == "bob" and list(u.groups) == ["a, b", "system:authenticated"]
    assert {k: list(v.values) for k, v in u.extra.items()} == {"k": ["1", "2"], "bad%zz": ["v"], "\u2713": ["ok"]}
    assert rh.user([(b"x-group", b"a")]) is None
    anon = rh.user([(b"x-user", b"system:anonymous")])
    assert list(anon.groups) == []
    with pytest.raises(ValueError):
        RequestHeaderConfig.from_flags([" "])


def test_unescape_extra_key():
    assert unescape_extra_key("acme.com%2fproject") == "acme.com/project"
    assert unescape_extra_key("100%") == "100%"
    assert unescape_extra_key("plain") == "plain"


# impersonation ---------------------------------------------------------------------------------

async def test_impersonate_user(stack):
    await stack.start()
    r = await stack.client.get(CM, headers=IMP + [("Impersonate-User", "alice")])
    assert r.status_code == 200
    assert _user(stack.registry.requests[-1]) == ("alice", ["system:authenticated"], "", {})
    check = stack.auth.attributes[0]
    assert (check.user.name, check.verb, check.resource, check.api_group, check.name, check.resource_request) == (
        "imp", "impersonate", "users", "", "alice", True)
    # what follows is authorized as alice
    r = await stack.client.get("/api/v1/namespaces/other/configmaps/c", headers=IMP + [("Impersonate-User", "alice")])
    assert r.status_code == 403
    assert r.json()["message"] == ('configmaps "c" is forbidden: User "alice" cannot get resource "configmaps" '
                                   'in API group "" in the namespace "other"')


async def test_impersonation_denied(stack):
    await stack.start()
    r = await stack.client.get(CM, headers=ALICE + [("Impersonate-User", "bob")])
    assert r.status_code == 403
    assert r.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" '
                   'at the cluster scope',
        "reason": "Forbidden", "details": {"name": "bob", "kind": "users"}, "code": 403}
    r = await stack.client.get(CM, headers=IMP + [("Impersonate-User", "alice"), ("Impersonate-Group", "admins")])
    assert r.json()["message"] == ('groups "admins" is forbidden: User "imp" cannot impersonate resource "groups" '
                                   'in API group "" at the cluster scope')
    r = await stack.client.get(CM, headers=IMP + [("Impersonate-User", "alice"), ("Impersonate-Extra-Scopes", "edit")])
    assert r.json()["message"] == (
        'userextras.authentication.k8s.io "edit" is forbidden: User "imp" cannot impersonate resource '
        '"userextras/scopes" in API group "authentication.k8s.io" at the cluster scope')
    assert r.json()["details"] == {"name": "edit", "group": "authentication.k8s.io", "kind": "userextras"}
    r = await stack.client.get(CM, headers=IMP + [("Impersonate-User", "alice"), ("Impersonate-Uid", "9")])
    assert r.json()["message"] == ('uids.authentication.k8s.io "9" is forbidden: User "imp" cannot impersonate '
                                   'resource "uids" in API group "authentication.k8s.io" at the cluster scope')
    r = await stack.client.get(CM, headers=IMP + [("Impersonate-User", "system:serviceaccount:other:robot")])
    assert r.json()["message"] == ('serviceaccounts "robot" is forbidden: User "imp" cannot impersonate resource '
                                   '"serviceaccounts" in API group "" in the namespace "other"')
    assert not [q for q in stack.registry.requests if q.resource == "configmaps"]


async def test_impersonate_groups_extra_uid(stack):
    await stack.start()
    r = await stack.client.get(CM, headers=IMP + [
        ("Impersonate-User", "alice"), ("Impersonate-Group", "dev"), ("Impersonate-Extra-Scopes", "view"),
        ("Impersonate-Uid", "1234")])
    assert r.status_code == 200
    assert _user(stack.registry.requests[-1]) == ("alice", ["dev", "system:authenticated"], "1234",
                                                  {"scopes": ["view"]})
    checks = [(a.resource, a.subresource, a.api_group, a.api_version, a.name) for a in stack.auth.attributes[:4]]
    assert checks == [("users", "", "", "", "alice"), ("groups", "", "", "", "dev"),
                      ("userextras", "scopes", "authentication.k8s.io", "v1", "view"),
                      ("uids", "", "authentication.k8s.io", "v1", "1234")]


async def test_impersonate_service_account(stack):
    await stack.start()
    r = await stack.client.get("/api/v1/namespaces/demo/configmaps",
                               headers=IMP + [("Impersonate-User", "system:serviceaccount:demo:robot")])
    assert r.status_code == 403  # the fake grants the service account nothing
    assert 'User "system:serviceaccount:demo:robot" cannot list' in r.json()["message"]
    a = stack.auth.attributes[0]
    assert (a.resource, a.namespace, a.name) == ("serviceaccounts", "demo", "robot")
    assert list(stack.auth.attributes[1].user.groups) == [
        "system:serviceaccounts", "system:serviceaccounts:demo", "system:authenticated"]


async def test_impersonate_anonymous_and_explicit_groups(stack):
    await stack.start()
    await stack.client.get(CM, headers=ADMIN + [("Impersonate-User", "system:anonymous")])
    assert list(stack.auth.attributes[-1].user.groups) == ["system:unauthenticated"]
    await stack.client.get(CM, headers=ADMIN + [("Impersonate-User", "x"), ("Impersonate-Group", "system:unauthenticated")])
    assert list(stack.auth.attributes[-1].user.groups) == ["system:unauthenticated"]


async def test_impersonation_without_user_is_bad_request(stack):
    await stack.start()
    r = await stack.client.get(CM, headers=ADMIN + [("Impersonate-Group", "dev"), ("Impersonate-Uid", "7")])
    assert r.status_code == 400 and r.json()["reason"] == "BadRequest"
    assert r.json()["message"] == ("requested [{Group  dev    } {UID  7  authentication.k8s.io/v1  }] "
                                   "without impersonating a user")


async def test_priority_and_fairness_see_the_impersonated_user(stack):
    await stack.start()
    r = await stack.client.get(CM, headers=ADMIN + [("Impersonate-User", "busy")])
    assert r.status_code == 429  # the fake apf rejects "busy"


def test_split_service_account():
    assert split_service_account("system:serviceaccount:demo:robot") == ("demo", "robot")
    assert split_service_account("system:serviceaccount:demo:a.b") == ("demo", "a.b")
    for bad in ("system:serviceaccount:demo", "system:serviceaccount:Demo:x", "system:serviceaccount:a:b:c",
                "system:serviceaccount:a.b:x", "alice"):
        assert split_service_account(bad) is None
    assert impersonation_requests([(b"impersonate-user", b"system:serviceaccount:a:b:c")])[0].kind == "User"
    assert impersonation_requests([]) == []


# authorization cache ---------------------------------------------------------------------------

async def test_rbac_event_invalidates_cached_decisions(stack):
    await stack.start(serve_rbac=True)
    stack.proxy.authz.settle = 0.2
    assert stack.proxy.authz_invalidation.synced()
    for _ in range(3):
        assert (await stack.client.get(CM, headers=ALICE)).status_code == 200
    assert stack.auth.authz_calls == 1
    stack.auth.revoked.add("alice")  # the auth service forgets alice's RoleBinding...
    assert (await stack.client.get(CM, headers=ALICE)).status_code == 200  # ...the proxy does not know yet
    before = stack.proxy.authz._generation
    stack.registry.rbac_events["rolebindings"].put_nowait({"type": "DELETED", "object": {
        "kind": "RoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
        "metadata": {"name": "alice-view", "namespace": "demo", "resourceVersion": "2"}}})
    await until(lambda: stack.proxy.authz._generation > before, what="the RBAC event")
    assert (await stack.client.get(CM, headers=ALICE)).status_code == 403


async def test_no_caching_while_the_auth_service_settles(stack):
    await stack.start(serve_rbac=True)
    authz = stack.proxy.authz
    authz.clock = clock = FakeClock()
    authz.settle = 0.3
    authz.invalidate()
    calls = stack.auth.authz_calls
    for _ in range(3):
        await stack.client.get(CM, headers=ALICE)
    assert stack.auth.authz_calls == calls + 3  # nothing stored inside the window
    clock.advance(0.35)
    for _ in range(3):
        await stack.client.get(CM, headers=ALICE)
    assert stack.auth.authz_calls == calls + 4  # stored again (with the long TTL: the watches are synced)


async def test_without_rbac_watches_decisions_expire_quickly_and_readiness_holds(stack):
    await stack.start(serve_rbac=False)
    authz = stack.proxy.authz
    authz.clock = clock = FakeClock()
    authz.fallback_ttl = 0.2
    assert (await stack.client.get(CM, headers=ALICE)).status_code == 200
    stack.auth.revoked.add("alice")
    assert (await stack.client.get(CM, headers=ALICE)).status_code == 200
    clock.advance(0.25)
    assert (await stack.client.get(CM, headers=ALICE)).status_code == 403
    assert not stack.proxy.authz_invalidation.synced()
    ok, text = await stack.proxy.readiness()
    assert ok, text


class _SlowAuth:
    """An auth stub whose Authorize answers Allow only when released."""

    def __init__(self):
        self.release = asyncio.Event()
        self.calls = 0

    def Authorize(self, req, timeout=None, metadata=None):
        self.calls += 1

        async def answer():
            await self.release.wait()
            return apb.AuthorizeResponse(decision="Allow")
        return answer()


async def test_answer_from_before_an_event_is_not_stored():
    auth = _SlowAuth()
    authz = Authorizer(auth, settle=0.0)
    authz.informed = lambda: True
    user = pb.UserInfo(name="alice")
    info = RequestInfo(path="", verb="get", is_resource_request=True, resource="configmaps", namespace="demo")
    task = asyncio.create_task(authz.authorize(user, info))
    await until(lambda: auth.calls == 1, what="the call in flight")
    authz.invalidate()  # an RBAC event lands while the call is in flight
    auth.release.set()
    await task
    await authz.authorize(user, info)
    assert auth.calls == 2  # the first answer was not stored
    await authz.authorize(user, info)
    assert auth.calls == 2


def test_repeat_filter_quiets_identical_retry_lines():
    f = RepeatFilter(interval=60)

    def rec(resource, msg, delay, level=logging.INFO):
        return logging.LogRecord("services.common.informer", level, "", 0, "informer %s: %s; retrying in %.1fs",
                                 (resource, msg, delay), None)
    assert f.filter(rec("roles", "not found", 0.2))
    assert not f.filter(rec("roles", "not found", 0.4))
    assert f.filter(rec("clusterroles", "not found", 0.2))
    assert f.filter(rec("roles", "unavailable", 5.0))
    assert f.filter(rec("roles", "not found", 5.0, logging.ERROR))
