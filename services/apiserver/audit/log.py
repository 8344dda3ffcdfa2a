"""The log backend: one audit.k8s.io/v1 Event per JSON line (--audit-log-path, "-": stdout), rotated by
size with lumberjack's file names and kept by count and age, as kube's log backend does. A batch is
written with one write."""
from __future__ import annotations

import logging
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

import orjson

from . import Event
from .metrics import plugin_error

log = logging.getLogger(__name__)


class LogBackend:
    """Event lines to a file ("-": stdout), rotated when the next write would pass max_size bytes.

    A rotated file is named as lumberjack (kube's log rotation) names it: audit-2026-12-01T21-33-29.123.log
    beside audit.log; at most max_backups of them are kept (0: all), none older than max_age days (0: any).
    """

    name = "log"

    def __init__(self, path: str, max_size_mb: int = 0, max_backups: int = 0, max_age_days: int = 0) -> None:
        self.path = path
        self.max_size = max_size_mb * 1024 * 1024
        self.max_backups, self.max_age = max_backups, max_age_days
        self._file: IO[bytes] | None = None
        self._size = 0

    def _open(self) -> IO[bytes]:
        if self._file is None:
            if self.path == "-":
                self._file = sys.stdout.buffer
            else:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "ab", buffering=0)  # one write per batch: nothing kept in memory
                self._size = self._file.tell()
        return self._file

    def process(self, events: list[Event]) -> bool:
        lines = [orjson.dumps(e) + b"\n" for e in events]
        data = b"".join(lines)
        try:
            if self.path != "-" and self.max_size and self._size + len(data) > self.max_size:
                for line in lines:  # rotation falls between lines: no file passes max_size
                    self._write(line)
            else:
                self._write(data)
        except OSError as e:
            plugin_error(self.name, e, events)
            return False
        return True

    def _write(self, data: bytes) -> None:
        f = self._open()
        if self.path != "-" and self.max_size and self._size and self._size + len(data) > self.max_size:
            f = self._rotate()
        f.write(data)
        self._size += len(data)
        if self.path == "-":
            f.flush()

    def _rotate(self) -> IO[bytes]:
        assert self._file is not None
        self._file.close()
        self._file = None
        p = Path(self.path)
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H-%M-%S.%f")[:-3]
        target, n = p.with_name(f"{p.stem}-{stamp}{p.suffix}"), 0
        while target.exists():  # two rotations within a millisecond
            n += 1
            target = p.with_name(f"{p.stem}-{stamp}.{n}{p.suffix}")
        os.replace(p, target)
        self._prune(p)
        return self._open()

    def _prune(self, p: Path) -> None:
        backups = sorted(p.parent.glob(f"{p.stem}-*{p.suffix}"), key=lambda b: (b.stat().st_mtime_ns, b.name))
        doomed = set()
        if self.max_backups:
            doomed.update(backups[:-self.max_backups])
        if self.max_age:
            cutoff = time.time() - self.max_age * 86400
            doomed.update(b for b in backups if b.stat().st_mtime < cutoff)
        for b in doomed:
            b.unlink(missing_ok=True)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        if self._file is not None and self.path != "-":
            self._file.close()
        self._file = None
