"""The pytest plugin's fixtures and options, run by pytest in subprocesses on a cluster of its own:
a namespace per test that is really gone after it, both API clients, the services' logs in a failed
test's report, and --apiary-reuse leaving the cluster running for the next session to attach to."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from services.cluster import clientcmd
from services.cluster.stack import Stack
from tests.e2e.test_example_operator import pytest_command, pytest_env, run_pytest

SUITE = '''
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

OUT = Path(__file__).with_name("out")


def default_service_account(api, namespace):
    for _ in range(300):
        try:
            return client.CoreV1Api(api).read_namespaced_service_account("default", namespace)
        except ApiException:
            time.sleep(0.1)
    raise AssertionError("no default ServiceAccount")


def test_namespace(apiary_cluster, apiary_namespace, k8s_api_client):
    (OUT / "namespace").write_text(apiary_namespace)
    (OUT / "kubeconfig").write_text(str(apiary_cluster.kubeconfig))
    core = client.CoreV1Api(k8s_api_client)
    core.create_namespaced_config_map(apiary_namespace, {"metadata": {"name": "c"}, "data": {"k": "v"}})
    assert core.read_namespaced_config_map("c", apiary_namespace).data == {"k": "v"}


@pytest.mark.asyncio
async def test_async_client(k8s_async_api_client):
    from kubernetes_asyncio import client as async_client

    names = [n.metadata.name for n in (await async_client.CoreV1Api(k8s_async_api_client).list_namespace()).items]
    assert "kube-system" in names


def test_fails_with_the_logs(apiary_namespace, k8s_api_client):
    default_service_account(k8s_api_client, apiary_namespace)  # the controller-manager logged it
    (OUT / "failed-namespace").write_text(apiary_namespace)
    assert False, "on purpose"
'''


def test_fixtures_logs_on_failure_and_reuse(tmp_path: Path) -> None:
    suite, state = tmp_path / "suite", tmp_path / "state"
    (suite / "out").mkdir(parents=True)
    (suite / "test_suite.py").write_text(SUITE)
    args = ("-rA", "--apiary-reuse", "--apiary-state", str(state))
    try:
        first = run_pytest(suite, *args)
        out = first.stdout
        assert first.returncode == 1, out + first.stderr
        assert "1 failed, 2 passed" in out, out
        failed_ns = (suite / "out" / "failed-namespace").read_text()
        section = out[out.index("apiary log: controllermanager"):]
        assert f"{failed_ns}/default" in section  # what the controller-manager said during the test
        stack = Stack(state, free_ports=True, aggregated=[], detach=True)
        etcd_pid, ports = stack.pid("etcd"), json.loads(stack.record.read_text())["ports"]
        assert etcd_pid is not None  # kept running for the next session

        with clientcmd.load(stack.kubeconfig, tmp_path / "files").client() as admin:
            for name in ((suite / "out" / "namespace").read_text(), failed_ns):
                assert admin.get(f"/api/v1/namespaces/{name}").status_code == 404  # gone, not Terminating

        second = run_pytest(suite, *args, "-k", "test_namespace")
        assert second.returncode == 0, second.stdout + second.stderr
        assert (stack.pid("etcd"), json.loads(stack.record.read_text())["ports"]) == (etcd_pid, ports)
    finally:
        Stack(state, free_ports=True, aggregated=[], detach=True).stop(quiet=True)


TWIN = '''
from kubernetes import client


def test_config_map(apiary_namespace, k8s_api_client):
    core = client.CoreV1Api(k8s_api_client)
    core.create_namespaced_config_map(apiary_namespace, {"metadata": {"name": "c"}, "data": {"k": "v"}})
    assert core.read_namespaced_config_map("c", apiary_namespace).data == {"k": "v"}
'''


def test_two_sessions_at_once_each_on_a_cluster_of_its_own(tmp_path: Path) -> None:
    """Ports from the OS and a state directory each: no clash between sessions started together (one
    on the default compact profile, one with --apiary-profile full, each service its own process)."""
    procs = []
    for name, profile in (("one", "compact"), ("two", "full")):
        suite = tmp_path / name
        suite.mkdir()
        (suite / "test_twin.py").write_text(TWIN)
        procs.append(subprocess.Popen(pytest_command("-q", "--apiary-profile", profile), cwd=suite,
                                      env=pytest_env(), text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out
        assert "1 passed" in out


HANG = '''
import time
from pathlib import Path


def test_hang(apiary_cluster):
    Path(__file__).with_name("state").write_text(str(apiary_cluster.stack.state))
    time.sleep(600)
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_a_killed_session_leaves_no_process_behind(tmp_path: Path) -> None:
    (tmp_path / "test_hang.py").write_text(HANG)
    proc = subprocess.Popen(pytest_command("-q"), cwd=tmp_path, env=pytest_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "state").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the session did not get its cluster"
            time.sleep(0.2)
        stack = Stack.from_state(Path((tmp_path / "state").read_text()))
        assert stack.profile == "compact"  # the plugin's default: etcd and one host of every service
        assert all(stack.pid(name) is not None for name in stack.names())
        pids = list({stack.pid(name) for name in stack.names()})
        assert len(pids) == len(stack.processes()) == 2
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 60
    while (left := [pid for pid in pids if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == []
