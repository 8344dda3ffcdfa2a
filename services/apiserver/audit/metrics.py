"""The audit metrics, named and labelled as kube's (k8s.io/apiserver/pkg/audit/metrics.go)."""
from __future__ import annotations

import logging
from typing import Any

from services.common.metrics import KubeCounter

log = logging.getLogger(__name__)

EVENTS = KubeCounter("apiserver_audit_event_total",
                     "Counter of audit events generated and sent to the audit backend.", ())
ERRORS = KubeCounter("apiserver_audit_error_total",
                     "Counter of audit events that failed to be audited properly. Plugin identifies the plugin "
                     "affected by the error.", ("plugin",))
LEVELS = KubeCounter("apiserver_audit_level_total",
                     "Counter of policy levels for audit events (1 per request).", ("level",))
REJECTED = KubeCounter("apiserver_audit_requests_rejected_total",
                       "Counter of apiserver requests rejected due to an error in audit logging backend.", ())
EVENT = EVENTS.labels()
REQUEST_REJECTED = REJECTED.labels()


def plugin_error(plugin: str, reason: Any, events: list[dict[str, Any]]) -> None:
    """kube's audit.HandlePluginError: count the events a plugin could not store, and say which."""
    if not events:
        return
    ERRORS.labels(plugin).inc(len(events))
    ids = ", ".join(str(e.get("auditID", "")) for e in events[:10])
    more = f" and {len(events) - 10} more" if len(events) > 10 else ""
    log.error("Error in audit plugin '%s' affecting %d audit events: %s; audit IDs: %s%s",
              plugin, len(events), reason, ids, more)
