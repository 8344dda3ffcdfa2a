"""kube-apiserver's audit backend flags (k8s.io/apiserver/pkg/server/options/audit.go), their defaults
and checks, and the backend chain they build: backend → mode (blocking: errors ignored; blocking-strict:
errors fail the request; batch: buffered) → truncation when enabled; both backends in a union.

Defaults as kube's: the log backend blocking, batches (when batch mode is chosen) of 1 event, no wait,
no throttle; the webhook backend batching 400 events or 30 s, throttled to 10 batches/s (burst 15);
buffers of 10000 events; truncation off (100 KiB events, 10 MiB batches).
"""
from __future__ import annotations

import argparse

from services.apiserver.fielderrors import ConfigError
from services.common import duration

from . import Backend, IgnoreErrors, Union
from .buffered import BatchConfig, BufferedBackend
from .log import LogBackend
from .policy import Auditor, Policy, PolicyError
from .truncate import TruncateBackend
from .webhook import INITIAL_BACKOFF, WebhookBackend

BATCH, BLOCKING, BLOCKING_STRICT = "batch", "blocking", "blocking-strict"
MODES = (BATCH, BLOCKING, BLOCKING_STRICT)
BUFFER_SIZE = 10000
LOG_BATCH = BatchConfig(BUFFER_SIZE, max_batch_size=1)
WEBHOOK_BATCH = BatchConfig(BUFFER_SIZE, max_batch_size=400, max_batch_wait=30.0, throttle_enable=True,
                            throttle_qps=10, throttle_burst=15, async_delegate=True)
TRUNCATE_MAX_EVENT, TRUNCATE_MAX_BATCH = 100 * 1024, 10 * 1024 * 1024
GROUP_VERSIONS = ("audit.k8s.io/v1",)


def _bool(value: str) -> bool:
    if value.lower() in ("true", "1", "t"):
        return True
    if value.lower() in ("false", "0", "f"):
        return False
    raise argparse.ArgumentTypeError(f'strconv.ParseBool: parsing "{value}": invalid syntax')


def _add_backend_flags(p: argparse.ArgumentParser, plugin: str, mode: str, batch: BatchConfig) -> None:
    f = f"--audit-{plugin}"
    p.add_argument(f"{f}-mode", default=mode,
                   help="Strategy for sending audit events. Blocking indicates sending events should block server "
                        "responses. Batch causes the backend to buffer and write events asynchronously. Known "
                        f"modes are {','.join(MODES)}. (default {mode})")
    p.add_argument(f"{f}-batch-buffer-size", type=int, default=batch.buffer_size,
                   help="The size of the buffer to store events before batching and writing. Only used in batch mode.")
    p.add_argument(f"{f}-batch-max-size", type=int, default=batch.max_batch_size,
                   help="The maximum size of a batch. Only used in batch mode.")
    p.add_argument(f"{f}-batch-max-wait", type=duration.flag, default=batch.max_batch_wait,
                   help="The amount of time to wait before force writing the batch that hadn't reached the max "
                        "size. Only used in batch mode.")
    p.add_argument(f"{f}-batch-throttle-enable", type=_bool, nargs="?", const=True, default=batch.throttle_enable,
                   help="Whether batching throttling is enabled. Only used in batch mode.")
    p.add_argument(f"{f}-batch-throttle-qps", type=float, default=batch.throttle_qps,
                   help="Maximum average number of batches per second. Only used in batch mode.")
    p.add_argument(f"{f}-batch-throttle-burst", type=int, default=batch.throttle_burst,
                   help="Maximum number of requests sent at the same moment if ThrottleQPS was not utilized "
                        "before. Only used in batch mode.")
    p.add_argument(f"{f}-truncate-enabled", type=_bool, nargs="?", const=True, default=False,
                   help="Whether event and batch truncating is enabled.")
    p.add_argument(f"{f}-truncate-max-batch-size", type=int, default=TRUNCATE_MAX_BATCH,
                   help="Maximum size of the batch sent to the underlying backend. If a batch exceeds this "
                        "limit, it is split into several batches of smaller size.")
    p.add_argument(f"{f}-truncate-max-event-size", type=int, default=TRUNCATE_MAX_EVENT,
                   help="Maximum size of the audit event sent to the underlying backend. If the size of an event "
                        "is greater than this number, first request and response are removed, and if this "
                        "doesn't reduce the size enough, event is discarded.")
    p.add_argument(f"{f}-version", default="audit.k8s.io/v1",
                   help=f"API group and version used for serializing audit events written to {plugin}.")


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--audit-policy-file", default="",
                   help="Path to the file that defines the audit policy configuration (audit.k8s.io/v1 Policy); "
                        "without it nothing is audited")
    p.add_argument("--audit-log-path", default="",
                   help='If set, all requests coming to the apiserver will be logged to this file. "-" means '
                        "standard out.")
    p.add_argument("--audit-log-maxsize", type=int, default=0,
                   help="The maximum size in megabytes of the audit log file before it gets rotated.")
    p.add_argument("--audit-log-maxbackup", type=int, default=0,
                   help="The maximum number of old audit log files to retain. Setting a value of 0 will mean "
                        "there's no restriction on the number of files.")
    p.add_argument("--audit-log-maxage", type=int, default=0,
                   help="The maximum number of days to retain old audit log files based on the timestamp "
                        "encoded in their filename.")
    p.add_argument("--audit-log-format", choices=["json"], default="json",
                   help='Format of saved audits. "json" indicates structured json format.')
    _add_backend_flags(p, "log", BLOCKING, LOG_BATCH)
    p.add_argument("--audit-webhook-config-file", default="",
                   help="Path to a kubeconfig formatted file that defines the audit webhook configuration.")
    p.add_argument("--audit-webhook-initial-backoff", type=duration.flag, default=INITIAL_BACKOFF,
                   help="The amount of time to wait before retrying the first failed request.")
    _add_backend_flags(p, "webhook", BATCH, WEBHOOK_BATCH)


def validate(args: argparse.Namespace) -> list[str]:
    """kube's AuditOptions.Validate messages, for the backends that are configured."""
    errs: list[str] = []
    for plugin, enabled in (("log", bool(args.audit_log_path)), ("webhook", bool(args.audit_webhook_config_file))):
        if enabled:
            errs += _validate_backend(args, plugin)
    return errs


def _validate_backend(args: argparse.Namespace, plugin: str) -> list[str]:
    errs: list[str] = []
    a = lambda name: getattr(args, f"audit_{plugin}_{name}")  # noqa: E731

    def positive(kind: str, name: str, what: str, fmt: str = "") -> None:
        if (value := a(name)) <= 0:
            errs.append(f"invalid audit {kind} {plugin} {what} {value:{fmt}}, must be a positive number")

    if a("mode") not in MODES:
        errs.append(f"invalid audit {plugin} mode {a('mode')}, allowed modes are \"{','.join(MODES)}\"")
    elif a("mode") == BATCH:
        positive("batch", "batch_buffer_size", "buffer size")
        positive("batch", "batch_max_size", "max batch size")
        if a("batch_max_wait") < 0:
            errs.append(f"invalid audit batch {plugin} max batch wait, must not be negative")
        if a("batch_throttle_enable"):
            positive("batch", "batch_throttle_qps", "throttle QPS", "g")
            positive("batch", "batch_throttle_burst", "throttle burst")
    if a("truncate_enabled"):
        ev, batch = a("truncate_max_event_size"), a("truncate_max_batch_size")
        positive("truncate", "truncate_max_event_size", "max event size")
        positive("truncate", "truncate_max_batch_size", "max batch size")
        if 0 < batch < ev:
            errs.append(f"invalid audit truncate {plugin} max event size {ev}, must be less than or equal "
                        f"to max batch size {batch}")
    if a("version") not in GROUP_VERSIONS:
        errs.append(f"invalid audit {plugin} version {a('version')}, supported versions are "
                    f"{', '.join(GROUP_VERSIONS)}")
    return errs


def _wrap(backend: Backend, args: argparse.Namespace, plugin: str, async_delegate: bool) -> Backend:
    a = lambda name: getattr(args, f"audit_{plugin}_{name}")  # noqa: E731
    mode = a("mode")
    if mode == BLOCKING:
        backend = IgnoreErrors(backend)
    elif mode == BATCH:
        backend = BufferedBackend(backend, BatchConfig(
            a("batch_buffer_size"), a("batch_max_size"), a("batch_max_wait"), a("batch_throttle_enable"),
            a("batch_throttle_qps"), a("batch_throttle_burst"), async_delegate))
    if a("truncate_enabled"):
        backend = TruncateBackend(backend, a("truncate_max_event_size"), a("truncate_max_batch_size"))
    return backend


def build(args: argparse.Namespace) -> Backend | None:
    """The configured backends (None: none is)."""
    backends: list[Backend] = []
    if args.audit_log_path:
        backends.append(_wrap(LogBackend(args.audit_log_path, args.audit_log_maxsize, args.audit_log_maxbackup,
                                         args.audit_log_maxage), args, "log", False))
    if args.audit_webhook_config_file:
        backends.append(_wrap(WebhookBackend(args.audit_webhook_config_file, args.audit_webhook_initial_backoff,
                                             args.audit_webhook_version), args, "webhook", True))
    if not backends:
        return None
    return backends[0] if len(backends) == 1 else Union(backends)


def auditor(args: argparse.Namespace) -> Auditor | None:
    """kube audits only with both a policy and a backend (the log, the webhook or both)."""
    if not (args.audit_policy_file and (args.audit_log_path or args.audit_webhook_config_file)):
        return None
    try:
        policy = Policy.load(args.audit_policy_file)
        backend = build(args)
    except (PolicyError, ConfigError) as e:
        raise SystemExit(str(e)) from None
    assert backend is not None
    return Auditor(policy, backend)
