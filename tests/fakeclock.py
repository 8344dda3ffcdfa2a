"""A clock a test moves by hand, given where code reads monotonic time (TTL caches, key refreshes), so
the test steps over a TTL instead of sleeping through it."""
from __future__ import annotations


class FakeClock:
    """Monotonic seconds that pass only when advance() is called."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
