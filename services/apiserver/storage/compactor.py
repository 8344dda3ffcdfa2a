"""Periodic etcd compaction, as kube-apiserver's storage/etcd3 compactor does it.

Every interval, one transaction bumps the version of `compact_rev_key` (only if nobody else did
since our last look, so several storage replicas compact once per interval between them) and
reads etcd's current revision; the revision seen one interval earlier is then compacted. History
is thus kept for at least one interval.
"""

from __future__ import annotations

import asyncio
import logging

from services.common.background import cancel_and_wait
from services.common.errors import APIError

from . import metrics
from .etcd import Compacted, Etcd, compare_version, op_get, op_put

log = logging.getLogger(__name__)

COMPACT_REV_KEY = b"compact_rev_key"


class Compactor:
    def __init__(self, etcd: Etcd, interval: float) -> None:
        self.etcd = etcd
        self.interval = interval
        self.version = 0  # compact_rev_key's version when we last looked (kube's "t")
        self.revision = 0  # etcd's revision one interval ago
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.interval > 0:
            self._task = asyncio.create_task(self._run(), name="etcd compactor")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                target = await self.compact_once()
            except APIError as e:
                metrics.COMPACTIONS.labels("failed").inc()
                log.warning("etcd compaction failed: %s", e.message)
                continue
            metrics.COMPACTIONS.labels("compacted" if target else "skipped").inc()
            if target:
                metrics.COMPACTED_REVISION.set(target)

    async def compact_once(self) -> int:
        """One step; returns the revision compacted (0 when this step compacted nothing)."""
        resp = await self.etcd.txn(
            [compare_version(COMPACT_REV_KEY, self.version)],
            [op_put(COMPACT_REV_KEY, str(self.revision).encode())],
            [op_get(COMPACT_REV_KEY)],
            op="compact",
            resource="",
        )
        current = resp.header.revision
        if not resp.succeeded:
            # Another replica compacted in this interval: follow its clock.
            kvs = resp.responses[0].response_range.kvs
            self.version = kvs[0].version if kvs else 0
            self.revision = current
            return 0
        self.version += 1
        target, self.revision = self.revision, current
        if not target:
            return 0  # nothing was seen an interval ago: never compact on bootstrap
        try:
            await self.etcd.compact(target)
        except Compacted:
            return 0  # someone compacted further already
        log.info("etcd: compacted revision %d", target)
        return target
