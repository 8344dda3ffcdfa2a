"""/healthz, /livez and /readyz, answered before the request is parsed or authenticated (kube
serves them to everyone too: system:public-info-viewer)."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from services.apiserver.filters import Handler

if TYPE_CHECKING:
    from ..context import Context

Readiness = Callable[[], Awaitable[tuple[bool, str]]]
PREFIXES = ("/healthz", "/livez", "/readyz")
_NOSNIFF = [(b"x-content-type-options", b"nosniff")]


def with_health_checks(handler: Handler, readiness: Readiness) -> Handler:
    """readiness: (ready, the verbose text listing each check)."""
    async def health(ctx: Context) -> None:
        if ctx.path.startswith("/readyz"):
            ok, text = await readiness()
            verbose = b"verbose" in ctx.query_string
            body = text.encode() if (verbose or not ok) else b"ok"
            await ctx.respond(200 if ok else 500, body, "text/plain; charset=utf-8", _NOSNIFF)
        else:
            await ctx.respond(200, b"ok", "text/plain; charset=utf-8", _NOSNIFF)

    def healthz(ctx: Context) -> Awaitable[None]:
        return health(ctx) if ctx.path.startswith(PREFIXES) else handler(ctx)
    return healthz
