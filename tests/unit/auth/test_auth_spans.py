"""The auth service's spans for a sampled request: the call, each authenticator tried (which took the token,
which left it, which rejected it) and each authorizer asked with its decision, as children; none at all
for a request that is not sampled."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from apiary_pb import auth_pb2 as apb
from apiary_pb import envelope_pb2 as pb
from services.auth.__main__ import build, parse_args
from services.auth.policy import load_bootstrap_policy
from services.auth.server import AuthServicer
from services.common.identity import user_pb
from tests.tracing_memory import UNSAMPLED, Spans, sampled, started

CSV = 'tok-alice,alice,uid-1,"dev"\n'


@pytest.fixture()
def spans() -> Iterator[Spans]:
    with started() as s:
        yield s


@pytest.fixture()
def servicer(tmp_path) -> AuthServicer:
    f = tmp_path / "tokens.csv"
    f.write_text(CSV)
    s = build(parse_args(["--token-auth-file", str(f), "--authorization-mode", "RBAC"]))
    load_bootstrap_policy(s.index)
    return s


def attrs(span) -> dict:  # type: ignore[no-untyped-def]
    return dict(span.attributes)


async def test_each_authenticator_tried_is_a_child(servicer: AuthServicer, spans: Spans) -> None:
    with sampled():
        resp = await servicer.Authenticate(apb.AuthenticateRequest(token="tok-alice"), None)
    assert resp.authenticated
    (call,) = spans.named("apiary.Auth/Authenticate")
    assert attrs(call) == {"authenticated": True, "user": "alice"}
    tried = sorted((s for s in spans.finished() if s.name.startswith("authenticator ")), key=lambda s: s.start_time)
    assert [s.name for s in tried] == ["authenticator x509", "authenticator token-file"]
    assert attrs(tried[0]) == {"result": "not mine"}
    assert attrs(tried[1]) == {"result": "authenticated", "user": "alice"}
    assert all(s.parent.span_id == call.context.span_id for s in tried)


async def test_a_rejected_token_says_why(servicer: AuthServicer, spans: Spans) -> None:
    with sampled():
        resp = await servicer.Authenticate(apb.AuthenticateRequest(has_cert=True), None)
    assert not resp.authenticated
    (x509,) = spans.named("authenticator x509")
    assert attrs(x509) == {"result": "failed", "reason": "x509: client certificate has no common name"}
    assert attrs(spans.named("apiary.Auth/Authenticate")[0]) == {"authenticated": False, "user": ""}


async def test_each_authorizer_asked_is_a_child_with_its_decision(servicer: AuthServicer, spans: Spans) -> None:
    alice = user_pb("alice", ["dev", "system:authenticated"])
    req = apb.AuthorizeRequest(attributes=pb.RequestAttributes(user=alice, verb="list", resource_request=True,
                                                               api_version="v1", resource="pods", namespace="x"))
    with sampled():
        resp = await servicer.Authorize(req, None)
    assert resp.decision == "NoOpinion"
    (call,) = spans.named("apiary.Auth/Authorize")
    assert attrs(call) == {"decision": "NoOpinion", "authorizer": ""}
    asked = sorted((s for s in spans.finished() if s.name.startswith("authorizer ")), key=lambda s: s.start_time)
    assert [s.name for s in asked] == ["authorizer Privileged", "authorizer RBAC"]
    assert [s.attributes["decision"] for s in asked] == ["NoOpinion", "NoOpinion"]
    assert all(s.parent.span_id == call.context.span_id for s in asked)
    spans.clear()
    admin = user_pb("admin", ["system:masters", "system:authenticated"])
    req.attributes.user.CopyFrom(admin)
    with sampled():
        assert (await servicer.Authorize(req, None)).decision == "Allow"
    (privileged,) = spans.named("authorizer Privileged")
    assert privileged.attributes["decision"] == "Allow"
    assert spans.named("authorizer RBAC") == []  # the first Allow ends the chain


async def test_an_unsampled_request_makes_no_span(servicer: AuthServicer, spans: Spans) -> None:
    with sampled(UNSAMPLED):
        assert (await servicer.Authenticate(apb.AuthenticateRequest(token="tok-alice"), None)).authenticated
    assert spans.finished() == []
