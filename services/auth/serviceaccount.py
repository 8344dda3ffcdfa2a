"""ServiceAccount tokens: kube's bound JWTs (RS256), the TokenRequest subresource, and the SA lookup.

Claims follow k8s.io/kubernetes pkg/serviceaccount/claims.go: iss, sub, aud, exp, iat, nbf, jti and the
private "kubernetes.io" claim with the namespace and the ServiceAccount's name and uid, which binds the
token to that object: once it is deleted (or recreated with another uid) the token stops working.
"""
from __future__ import annotations

import base64
import datetime as dt
import hashlib
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

import jwt
import orjson
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from apiary_pb import registry_pb2_grpc as rgrpc
from services.common.errors import BadRequest, NotFound, invalid
from services.common.informer import Informer

from .policy import handle

SA_PREFIX = "system:serviceaccount:"
DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
DEFAULT_EXPIRATION = 3600
MIN_EXPIRATION = 600          # kube's MinTokenAgeSec: 10 minutes
MAX_EXPIRATION = 1 << 32      # kube's MaxTokenAgeSec
CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
AUTHN_GROUP = "authentication.k8s.io"


def key_id(public_key: Any) -> str:
    """kube's keyIDFromPublicKey: unpadded base64url of the SHA-256 of the PKIX DER public key."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.urlsafe_b64encode(hashlib.sha256(der).digest()).decode().rstrip("=")


def load_private_key(path: str) -> rsa.RSAPrivateKey:
    with open(path, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError(f"{path}: expected an RSA private key")
    return key


_PEM_RE = re.compile(rb"-----BEGIN ([A-Z ]+)-----.*?-----END \1-----", re.S)


def load_public_keys(path: str) -> list[Any]:
    """--service-account-key-file: PEM public keys or private keys (their public halves), as kube accepts."""
    with open(path, "rb") as f:
        data = f.read()
    keys: list[Any] = []
    for m in _PEM_RE.finditer(data):
        if b"PRIVATE KEY" in m.group(1):
            keys.append(serialization.load_pem_private_key(m.group(0), None).public_key())
        elif b"PUBLIC KEY" in m.group(1):
            keys.append(serialization.load_pem_public_key(m.group(0)))
    if not keys:
        raise ValueError(f"{path}: no PEM keys found")
    return keys


@dataclass
class TokenIssuer:
    private_key: rsa.RSAPrivateKey
    issuer: str = DEFAULT_ISSUER
    api_audiences: tuple[str, ...] = (DEFAULT_ISSUER,)

    def __post_init__(self) -> None:
        self.kid = key_id(self.private_key.public_key())

    def sign(self, namespace: str, name: str, uid: str, audiences: list[str], expiration_seconds: int,
             now: float | None = None) -> tuple[str, int]:
        """(token, expiry as a unix time)."""
        iat = int(now if now is not None else time.time())
        exp = iat + expiration_seconds
        claims = {
            "aud": audiences, "exp": exp, "iat": iat, "iss": self.issuer, "jti": str(uuid.uuid4()),
            "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
            "nbf": iat, "sub": f"{SA_PREFIX}{namespace}:{name}",
        }
        return jwt.encode(claims, self.private_key, algorithm="RS256", headers={"kid": self.kid}), exp

    def token_request(self, namespace: str, name: str, uid: str, body: bytes, now: float | None = None) -> dict[str, Any]:
        """Validate and answer a TokenRequest (serviceaccounts/<name>/token), as kube's TokenREST.Create."""
        try:
            req = orjson.loads(body) if body else {}
        except orjson.JSONDecodeError as e:
            raise BadRequest(f"the body of the request was in an unknown format: {e}") from None
        if not isinstance(req, dict):
            raise BadRequest("the body of the request was in an unknown format: expected a TokenRequest object")
        meta = req.get("metadata") or {}
        spec = req.get("spec") or {}
        if not isinstance(meta, dict) or not isinstance(spec, dict):
            raise BadRequest("TokenRequest: metadata and spec must be objects")
        if meta.get("name") and meta["name"] != name:
            raise invalid("TokenRequest", AUTHN_GROUP, name, [_cause("metadata.name", meta["name"],
                                                                    "must match the service account name if specified")])
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise invalid("TokenRequest", AUTHN_GROUP, name, [_cause("metadata.namespace", meta["namespace"],
                                                                    "must match the service account namespace if specified")])
        audiences = spec.get("audiences") or list(self.api_audiences)
        if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
            raise BadRequest("TokenRequest: spec.audiences must be a list of strings")
        seconds = spec.get("expirationSeconds")
        if seconds is None:
            seconds = DEFAULT_EXPIRATION
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise BadRequest("TokenRequest: spec.expirationSeconds must be an integer")
        if seconds < MIN_EXPIRATION:
            raise invalid("TokenRequest", AUTHN_GROUP, name, [_cause(
                "spec.expirationSeconds", seconds, "may not specify a duration less than 10 minutes")])
        if seconds > MAX_EXPIRATION:
            raise invalid("TokenRequest", AUTHN_GROUP, name, [_cause(
                "spec.expirationSeconds", seconds, "may not specify a duration larger than 2^32 seconds")])
        token, exp = self.sign(namespace, name, uid, audiences, seconds, now)
        out_meta = {"name": name, "namespace": namespace, "creationTimestamp": _rfc3339(exp - seconds)}
        return {
            "kind": "TokenRequest", "apiVersion": f"{AUTHN_GROUP}/v1", "metadata": out_meta,
            "spec": {"audiences": audiences, "expirationSeconds": seconds,
                     "boundObjectRef": spec.get("boundObjectRef")},
            "status": {"token": token, "expirationTimestamp": _rfc3339(exp)},
        }


def _cause(field: str, value: Any, detail: str) -> dict[str, str]:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    return {"reason": "FieldValueInvalid", "message": f"Invalid value: {shown}: {detail}", "field": field}


def _rfc3339(ts: int) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ServiceAccountLookup:
    """Current ServiceAccount uids: an informer on core v1 serviceaccounts, with a live GET on a miss
    (a token for an account created a moment ago must not fail while the watch catches up)."""

    def __init__(self, registry: rgrpc.RegistryStub, informer: Informer | None = None) -> None:
        self.registry = registry
        self.informer = informer if informer is not None else Informer(registry, "", "v1", "serviceaccounts")

    def start(self) -> None:
        self.informer.start()

    async def stop(self) -> None:
        await self.informer.stop()

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self.informer.store.get(f"{namespace}/{name}")
        if obj is not None:
            return obj
        try:
            return await handle(self.registry, "get", "serviceaccounts", name=name, namespace=namespace,
                                group="", timeout=5)
        except NotFound:
            return None
