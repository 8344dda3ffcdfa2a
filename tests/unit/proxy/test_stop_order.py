"""The proxy's stop: the HTTPS drain is bounded well inside the grace a stop gives the process, and the
audit sink is flushed first once it has drained, before the stops that may be slow or fail (the endpoint
lease's delete, the informers), which must not spend that grace before the audit events are written."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson
import pytest

from services.apiserver.audit.policy import Auditor
from services.cluster import processes
from services.common import runtime
from services.proxy import __main__ as proxy_main
from services.proxy.aggregator.authentication_trust import AuthenticationTrust
from services.proxy.app import ProxyApp
from services.proxy.endpointlease import EndpointLease

POLICY = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n  - level: Metadata\n"


class Health:
    shutting_down = False

    async def stop(self) -> None:
        pass


async def test_audit_events_are_written_before_the_other_components_stop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY)
    log = tmp_path / "audit.log"
    args = proxy_main.parse_args([
        "--tls-cert-file", "c", "--tls-private-key-file", "k", "--insecure-internal",
        "--audit-policy-file", str(tmp_path / "policy.yaml"), "--audit-log-path", str(log),
        "--audit-log-mode", "batch", "--audit-log-batch-max-wait", "1h"])
    seen: list[tuple[str, bytes]] = []

    def failing(name: str) -> Callable[[object], Awaitable[None]]:  # a component whose stop fails, noting what the audit log held by then
        async def stop(self: object) -> None:
            seen.append((name, log.read_bytes() if log.exists() else b""))
            raise RuntimeError(f"{name} cannot stop")
        return stop

    for cls, name in ((EndpointLease, "lease"), (AuthenticationTrust, "trust"), (ProxyApp, "proxy")):
        monkeypatch.setattr(cls, "stop", failing(name))
    service = runtime.Service("proxy", args)
    await proxy_main.assemble(service)
    auditor = next(start.__self__ for start, _ in service._components  # type: ignore[union-attr]
                   if isinstance(getattr(start, "__self__", None), Auditor))
    await auditor.start()
    auditor.backend.process([{"kind": "Event", "auditID": "a1", "stage": "ResponseComplete"}])  # held: batch mode

    await service._shutdown(Health(), len(service._components), [])  # type: ignore[arg-type]
    assert [name for name, _ in seen] == ["lease", "trust", "proxy"]
    for _, held in seen:  # written before any other stop ran
        assert [orjson.loads(line)["auditID"] for line in held.splitlines()] == ["a1"]


async def test_the_https_drain_leaves_the_stop_grace_to_what_follows_it() -> None:
    """The requests a drain waits for (a watch whose client does not read) are cancelled in time for the
    audit sink and the other stops to run before a local stack's SIGKILL."""
    service = runtime.Service("proxy", proxy_main.parse_args(
        ["--tls-cert-file", "c", "--tls-private-key-file", "k", "--insecure-internal"]))
    await proxy_main.assemble(service)
    [listener] = service._listeners
    assert 2 * listener.server.config.timeout_graceful_shutdown <= processes.DATA_GRACE  # type: ignore[attr-defined]
