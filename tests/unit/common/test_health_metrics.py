"""services/common/health.py's /metrics: text by default, OpenMetrics (the form with exemplars) when the
scraper's Accept header asks for it, as Prometheus's does."""
from __future__ import annotations

import httpx

from services.common.health import HealthServer

PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
                     "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


async def test_metrics_in_the_form_asked_for() -> None:
    health = HealthServer("127.0.0.1", 0)
    await health.start()
    try:
        port = health._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
            om = await c.get("/metrics", headers={"Accept": PROMETHEUS_ACCEPT})
            text = await c.get("/metrics")
    finally:
        await health.stop()
    assert om.headers["content-type"].startswith("application/openmetrics-text") and om.text.endswith("# EOF\n")
    assert text.headers["content-type"].startswith("text/plain") and "# EOF" not in text.text
