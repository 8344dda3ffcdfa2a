"""Concurrency borrowing between priority levels (kube's apf_controller updateBorrowing and conc_alloc).

Each level has a nominal limit (its share of the server's seats), a lower bound (nominal less what it
may lend: lendablePercent) and an upper bound (nominal plus what it may borrow: borrowingLimitPercent,
no limit when unset). Every BORROWING_PERIOD the levels' current limits are set again from their seat
demand (seats in use plus seats waiting) over the period: each level's target is its smoothed demand
envelope (average + standard deviation, decaying with a half-life of 5 minutes), never below its
demand's high watermark (up to its nominal limit) nor its lower bound; the server's seats (the sum of
the nominal limits) are then shared in proportion to the targets within every level's bounds
(compute_concurrency_allocation). The exempt level takes part with its own nominal share and lending.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

BORROWING_PERIOD = 10.0               # seconds (kube's borrowingAdjustmentPeriod)
SEAT_DEMAND_SMOOTHING = 0.977         # half-life of 5 minutes at one adjustment per 10 s
MIN_TARGET = 0.001
EPSILON = 1e-7


def round_half_away(x: float) -> int:
    """Go's math.Round (Python's round() rounds half to even)."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


@dataclass(frozen=True)
class Limits:
    nominal: int
    lower: int      # nominal less the lendable seats
    upper: int      # nominal plus the seats it may borrow


def level_limits(server_seats: int, shares: int, share_sum: int, lendable_percent: int,
                 borrowing_limit_percent: int | None) -> Limits:
    """kube's finishQueueSetReconfigs: the nominal limit rounds up, lending and borrowing round half away."""
    nominal = math.ceil(server_seats * shares / share_sum) if share_sum else 0
    lendable = round_half_away(nominal * lendable_percent / 100)
    borrowing = server_seats if borrowing_limit_percent is None else \
        round_half_away(nominal * borrowing_limit_percent / 100)
    return Limits(nominal, nominal - lendable, nominal + borrowing)


class Integrator:
    """The time-weighted average, standard deviation and maximum of a value since the last reset
    (kube's fairqueuing Integrator)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.value = 0.0
        self._start = self._at = clock()
        self._sum = self._sum_sq = 0.0
        self.max = 0.0

    def _advance(self) -> None:
        now = self.clock()
        dt = now - self._at
        if dt > 0:
            self._sum += self.value * dt
            self._sum_sq += self.value * self.value * dt
        self._at = now

    def set(self, value: float) -> None:
        self._advance()
        self.value = value
        self.max = max(self.max, value)

    def reset(self) -> tuple[float, float, float, float]:
        """(duration, average, standard deviation, max) since the last reset; starts a new period."""
        self._advance()
        duration = self._at - self._start
        avg = self._sum / duration if duration > 0 else 0.0
        var = self._sum_sq / duration - avg * avg if duration > 0 else 0.0
        out = (duration, avg, math.sqrt(max(0.0, var)), self.max)
        self._start = self._at
        self._sum = self._sum_sq = 0.0
        self.max = self.value
        return out


@dataclass
class SeatDemandStats:
    avg: float = 0.0
    std_dev: float = 0.0
    high_watermark: float = 0.0
    smoothed: float = 0.0

    def update(self, duration: float, avg: float, std_dev: float, high: float) -> None:
        self.high_watermark = high
        if duration <= 0:
            return
        self.avg, self.std_dev = avg, std_dev
        envelope = avg + std_dev
        self.smoothed = max(envelope, SEAT_DEMAND_SMOOTHING * self.smoothed + (1 - SEAT_DEMAND_SMOOTHING) * envelope)


@dataclass(frozen=True)
class AllocItem:
    target: float
    lower: float
    upper: float


def compute_concurrency_allocation(required: int, items: Sequence[AllocItem]) -> tuple[list[float], float]:
    """The allocations, summing to `required`, with each item at fair * target clamped to its bounds,
    and that fair proportion (the smallest that works). ValueError when the bounds make it impossible."""
    if required < 0:
        raise ValueError("negative sums are not supported")
    targets = []
    low = high = 0.0
    for i, it in enumerate(items):
        if it.lower < 0:
            raise ValueError(f"lower bound {i} is {it.lower} but negative lower bounds are not allowed")
        if it.target < it.lower:
            raise ValueError(f"target {i} is {it.target}, which is below its lower bound of {it.lower}")
        if it.upper < it.lower:
            raise ValueError(f"upper bound {i} is {it.upper} but should not be less than the lower bound {it.lower}")
        targets.append(max(it.target, MIN_TARGET))
        low += it.lower
        high += it.upper
    if low - required > EPSILON:
        raise ValueError(f"lower bounds sum to {low}, which is higher than the required sum of {required}")
    if required - high > EPSILON:
        raise ValueError(f"upper bounds sum to {high}, which is lower than the required sum of {required}")
    if required == 0 or not items:
        return [0.0] * len(items), 0.0
    lows = [it.lower / t for it, t in zip(items, targets)]
    highs = [it.upper / t for it, t in zip(items, targets)]
    if low - required > -EPSILON:
        return [it.lower for it in items], min(lows)
    if required - high > -EPSILON:
        return [it.upper for it in items], max(highs)

    def total(fair: float) -> float:
        return sum(min(it.upper, max(it.lower, fair * t)) for it, t in zip(items, targets))

    # total() is piecewise linear and non-decreasing, with its corners where an item meets a bound
    corners = sorted(set(lows + highs))
    prev, prev_sum = corners[0], total(corners[0])
    fair = corners[-1]
    for c in corners[1:]:
        s = total(c)
        if s >= required:
            fair = prev + (required - prev_sum) * (c - prev) / (s - prev_sum) if s > prev_sum else prev
            break
        prev, prev_sum = c, s
    return [min(it.upper, max(it.lower, fair * t)) for it, t in zip(items, targets)], fair
