"""Request body decoding off the event loop: a large body is decoded in a worker process.

Decoding is CPU-bound and holds the GIL (orjson and protobuf parse in C without releasing it; YAML
builds its objects in Python), so a thread would still stall the loop that serves everyone else: a
dense 3 MiB YAML body takes seconds. A worker process costs the body's copy there and the JSON's copy
back (about a millisecond per MiB), so small bodies, the usual case, are decoded inline.
"""
from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from services.apiserver import negotiation
from services.apiserver.negotiation import JSON, JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH
from services.common.errors import ServiceUnavailable

from .encoding import protobuf

log = logging.getLogger(__name__)

# Bodies up to this size are decoded inline: at most a few milliseconds of loop time. YAML costs
# 20-50x more per byte than JSON, so it goes to the worker sooner.
INLINE_BYTES = 64 * 1024
INLINE_YAML_BYTES = 4 * 1024
# Passed on to the registry as they came (decode_body): nothing to do in a worker. A body
# without a content type is JSON too.
PASSED_ON = frozenset({"", JSON, JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH})


def decode_body(verb: str, content_type: str, body: bytes, into: str = "") -> tuple[bytes, str]:
    """negotiation.decode_body with the built-in kinds' protobuf serializer (a module-level function,
    so that the worker processes can be handed it)."""
    return negotiation.decode_body(verb, content_type, body, into, protobuf().decode_k8s_protobuf)


def _worker_init(parent: int) -> None:
    """Decoding yields the CPU to the event loops that serve requests (a hostile body costs its
    sender), and a worker whose proxy was killed (-9, no shutdown), which would wait on its task
    queue forever, leaves once it is no longer the proxy's child."""
    os.nice(10)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


class BodyDecoder:
    def __init__(self, workers: int = 2) -> None:
        self.workers = workers
        self._started = False
        self._pool: ProcessPoolExecutor | None = None

    def start(self) -> None:
        self._started = True

    def _workers(self) -> ProcessPoolExecutor:
        """The pool, made with the first body that needs it: its queues' semaphores start multiprocessing's
        resource tracker, a Python process of its own, which would otherwise start with every proxy and share
        the cores with its start-up. Spawn, not fork: the proxy's gRPC channels and threads must not be
        copied into a child. Workers start with the first large bodies (a few hundred ms each, once)."""
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_worker_init, initargs=(os.getpid(),))
        return self._pool

    def stop(self) -> None:
        self._started = False
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    @staticmethod
    def inline(content_type: str, body: bytes) -> bool:
        """Whether to decode here: small bodies, and JSON of any size (passed on, not parsed)."""
        media = content_type.split(";", 1)[0].strip().lower()
        if media in PASSED_ON:
            return True
        limit = INLINE_YAML_BYTES if "yaml" in media else INLINE_BYTES
        return len(body) <= limit

    async def decode(self, verb: str, content_type: str, body: bytes, into: str = "") -> tuple[bytes, str]:
        """decode_body's answer; raises its APIErrors."""
        if not self._started or self.inline(content_type, body):
            return decode_body(verb, content_type, body, into)
        pool = self._workers()
        try:
            # APIErrors come back pickled whole (class, message, details)
            return await asyncio.get_running_loop().run_in_executor(pool, decode_body, verb, content_type, body,
                                                                    into)
        except BrokenProcessPool:
            # A worker died (killed from outside, or out of memory): the next body gets a fresh pool
            # (once, however many decodes the broken one failed).
            if self._pool is pool:
                log.error("a body decoding worker died; restarting the pool")
                self.stop()
                self.start()
            raise ServiceUnavailable("the server is currently unable to decode the request body",
                                     headers={"Retry-After": "1"}, details={"retryAfterSeconds": 1}) from None
