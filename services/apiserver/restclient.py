"""client-go's rest.RESTClient, in small: requests and watch streams to a Kubernetes API server, for the
clients of the API (the controller-manager, the kit's NamespaceLifecycle), over the library's one outbound
client (httpclient.Client: its pool, TLS and headers).

An answer of 400 or more is raised as the APIError its Status says (a body that is no Status: its code and
text); a server that cannot be reached, a broken connection or a timeout is raised as ServiceUnavailable,
which callers retry as any unavailable answer."""
from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping

import aiohttp
import orjson

from services.common.errors import APIError, ServiceUnavailable

from .httpclient import Client

# A watch has no read timeout: the server ends it (timeoutSeconds) and the informer resumes it.
WATCH_TIMEOUT = aiohttp.ClientTimeout()
# The longest watch event line read: far above what one object of a 3 MiB request body can become; a
# line past it fails the watch (the informer relists) rather than growing a buffer without bound.
MAX_EVENT_BYTES = 64 * 1024 * 1024
# What is caught as "the API is away": aiohttp's errors and its timeouts (TimeoutError).
UNREACHABLE = (aiohttp.ClientError, TimeoutError)


def status_error(code: int, content: bytes) -> APIError:
    """The error an answer of `code` with body `content` stands for: its Status, else its code and text."""
    try:
        doc = orjson.loads(content) if content else None
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and doc.get("kind") == "Status":
        return APIError.from_status_dict({**doc, "code": doc.get("code") or code})
    return APIError.from_status_dict({"code": code, "message": content[:200].decode("utf-8", "replace")})


class RESTClient:
    """Requests to `server` (a kubeconfig's, with its TLS context and headers) over one Client's pool.

    The pool has no bound: every watch holds its connection for as long as it runs (~40 in the
    controller-manager's garbage collector), and past a bound a watch or a lease renewal would wait for a
    connection; idle connections are kept, so the requests between watches reuse them. `timeout` bounds
    connecting and each read (not a whole answer: a large list takes as long as it streams)."""

    def __init__(self, server: str, ssl_context: ssl.SSLContext | None, headers: Mapping[str, str] | None = None,
                 timeout: float = 30.0) -> None:
        self.server = server.rstrip("/")
        self.client = Client(self.server, ssl_context, headers, timeout=None)
        self.timeout = aiohttp.ClientTimeout(connect=timeout, sock_read=timeout)

    async def close(self) -> None:
        await self.client.aclose()

    async def request(self, method: str, path: str, params: Mapping[str, str] | None = None,
                      body: bytes | None = None, headers: Mapping[str, str] | None = None) -> bytes:
        """The body of the answer to `method path` (the path below the server's URL)."""
        try:
            async with self.client.session().request(method, self.server + path, params=params, data=body,
                                                     headers=headers, timeout=self.timeout) as r:
                content = await r.read()
        except UNREACHABLE as e:
            raise ServiceUnavailable(f"{method} {path}: {type(e).__name__}: {e}") from None
        if r.status >= 400:
            raise status_error(r.status, content)
        return content

    async def lines(self, path: str, params: Mapping[str, str] | None = None,
                    headers: Mapping[str, str] | None = None) -> AsyncIterator[bytes]:
        """A watch: each line of the answer to GET `path` as it arrives, until the server ends it. Close it
        (contextlib.aclosing) when leaving early, so that its connection goes at once."""
        try:
            async with self.client.session().get(self.server + path, params=params, headers=headers,
                                        timeout=WATCH_TIMEOUT) as r:
                if r.status >= 400:
                    raise status_error(r.status, await r.read())
                content = r.content
                while line := await content.readline(max_line_length=MAX_EVENT_BYTES):
                    if line != b"\n":
                        yield line
        except UNREACHABLE as e:
            raise ServiceUnavailable(f"watch {path}: {type(e).__name__}: {e}") from None
