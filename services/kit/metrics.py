"""The kit's Prometheus metrics, in kube-apiserver's names, in a registry of their own (modules the
kit borrows from the proxy register the proxy's metrics in the default one)."""
from __future__ import annotations

from prometheus_client import (
                   CollectorRegistry,
                   Counter,
                   Gauge,
                   Histogram,
                   PlatformCollector,
                   ProcessCollector,
)

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

REQUESTS = Counter("apiserver_request_total", "Requests by verb, group, version, resource and HTTP code.",
                   ["verb", "group", "version", "resource", "code"], registry=REGISTRY)
LATENCY = Histogram("apiserver_request_duration_seconds", "Response latency by verb, group, version and resource.",
                    ["verb", "group", "version", "resource"],
                    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0),
                    registry=REGISTRY)
AUTHN = Counter("apiserver_delegated_authn_request_total", "TokenReviews sent to the core API server, by HTTP code.",
                ["code"], registry=REGISTRY)
AUTHZ = Counter("apiserver_delegated_authz_request_total",
                "SubjectAccessReviews sent to the core API server, by HTTP code.", ["code"], registry=REGISTRY)
AUTHZ_CACHE = Counter("apiserver_kit_authorization_cache_total",
                      "Authorization decisions by whether the cache answered (hit) or apiary did (miss).",
                      ["result"], registry=REGISTRY)
LONGRUNNING = Gauge("apiserver_longrunning_requests",
                    "Gauge of all active long-running apiserver requests broken out by verb, group, version, "
                    "resource, scope and component.", ["verb", "group", "version", "resource", "scope", "component"],
                    registry=REGISTRY)
