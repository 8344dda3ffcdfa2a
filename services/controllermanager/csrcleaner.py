"""kube's csrcleaner controller (pkg/controller/certificates/cleaner): CertificateSigningRequests are deleted
once they have served their purpose, checked every hour: issued ones an hour after approval, denied and failed
ones an hour after that condition, pending ones after a day, and any whose certificate has expired."""
from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
from collections.abc import Callable

from cryptography import x509

from services.apiserver.printers import parse_time
from services.common.background import cancel_and_wait
from services.common.errors import APIError, NotFound

from .certificates import CSRS, Obj
from .client import Client
from .csrsigning import now_utc

log = logging.getLogger(__name__)

POLLING_INTERVAL = 3600.0
APPROVED_EXPIRATION = dt.timedelta(hours=1)
DENIED_EXPIRATION = dt.timedelta(hours=1)
PENDING_EXPIRATION = dt.timedelta(hours=24)


def _older_than(ts: object, age: dt.timedelta, now: dt.datetime) -> bool:
    t = parse_time(ts)
    return t is not None and t + age < now


def _certificate_expired(pem: bytes, now: dt.datetime) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError:
        return False
    return now > cert.not_valid_after_utc


def expired(csr: Obj, now: dt.datetime) -> bool:
    """Whether the cleaner deletes csr now (isIssuedPastDeadline, isDeniedPastDeadline, isFailedPastDeadline,
    isPendingPastDeadline, isIssuedExpired)."""
    status = csr.get("status") or {}
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    certificate = base64.b64decode(status.get("certificate") or "")
    if not conditions and _older_than((csr.get("metadata") or {}).get("creationTimestamp"), PENDING_EXPIRATION, now):
        return True
    for c in conditions:
        typ, updated = c.get("type"), c.get("lastUpdateTime")
        if typ in ("Denied", "Failed") and _older_than(updated, DENIED_EXPIRATION, now):
            return True
        if typ == "Approved" and certificate:
            if _older_than(updated, APPROVED_EXPIRATION, now) or _certificate_expired(certificate, now):
                return True
    return False


class CSRCleanerController:
    def __init__(self, client: Client, interval: float = POLLING_INTERVAL,
                 clock: Callable[[], dt.datetime] = now_utc) -> None:
        self.client, self.interval, self.clock = client, interval, clock
        self.csrs = client.informer(CSRS)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.csrs.start()
        await self.csrs.synced.wait()
        self._task = asyncio.create_task(self._run(), name="csrcleaner")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        await self.csrs.stop()

    async def _run(self) -> None:
        while True:
            await self.clean()
            await asyncio.sleep(self.interval)

    async def clean(self) -> None:
        now = self.clock()
        for name, csr in list(self.csrs.store.items()):
            if not expired(csr, now):
                continue
            try:
                await self.client.delete(CSRS, "", name, uid=(csr.get("metadata") or {}).get("uid", ""))
                log.info("csrcleaner: deleted %s", name)
            except NotFound:
                pass
            except APIError as e:  # the next pass tries again, as kube's cleaner
                log.info("csrcleaner: unable to delete %s: %s", name, e)
