"""Prometheus metrics of the storage service, named as kube-apiserver names them."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

# (metric, label values) -> its child: labels() validates its arguments on every call, and the hot
# paths (an etcd request, a watch event) would pay that each time
_children: dict[tuple[int, tuple[str, ...]], Any] = {}


def child(metric: MetricWrapperBase, *values: str) -> Any:
    """metric.labels(*values), looked up once (for series never removed)."""
    key = (id(metric), values)
    found = _children.get(key)
    if found is None:
        found = _children[key] = metric.labels(*values)
    return found

ETCD_DURATION = Histogram(
    "etcd_request_duration_seconds",
    "Etcd request latency in seconds for each operation and object type.",
    ["operation", "type"],
    buckets=(
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.2,
        0.4,
        0.6,
        0.8,
        1.0,
        1.25,
        1.5,
        2,
        3,
        4,
        5,
        6,
        8,
        10,
        15,
        20,
        30,
        45,
        60,
    ),
)
STORAGE_OBJECTS = Gauge(
    "apiserver_storage_objects",
    "Number of stored objects at the time of last check split by kind.",
    ["resource"],
)
WATCH_EVENTS = Counter("apiserver_watch_cache_events_dispatched_total", "Events the watch cache sent to its watchers", ["kind"])
REGISTERED_WATCHERS = Gauge(
    "apiserver_registered_watchers",
    "Number of currently registered watchers for a given resource",
    ["resource"],
)
WATCH_CACHE_EVENTS = Counter(
    "apiserver_watch_cache_events_received_total",
    "Counter of events received in watch cache broken by resource type.",
    ["resource"],
)
WATCH_CACHE_CAPACITY = Gauge(
    "watch_cache_capacity", "Total capacity of watch cache broken by resource type (here: the events its "
    "history window holds now).", ["resource"])
WATCH_CACHE_RV = Gauge(
    "apiserver_watch_cache_resource_version", "Current resource version of watch cache broken by resource type.",
    ["resource"])
TRANSFORMATION_OPERATIONS = Counter(
    "apiserver_storage_transformation_operations_total",
    "Total number of transformations (encryption at rest) by type, provider prefix and status.",
    ["transformation_type", "transformer_prefix", "status"])
TRANSFORMATION_DURATION = Histogram(
    "apiserver_storage_transformation_duration_seconds",
    "Latencies in seconds of value transformation operations.", ["transformation_type", "transformer_prefix"],
    buckets=(5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 0.025, 0.1, 0.5))
COMPACTIONS = Counter(
    "apiary_storage_compactions_total",
    "Steps of the etcd compactor by result (compacted, skipped: nothing to compact or another replica did, "
    "failed).", ["result"])
COMPACTED_REVISION = Gauge("apiary_storage_compacted_revision", "The etcd revision this storage last compacted.")
TERMINATED_WATCHERS = Counter(
    "apiserver_terminated_watchers_total",
    "Counter of watchers closed due to unresponsiveness broken by resource type.",
    ["resource"],
)
