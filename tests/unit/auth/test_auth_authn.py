from __future__ import annotations

import pytest

from apiary_pb import auth_pb2 as apb
from services.auth.__main__ import build, parse_args
from services.auth.authenticators import Union
from services.auth.authenticators.anonymous import AnonymousAuthenticator
from services.auth.authenticators.tokenfile import TokenFileAuthenticator, TokenFileError, parse_token_csv
from services.auth.authenticators.x509 import X509Authenticator

CSV = '''# comment line
abc123,alice,uid-1,"dev,ops"
def456,bob,uid-2

 ghi789, carol, uid-3, "admins"
,nobody,uid-4
'''


def test_parse_token_csv() -> None:
    tokens = parse_token_csv(CSV)
    assert set(tokens) == {"abc123", "def456", "ghi789"}
    assert tokens["abc123"].name == "alice" and tokens["abc123"].uid == "uid-1"
    assert list(tokens["abc123"].groups) == ["dev", "ops"]
    assert list(tokens["def456"].groups) == []
    assert tokens["ghi789"].name == "carol" and list(tokens["ghi789"].groups) == ["admins"]


def test_parse_token_csv_too_few_columns() -> None:
    with pytest.raises(TokenFileError, match="at least 3 columns"):
        parse_token_csv("tok,user\n", "f.csv")


def chain(anonymous: bool = True) -> Union:
    return Union([X509Authenticator(), TokenFileAuthenticator(parse_token_csv(CSV))],
                 AnonymousAuthenticator() if anonymous else None)


async def test_token_user_gets_authenticated_group() -> None:
    r = await chain().authenticate(apb.AuthenticateRequest(token="abc123"))
    assert r.authenticated
    assert r.user.name == "alice" and r.user.uid == "uid-1"
    assert list(r.user.groups) == ["dev", "ops", "system:authenticated"]
    # the token table is not modified by the group adder
    r2 = await chain().authenticate(apb.AuthenticateRequest(token="abc123"))
    assert list(r2.user.groups) == ["dev", "ops", "system:authenticated"]


async def test_unknown_token_is_not_anonymous() -> None:
    r = await chain().authenticate(apb.AuthenticateRequest(token="nope"))
    assert not r.authenticated
    assert r.errors == ["invalid bearer token"]


async def test_cert_wins_over_token() -> None:
    req = apb.AuthenticateRequest(token="abc123", has_cert=True, cert_common_name="admin",
                                  cert_organizations=["system:masters"])
    r = await chain().authenticate(req)
    assert r.user.name == "admin"
    assert list(r.user.groups) == ["system:masters", "system:authenticated"]


async def test_anonymous() -> None:
    r = await chain().authenticate(apb.AuthenticateRequest())
    assert r.user.name == "system:anonymous"
    assert list(r.user.groups) == ["system:unauthenticated"]
    r = await chain(anonymous=False).authenticate(apb.AuthenticateRequest())
    assert not r.authenticated


async def test_servicer_from_flags(tmp_path) -> None:
    f = tmp_path / "tokens.csv"
    f.write_text(CSV)
    servicer = build(parse_args(["--token-auth-file", str(f), "--anonymous-auth=false"]))
    resp = await servicer.Authenticate(apb.AuthenticateRequest(token="def456"), None)
    assert resp.authenticated and resp.user.name == "bob"
    resp = await servicer.Authenticate(apb.AuthenticateRequest(), None)
    assert not resp.authenticated
    resp = await servicer.Authenticate(apb.AuthenticateRequest(token="bad"), None)
    assert not resp.authenticated and resp.reason == "invalid bearer token"


def test_bad_flags() -> None:
    with pytest.raises(SystemExit):
        build(parse_args(["--authorization-mode", "RBAC,Bogus"]))
    with pytest.raises(SystemExit):
        build(parse_args(["--token-auth-file", "/nonexistent/tokens.csv"]))
