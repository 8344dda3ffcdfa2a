"""`python -m tools.bench envtest`: apiary as a test cluster (issue 23's figures), through what a user runs.

  up_cold      `apiary up --port 0 --crds DIR --detach` on a fresh state directory until it returns
               (ready, 3 CRDs Established and served): p50 and p90 over --runs starts
  up_warm      the same command again on the running cluster's state (it attaches); and the command's
               own CPU seconds
  down         `apiary down` until every process of the cluster (each process group) is gone
  start_cpu    CPU seconds each process spent on its start (read right after each cold `up`; the run of
               median total, and every run's total)
  memory       summed VmRSS of every process of the cluster (etcd included, no pizza server), 10 s
               after ready, and each process's
  pytest_cold, pytest_reuse  a one-test pytest session with `-p services.cluster.pytest_plugin`: from
               its conftest's import to its first test's body (the session fixture's start and CRDs),
               cold (a temporary state) and with --apiary-reuse on a cluster it left running
  suite        50 operator tests (create a Widget, wait for the ConfigMap a controller thread of the
               session makes for it, delete the Widget): the pytest session's wall time with the
               plugin starting the cluster ÷ with --apiary-kubeconfig of one already running

The cluster runs in --profile compact (the pytest plugin's default: etcd and one host process of every
service) unless another profile is asked for (full: one process per service, as `make run`).

Every command runs as a subprocess of this one (`python -m services.cluster`, `python -m pytest`), as
from a shell. The ports are the OS's (--port 0), so the bench's offset does not matter.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from services.cluster.stack import ROOT
from tools.bench_stats import percentile

GROUP = "bench.apiary.dev"
KINDS = ("Widget", "Gadget", "Gizmo")
SUITE_TESTS = 50
MEMORY_SETTLE = 10.0
CLK = os.sysconf("SC_CLK_TCK")


def crd_manifest(kind: str) -> dict[str, Any]:
    """A small namespaced CRD of GROUP (v1, a spec of one string and a status subresource)."""
    plural = kind.lower() + "s"
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{GROUP}"},
            "spec": {"group": GROUP, "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                     "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                       "spec": {"type": "object", "properties": {"size": {"type": "string"}}},
                                       "status": {"type": "object",
                                                  "x-kubernetes-preserve-unknown-fields": True}}}}}]}}


def write_crds(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        (directory / f"{kind.lower()}.json").write_text(json.dumps(crd_manifest(kind)))
    return directory


# A session's own time to its first test: from its conftest's import to the first test's body.
TIMING_CONFTEST = '''\
import json
import os
import time

T0 = time.monotonic()


def first_test_reached():
    path = os.environ["APIARY_BENCH_TIMING"]
    if not os.path.exists(path):
        with open(path, "w") as f:
            json.dump({"to_first_test_s": time.monotonic() - T0}, f)
'''

ONE_TEST = '''\
from conftest import first_test_reached


def test_cluster(apiary_cluster):
    first_test_reached()
    assert apiary_cluster.crds
'''

# The operator under test: a controller thread of the session that makes a ConfigMap (owned by the
# Widget, so the garbage collector deletes it) for every Widget it sees.
SUITE_CONFTEST = TIMING_CONFTEST + '''
import threading
import uuid

import kubernetes
import pytest

GROUP, VERSION, PLURAL = "bench.apiary.dev", "v1", "widgets"


def reconcile(core, widget):
    meta = widget["metadata"]
    child = {"metadata": {"name": meta["name"], "ownerReferences": [{
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "name": meta["name"], "uid": meta["uid"]}]},
        "data": {"size": widget.get("spec", {}).get("size", "")}}
    try:
        core.create_namespaced_config_map(meta["namespace"], child)
    except kubernetes.client.ApiException as e:
        if e.status != 409:
            raise


def control(client, stop):
    custom, core = kubernetes.client.CustomObjectsApi(client), kubernetes.client.CoreV1Api(client)
    while not stop.is_set():
        w = kubernetes.watch.Watch()
        for event in w.stream(custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, timeout_seconds=2):
            if event["type"] == "ADDED":
                reconcile(core, event["object"])
            if stop.is_set():
                w.stop()


@pytest.fixture(scope="session")
def namespace(k8s_api_client):
    core = kubernetes.client.CoreV1Api(k8s_api_client)
    name = f"suite-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    stop = threading.Event()
    controller = threading.Thread(target=control, args=(k8s_api_client, stop), daemon=True)
    controller.start()
    yield name
    stop.set()
    controller.join(5)
    core.delete_namespace(name)
'''

SUITE_TESTS_FILE = '''\
import time

import kubernetes
import pytest

from conftest import GROUP, PLURAL, VERSION, first_test_reached


@pytest.mark.parametrize("i", range({n}))
def test_widget_gets_its_configmap(k8s_api_client, namespace, i):
    first_test_reached()
    custom, core = kubernetes.client.CustomObjectsApi(k8s_api_client), kubernetes.client.CoreV1Api(k8s_api_client)
    name = f"w-{{i}}"
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {{
        "apiVersion": f"{{GROUP}}/{{VERSION}}", "kind": "Widget", "metadata": {{"name": name}},
        "spec": {{"size": str(i)}}}})
    deadline = time.monotonic() + 30
    while True:
        try:
            child = core.read_namespaced_config_map(name, namespace)
            break
        except kubernetes.client.ApiException as e:
            if e.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    assert child.data == {{"size": str(i)}}
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
'''


def write_session(directory: Path, suite: bool) -> Path:
    """A pytest project: the timing conftest and either one test of the cluster or the operator suite."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "conftest.py").write_text(SUITE_CONFTEST if suite else TIMING_CONFTEST)
    (directory / "test_envtest.py").write_text(SUITE_TESTS_FILE.format(n=SUITE_TESTS) if suite else ONE_TEST)
    return directory


def summary(values: list[float]) -> dict[str, float]:
    """p50 and p90 (nearest rank) of seconds, and the runs."""
    return {"p50_s": round(percentile(values, 0.5), 2), "p90_s": round(percentile(values, 0.9), 2),
            "runs_s": [round(v, 2) for v in values]}


# processes ---------------------------------------------------------------------

def proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every live, non-zombie process."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z":
                out[int(entry)] = (int(fields[1]), int(fields[2]))
    return out


def members(table: Mapping[int, tuple[int, int]], roots: Iterable[int]) -> set[int]:
    """The processes of the roots: their process groups and every descendant."""
    roots = set(roots)
    found = {pid for pid, (_, pgid) in table.items() if pid in roots or pgid in roots}
    grew = True
    while grew:
        more = {pid for pid, (ppid, _) in table.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    return found


def cluster_pids(state: Path) -> dict[str, int]:
    """process name -> pid, from the pid files of the state directory."""
    out = {}
    for f in sorted((state / "pids").glob("*.pid")):
        try:
            out[f.stem] = int(f.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process pid has spent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def start_cpu(state: Path) -> dict[str, Any]:
    """CPU seconds each process of the cluster spent up to now (right after ready: on its start), summed:
    on 2 cores a start cannot take less than half of that."""
    table = proc_table()
    per = {name: round(sum(cpu_s(p) for p in members(table, [pid])), 2) for name, pid in cluster_pids(state).items()}
    return {"total_cpu_s": round(sum(per.values()), 2), "per_process_cpu_s": dict(sorted(per.items(), key=lambda kv: -kv[1]))}


def memory(state: Path) -> dict[str, Any]:
    """Summed RSS (MB) of every process of the cluster, and per process (its group and children summed)."""
    table = proc_table()
    per = {name: round(sum(rss_kib(p) for p in members(table, [pid])) / 1024, 1)
           for name, pid in cluster_pids(state).items()}
    return {"total_mb": round(sum(per.values()), 1), "processes": len(members(table, cluster_pids(state).values())),
            "per_process_mb": dict(sorted(per.items(), key=lambda kv: -kv[1]))}


# commands ----------------------------------------------------------------------

def apiary(*args: str | Path) -> float:
    """Run `apiary ARGS` (python -m services.cluster); its wall seconds. Fails loudly."""
    return apiary_timed(*args)[0]


def apiary_timed(*args: str | Path) -> tuple[float, float]:
    """Run `apiary ARGS`: its wall seconds and the CPU seconds of the command's own process (not
    the cluster's, which are its own processes), less sensitive to the machine's load."""
    t, before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([sys.executable, "-m", "services.cluster", *map(str, args)], cwd=ROOT,
                       capture_output=True, text=True, check=False)
    took, after = time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        raise RuntimeError(f"apiary {' '.join(map(str, args))}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    return took, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def down(state: Path) -> dict[str, float]:
    """`apiary down`: its own seconds and the seconds until every process of the cluster is gone."""
    gone_of = members(proc_table(), cluster_pids(state).values())
    t = time.monotonic()
    command = apiary("down", "--state", state)
    while gone_of & set(proc_table()):
        time.sleep(0.01)
    return {"command_s": round(command, 2), "all_gone_s": round(time.monotonic() - t, 2),
            "processes": len(gone_of)}


def pytest_session(project: Path, *options: str | Path, profile: str = "compact") -> dict[str, float]:
    """Run pytest in project with the plugin: its wall seconds and its own time to the first test."""
    timing = project / "timing.json"
    timing.unlink(missing_ok=True)
    env = {**os.environ, "APIARY_BENCH_TIMING": str(timing), "PYTHONPATH": str(ROOT)}
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                        "services.cluster.pytest_plugin", "--rootdir", str(project), "--apiary-profile", profile,
                        *map(str, options),
                        str(project)], cwd=project, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t
    if r.returncode:
        raise RuntimeError(f"pytest in {project}: exit {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}")
    return {"wall_s": round(wall, 2), "to_first_test_s": round(json.loads(timing.read_text())["to_first_test_s"], 2)}


# the figures -------------------------------------------------------------------

def bench(runs: int, profile: str = "compact") -> dict[str, Any]:
    """Every figure of the module docstring; load averages beside."""
    work = Path(tempfile.mkdtemp(prefix="apiary-envtest-"))
    crds = write_crds(work / "crds")
    state = work / "cluster"
    out: dict[str, Any] = {"profile": profile, "load_average_start": round(os.getloadavg()[0], 2)}
    project = write_session(work / "one", suite=False)
    try:
        cold, warm, warm_cpu, downs, sessions, starts = [], [], [], [], [], []
        # in each run the CLI's start and the plugin's, one after the other: a neighbour's burst of
        # load slows one run of both rather than all of one
        for i in range(runs):
            shutil.rmtree(state, ignore_errors=True)
            cold.append(apiary("up", "--state", state, "--port", "0", "--crds", crds, "--detach",
                               "--profile", profile))
            starts.append(start_cpu(state))
            took, cpu = apiary_timed("up", "--state", state, "--crds", crds, "--detach")
            warm.append(took)
            warm_cpu.append(cpu)
            if i == 0:
                time.sleep(MEMORY_SETTLE)
                out["memory"] = memory(state)
            downs.append(down(state))
            sessions.append(pytest_session(project, "--apiary-crds", crds, profile=profile))
        out["up_cold"] = summary(cold)
        # the run of median CPU (the first may compile the services' bytecode cache), and every run's total
        out["start_cpu"] = {**sorted(starts, key=lambda c: c["total_cpu_s"])[len(starts) // 2],
                            "total_cpu_runs_s": [c["total_cpu_s"] for c in starts]}
        out["up_warm"] = {**summary(warm), "cpu_p50_s": round(percentile(warm_cpu, 0.5), 3),
                          "cpu_runs_s": [round(c, 3) for c in warm_cpu]}
        out["down"] = {"all_gone_p50_s": round(percentile([d["all_gone_s"] for d in downs], 0.5), 2),
                       "all_gone_max_s": max(d["all_gone_s"] for d in downs),
                       "command_p50_s": round(percentile([d["command_s"] for d in downs], 0.5), 2),
                       "processes": downs[0]["processes"]}
        out["pytest_cold"] = _pytest_figures(project, work / "reuse" / "state", crds, sessions, profile)
        out["suite"] = _suite(work, crds, state, max(1, runs // 2), profile)
    finally:
        for s in (state, work / "reuse" / "state"):
            if (s / "pids").is_dir():
                subprocess.run([sys.executable, "-m", "services.cluster", "down", "--state", str(s)], cwd=ROOT,
                               capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)
    out["load_average_end"] = round(os.getloadavg()[0], 2)
    return out


def _pytest_figures(project: Path, reuse_state: Path, crds: Path, cold: list[dict[str, float]],
                    profile: str) -> dict[str, Any]:
    """The cold sessions' figures, and as many with --apiary-reuse after one that leaves the cluster running."""
    pytest_session(project, "--apiary-crds", crds, "--apiary-reuse", "--apiary-state", reuse_state, profile=profile)
    reuse = [pytest_session(project, "--apiary-crds", crds, "--apiary-reuse", "--apiary-state", reuse_state,
                            profile=profile)
             for _ in cold]
    apiary("down", "--state", reuse_state)
    return {"cold": summary([r["to_first_test_s"] for r in cold]),
            "cold_wall": summary([r["wall_s"] for r in cold]),
            "reuse": summary([r["to_first_test_s"] for r in reuse]),
            "reuse_wall": summary([r["wall_s"] for r in reuse])}


def _suite(work: Path, crds: Path, state: Path, rounds: int, profile: str) -> dict[str, Any]:
    """The operator suite, in rounds: against a running cluster, then starting its own."""
    project = write_session(work / "suite", suite=True)
    shutil.rmtree(state, ignore_errors=True)
    apiary("up", "--state", state, "--port", "0", "--crds", crds, "--detach", "--profile", profile)
    running, started = [], []
    try:
        for _ in range(rounds):
            running.append(pytest_session(project, "--apiary-crds", crds, "--apiary-kubeconfig",
                                          state / "kubeconfig", profile=profile))
            started.append(pytest_session(project, "--apiary-crds", crds, profile=profile))
    finally:
        apiary("down", "--state", state)
    ratios = [s["wall_s"] / r["wall_s"] for s, r in zip(started, running)]
    return {"tests": SUITE_TESTS, "running_wall_s": [r["wall_s"] for r in running],
            "started_wall_s": [s["wall_s"] for s in started],
            "started_to_first_test_s": [s["to_first_test_s"] for s in started],
            "ratio": round(sorted(ratios)[len(ratios) // 2], 2)}


def figures(r: Mapping[str, Any]) -> dict[str, float]:
    """The numbers ENVTEST_GOALS read, as `envtest.<field>`."""
    return {"envtest.up_cold_p50_s": r["up_cold"]["p50_s"], "envtest.up_cold_p90_s": r["up_cold"]["p90_s"],
            "envtest.up_warm_p50_s": r["up_warm"]["p50_s"],
            "envtest.pytest_cold_p50_s": r["pytest_cold"]["cold"]["p50_s"],
            "envtest.pytest_reuse_p50_s": r["pytest_cold"]["reuse"]["p50_s"],
            "envtest.down_all_gone_p50_s": r["down"]["all_gone_p50_s"],
            "envtest.memory_mb": r["memory"]["total_mb"], "envtest.suite_ratio": r["suite"]["ratio"]}
