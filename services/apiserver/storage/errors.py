"""The storage errors kube's storage package makes (k8s.io/apiserver/pkg/storage/errors.go)."""

from __future__ import annotations

from services.common.errors import Gone, Timeout


def too_old(rv: int, oldest: int) -> Gone:
    """A watch from a revision the watch cache's event window no longer holds."""
    return Gone(f"too old resource version: {rv} ({oldest})", reason="Expired")


def too_large(rv: int, current: int) -> Timeout:
    """A read at a revision the cache (or etcd) has not reached."""
    return Timeout(
        f"Too large resource version: {rv}, current: {current}",
        details={
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
        headers={"Retry-After": "1"},
    )
