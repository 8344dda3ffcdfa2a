"""Start-up, stop and memory at rest of the local stack (issues 23 and 24): what a test cluster costs.

    python -m tools.bench_startup [--runs 3] [--state DIR]

Each run starts a fresh stack (etcd and one process of each service, no aggregated server) the way
services.cluster.stack does, but polls every /readyz each 10 ms so the figure is the services' and not the
poller's, and gives:

- stack: from etcd's spawn to the proxy's HTTPS /readyz answering 200;
- per service, with the stack up and settled (3 s after the previous restart): SIGTERM → exit, then
  spawn → its /readyz green (the outage of a restarted process, peers up);
- per process: RSS at rest (VmRSS, 3 s after the stack was ready) and their sum, etcd included;
- per service: import time of its __main__ module as a restart pays it: a fresh interpreter with the
  services' own environment (services.cluster.stack.service_env) and its bytecode cache warm (one import
  before the measured one), so compiling is not in it, and the cyclic collector resting as it does while a
  service loads (services/common/loading.py); the interpreter's own start is not in it;
- stop: SIGTERM to every service at once (then etcd) → every process gone.

Medians over the runs are printed, with each run's figures beside them.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from services.cluster.stack import ROOT, Stack, service_env

BENCH_OFFSET = int(os.environ.get("APIARY_BENCH_PORT_OFFSET", "2000")) + 500
POLL = 0.01
SETTLE = 3.0
SERVICES = ("storage", "registry", "admission", "auth", "apf", "proxy", "controllermanager")
# what a section's figures are, printed under its name
NOTES = {"import_s": "import of each service's __main__, bytecode cache warm (as a restarted service has it)"}


def _get(url: str, ctx: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1, context=ctx) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _ready_url(stack: Stack, name: str) -> str:
    return f"{stack.etcd_url}/health" if name == "etcd" else f"http://127.0.0.1:{stack.health_port(name)}/readyz"


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        done = pid
    if done == pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_ready(stack: Stack, names: list[str], pids: dict[str, int], t0: dict[str, float],
                timeout: float = 60.0) -> dict[str, float]:
    """Seconds from each one's spawn (t0) to its /readyz green."""
    ready: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(ready) < len(names):
        if time.monotonic() > deadline:
            raise SystemExit(f"not ready after {timeout:.0f} s: {sorted(set(names) - set(ready))}")
        for n in names:
            if n not in ready:
                if not _alive(pids[n]):
                    raise SystemExit(f"{n} exited; see {stack.logs / (n + '.log')}")
                if _get(_ready_url(stack, n)):
                    ready[n] = time.monotonic() - t0[n]
        time.sleep(POLL)
    return ready


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _terminate(pids: list[int], timeout: float = 30.0) -> float:
    """SIGTERM to each (its process group), then seconds until all are gone."""
    t = time.monotonic()
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    while any(_alive(p) for p in pids):
        if time.monotonic() - t > timeout:
            for p in pids:
                if _alive(p):
                    os.killpg(p, signal.SIGKILL)
            break
        time.sleep(0.005)
    return time.monotonic() - t


def import_time(service: str) -> float:
    """Seconds to import the service's __main__ in a fresh interpreter, in the environment the stack gives
    its services, after a first import has filled the bytecode cache: what a restart pays (the collector
    resting, as under `python -m`), not a first start's compilation."""
    # the collector rests as services.common.loading has it rest under `python -m services.<name>`
    code = (f"import gc, time; gc.disable(); t = time.perf_counter(); import services.{service}.__main__; "
            "print(time.perf_counter() - t)")
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                             env=service_env())
    return float(out.stdout.strip())


def one_run(state: Path) -> dict[str, dict[str, float]]:
    stack = Stack(state, BENCH_OFFSET, aggregated=[])
    for pidfile in stack.pids.glob("*.pid") if stack.pids.is_dir() else []:
        stack.stop_one(pidfile.stem)
    shutil.rmtree(state / "etcd", ignore_errors=True)
    stack.init()
    fig: dict[str, dict[str, float]] = {"ready_in_stack": {}, "restart_ready": {}, "sigterm_exit": {},
                                        "rss_mb": {}, "import_s": {}, "stack": {}}
    start = time.monotonic()
    pids = {"etcd": stack.spawn("etcd")}
    t0 = {"etcd": start}
    _wait_ready(stack, ["etcd"], pids, t0)
    for n in SERVICES:
        t0[n] = time.monotonic()
        pids[n] = stack.spawn(n)
    fig["ready_in_stack"] = _wait_ready(stack, list(SERVICES), pids, t0)
    ctx = ssl.create_default_context(cafile=str(state / "pki" / "ca.crt"))
    while not _get(f"{stack.server}/readyz", ctx):
        time.sleep(POLL)
    fig["stack"]["start_to_ready_s"] = time.monotonic() - start
    time.sleep(SETTLE)
    fig["rss_mb"] = {n: _rss_mb(p) for n, p in pids.items()}
    fig["stack"]["rss_sum_mb"] = sum(fig["rss_mb"].values())
    for n in SERVICES:
        # each restart on a settled stack: the previous one's reconnections and re-watches are over
        while not _get(f"{stack.server}/readyz", ctx):
            time.sleep(POLL)
        time.sleep(SETTLE)
        fig["sigterm_exit"][n] = _terminate([pids[n]])
        t0[n] = time.monotonic()
        pids[n] = stack.spawn(n)
        fig["restart_ready"][n] = _wait_ready(stack, [n], pids, t0)[n]
    while not _get(f"{stack.server}/readyz", ctx):
        time.sleep(POLL)
    time.sleep(1.0)
    fig["stack"]["stop_services_s"] = _terminate([pids[n] for n in SERVICES])
    fig["stack"]["stop_etcd_s"] = _terminate([pids["etcd"]])
    for n in SERVICES:
        (stack.pids / f"{n}.pid").unlink(missing_ok=True)
    (stack.pids / "etcd.pid").unlink(missing_ok=True)
    fig["import_s"] = {n: import_time(n) for n in SERVICES}
    return fig


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tools.bench_startup", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--state", default=str(ROOT / ".apiary" / "bench-startup"))
    args = p.parse_args(argv)
    runs = [one_run(Path(args.state).resolve()) for _ in range(args.runs)]
    for section in runs[0]:
        print(f"{section}:" + (f" {NOTES[section]}" if section in NOTES else ""))
        for key in runs[0][section]:
            values = [r[section][key] for r in runs]
            unit = "MB" if "mb" in section or key.endswith("_mb") else "s"
            each = " ".join(f"{v:.2f}" if unit == "s" else f"{v:.0f}" for v in values)
            med = statistics.median(values)
            print(f"  {key:18} {med:8.2f} {unit}   ({each})" if unit == "s" else
                  f"  {key:18} {med:8.0f} {unit}   ({each})")


if __name__ == "__main__":
    main()
