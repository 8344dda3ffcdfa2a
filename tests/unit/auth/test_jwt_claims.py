"""The JWT authenticator's claim mappings and claim rules on signed tokens: the user they make, and kube's
messages when a claim is missing, is no string, or an expression gives no string."""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import jwt
import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from services.apiserver.fielderrors import FieldErrors
from services.apiserver.httpclient import Response
from services.auth.authenticators import AuthenticationFailed
from services.auth.authenticators.jwks import KeySet
from services.auth.authenticators.jwt import JWTAuthenticator
from services.auth.authenticators.jwtconfig import JWTAuthenticatorSpec, parse_jwt, validate_jwt

ISSUER = "https://issuer.example.com"
KEY = rsa.generate_private_key(65537, 2048)


class Issuer:
    """The discovery document and the JWKS of KEY, served in place of the key set's client."""

    async def get(self, url: str, **_: Any) -> Response:
        if url.endswith("/.well-known/openid-configuration"):
            return Response(200, orjson.dumps({"issuer": ISSUER, "jwks_uri": f"{ISSUER}/keys"}))
        jwk = {**json.loads(RSAAlgorithm.to_jwk(KEY.public_key())), "kid": "k"}
        return Response(200, orjson.dumps({"keys": [jwk]}))

    async def aclose(self) -> None:
        pass


def authenticator(claim_mappings: dict[str, Any], rules: list[dict[str, Any]] | None = None) -> JWTAuthenticator:
    spec = JWTAuthenticatorSpec.model_validate({
        "issuer": {"url": ISSUER, "audiences": ["a"]}, "claimMappings": claim_mappings,
        "claimValidationRules": rules or []})
    config = parse_jwt(spec)
    errs = FieldErrors()
    validate_jwt(config, "jwt[0]", errs)
    assert not errs, errs
    keys = KeySet(config)
    keys._client = Issuer()  # type: ignore[assignment]
    return JWTAuthenticator(config, keys)


def token(**claims: Any) -> str:
    now = int(time.time())
    return jwt.encode({"iss": ISSUER, "aud": "a", "iat": now, "exp": now + 600, **claims}, KEY, "RS256",
                      headers={"kid": "k"})


def authenticate(a: JWTAuthenticator, t: str) -> Any:
    return asyncio.run(a.authenticate_token(t))


USERNAME = {"username": {"claim": "sub", "prefix": "oidc:"}}


def test_claims_and_expressions_make_the_user() -> None:
    a = authenticator({**USERNAME, "uid": {"expression": "claims.id"}}, [{"claim": "hd", "requiredValue": "x.io"}])
    user = authenticate(a, token(sub="jane", id="42", hd="x.io"))
    assert (user.name, user.uid) == ("oidc:jane", "42")


@pytest.mark.parametrize(("mappings", "rules", "claims", "message"), [
    (USERNAME, [], {}, 'oidc: parse username claims "sub": claim not present'),
    ({"username": {"claim": "login", "prefix": ""}}, [], {"login": 7},
     'oidc: parse username claims "login": json: cannot unmarshal int into Go value of type string'),
    (USERNAME, [{"claim": "hd", "requiredValue": "x.io"}], {"sub": "jane"},
     "oidc: required claim hd not present in ID token"),
    (USERNAME, [{"claim": "hd", "requiredValue": "x.io"}], {"sub": "jane", "hd": ["x.io"]},
     "oidc: parse claim hd: json: cannot unmarshal list into Go value of type string"),
    ({"username": {"expression": "claims.n"}}, [], {"n": 1},
     "oidc: error evaluating username claim expression: username claim expression must return a string"),
    ({**USERNAME, "uid": {"expression": "claims.n"}}, [], {"sub": "jane", "n": 1},
     "oidc: error evaluating uid claim expression: uid claim expression must return a string"),
])
def test_what_a_claim_must_be_is_said_as_kube_says_it(mappings: dict[str, Any], rules: list[dict[str, Any]],
                                                      claims: dict[str, Any], message: str) -> None:
    with pytest.raises(AuthenticationFailed) as e:
        authenticate(authenticator(mappings, rules), token(**claims))
    assert str(e.value) == message
