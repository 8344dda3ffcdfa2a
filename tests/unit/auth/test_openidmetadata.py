"""Service account issuer discovery: the documents kube's openidmetadata.go renders, checked by
verifying a real token against the published key set."""
from __future__ import annotations

import json

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from services.auth.openidmetadata import OpenIDMetadata, jwk
from services.auth.serviceaccount import DEFAULT_ISSUER, TokenIssuer, key_id

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def test_the_configuration_names_the_issuer_and_defaults_jwks_uri_to_the_server():
    meta = OpenIDMetadata(DEFAULT_ISSUER, [KEY.public_key()])
    assert json.loads(meta.config("127.0.0.1:6443")) == {
        "issuer": DEFAULT_ISSUER, "jwks_uri": "https://127.0.0.1:6443/openid/v1/jwks",
        "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"]}
    uri = "https://issuer.example.com/keys"
    assert json.loads(OpenIDMetadata(DEFAULT_ISSUER, [KEY.public_key()], uri).config("ignored:1"))["jwks_uri"] == uri


def test_a_token_verifies_against_the_published_key_set():
    ec_key = ec.generate_private_key(ec.SECP384R1()).public_key()
    meta = OpenIDMetadata(DEFAULT_ISSUER, [KEY.public_key(), ec_key])
    keys = json.loads(meta.keyset)["keys"]
    assert [list(k) for k in keys] == [["use", "kty", "kid", "alg", "n", "e"],
                                       ["use", "kty", "kid", "crv", "alg", "x", "y"]]
    assert (keys[1]["crv"], keys[1]["alg"], keys[1]["kid"]) == ("P-384", "ES384", key_id(ec_key))
    assert json.loads(meta.config("h:1"))["id_token_signing_alg_values_supported"] == ["ES384", "RS256"]
    token, _ = TokenIssuer(KEY).sign("demo", "bot", "uid-1", [DEFAULT_ISSUER], 600)
    kid = jwt.get_unverified_header(token)["kid"]
    published = jwt.PyJWK(next(k for k in keys if k["kid"] == kid))
    claims = jwt.decode(token, published.key, algorithms=["RS256"], audience=DEFAULT_ISSUER)
    assert claims["sub"] == "system:serviceaccount:demo:bot"


@pytest.mark.parametrize("issuer,jwks_uri,message", [
    ("http://issuer.example.com", "", "issuer URL must use https scheme"),
    ("https://issuer.example.com?a=b", "", "issuer URL may not include a query"),
    ("https://issuer.example.com#x", "", "issuer URL may not include a fragment"),
    ("api", "", "issuer URL must use https scheme"),
    (DEFAULT_ISSUER, "http://keys.example.com", "jwksURI requires https scheme"),
])
def test_what_kube_would_not_serve(issuer, jwks_uri, message):
    with pytest.raises(ValueError, match=message):
        OpenIDMetadata(issuer, [KEY.public_key()], jwks_uri)


def test_unsupported_keys():
    with pytest.raises(ValueError, match="unknown public key type"):
        jwk(ec.generate_private_key(ec.SECP224R1()).public_key())
