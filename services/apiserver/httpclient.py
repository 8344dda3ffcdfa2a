"""The outbound HTTP client of every service (client-go's transport with k8s.io/apiserver's webhook
client): admission and CRD conversion webhooks (webhook/client.py), token and authorization webhooks, the
audit webhook, the JWKS of JWT issuers, the aggregator's availability and discovery probes and the kit's
delegated reviews all call through a Client.

One stack, aiohttp, under the controller-manager's RESTClient too (services/apiserver/restclient.py): its client
spends about a quarter of httpx's CPU per call (measured on webhook calls). The aggregator forwards on
its own leaner transport (services/proxy/aggregator/transport.py), measured faster again for proxying.

A Client is one keep-alive pool with its TLS context, default headers and timeout; its session is made
on first use, inside the event loop that uses it (aiohttp binds a session to the running loop). A call made
while a request is traced carries its `traceparent` (services/common/tracing.py). A call
that gets no answer raises CallError with Go's net/http words, which kube's messages quote.
"""
from __future__ import annotations

import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from services.common import tracing

if TYPE_CHECKING:
    import aiohttp

Headers = Mapping[str, str] | Iterable[tuple[str, str]]
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
DEADLINE_EXCEEDED = "context deadline exceeded"
KEEPALIVE = 60.0  # idle connections kept this long, below the 90 s after which kube's servers close them


@dataclass(frozen=True)
class Response:
    """An answer, read whole."""
    status: int
    content: bytes = b""
    reason: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body decoded (orjson.JSONDecodeError, a ValueError, when it is no JSON)."""
        return orjson.loads(self.content)


class CallError(Exception):
    """Go's url.Error: the request got no answer (`Post "<url>": <reason>`)."""

    def __init__(self, method: str, url: str, reason: str) -> None:
        super().__init__(f'{method.capitalize()} "{url}": {reason}')
        self.reason = reason
        self.timeout = reason == DEADLINE_EXCEEDED


def reason(e: BaseException) -> str:
    """Go's words for the common network failures (kube's messages come from net/http), else the error."""
    if isinstance(e, TimeoutError):
        return DEADLINE_EXCEEDED
    text = " ".join((str(e) or type(e).__name__).split())
    import aiohttp  # loaded by the call that failed (Client.session)

    if isinstance(e, (aiohttp.ClientConnectorCertificateError, ssl.SSLCertVerificationError)):
        return f"tls: failed to verify certificate: {text}"
    if isinstance(e, aiohttp.ClientConnectorError) and isinstance(e.os_error, ConnectionRefusedError):
        return f"dial tcp {e.host}:{e.port}: connect: connection refused"
    return text


class Client:
    """Requests to paths below `base_url` ("": the URL itself, as a webhook's), or to absolute URLs when
    `base_url` is empty, over one pool.

    `timeout` bounds a whole exchange (None: no bound; a request may give its own), `connect_timeout` the
    connection alone. The pool has no bound on connections."""

    def __init__(self, base_url: str = "", tls: ssl.SSLContext | None = None, headers: Mapping[str, str] | None = None,
                 timeout: float | None = 30.0, connect_timeout: float | None = None) -> None:
        self.base_url = base_url
        self.tls = tls
        self.headers = dict(headers or {})
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # imported on first use: a service that calls no webhook (most of a test cluster's) never
            # pays aiohttp's ~8 MB and ~0.1 s
            import aiohttp

            self._session = aiohttp.ClientSession(
                headers=self.headers, trust_env=False, skip_auto_headers=("User-Agent",),
                connector=aiohttp.TCPConnector(ssl=self.tls or True, limit=0, keepalive_timeout=KEEPALIVE))
        return self._session

    async def request(self, method: str, url: str, body: bytes | None = None, headers: Headers | None = None,
                      timeout: float | None = None, server_name: str | None = None) -> Response:
        """The answer to `method url`; CallError when there is none (`timeout`: this request's bound)."""
        full = (self.base_url.rstrip("/") + url if url else self.base_url) if self.base_url else url
        session = self.session()
        import aiohttp  # loaded by session()

        limit = aiohttp.ClientTimeout(total=timeout if timeout is not None else self.timeout,
                                      connect=self.connect_timeout)
        if tracing.ENABLED and (trace := tracing.headers()):  # the webhook or server continues the trace
            headers = [*(headers.items() if isinstance(headers, Mapping) else headers or ()), *trace.items()]
        try:
            async with session.request(method, full, data=body, headers=headers, timeout=limit,
                                              server_hostname=server_name or None, allow_redirects=False) as r:
                return Response(r.status, await r.read(), r.reason or "", r.headers)
        except (aiohttp.ClientError, ssl.SSLError, OSError, TimeoutError) as e:
            raise CallError(method, full, reason(e)) from None

    async def get(self, url: str, headers: Headers | None = None, timeout: float | None = None,
                  server_name: str | None = None) -> Response:
        return await self.request("GET", url, headers=headers, timeout=timeout, server_name=server_name)

    async def post_json(self, url: str, obj: Any, headers: Mapping[str, str] | None = None,
                        timeout: float | None = None, server_name: str | None = None) -> Response:
        """POST `obj` as JSON (bytes: already encoded), asking for JSON back."""
        body = obj if isinstance(obj, bytes) else orjson.dumps(obj)
        return await self.request("POST", url, body, {**JSON_HEADERS, **(headers or {})}, timeout, server_name)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
