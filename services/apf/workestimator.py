"""How many seats a request takes, and for how long (kube 1.33's request.WorkEstimator, its defaults).

- LIST (and a WATCH that asks for initial events): from the number of objects it will go through, one
  seat per 100 (kube's listWorkEstimator, object-count based): from the watch cache all the stored
  objects; from etcd (a continue token, resourceVersionMatch=Exact, or a legacy exact read: a limit
  with a resourceVersion other than "0") twice the page, or every object plus the page when a selector
  filters them. A LIST of one named object is one seat. The counts come from the storage service
  (ObjectCounts); a resource it has no count for costs the minimum (kube: an aggregated or unknown
  resource), a count gone stale the maximum.
- create, update, patch, delete: one seat while it runs, then, when 10 or more watchers will be sent
  its event, ceil(watchers / 10) seats held for 5 ms per seat's share of the events after it answers
  (kube's mutatingWorkEstimator: the notifications' cost, never seen by the client).
- everything else: one seat.
Every estimate is between 1 seat and the level's max seats (kube: max(1, min(15 % of its nominal
seats, nominal / handSize)), and never above 10).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from apiary_pb import envelope_pb2 as pb

MINIMUM_SEATS = 1
MAXIMUM_SEATS = 10
OBJECTS_PER_SEAT = 100.0
WATCHES_PER_SEAT = 10.0
EVENT_ADDITIONAL_DURATION = 0.005  # seconds of a seat per watch event
# the share of a level's nominal seats one request may take (kube's priorityLevelMaxSeatsPercent)
PRIORITY_LEVEL_MAX_SEATS_PERCENT = 0.15

MUTATING_VERBS = frozenset(("create", "update", "patch", "delete"))


class StaleCount(Exception):
    """The storage's count of a resource is too old to trust (kube's ObjectCountStaleErr)."""


@dataclass(frozen=True)
class WorkEstimate:
    """kube's WorkEstimate: seats while the request runs, and seats held for additional_latency after."""

    initial_seats: int = MINIMUM_SEATS
    final_seats: int = 0
    additional_latency: float = 0.0  # seconds
    watch_count: int = -1  # a write's: the watchers its event goes to (kube's watch_count_samples); -1 others

    @property
    def max_seats(self) -> int:
        return max(self.initial_seats, self.final_seats)

    @property
    def final_work(self) -> float:
        """The seat-seconds of the final phase."""
        return self.final_seats * self.additional_latency


# the estimate of most requests (an estimate is immutable: one object serves them all)
ONE_SEAT = WorkEstimate()


def level_max_seats(nominal: int, hand_size: int) -> int:
    """The most seats one request of a queuing level may take (kube's MaxSeatsTracker value)."""
    return max(1, min(math.ceil(nominal * PRIORITY_LEVEL_MAX_SEATS_PERCENT), nominal // max(1, hand_size)))


def _list_from_storage(opts: pb.ListOptions) -> bool:
    """Whether the LIST goes past the watch cache to etcd (kube 1.33's ShouldDelegateList, cache without
    snapshots): a continuation, or an exact resourceVersion (resourceVersionMatch=Exact, or the legacy
    form: a limit with a resourceVersion other than 0)."""
    rv, match = opts.resource_version, opts.resource_version_match
    legacy_exact = opts.limit > 0 and not match and rv not in ("", "0")
    unsupported_match = (match not in ("", "NotOlderThan")) or legacy_exact
    return bool(getattr(opts, "continue")) or unsupported_match


def objects_processed(count: int, opts: pb.ListOptions, from_cache: bool) -> int:
    """The objects a LIST goes through (kube's seatsBasedOnObjectCount, before the division)."""
    limit = opts.limit if 0 < opts.limit < count else count
    if from_cache:
        return count
    if opts.label_selector or opts.field_selector:
        return count + limit
    return 2 * limit


class WorkEstimator:
    """estimate(digest, level max seats) -> WorkEstimate, with the storage's counts behind two lookups:
    object_count(group, resource) (raises StaleCount; None when unknown) and
    watch_count(group, resource, namespace, name) (the watchers an event of that object goes to)."""

    def __init__(self, object_count: Callable[[str, str], int | None],
                 watch_count: Callable[[str, str, str, str], int]) -> None:
        self.object_count = object_count
        self.watch_count = watch_count

    def estimate(self, d: pb.RequestAttributes, max_seats: int = 0) -> WorkEstimate:
        if max_seats <= 0 or max_seats > MAXIMUM_SEATS:
            max_seats = MAXIMUM_SEATS
        if not d.resource_request:
            return ONE_SEAT
        if d.verb == "list" or (d.verb == "watch" and d.list_options.send_initial_events):
            return WorkEstimate(self._list_seats(d, max_seats))
        if d.verb in MUTATING_VERBS:
            return self._mutating(d, max_seats)
        return ONE_SEAT

    def _list_seats(self, d: pb.RequestAttributes, max_seats: int) -> int:
        if d.name:
            return MINIMUM_SEATS  # a LIST of one named object reads one object
        opts = d.list_options
        from_cache = d.verb == "watch" or not _list_from_storage(opts)
        try:
            count = self.object_count(d.api_group, d.resource)
        except StaleCount:
            return max_seats
        if count is None:
            return MINIMUM_SEATS
        seats = math.ceil(objects_processed(count, opts, from_cache) / OBJECTS_PER_SEAT)
        return max(MINIMUM_SEATS, min(seats, max_seats))

    def _mutating(self, d: pb.RequestAttributes, max_seats: int) -> WorkEstimate:
        if d.resource == "serviceaccounts" and d.subresource == "token":
            return ONE_SEAT  # a TokenRequest writes nothing: no event
        watchers = self.watch_count(d.api_group, d.resource, d.namespace, d.name)
        if watchers < WATCHES_PER_SEAT:
            return WorkEstimate(watch_count=watchers)
        final = math.ceil(watchers / WATCHES_PER_SEAT)
        work = final * EVENT_ADDITIONAL_DURATION  # seat-seconds, kept when the seats are capped
        final = min(final, max_seats)
        return WorkEstimate(MINIMUM_SEATS, final, work / final, watchers)
