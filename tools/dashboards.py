"""The Grafana dashboards: one per service, the pizza server's and an overview of the request path
(grafanalib).

Each panel is a PromQL query over the metrics the services serve (job="<service>" as
observability/prometheus.yml names them). `python -m tools.observe dashboards` writes them as JSON
for Grafana's file provisioning; tests/integration/test_dashboards.py runs every query against a
real Prometheus scraping a real stack.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from grafanalib._gen import DashboardEncoder
from grafanalib.core import Dashboard, GridPos, Target, TimeSeries

DATASOURCE = {"type": "prometheus", "uid": "prometheus"}  # provisioned under this uid


@dataclass(frozen=True)
class Panel:
    title: str
    expr: str
    unit: str = "short"
    legend: str = ""


def p99(metric: str, job: str, by: str, where: str = "") -> str:
    sel = f'job="{job}"' + (f", {where}" if where else "")
    return f"histogram_quantile(0.99, sum by (le, {by}) (rate({metric}_bucket{{{sel}}}[5m])))"


def process_panels(job: str) -> list[Panel]:
    """What every dashboard shows of its process: CPU, memory and the streams it holds open."""
    if job == "proxy":
        streams = Panel("Open watch streams (clients)", 'sum by (resource) (apiserver_longrunning_requests{job="proxy"})',
                        legend="{{resource}}")
    elif job == "pizza":
        streams = Panel("Open watch streams", 'sum by (resource) (apiserver_longrunning_requests{job="pizza"})',
                        legend="{{resource}}")
    elif job in ("auth", "controllermanager"):
        streams = Panel("Open informer watches",
                        f'sum by (resource) (apiary_informer_watches_open{{job="{job}"}})', legend="{{resource}}")
    else:
        streams = Panel("Open gRPC streams", f'sum by (grpc_method) (grpc_server_streams_open{{job="{job}"}})',
                        legend="{{grpc_method}}")
    memory = [Panel("Memory (RSS)", f'process_resident_memory_bytes{{job="{job}"}}', "bytes", "rss")]
    if job == "proxy":  # it trims its heap after bursts of closed connections too (runtime.released)
        memory += heap_trim_panels(job)
    return [
        Panel("CPU", f'rate(process_cpu_seconds_total{{job="{job}"}}[1m])', "percentunit", "cores"),
        *memory,
        streams,
    ]


def heap_trim_panels(job: str) -> list[Panel]:
    """When the process gave freed C-heap memory back to the system (runtime.released), to read beside its RSS:
    both series exist from the start (a counter without labels is 0 until the first trim)."""
    return [
        Panel("C heap trims", f'increase(apiary_heap_trims_total{{job="{job}"}}[10m])', legend="trims"),
        Panel("C heap trim pending", f'apiary_heap_trim_pending{{job="{job}"}}', legend="pending"),
    ]


SERVICE_PANELS: dict[str, list[Panel]] = {
    "proxy": [
        Panel("Requests by verb, resource and code",
              'sum by (verb, resource, code) (rate(apiserver_request_total{job="proxy"}[1m]))', "reqps",
              "{{verb}} {{resource}} {{code}}"),
        Panel("Request latency p99 by verb and resource",
              p99("apiserver_request_duration_seconds", "proxy", "verb, resource", 'verb!="WATCH"'), "s",
              "{{verb}} {{resource}}"),
        Panel("Errors (4xx and 5xx) by code",
              'sum by (code, verb, resource) (rate(apiserver_request_total{job="proxy", code=~"[45].."}[5m]))',
              "reqps", "{{code}} {{verb}} {{resource}}"),
        Panel("Requests in flight", 'apiserver_current_inflight_requests{job="proxy"}', legend="{{request_kind}}"),
        Panel("Authentication and authorization cache hit ratio",
              'sum by (cache) (rate(apiary_proxy_cache_requests_total{job="proxy", result="hit"}[5m]))'
              ' / sum by (cache) (rate(apiary_proxy_cache_requests_total{job="proxy"}[5m]))',
              "percentunit", "{{cache}}"),
    ],
    "auth": [
        Panel("Authentications by result",
              'sum by (result) (rate(apiserver_authentication_attempts_total{job="auth"}[5m]))', "reqps",
              "{{result}}"),
        Panel("Authentication latency p99", p99("apiserver_authentication_duration_seconds", "auth", "result"),
              "s", "{{result}}"),
        Panel("Authorization decisions",
              'sum by (decision, name) (rate(apiserver_authorization_decisions_total{job="auth"}[5m]))', "reqps",
              "{{decision}} ({{name}})"),
        Panel("Proxy cache hit ratio (answers not asked of auth)",
              'sum by (cache) (rate(apiary_proxy_cache_requests_total{job="proxy", result="hit"}[5m]))'
              ' / sum by (cache) (rate(apiary_proxy_cache_requests_total{job="proxy"}[5m]))',
              "percentunit", "{{cache}}"),
        Panel("Calls served by method", 'sum by (grpc_method) (rate(grpc_server_started_total{job="auth"}[5m]))',
              "reqps", "{{grpc_method}}"),
    ],
    "apf": [
        Panel("Seats in use by priority level",
              'sum by (priority_level) (apiserver_flowcontrol_current_executing_seats{job="apf"})',
              legend="{{priority_level}}"),
        Panel("Nominal seats by priority level", 'apiserver_flowcontrol_nominal_limit_seats{job="apf"}',
              legend="{{priority_level}}"),
        Panel("Queued requests by priority level",
              'sum by (priority_level) (apiserver_flowcontrol_current_inqueue_requests{job="apf"})',
              legend="{{priority_level}}"),
        Panel("Queue wait p99 by priority level",
              p99("apiserver_flowcontrol_request_wait_duration_seconds", "apf", "priority_level"), "s",
              "{{priority_level}}"),
        Panel("Execution p99 by priority level",
              p99("apiserver_flowcontrol_request_execution_seconds", "apf", "priority_level"), "s",
              "{{priority_level}}"),
        Panel("Seat demand ÷ current limit, p99 over time, by priority level",
              p99("apiserver_flowcontrol_demand_seats", "apf", "priority_level"), legend="{{priority_level}}"),
        Panel("Dispatched by priority level and flow schema",
              'sum by (priority_level, flow_schema) (rate(apiserver_flowcontrol_dispatched_requests_total{job="apf"}[5m]))',
              "reqps", "{{priority_level}} / {{flow_schema}}"),
        Panel("Rejections (429) by priority level, flow schema and reason",
              'sum by (priority_level, flow_schema, reason) '
              '(increase(apiserver_flowcontrol_rejected_requests_total{job="apf"}[10m]))',
              legend="{{priority_level}} / {{flow_schema}} ({{reason}})"),
    ],
    "admission": [
        Panel("Admission latency p99 by phase and operation",
              p99("apiserver_admission_step_admission_duration_seconds", "admission", "type, operation"), "s",
              "{{type}} {{operation}}"),
        Panel("Plug-in latency p99", p99("apiserver_admission_controller_admission_duration_seconds", "admission",
                                          "name, type"), "s", "{{name}} ({{type}})"),
        Panel("Rejections by plug-in",
              'sum by (name, operation) (increase(apiserver_admission_controller_admission_duration_seconds_count'
              '{job="admission", rejected="true"}[10m]))', legend="{{name}} {{operation}}"),
        Panel("Admission calls by the registry, p99",
              p99("apiary_registry_admission_call_duration_seconds", "registry", "phase"), "s", "{{phase}}"),
        Panel("Webhook latency p99 by webhook",
              p99("apiserver_admission_webhook_admission_duration_seconds", "admission", "name, type"), "s",
              "{{name}} ({{type}})"),
        Panel("Webhook calls by webhook and code",
              'sum by (name, type, code) (increase(apiserver_admission_webhook_request_total{job="admission"}[10m]))',
              legend="{{name}} ({{type}}) {{code}}"),
        Panel("Webhook rejections by webhook",
              'sum by (name, type, rejection_code) '
              '(increase(apiserver_admission_webhook_rejection_count{job="admission"}[10m]))',
              legend="{{name}} ({{type}}) {{rejection_code}}"),
    ],
    "registry": [
        Panel("Requests by verb, resource and code",
              'sum by (verb, resource, code) (rate(apiserver_registry_request_duration_seconds_count{job="registry"}[1m]))',
              "reqps", "{{verb}} {{resource}} {{code}}"),
        Panel("Request latency p99 by verb and resource",
              p99("apiserver_registry_request_duration_seconds", "registry", "verb, resource"), "s",
              "{{verb}} {{resource}}"),
        Panel("Storage calls p99 by operation",
              p99("apiary_registry_storage_call_duration_seconds", "registry", "operation"), "s", "{{operation}}"),
        Panel("Auth calls p99 (reviews, tokens, escalation checks)",
              p99("apiary_registry_auth_call_duration_seconds", "registry", "method"), "s", "{{method}}"),
        Panel("Watch events sent by kind",
              'sum by (kind) (rate(apiserver_watch_events_total{job="registry"}[5m]))', "ops", "{{kind}}"),
    ],
    "storage": [
        Panel("etcd request latency p99 by operation",
              p99("etcd_request_duration_seconds", "storage", "operation"), "s", "{{operation}}"),
        Panel("Objects by resource", 'apiserver_storage_objects{job="storage"}', legend="{{resource}}"),
        Panel("Watch cache: events held by resource", 'watch_cache_capacity{job="storage"}', legend="{{resource}}"),
        Panel("Watch cache: events received",
              'sum by (resource) (rate(apiserver_watch_cache_events_received_total{job="storage"}[5m]))', "ops",
              "{{resource}}"),
        Panel("Watch cache: events dispatched to watchers",
              'sum by (kind) (rate(apiserver_watch_cache_events_dispatched_total{job="storage"}[5m]))', "ops",
              "{{kind}}"),
        Panel("Watchers by resource", 'apiserver_registered_watchers{job="storage"}', legend="{{resource}}"),
        Panel("Encryption at rest: operations",
              'sum by (transformation_type, status) '
              '(rate(apiserver_storage_transformation_operations_total{job="storage"}[5m]))',
              "ops", "{{transformation_type}} {{status}}"),
        Panel("Encryption at rest: latency p99",
              p99("apiserver_storage_transformation_duration_seconds", "storage", "transformation_type"), "s",
              "{{transformation_type}}"),
        Panel("Compaction steps by result",
              'sum by (result) (increase(apiary_storage_compactions_total{job="storage"}[1h]))',
              legend="{{result}}"),
        Panel("etcd database size", 'etcd_mvcc_db_total_size_in_bytes{job="etcd"}', "bytes", "db"),
    ],
    # kube-controller-manager's controllers: client-go's workqueue metrics by queue, the leader election
    "controllermanager": [
        Panel("Leader (1) or standby (0)", 'leader_election_master_status{job="controllermanager"}',
              legend="{{instance}} {{name}}"),
        Panel("Work queue depth by queue", 'sum by (name) (workqueue_depth{job="controllermanager"})',
              legend="{{name}}"),
        Panel("Work queue adds by queue",
              'sum by (name) (rate(workqueue_adds_total{job="controllermanager"}[5m]))', "ops", "{{name}}"),
        Panel("Work duration p99 by queue", p99("workqueue_work_duration_seconds", "controllermanager", "name"),
              "s", "{{name}}"),
        Panel("Queue wait p99 by queue", p99("workqueue_queue_duration_seconds", "controllermanager", "name"),
              "s", "{{name}}"),
        Panel("Garbage collector: objects in the graph", 'apiary_garbagecollector_graph_nodes{job="controllermanager"}',
              legend="nodes"),
        Panel("Garbage collector: resources watched", 'apiary_garbagecollector_monitors{job="controllermanager"}',
              legend="resources"),
    ],
    # the aggregated pizza server (services/pizza on the kit): what it serves, and what it asks of apiary
    "pizza": [
        Panel("Requests by verb, resource and code",
              'sum by (verb, resource, code) (rate(apiserver_request_total{job="pizza"}[1m]))', "reqps",
              "{{verb}} {{resource}} {{code}}"),
        Panel("Request latency p99 by verb and resource",
              p99("apiserver_request_duration_seconds", "pizza", "verb, resource", 'verb!="WATCH"'), "s",
              "{{verb}} {{resource}}"),
        Panel("Errors (4xx and 5xx) by code",
              'sum by (code, verb, resource) (rate(apiserver_request_total{job="pizza", code=~"[45].."}[5m]))',
              "reqps", "{{code}} {{verb}} {{resource}}"),
        Panel("Delegated authentication: TokenReviews by code",
              'sum by (code) (rate(apiserver_delegated_authn_request_total{job="pizza"}[5m]))', "reqps", "{{code}}"),
        Panel("Delegated authorization: SubjectAccessReviews by code",
              'sum by (code) (rate(apiserver_delegated_authz_request_total{job="pizza"}[5m]))', "reqps", "{{code}}"),
        Panel("Authorization cache hit ratio",
              'sum(rate(apiserver_kit_authorization_cache_total{job="pizza", result="hit"}[5m]))'
              ' / sum(rate(apiserver_kit_authorization_cache_total{job="pizza"}[5m]))', "percentunit", "hit ratio"),
    ],
}

OVERVIEW: list[Panel] = [
    Panel("Requests through the proxy by code", 'sum by (code) (rate(apiserver_request_total{job="proxy"}[1m]))',
          "reqps", "{{code}}"),
    Panel("p99 per stage of the request path",
          'label_replace(histogram_quantile(0.99, sum by (le) (rate(apiserver_request_duration_seconds_bucket{job="proxy", verb!="WATCH"}[5m]))), "stage", "proxy", "", "")'
          ' or label_replace(histogram_quantile(0.99, sum by (le) (rate(apiserver_registry_request_duration_seconds_bucket{job="registry"}[5m]))), "stage", "registry", "", "")'
          ' or label_replace(histogram_quantile(0.99, sum by (le) (rate(etcd_request_duration_seconds_bucket{job="storage"}[5m]))), "stage", "etcd", "", "")',
          "s", "{{stage}}"),
    Panel("APF queue wait p99", p99("apiserver_flowcontrol_request_wait_duration_seconds", "apf", "priority_level"),
          "s", "{{priority_level}}"),
    Panel("Admission p99", p99("apiserver_admission_step_admission_duration_seconds", "admission", "type"), "s",
          "{{type}}"),
    Panel("CPU by service", "sum by (job) (rate(process_cpu_seconds_total[1m]))", "percentunit", "{{job}}"),
    Panel("Memory by service", "sum by (job) (process_resident_memory_bytes)", "bytes", "{{job}}"),
    Panel("Targets up", "up", legend="{{job}}"),
]


def dashboards() -> Iterator[tuple[str, str, list[Panel]]]:
    """(uid, title, panels) for every dashboard."""
    yield "apiary-overview", "apiary: request path", OVERVIEW
    for name, panels in SERVICE_PANELS.items():
        yield f"apiary-{name}", f"apiary: {name}", panels + process_panels(name)


def build(uid: str, title: str, panels: list[Panel]) -> Dashboard:
    out = []
    for i, p in enumerate(panels):
        out.append(TimeSeries(
            title=p.title, dataSource=DATASOURCE, unit=p.unit,
            targets=[Target(expr=p.expr, legendFormat=p.legend, refId="A", datasource=DATASOURCE)],
            gridPos=GridPos(h=8, w=12, x=12 * (i % 2), y=8 * (i // 2)),
        ))
    return Dashboard(title=title, uid=uid, tags=["apiary"], panels=out, refresh="10s",
                     timezone="browser").auto_panel_ids()


def write_all(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for uid, title, panels in dashboards():
        path = out / f"{uid}.json"
        path.write_text(json.dumps(build(uid, title, panels).to_json_data(), cls=DashboardEncoder, indent=2,
                                   sort_keys=True) + "\n")
        written.append(path)
    return written
