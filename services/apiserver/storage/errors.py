"""The storage errors kube's storage package makes (k8s.io/apiserver/pkg/storage/errors.go)."""

from __future__ import annotations

from services.common import errors
from services.common.errors import APIError, Gone, Timeout

from ..resource import ResourceInfo


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


def interpret(e: APIError, info: ResourceInfo, name: str) -> APIError:
    """kube's storage InterpretGetError/InterpretUpdateError/InterpretDeleteError: storage speaks in keys;
    clients expect kube's messages about the resource and name."""
    if e.code == 404:
        return errors.not_found(info.plural, info.group, name)
    if e.code == 409:
        # keep storage's reason (modified, or a failed uid/resourceVersion precondition)
        _, sep, why = e.message.partition('": ')
        return errors.conflict(info.plural, info.group, name, why if sep else errors.MODIFIED)
    return e
