"""The proxy's --workers (services/proxy/workers.py): what each worker is started with."""
from __future__ import annotations

import sys

import pytest

from services.proxy.__main__ import parse_args
from services.proxy.workers import Workers, share, worker_audit_path

FLAGS = ["--tls-cert-file", "c.crt", "--tls-private-key-file", "c.key", "--audit-log-path", "/l/audit.log",
         "--health-port", "10256", "--workers", "3"]


def test_each_worker_takes_its_share_of_a_per_process_limit() -> None:
    assert [share(400, 1), share(400, 2), share(400, 3), share(0, 2)] == [400, 200, 134, 0]


def test_each_worker_writes_its_own_audit_log() -> None:
    assert worker_audit_path("/l/audit.log", 0) == "/l/audit.log"
    assert worker_audit_path("/l/audit.log", 2) == "/l/audit-w2.log"
    assert worker_audit_path("-", 1) == "-" and worker_audit_path("", 1) == ""


def test_a_worker_runs_the_same_command_line_with_its_index_health_port_and_audit_log() -> None:
    w = Workers(FLAGS, 3, "/l/audit.log", "127.0.0.1")
    cmd = w.command(2)
    assert cmd[:3] == [sys.executable, "-m", "services.proxy"]
    args = parse_args(cmd[3:])
    assert (args.workers, args.worker_index, args.audit_log_path) == (3, 2, "/l/audit-w2.log")
    assert args.health_port == w.health_ports[2] != 10256
    assert len(set(w.health_ports.values())) == 2


def test_workers_must_be_at_least_one() -> None:
    with pytest.raises(SystemExit):
        parse_args([*FLAGS, "--workers", "0"])
