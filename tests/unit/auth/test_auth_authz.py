from __future__ import annotations

import pytest

from apiary_pb import auth_pb2 as apb
from apiary_pb import envelope_pb2 as pb
from services.auth.__main__ import build, parse_args
from services.auth.authorizers.modes import parse_modes
from services.auth.policy import load_bootstrap_policy
from services.auth.server import AuthServicer
from services.common.errors import ServiceUnavailable
from services.common.identity import user_pb

ANON = user_pb("system:anonymous", ["system:unauthenticated"])
ALICE = user_pb("alice", ["dev", "system:authenticated"])
ADMIN = user_pb("admin", ["system:masters", "system:authenticated"])


def nonresource(user, path: str, verb: str = "get") -> apb.AuthorizeRequest:
    return apb.AuthorizeRequest(attributes=pb.RequestAttributes(user=user, verb=verb, path=path))


def resource(user, verb: str = "list", resource: str = "pods", ns: str = "default") -> apb.AuthorizeRequest:
    return apb.AuthorizeRequest(attributes=pb.RequestAttributes(user=user, verb=verb, resource_request=True,
                                                          api_version="v1", resource=resource, namespace=ns))


def with_bootstrap_policy(servicer: AuthServicer) -> AuthServicer:
    load_bootstrap_policy(servicer.index)
    return servicer


async def decide(mode: str, req: apb.AuthorizeRequest) -> apb.AuthorizeResponse:
    return await with_bootstrap_policy(build(parse_args(["--authorization-mode", mode]))).Authorize(req, None)


async def test_always_deny_but_masters_allowed() -> None:
    r = await decide("AlwaysDeny", resource(ALICE))
    assert r.decision == "Deny" and r.reason == "Everything is forbidden."
    assert (await decide("AlwaysDeny", resource(ADMIN))).decision == "Allow"


async def test_default_mode_is_rbac() -> None:
    servicer = build(parse_args([]))
    assert servicer.rbac_enabled
    r = await servicer.Authorize(resource(ALICE), None)
    assert r.decision == "NoOpinion" and r.reason == ""


async def test_always_allow() -> None:
    assert (await decide("AlwaysAllow", resource(ANON, verb="delete"))).decision == "Allow"
    assert (await decide("AlwaysAllow,AlwaysDeny", resource(ALICE))).decision == "Allow"
    assert (await decide("AlwaysDeny,AlwaysAllow", resource(ALICE))).decision == "Deny"


def test_mode_parsing() -> None:
    assert [m.name for m in parse_modes("Node,RBAC")] == ["RBAC"]
    with pytest.raises(ValueError, match="not a valid mode"):
        parse_modes("ABAC")
    with pytest.raises(ValueError, match="more than once"):
        parse_modes("RBAC,RBAC")
    with pytest.raises(SystemExit):
        build(parse_args(["--authorization-mode", ""]))


@pytest.mark.parametrize("path", ["/healthz", "/livez", "/readyz", "/version", "/version/"])
async def test_public_info_for_everyone(path: str) -> None:
    r = await decide("RBAC", nonresource(ANON, path))
    assert r.decision == "Allow"
    assert r.reason == ('RBAC: allowed by ClusterRoleBinding "system:public-info-viewer" of ClusterRole '
                        '"system:public-info-viewer" to Group "system:unauthenticated"')
    assert (await decide("RBAC", nonresource(ALICE, path))).decision == "Allow"


@pytest.mark.parametrize("path", ["/api", "/api/v1", "/apis", "/apis/apps/v1", "/openapi/v3", "/openapi"])
async def test_discovery_for_authenticated_only(path: str) -> None:
    assert (await decide("RBAC", nonresource(ALICE, path))).decision == "Allow"
    assert (await decide("RBAC", nonresource(ANON, path))).decision == "NoOpinion"


async def test_non_get_and_other_paths_fall_through() -> None:
    assert (await decide("RBAC", nonresource(ALICE, "/healthz", verb="post"))).decision == "NoOpinion"
    assert (await decide("RBAC", nonresource(ALICE, "/metrics"))).decision == "NoOpinion"
    assert (await decide("RBAC", nonresource(ALICE, "/apiss"))).decision == "NoOpinion"
    assert (await decide("RBAC", nonresource(ANON, "/readyz/etcd"))).decision == "NoOpinion"
    assert (await decide("RBAC", resource(ALICE, verb="get"))).decision == "NoOpinion"


async def test_masters_through_cluster_admin_binding_and_basic_user() -> None:
    servicer = with_bootstrap_policy(build(parse_args([])))
    # without the privileged authorizer, RBAC alone allows system:masters through the cluster-admin binding
    rbac = servicer.authorizer.authorizers[1]
    decision, reason = await rbac.authorize(resource(ADMIN, verb="delete", resource="secrets").attributes)
    assert decision == "Allow" and 'ClusterRoleBinding "cluster-admin"' in reason
    ssar = pb.RequestAttributes(user=ALICE, verb="create", resource_request=True, api_group="authorization.k8s.io",
                          resource="selfsubjectaccessreviews")
    assert (await servicer.Authorize(apb.AuthorizeRequest(attributes=ssar), None)).decision == "Allow"


async def test_no_answer_but_allow_before_the_rbac_index_has_synced() -> None:
    """A restarted auth service is reachable before its RBAC informers have listed everything: a
    partial index must not deny (the proxy would cache the 403), so the caller gets a 503 instead."""
    servicer = build(parse_args([]))
    servicer.rbac_synced = lambda: False
    authorize = AuthServicer.Authorize.__wrapped__  # type: ignore[attr-defined]
    assert (await authorize(servicer, resource(ADMIN), None)).decision == "Allow"
    with pytest.raises(ServiceUnavailable) as e:
        await authorize(servicer, resource(ALICE), None)
    assert e.value.headers == {"Retry-After": "1"}
    servicer.rbac_synced = lambda: True
    assert (await authorize(servicer, resource(ALICE), None)).decision == "NoOpinion"
