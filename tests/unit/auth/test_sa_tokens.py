"""ServiceAccount JWTs: TokenRequest validation, signing with kube's claims, and the authenticator."""
from __future__ import annotations

import time

import jwt
import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from apiary_pb import auth_pb2 as apb
from apiary_pb import envelope_pb2 as pb
from services.auth.authenticators import AuthenticationFailed
from services.auth.authenticators.serviceaccount import ServiceAccountAuthenticator
from services.auth.server import AuthServicer
from services.auth.serviceaccount import DEFAULT_ISSUER, TokenIssuer, key_id
from services.common.errors import APIError, Invalid

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
ISSUER = TokenIssuer(KEY)
ACCOUNTS = {("demo", "bot"): {"metadata": {"name": "bot", "namespace": "demo", "uid": "uid-1"}}}


async def lookup(ns: str, name: str):
    return ACCOUNTS.get((ns, name))


def authenticator() -> ServiceAccountAuthenticator:
    return ServiceAccountAuthenticator([KEY.public_key()], [DEFAULT_ISSUER], [DEFAULT_ISSUER], lookup)


def request(**spec) -> bytes:
    return orjson.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})


def test_token_request_defaults_and_claims() -> None:
    now = time.time()
    out = ISSUER.token_request("demo", "bot", "uid-1", request(), now=now)
    assert out["kind"] == "TokenRequest" and out["spec"]["audiences"] == [DEFAULT_ISSUER]
    assert out["spec"]["expirationSeconds"] == 3600
    token = out["status"]["token"]
    assert jwt.get_unverified_header(token) == {"alg": "RS256", "kid": key_id(KEY.public_key()), "typ": "JWT"}
    claims = jwt.decode(token, KEY.public_key(), algorithms=["RS256"], audience=DEFAULT_ISSUER)
    assert claims["iss"] == DEFAULT_ISSUER and claims["sub"] == "system:serviceaccount:demo:bot"
    assert claims["exp"] - claims["iat"] == 3600 and claims["nbf"] == claims["iat"] and claims["jti"]
    assert claims["kubernetes.io"] == {"namespace": "demo", "serviceaccount": {"name": "bot", "uid": "uid-1"}}
    assert out["status"]["expirationTimestamp"].endswith("Z")


def test_token_request_validation() -> None:
    with pytest.raises(Invalid) as e:
        ISSUER.token_request("demo", "bot", "uid-1", request(expirationSeconds=599))
    assert e.value.message == ('TokenRequest.authentication.k8s.io "bot" is invalid: spec.expirationSeconds: '
                               'Invalid value: 599: may not specify a duration less than 10 minutes')
    with pytest.raises(Invalid, match="must match the service account name"):
        ISSUER.token_request("demo", "bot", "uid-1", orjson.dumps({"metadata": {"name": "other"}}))
    with pytest.raises(APIError) as e2:
        ISSUER.token_request("demo", "bot", "uid-1", b"{nope")
    assert e2.value.code == 400
    out = ISSUER.token_request("demo", "bot", "uid-1", request(audiences=["vault"], expirationSeconds=600))
    assert jwt.decode(out["status"]["token"], KEY.public_key(), algorithms=["RS256"], audience="vault")


async def test_authenticator_accepts_current_account() -> None:
    token = ISSUER.sign("demo", "bot", "uid-1", [DEFAULT_ISSUER], 3600)[0]
    user = await authenticator().authenticate(apb.AuthenticateRequest(token=token))
    assert user.name == "system:serviceaccount:demo:bot" and user.uid == "uid-1"
    assert list(user.groups) == ["system:serviceaccounts", "system:serviceaccounts:demo"]
    jti = jwt.decode(token, options={"verify_signature": False})["jti"]
    assert list(user.extra["authentication.kubernetes.io/credential-id"].values) == [f"JTI={jti}"]


@pytest.mark.parametrize("case,message", [
    ("deleted", 'serviceaccounts "gone" not found'),
    ("recreated", "service account UID (uid-1) does not match claim (uid-old)"),
    ("expired", "service account token has expired"),
    ("audience", 'token audiences ["vault"] is invalid for the target audiences ["' + DEFAULT_ISSUER + '"]'),
    ("signature", "token could not be verified"),
])
async def test_authenticator_rejects(case: str, message: str) -> None:
    now = time.time()
    token = {
        "deleted": lambda: ISSUER.sign("demo", "gone", "uid-2", [DEFAULT_ISSUER], 3600)[0],
        "recreated": lambda: ISSUER.sign("demo", "bot", "uid-old", [DEFAULT_ISSUER], 3600)[0],
        "expired": lambda: ISSUER.sign("demo", "bot", "uid-1", [DEFAULT_ISSUER], 600, now=now - 700)[0],
        "audience": lambda: ISSUER.sign("demo", "bot", "uid-1", ["vault"], 3600)[0],
        "signature": lambda: TokenIssuer(rsa.generate_private_key(public_exponent=65537, key_size=2048)).sign(
            "demo", "bot", "uid-1", [DEFAULT_ISSUER], 3600)[0],
    }[case]()
    with pytest.raises(AuthenticationFailed) as e:
        await authenticator().authenticate(apb.AuthenticateRequest(token=token))
    assert str(e.value) == message


async def test_foreign_tokens_are_not_ours() -> None:
    a = authenticator()
    assert await a.authenticate(apb.AuthenticateRequest(token="abc123")) is None
    other = jwt.encode({"iss": "https://elsewhere", "sub": "x"}, KEY, algorithm="RS256")
    assert await a.authenticate(apb.AuthenticateRequest(token=other)) is None
    assert await a.authenticate(apb.AuthenticateRequest(token="a.b.c")) is None


async def test_request_token_rpc() -> None:
    from services.auth.authenticators import Union as AuthnUnion
    from services.auth.authorizers import Union as AuthzUnion

    servicer = AuthServicer(AuthnUnion([]), AuthzUnion([]), issuer=ISSUER)
    sa = pb.Object(kind="ServiceAccount", api_version="v1")
    sa.metadata.name, sa.metadata.namespace, sa.metadata.uid = "bot", "demo", "uid-1"
    resp = await servicer.RequestToken(apb.TokenRequestRequest(namespace="demo", name="bot", body=request(),
                                                               service_account=sa), None)
    out = orjson.loads(resp.body)
    assert (await authenticator().authenticate(apb.AuthenticateRequest(token=out["status"]["token"]))).uid == "uid-1"
