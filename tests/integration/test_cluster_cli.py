"""The apiary command end to end: two `apiary up --port 0 --detach` at once (ports from the OS, CRDs
installed), kubectl against each, a refused CRD, `apiary down` leaving no process; and a cluster
whose starter is killed with SIGKILL (the foreground command, or a Python process holding a Stack)
stopped by its watchdog, the services' own children too.

Times are printed (`up` to ready, cold; `down` until every process is gone), never asserted.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from services.cluster.stack import ROOT
from tests.waiting import wait_for

CRD = textwrap.dedent("""\
    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata:
      name: widgets.example.com
    spec:
      group: example.com
      scope: Namespaced
      names: {plural: widgets, singular: widget, kind: Widget}
      versions:
      - name: v1
        served: true
        storage: true
        schema:
          openAPIV3Schema:
            type: object
            properties:
              spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
    """)
# its name is not <plural>.<group>: the API refuses it with 422
BAD_CRD = CRD.replace("name: widgets.example.com", "name: gadgets.example.com")


def apiary(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "services.cluster", *args], cwd=ROOT, capture_output=True,
                          check=False, text=True, timeout=180, **kwargs)  # type: ignore[call-overload]


def apiary_up(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "services.cluster", "up", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def kubectl(state: Path, *args: str) -> str:
    out = subprocess.run(["kubectl", f"--kubeconfig={state / 'kubeconfig'}", f"--cache-dir={state / 'kube-cache'}",
                          *args], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def processes_of(state: Path) -> dict[int, str]:
    """Every live process (not a zombie) whose command line names the state directory, or whose
    process group is one of theirs (a service's own children)."""
    mark = str(state).encode()
    found: dict[int, tuple[int, bytes, bytes]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_bytes()
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rpartition(b")")[2].split()
        found[int(entry.name)] = (int(fields[2]), fields[0], cmdline)
    groups = {pgid for pgid, _, cmd in found.values() if mark in cmd}
    return {pid: cmd.replace(b"\0", b" ").decode(errors="replace")[:120]
            for pid, (pgid, state_, cmd) in found.items()
            if state_ != b"Z" and (mark in cmd or pgid in groups) and pid != os.getpid()}


def test_two_clusters_on_ports_from_the_os(tmp_path: Path) -> None:
    crds = tmp_path / "crds"
    crds.mkdir()
    (crds / "widgets.yaml").write_text(CRD)
    (tmp_path / "bad.yaml").write_text(BAD_CRD)
    states = [tmp_path / "one", tmp_path / "two"]
    began = time.monotonic()
    ups = [apiary_up("--port", "0", "--detach", "--state", str(s), "--crds", str(crds)) for s in states]
    try:
        for up in ups:
            out, err = up.communicate(timeout=180)
            assert up.returncode == 0, err
            assert "1 CRDs established" in out
        print(f"\ntwo `apiary up --port 0 --crds` at once, cold: ready in {time.monotonic() - began:.1f} s")
        servers = set()
        for s in states:
            assert apiary("kubeconfig", "--state", str(s)).stdout.strip() == str(s / "kubeconfig")
            servers.add(next(line for line in (s / "kubeconfig").read_text().splitlines() if "server:" in line))
            assert "kube-system" in kubectl(s, "get", "namespaces")
            kubectl(s, "create", "namespace", "w")
            widget = '{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {}}'
            subprocess.run(["kubectl", f"--kubeconfig={s / 'kubeconfig'}", "-n", "w", "create", "-f", "-"],
                           input=widget, check=True, capture_output=True, text=True, timeout=60)
            assert "w1" in kubectl(s, "-n", "w", "get", "widgets")
            assert apiary("status", "--state", str(s)).returncode == 0
        assert len(servers) == 2  # each its own proxy port

        # a CRD the API refuses: the file and the API's 422 message, and the running cluster stays
        refused = apiary("up", "--state", str(states[0]), "--crds", str(tmp_path / "bad.yaml"))
        assert refused.returncode == 1
        assert f"{tmp_path / 'bad.yaml'}: CustomResourceDefinition gadgets.example.com: 422" in refused.stderr
        assert 'must be spec.names.plural+"."+spec.group' in refused.stderr
        assert apiary("status", "--state", str(states[0])).returncode == 0
    finally:
        for s in states:
            began = time.monotonic()
            down = apiary("down", "--state", str(s))
            wait_for(lambda s=s: not processes_of(s), timeout=30, what="every process of the cluster gone")
            print(f"`apiary down`: {down.stdout.strip()}; every process gone {time.monotonic() - began:.2f} s "
                  "after the command started")
            assert down.returncode == 0, down.stderr


STARTER = textwrap.dedent("""\
    import sys, time
    from pathlib import Path
    from services.cluster.stack import Stack
    Stack(Path(sys.argv[1]), free_ports=True, aggregated=[]).start(fresh=True)
    print("export KUBECONFIG", flush=True)
    time.sleep(600)
    """)


@pytest.mark.parametrize("starter, sig", [("apiary up", signal.SIGKILL), ("Stack", signal.SIGKILL),
                                         ("apiary up", signal.SIGTERM)])
def test_a_starter_killed_leaves_nothing_behind(tmp_path: Path, starter: str, sig: signal.Signals) -> None:
    """SIGKILL: the watchdog stops the cluster; SIGTERM (as Ctrl-C's SIGINT): `apiary up` stops it."""
    state = tmp_path / "state"
    if starter == "apiary up":
        proc = apiary_up("--port", "0", "--state", str(state))  # in the foreground
    else:
        proc = subprocess.Popen([sys.executable, "-c", STARTER, str(state)], cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "export KUBECONFIG" in line:
                break
        else:
            pytest.fail(f"{starter} ended before the cluster was ready: {proc.stderr.read() if proc.stderr else ''}")
        assert "kube-system" in kubectl(state, "get", "namespaces")
        running = processes_of(state)
        assert len([p for p in running if p != proc.pid]) >= 8, running  # etcd, 7 services (and a watchdog)
        began = time.monotonic()
        proc.send_signal(sig)
        code = proc.wait(timeout=30)
        wait_for(lambda: not processes_of(state), timeout=30, what="every process of the cluster gone")
        print(f"\n{starter} killed with {sig.name}: every process gone after {time.monotonic() - began:.2f} s")
        assert code == (-signal.SIGKILL if sig == signal.SIGKILL else 0)
    finally:
        proc.kill()
        apiary("down", "--state", str(state))


def test_the_compact_profile_serves(tmp_path: Path) -> None:
    """`apiary up --profile compact`: every service in one host process beside etcd, each ready on its
    own health port; kubectl creates, reads and deletes, a namespace's deletion completes (the
    controller-manager's namespace controller runs in the host); `up` again attaches without
    writing the CRDs again; `apiary down` leaves no process."""
    state, crds = tmp_path / "state", tmp_path / "crds"
    crds.mkdir()
    (crds / "widgets.yaml").write_text(CRD)
    try:
        up = apiary("up", "--port", "0", "--profile", "compact", "--detach", "--state", str(state), "--crds", str(crds))
        assert up.returncode == 0, up.stderr
        assert sorted(p.name for p in (state / "pids").iterdir()) == ["compact.pid", "etcd.pid"]
        status = apiary("status", "--state", str(state))
        assert status.returncode == 0, status.stdout
        host_pid = (state / "pids" / "compact.pid").read_text().split()[0]
        for service in ("storage", "registry", "admission", "auth", "apf", "proxy", "controllermanager"):
            assert f"pid={host_pid}" in next(line for line in status.stdout.splitlines() if line.startswith(service))

        kubectl(state, "create", "namespace", "c")
        kubectl(state, "-n", "c", "create", "configmap", "one", "--from-literal=k=v")
        assert '"k": "v"' in kubectl(state, "-n", "c", "get", "configmap", "one", "-o", "json")
        widget = '{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {}}'
        subprocess.run(["kubectl", f"--kubeconfig={state / 'kubeconfig'}", "-n", "c", "create", "-f", "-"],
                       input=widget, check=True, capture_output=True, text=True, timeout=60)
        kubectl(state, "-n", "c", "delete", "configmap", "one")
        kubectl(state, "delete", "namespace", "c", "--wait=true", "--timeout=60s")
        gone = subprocess.run(["kubectl", f"--kubeconfig={state / 'kubeconfig'}", "get", "namespace", "c"],
                              capture_output=True, text=True, timeout=60, check=False)
        assert gone.returncode == 1 and "NotFound" in gone.stderr, gone.stdout + gone.stderr

        record = (state / "crds.json").read_text()
        again = apiary("up", "--state", str(state), "--crds", str(crds), "--detach")
        assert again.returncode == 0, again.stderr
        assert "1 CRDs established" in again.stdout
        assert (state / "crds.json").read_text() == record
        assert (state / "pids" / "compact.pid").read_text().split()[0] == host_pid  # attached, not restarted
    finally:
        down = apiary("down", "--state", str(state))
        wait_for(lambda: not processes_of(state), timeout=30, what="every process of the cluster gone")
        assert down.returncode == 0, down.stderr


def test_up_with_tracing_keeps_every_request_s_trace(tmp_path: Path) -> None:
    """`apiary up --tracing`: the receiver is a process of the cluster, every service exports to it at
    every request by default, `apiary traces --audit-id` prints the trace of a kubectl request (its
    proxy root span, which carries the audit ID), and `apiary down` stops the receiver with the rest."""
    state = tmp_path / "state"
    try:
        up = apiary("up", "--port", "0", "--profile", "compact", "--detach", "--tracing", "--state", str(state))
        assert up.returncode == 0, up.stderr
        assert sorted(p.name for p in (state / "pids").iterdir()) == ["compact.pid", "etcd.pid", "otlpreceiver.pid"]
        assert "samplingRatePerMillion: 1000000" in (state / "tracing-config.yaml").read_text()
        status = apiary("status", "--state", str(state))
        assert status.returncode == 0 and "otlpreceiver running" in status.stdout, status.stdout
        create = subprocess.run(["kubectl", f"--kubeconfig={state / 'kubeconfig'}", "create", "configmap", "t",
                                 "--from-literal=k=v", "-v=8"], capture_output=True, text=True, timeout=60, check=True)
        audit_id = next(line.split(":", 1)[1].strip() for line in create.stderr.splitlines()
                        if line.strip().lower().startswith("audit-id:"))
        shown = apiary("traces", "--state", str(state), "--audit-id", audit_id, "--wait", "20")
        assert shown.returncode == 0, shown.stderr
        root = shown.stdout.splitlines()[1]
        assert root.startswith("apiary-") and "POST /api/v1/namespaces/{:namespace}/configmaps" in root
        assert f"audit-id={audit_id}" in root
        missing = apiary("traces", "--state", str(state), "--audit-id", "no-such-request")
        assert missing.returncode == 1 and "no trace no-such-request" in missing.stderr
    finally:
        down = apiary("down", "--state", str(state))
        assert down.returncode == 0, down.stderr
        wait_for(lambda: not processes_of(state), timeout=30, what="every process of the cluster gone")
