"""`docker compose up` for real: the images built offline (tools/images.py), every service of
compose.yaml but Grafana (no reachable registry ships it) started with Debian's docker-compose,
a kubectl session through the proxy with the kubeconfig the init service wrote (a pizza too, from
the pizza server's container, through the aggregation proxy), Prometheus
scraping every target, a killed container brought back by compose's restart policy, `down -v`.

The stack uses the default ports on the host's loopback (as compose.yaml does), so it needs them
free: nothing else of the suite uses them. `.ci/run` installs and starts the Docker engine.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools import images
from services.cluster.stack import ROOT

PROJECT = "apiary-compose-test"
STARTED = ["init", "etcd", "storage", "registry", "admission", "auth", "apf", "proxy", "controllermanager",
           "pizza-apiserver", "prometheus"]
GROUP = "restaurant.programming-kubernetes.info"


def compose(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker-compose", "-p", PROJECT, "-f", str(ROOT / "compose.yaml"), *args],
                          capture_output=True, text=True, check=check, timeout=timeout)


def container(service: str) -> str:
    cid = compose("ps", "-a", "-q", service).stdout.strip()
    assert cid, f"no container for {service}"
    return cid


def inspect(cid: str) -> dict:
    return json.loads(subprocess.run(["docker", "inspect", cid], capture_output=True, text=True, check=True).stdout)[0]


def kubectl(kubeconfig: Path, *args: str, check: bool = True, input: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", f"--cache-dir={kubeconfig.parent / 'cache'}",
                           *args], capture_output=True, text=True, timeout=60, input=input)
    if check:
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc


def wait_ready(kubeconfig: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if kubectl(kubeconfig, "get", "--raw", "/readyz", check=False).returncode == 0:
            return
        time.sleep(1)
    logs = compose("logs", "--tail=20", check=False).stdout
    raise AssertionError(f"apiary in compose not ready within {timeout}s:\n{logs}")


# building the images from a debootstrapped base on a fresh machine takes longer than the suite's 15-minute
# limit per test (pyproject.toml), and the first test pays for it
pytestmark = pytest.mark.timeout(2700)


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    info = subprocess.run(["docker", "info"], capture_output=True, text=True)
    assert info.returncode == 0, "the Docker engine is not running (.ci/run starts dockerd)"
    for port in (6443, 2379, 20055, 8444, 9090):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} is taken: stop `make run` first"
    images.build()
    compose("down", "-v", check=False)
    try:
        compose("up", "-d", *STARTED, timeout=600)
        path = tmp_path_factory.mktemp("compose") / "kubeconfig"
        subprocess.run(["docker", "cp", f"{container('init')}:/state/kubeconfig", str(path)], check=True)
        wait_ready(path)
        yield path
    finally:
        compose("down", "-v", check=False)


def test_kubectl_session(kubeconfig: Path) -> None:
    kubectl(kubeconfig, "create", "namespace", "compose")
    kubectl(kubeconfig, "-n", "compose", "create", "configmap", "c", "--from-literal=a=b")
    kubectl(kubeconfig, "-n", "compose", "create", "secret", "generic", "s", "--from-literal=password=p")
    assert kubectl(kubeconfig, "-n", "compose", "get", "cm", "c", "-o", "jsonpath={.data.a}").stdout == "b"
    watch = subprocess.Popen(["kubectl", f"--kubeconfig={kubeconfig}", f"--cache-dir={kubeconfig.parent / 'cache'}",
                              "-n", "compose", "get", "cm", "-w", "--request-timeout=30s", "-o", "name"],
                             stdout=subprocess.PIPE, text=True)
    try:
        # listed (configmap c): kubectl then watches from the list's resourceVersion, missing nothing
        seen = ""
        deadline = time.monotonic() + 20
        while "configmap/c\n" not in seen and time.monotonic() < deadline:
            seen += watch.stdout.readline()  # type: ignore[union-attr]
        assert "configmap/c\n" in seen, seen
        kubectl(kubeconfig, "-n", "compose", "create", "configmap", "watched")
        seen = ""
        deadline = time.monotonic() + 20
        while "watched" not in seen and time.monotonic() < deadline:
            seen += watch.stdout.readline()  # type: ignore[union-attr]
        assert "configmap/watched" in seen
    finally:
        watch.kill()
        watch.wait()
    assert kubectl(kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout == \
        "kubernetes-admin"
    # the pizza server, registered by its own container, through the aggregation proxy
    deadline = time.monotonic() + 120
    while kubectl(kubeconfig, "get", "toppings", check=False).returncode != 0:
        assert time.monotonic() < deadline, kubectl(kubeconfig, "get", "apiservices", check=False).stdout
        time.sleep(1)
    kubectl(kubeconfig, "create", "-f", "-", input=f"apiVersion: {GROUP}/v1alpha1\nkind: Topping\n"
            "metadata:\n  name: tomato\nspec:\n  cost: 0.25\n")
    pizza = (f"apiVersion: {GROUP}/v1alpha1\nkind: Pizza\nmetadata:\n  name: marinara\n  namespace: compose\n"
             "spec:\n  toppings:\n  - tomato\n  - tomato\n")
    deadline = time.monotonic() + 30  # the server's topping informer sees the topping
    while (p := kubectl(kubeconfig, "create", "-f", "-", input=pizza, check=False)).returncode != 0:
        assert time.monotonic() < deadline, p.stderr
        time.sleep(1)
    out = kubectl(kubeconfig, "-n", "compose", "get", "pizza", "marinara", "-o",
                  "jsonpath={.spec.toppings[0].quantity} {.status.cost}").stdout
    assert out == "2 0.5", out


def test_prometheus_scrapes_every_target(kubeconfig: Path) -> None:
    deadline = time.monotonic() + 60
    up: dict[str, str] = {}
    while time.monotonic() < deadline:
        with urllib.request.urlopen("http://127.0.0.1:9090/api/v1/query?query=up", timeout=5) as r:
            up = {s["metric"]["job"]: s["value"][1] for s in json.loads(r.read())["data"]["result"]}
        # etcd, the six services, the controller-manager and the pizza server
        if len(up) == 9 and set(up.values()) == {"1"}:
            return
        time.sleep(2)
    raise AssertionError(f"targets up: {up}")


def test_a_killed_container_comes_back(kubeconfig: Path) -> None:
    cid = container("registry")
    before = inspect(cid)["RestartCount"]
    os.kill(inspect(cid)["State"]["Pid"], signal.SIGKILL)  # a crash, as the engine sees it
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = inspect(cid)
        if state["RestartCount"] > before and state["State"]["Running"]:
            break
        time.sleep(0.5)
    else:
        raise AssertionError("compose's restart policy did not bring the registry back")
    wait_ready(kubeconfig, 60)
    deadline = time.monotonic() + 30
    while kubectl(kubeconfig, "-n", "compose", "get", "cm", "c", check=False).returncode != 0:
        assert time.monotonic() < deadline, "the API did not recover after the registry restarted"
        time.sleep(1)
