"""The proxy's Prometheus metrics, named and labelled as kube-apiserver's."""
from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from services.apiserver.requestinfo import RequestInfo

LABELS = ("verb", "group", "version", "resource", "subresource", "scope", "component")

REQUESTS = Counter(
    "apiserver_request_total",
    "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, "
    "scope, component, and HTTP response code.",
    (*LABELS, "code"),
)
DURATION = Histogram(
    "apiserver_request_duration_seconds",
    "Response latency distribution in seconds for each verb, dry run value, group, version, resource, "
    "subresource, scope and component.",
    LABELS,
    buckets=(0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30,
             45, 60),
)
INFLIGHT = Gauge(
    "apiserver_current_inflight_requests",
    "Maximal number of currently used inflight request limit of this apiserver per request kind in last "
    "second.",
    ("request_kind",),
)
LONGRUNNING = Gauge(
    "apiserver_longrunning_requests",
    "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, "
    "scope and component.", ("verb", "group", "version", "resource", "subresource", "scope", "component"),
)
CACHE_REQUESTS = Counter(
    "apiary_proxy_cache_requests_total",
    "Authentication and authorization answers looked up in the proxy's caches, by cache and result "
    "(hit: answered without a call to the auth service).", ("cache", "result"),
)
AUTHN_HIT, AUTHN_MISS = CACHE_REQUESTS.labels("authentication", "hit"), CACHE_REQUESTS.labels("authentication", "miss")
AUTHZ_HIT, AUTHZ_MISS = CACHE_REQUESTS.labels("authorization", "hit"), CACHE_REQUESTS.labels("authorization", "miss")
READ_ONLY = INFLIGHT.labels("readOnly")
MUTATING = INFLIGHT.labels("mutating")

_CLEAN_VERBS = {"list": "LIST", "watch": "WATCH", "get": "GET", "create": "POST", "update": "PUT",
                "patch": "PATCH", "delete": "DELETE", "deletecollection": "DELETE", "proxy": "CONNECT"}


def clean_verb(info: RequestInfo | None, method: str, apply: bool = False) -> str:
    """metrics.CleanVerb: the verb label kube uses (LIST, WATCH, APPLY, POST, ...)."""
    if info is None or not info.is_resource_request:
        return method.upper()
    if apply:
        return "APPLY"
    return _CLEAN_VERBS.get(info.verb, method.upper())


def scope(info: RequestInfo | None) -> str:
    if info is None or not info.is_resource_request:
        return ""
    if info.path_name:
        return "resource"
    return "namespace" if info.namespace else "cluster"


# (labels, code) -> the counter's and the histogram's children: prometheus_client's labels() validates
# and converts its arguments on every call; the label sets are as many as the children it keeps anyway
_children: dict[tuple[tuple[str, ...], int], tuple[Any, Any]] = {}


def observe(info: RequestInfo | None, method: str, code: int, seconds: float, apply: bool = False,
            trace_id: str = "") -> None:
    """Count the request and its latency; a sampled request's trace ID is the latency's exemplar (shown
    in the OpenMetrics exposition), which links a latency panel to the trace."""
    verb = clean_verb(info, method, apply)
    if info is not None and info.is_resource_request:
        labels = (verb, info.api_group, info.api_version, info.resource, info.subresource, scope(info),
                  "apiserver")
    else:
        labels = (verb, "", "", "", "", "", "apiserver")
    key = (labels, code)
    children = _children.get(key)
    if children is None:
        children = _children[key] = (REQUESTS.labels(*labels, str(code)), DURATION.labels(*labels))
    children[0].inc()
    children[1].observe(seconds, {"trace_id": trace_id} if trace_id else None)


def longrunning(info: RequestInfo) -> Gauge:
    """The apiserver_longrunning_requests child a watch counts itself in while it streams."""
    return LONGRUNNING.labels("WATCH", info.api_group, info.api_version, info.resource, info.subresource,
                              scope(info), "apiserver")
