"""Authorization cache invalidation: watches of the RBAC objects, so cached decisions go as soon as
RBAC changes.

Four informers (roles, clusterroles, rolebindings, clusterrolebindings) call Authorizer.invalidate
on every event. They are not part of readiness: until the registry serves these resources they
keep retrying in the background, and the authorizer keeps its short fallback TTL meanwhile.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from apiary_pb import registry_pb2_grpc as rgrpc
from services.common.informer import Informer

from .filters.authz import Authorizer

RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_RESOURCES = ("roles", "clusterroles", "rolebindings", "clusterrolebindings")
# A retry message that repeats unchanged is logged again only after this long.
REPEAT_LOG_INTERVAL = 300.0


class RepeatFilter(logging.Filter):
    """Drops a log message identical to one logged less than `interval` ago.

    Informers log each failed attempt; while a resource is not served yet that is the same line
    every few seconds, per informer.
    """

    def __init__(self, interval: float = REPEAT_LOG_INTERVAL) -> None:
        super().__init__()
        self.interval = interval
        self._last: dict[tuple[str, Any], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        # the retry delay changes with the backoff; the rest of the message is what repeats
        key = (record.msg, args[:2]) if isinstance(record.msg, str) else (str(record.msg), ())
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            return False
        if len(self._last) > 1000:
            self._last.clear()
        self._last[key] = now
        return True


_informer_log = logging.getLogger("services.common.informer")
_repeat_filter = RepeatFilter()


class AuthzCacheInvalidator:
    def __init__(self, registry: rgrpc.RegistryStub, authz: Authorizer) -> None:
        self.authz = authz
        self.informers = [Informer(registry, RBAC_GROUP, "v1", r) for r in RBAC_RESOURCES]
        for inf in self.informers:
            inf.add_handler(self._changed)
        authz.informed = self.synced

    def _changed(self, _kind: str, _obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
        self.authz.invalidate()

    def synced(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers)

    def start(self) -> None:
        if _repeat_filter not in _informer_log.filters:
            _informer_log.addFilter(_repeat_filter)
        for inf in self.informers:
            inf.start()

    async def stop(self) -> None:
        for inf in self.informers:
            await inf.stop()
