"""Capped exponential backoff with jitter, for the loops that keep a stream or a watch to a peer open.

The cap is small on purpose: a retry against a peer that is down fails at once (its channel is not
connected), so retrying often costs little, and a restarted peer is reached within about `cap` of
being ready. The jitter keeps the clients of one restarted peer from retrying in lockstep.
"""
from __future__ import annotations

import random

INITIAL = 0.05
CAP = 0.25


class Backoff:
    """delay() grows INITIAL, 2x, 4x... up to cap, each draw jittered down by up to half; reset()
    after a success."""

    def __init__(self, initial: float = INITIAL, cap: float = CAP) -> None:
        self.initial, self.cap = initial, cap
        self._next = initial

    def delay(self) -> float:
        d = self._next
        self._next = min(d * 2, self.cap)
        return d * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self._next = self.initial
