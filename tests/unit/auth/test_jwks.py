"""The JWKS key set of a JWT issuer: discovery, the keys it installs, and refreshes spaced on its clock."""
from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from services.apiserver.httpclient import Response
from services.auth.authenticators.jwks import KeySet
from services.auth.authenticators.jwtconfig import JWTConfig
from tests.fakeclock import FakeClock

ISSUER = "https://issuer.example.com"


def jwk(kid: str | None) -> dict[str, object]:
    key = json.loads(RSAAlgorithm.to_jwk(rsa.generate_private_key(65537, 2048).public_key()))
    return {**key, "kid": kid} if kid else key


class Issuer:
    """A discovery document and a JWKS served in place of the key set's client; counts the key fetches."""

    def __init__(self, keys: list[dict[str, object]], issuer: str = ISSUER) -> None:
        self.keys, self.issuer, self.fetches = keys, issuer, 0

    async def get(self, url: str, **_: Any) -> Response:
        if urlsplit(url).path == "/.well-known/openid-configuration":
            return Response(200, orjson.dumps({"issuer": self.issuer, "jwks_uri": f"{ISSUER}/keys"}))
        self.fetches += 1
        return Response(200, orjson.dumps({"keys": self.keys}))

    async def aclose(self) -> None:
        pass


def key_set(issuer: Issuer, clock: FakeClock) -> KeySet:
    keys = KeySet(JWTConfig(url=ISSUER, audiences=["a"]), clock)
    keys._client = issuer  # type: ignore[assignment]
    return keys


def test_keys_by_kid_and_unnamed_ones_are_candidates() -> None:
    issuer = Issuer([jwk("one"), jwk(None), {**jwk("enc"), "use": "enc"}])
    keys = key_set(issuer, FakeClock())

    async def run() -> None:
        await keys.refresh()
        assert keys.ready.is_set() and set(keys.keys) == {"one"} and len(keys.unnamed) == 1
        assert len(await keys.candidates(None)) == 2
        assert len(await keys.candidates("one")) == 1

    asyncio.run(run())


def test_an_unknown_kid_refreshes_at_most_once_per_min_interval() -> None:
    issuer = Issuer([jwk("one")])
    clock = FakeClock()
    keys = key_set(issuer, clock)

    async def run() -> None:
        await keys.refresh()
        assert await keys.candidates("two") == [] and issuer.fetches == 1  # fetched just now: not again
        clock.advance(1.0)
        issuer.keys = [jwk("one"), jwk("two")]
        assert len(await keys.candidates("two")) == 1 and issuer.fetches == 2
        assert await keys.candidates("three") == [] and issuer.fetches == 2

    asyncio.run(run())


def test_a_discovery_document_of_another_issuer_is_refused() -> None:
    keys = key_set(Issuer([jwk("one")], issuer="https://other.example.com"), FakeClock())
    with pytest.raises(ValueError, match="issuer did not match"):
        asyncio.run(keys.refresh())
    assert not keys.ready.is_set()
