import uuid

import pytest

from services.apiserver.filters.authentication import bearer_token
from services.apiserver.filters.authorization import forbidden_error
from services.apiserver.filters.context import new_audit_id
from services.apiserver.requestinfo import parse, parse_query
from services.proxy.context import MAX_REQUEST_BODY_BYTES, Context, too_large


def info(method, url):
    path, _, qs = url.partition("?")
    return parse(method, path, parse_query(qs))


def test_forbidden_list_in_namespace():
    err = forbidden_error("alice", info("GET", "/api/v1/namespaces/demo/configmaps"))
    assert err.code == 403 and err.reason == "Forbidden"
    assert err.message == ('configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" '
                           'in the namespace "demo"')
    assert err.details == {"kind": "configmaps"}


def test_forbidden_named():
    err = forbidden_error("alice", info("GET", "/api/v1/namespaces/demo/configmaps/c"))
    assert err.message == ('configmaps "c" is forbidden: User "alice" cannot get resource "configmaps" in API group '
                           '"" in the namespace "demo"')
    assert err.details == {"name": "c", "kind": "configmaps"}


def test_forbidden_cluster_scope_with_group_and_subresource():
    err = forbidden_error("bob", info("PUT", "/apis/apps/v1/namespaces/x/deployments/d/scale"))
    assert err.message == ('deployments.apps "d" is forbidden: User "bob" cannot update resource '
                           '"deployments/scale" in API group "apps" in the namespace "x"')
    assert err.details == {"name": "d", "group": "apps", "kind": "deployments"}
    err = forbidden_error("bob", info("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles"))
    assert err.message == ('clusterroles.rbac.authorization.k8s.io is forbidden: User "bob" cannot list resource '
                           '"clusterroles" in API group "rbac.authorization.k8s.io" at the cluster scope')


def test_forbidden_non_resource_and_reason():
    err = forbidden_error("alice", info("GET", "/foo"))
    assert err.message == 'forbidden: User "alice" cannot get path "/foo"'
    err = forbidden_error("alice", info("GET", "/api/v1/pods"), "RBAC: nope")
    assert err.message.endswith("at the cluster scope: RBAC: nope")


def test_bearer_token():
    assert bearer_token({b"authorization": b"Bearer abc"}) == "abc"
    assert bearer_token({b"authorization": b"bearer  abc "}) == "abc"
    assert bearer_token({b"authorization": b"Basic abc"}) == ""
    assert bearer_token({}) == ""


def _ctx(messages, content_length=None):
    headers = [(b"content-length", str(content_length).encode())] if content_length is not None else []
    it = iter(messages)

    async def receive():
        return next(it)

    async def send(_):
        pass
    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers}
    return Context(scope, receive, send)


async def test_body_limit_declared():
    ctx = _ctx([], MAX_REQUEST_BODY_BYTES + 1)
    with pytest.raises(type(too_large())) as e:
        await ctx.read_body()
    assert e.value.code == 413
    assert e.value.message == "Request entity too large: limit is 3145728"


async def test_body_limit_streamed():
    chunk = b"x" * (1024 * 1024)
    ctx = _ctx([{"type": "http.request", "body": chunk, "more_body": True}] * 4)
    with pytest.raises(type(too_large())):
        await ctx.read_body()


async def test_body_read_in_chunks():
    ctx = _ctx([{"type": "http.request", "body": b"ab", "more_body": True},
                {"type": "http.request", "body": b"cd", "more_body": False}], 4)
    assert await ctx.read_body() == b"abcd"


def test_audit_ids_are_random_version_4_uuids():
    ids = {new_audit_id() for _ in range(1000)}
    assert len(ids) == 1000
    for i in ids:
        u = uuid.UUID(i)
        assert str(u) == i and u.version == 4 and u.variant == uuid.RFC_4122



def test_openmetrics_exposition_carries_exemplars() -> None:
    """/metrics in OpenMetrics (what a Prometheus scrape asks for): the request-duration histogram's
    exemplar names a sampled request's trace, and the family parses as OpenMetrics."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    from services.common.metrics import exposition
    from services.proxy import metrics

    metrics.observe(None, "OPTIONS", 200, 0.3, trace_id="ab" * 16)
    text = exposition(openmetrics=True).decode()
    assert text.endswith("# EOF\n") and "# EOF" not in exposition().decode()
    family = "".join(ln + "\n" for ln in text.splitlines() if ln.startswith((
        "apiserver_request_duration_seconds", "# HELP apiserver_request_duration_seconds ",
        "# TYPE apiserver_request_duration_seconds "))) + "# EOF\n"
    (parsed,) = text_string_to_metric_families(family)
    exemplars = [s.exemplar for s in parsed.samples if s.exemplar is not None and s.labels.get("verb") == "OPTIONS"]
    assert [e.labels for e in exemplars] == [{"trace_id": "ab" * 16}]
