"""The JWKS key set of one JWT issuer (kube's oidc authenticator's remote key set, go-oidc's).

Keys come from the issuer's discovery document (`<url>/.well-known/openid-configuration`, or
discoveryURL) and its jwks_uri, over TLS verified with certificateAuthority (else the system roots).
They are fetched at start (retried in the background until they arrive), again when a token names a
kid the set does not hold (at most once per KEY_REFRESH_MIN_INTERVAL), and every KEY_REFRESH_INTERVAL.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

import jwt
from prometheus_client import Gauge

from services.apiserver.httpclient import Client

from .jwtconfig import JWTConfig

log = logging.getLogger(__name__)

KEY_REFRESH_INTERVAL = 300.0
KEY_REFRESH_MIN_INTERVAL = 1.0
FETCH_TIMEOUT = 5.0
INIT_RETRY = 2.0

JWKS_FETCH_TIME = Gauge(
    "apiserver_authentication_jwt_authenticator_jwks_fetch_last_timestamp_seconds",
    "Timestamp of the last successful or failed JWKS fetch split by result, api server identity and jwt issuer "
    "for the JWT authenticator.", ["result", "jwt_issuer_hash", "apiserver_id_hash"])
JWKS_KEY_SET = Gauge(
    "apiserver_authentication_jwt_authenticator_jwks_fetch_last_key_set_info",
    "Information about the last JWKS fetched by the JWT authenticator with hash as label, split by api server "
    "identity and jwt issuer.", ["jwt_issuer_hash", "apiserver_id_hash", "hash"])
APISERVER_ID_HASH = "sha256:" + hashlib.sha256(f"apiserver-{socket.gethostname()}".encode()).hexdigest()


def issuer_hash(url: str) -> str:
    return "sha256:" + hashlib.sha256(url.encode()).hexdigest()


class KeySet:
    """The issuer's signing keys, fetched from its discovery document and JWKS; `clock` (monotonic
    seconds) spaces the refreshes a token with an unknown kid asks for."""

    def __init__(self, config: JWTConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self.keys: dict[str, Any] = {}       # kid -> PyJWK
        self.unnamed: list[Any] = []         # keys without a kid
        self.fetched_at = 0.0
        self.ready = asyncio.Event()
        self._lock = asyncio.Lock()
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._jwks = b""

    def _http(self) -> Client:
        if self._client is None:
            if self.config.certificate_authority:
                ctx = ssl.create_default_context(cadata=self.config.certificate_authority)
            else:
                ctx = ssl.create_default_context()
            self._client = Client(tls=ctx, timeout=FETCH_TIMEOUT)
        return self._client

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"jwks {self.config.url}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
                delay = KEY_REFRESH_INTERVAL
            except Exception as e:  # keep trying: an issuer down at start may come up later
                log.warning("jwt authenticator for issuer %s: fetching keys failed: %s", self.config.url, e)
                delay = INIT_RETRY if not self.ready.is_set() else KEY_REFRESH_INTERVAL
            await asyncio.sleep(delay)

    async def refresh(self, min_interval: float = 0.0) -> None:
        async with self._lock:
            if min_interval and self.clock() - self.fetched_at < min_interval:
                return
            issuer = issuer_hash(self.config.url)
            try:
                body = await self._fetch()
            except Exception:
                JWKS_FETCH_TIME.labels("failure", issuer, APISERVER_ID_HASH).set(time.time())
                raise
            JWKS_FETCH_TIME.labels("success", issuer, APISERVER_ID_HASH).set(time.time())
            if body != self._jwks:
                if self._jwks:
                    JWKS_KEY_SET.remove(issuer, APISERVER_ID_HASH, "sha256:" + hashlib.sha256(self._jwks).hexdigest())
                JWKS_KEY_SET.labels(issuer, APISERVER_ID_HASH, "sha256:" + hashlib.sha256(body).hexdigest()).set(1)
                self._jwks = body

    async def _fetch(self) -> bytes:
        """Fetch the discovery document and the JWKS, install the keys; the JWKS body."""
        client = self._http()
        c = self.config
        discovery = c.discovery_url or c.url.rstrip("/") + "/.well-known/openid-configuration"
        r = await client.get(discovery)
        if r.status != 200:
            raise ValueError(f"{r.status} {r.reason}: {r.text[:200]}")
        doc = r.json()
        if not c.discovery_url and doc.get("issuer") != c.url:
            raise ValueError(f"oidc: issuer did not match the issuer returned by provider, expected "
                             f"\"{c.url}\" got \"{doc.get('issuer')}\"")
        jwks_uri = doc.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not jwks_uri:
            raise ValueError("oidc: discovery document has no jwks_uri")
        r = await client.get(jwks_uri)
        if r.status != 200:
            raise ValueError(f"oidc: get keys failed: {r.status} {r.reason}")
        keys: dict[str, Any] = {}
        unnamed: list[Any] = []
        for k in (r.json().get("keys") or []):
            if not isinstance(k, dict) or k.get("use", "sig") != "sig":
                continue
            try:
                jwk = jwt.PyJWK(k)
            except jwt.PyJWTError:
                continue
            if k.get("kid"):
                keys[str(k["kid"])] = jwk
            else:
                unnamed.append(jwk)
        self.keys, self.unnamed = keys, unnamed
        self.fetched_at = self.clock()
        self.ready.set()
        return r.content

    async def candidates(self, kid: str | None) -> list[Any]:
        if kid and kid not in self.keys:
            try:
                await self.refresh(KEY_REFRESH_MIN_INTERVAL)
            except Exception as e:
                log.warning("jwt authenticator for issuer %s: refreshing keys failed: %s", self.config.url, e)
        if kid:
            k = self.keys.get(kid)
            return [k] if k is not None else []
        return [*self.keys.values(), *self.unnamed]
