"""Service account issuer discovery, as kube's pkg/serviceaccount/openidmetadata.go: the OpenID
provider configuration and the JSON Web Key Set of the keys that verify ServiceAccount tokens, so
that a relying party outside the cluster can check them (kube-apiserver serves both, the proxy here).

Rendered once per jwks_uri: the keys are fixed for the process's lifetime.
"""
from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric import ec, rsa

from .serviceaccount import key_id

OPENID_CONFIG_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/openid/v1/jwks"
MAX_AGE_SECONDS = 3600  # kube's for keys read from files
_CURVES = {"secp256r1": ("P-256", "ES256"), "secp384r1": ("P-384", "ES384"), "secp521r1": ("P-521", "ES512")}


def _b64(n: int, size: int = 0) -> str:
    raw = n.to_bytes(size or max(1, (n.bit_length() + 7) // 8), "big")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def jwk(key: Any) -> dict[str, str]:
    """A public key as go-jose's JSONWebKey marshals it (its fields in that order)."""
    if isinstance(key, rsa.RSAPublicKey):
        numbers = key.public_numbers()
        return {"use": "sig", "kty": "RSA", "kid": key_id(key), "alg": "RS256",
                "n": _b64(numbers.n), "e": _b64(numbers.e)}
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in _CURVES:
        crv, alg = _CURVES[key.curve.name]
        size = (key.curve.key_size + 7) // 8
        numbers = key.public_numbers()
        return {"use": "sig", "kty": "EC", "kid": key_id(key), "crv": crv, "alg": alg,
                "x": _b64(numbers.x, size), "y": _b64(numbers.y, size)}
    raise ValueError("unknown public key type, must be RSA or ECDSA on P-256, P-384 or P-521")


def _compact(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


class OpenIDMetadata:
    """The two documents for one issuer. Raises ValueError when kube would not serve them (then
    the paths answer 404): an issuer that is no https URL, or one with a query or fragment."""

    def __init__(self, issuer: str, keys: list[Any], jwks_uri: str = "") -> None:
        parts = urlsplit(issuer)
        if parts.scheme != "https":
            raise ValueError(f"issuer URL must use https scheme, got: {issuer}")
        if parts.query:
            raise ValueError(f"issuer URL may not include a query, got: {issuer}")
        if parts.fragment:
            raise ValueError(f"issuer URL may not include a fragment, got: {issuer}")
        if jwks_uri and urlsplit(jwks_uri).scheme != "https":
            raise ValueError(f"jwksURI requires https scheme, parsed as: {jwks_uri}")
        if not keys:
            raise ValueError("no keys provided for validating keyset")
        self.issuer, self.jwks_uri = issuer, jwks_uri
        self.keys = [jwk(k) for k in keys]
        self.keyset = _compact({"keys": self.keys})
        self._configs: dict[str, bytes] = {}

    def config(self, default_external_address: str) -> bytes:
        """The provider configuration; its jwks_uri is --service-account-jwks-uri, else the
        server's external address (host:port) with JWKS_PATH, as kube defaults it."""
        uri = self.jwks_uri or f"https://{default_external_address}{JWKS_PATH}"
        doc = self._configs.get(uri)
        if doc is None:
            doc = self._configs[uri] = _compact({
                "issuer": self.issuer, "jwks_uri": uri, "response_types_supported": ["id_token"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": sorted({k["alg"] for k in self.keys})})
        return doc
