from __future__ import annotations

import pytest

from apiary_pb import auth_pb2 as apb
from services.auth.__main__ import build, parse_args
from services.common.identity import user_pb

ANON = user_pb("system:anonymous", ["system:unauthenticated"])
ALICE = user_pb("alice", ["dev", "system:authenticated"])
ADMIN = user_pb("admin", ["system:masters", "system:authenticated"])


def nonresource(user, path: str, verb: str = "get") -> apb.AuthorizeRequest:
    return apb.AuthorizeRequest(attributes=apb.Attributes(user=user, verb=verb, path=path))


def resource(user, verb: str = "list", resource: str = "pods", ns: str = "default") -> apb.AuthorizeRequest:
    return apb.AuthorizeRequest(attributes=apb.Attributes(user=user, verb=verb, resource_request=True,
                                                          api_version="v1", resource=resource, namespace=ns))


async def decide(mode: str, req: apb.AuthorizeRequest) -> apb.AuthorizeResponse:
    return await build(parse_args(["--authorization-mode", mode])).Authorize(req, None)


async def test_default_mode_denies_but_masters_allowed() -> None:
    r = await decide("AlwaysDeny", resource(ALICE))
    assert r.decision == "Deny" and r.reason == "Everything is forbidden."
    assert (await decide("AlwaysDeny", resource(ADMIN))).decision == "Allow"
    servicer = build(parse_args([]))
    assert (await servicer.Authorize(resource(ALICE), None)).decision == "Deny"


async def test_always_allow() -> None:
    assert (await decide("AlwaysAllow", resource(ANON, verb="delete"))).decision == "Allow"
    assert (await decide("AlwaysAllow,AlwaysDeny", resource(ALICE))).decision == "Allow"
    assert (await decide("AlwaysDeny,AlwaysAllow", resource(ALICE))).decision == "Deny"


@pytest.mark.parametrize("path", ["/healthz", "/livez", "/readyz", "/version", "/version/", "/readyz/etcd"])
async def test_public_info_for_everyone(path: str) -> None:
    r = await decide("AlwaysDeny", nonresource(ANON, path))
    assert r.decision == "Allow"
    assert 'to Group "system:unauthenticated"' in r.reason
    assert (await decide("AlwaysDeny", nonresource(ALICE, path))).decision == "Allow"


@pytest.mark.parametrize("path", ["/api", "/api/v1", "/apis", "/apis/apps/v1", "/openapi/v3", "/openapi"])
async def test_discovery_for_authenticated_only(path: str) -> None:
    assert (await decide("AlwaysDeny", nonresource(ALICE, path))).decision == "Allow"
    assert (await decide("AlwaysDeny", nonresource(ANON, path))).decision == "Deny"


async def test_non_get_and_other_paths_fall_through() -> None:
    assert (await decide("AlwaysDeny", nonresource(ALICE, "/healthz", verb="post"))).decision == "Deny"
    assert (await decide("AlwaysDeny", nonresource(ALICE, "/metrics"))).decision == "Deny"
    assert (await decide("AlwaysDeny", nonresource(ALICE, "/apiss"))).decision == "Deny"
    # resource requests on discovery-looking names are not matched by the path rules
    assert (await decide("AlwaysDeny", resource(ALICE, verb="get"))).decision == "Deny"
