"""etcd and storage outages against a private stack (real processes): bounded failures, reads and
watches from the cache, recovery without restarting anything else, no lost acknowledged write."""
from __future__ import annotations

import json
import os
import signal
import ssl
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tools.run import Stack

OFFSET = 4000
NS = "default"


class FaultStack(Stack):
    """The runner's stack with a shorter etcd deadline, so that writes fail fast when etcd hangs."""

    def command(self, name: str) -> list[str]:
        cmd = super().command(name)
        if name == "storage":
            cmd += ["--etcd-request-timeout", "5s"]
        return cmd


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, httpx.Client]]:
    s = FaultStack(tmp_path_factory.mktemp("faults"), OFFSET)
    try:
        s.start(fresh=True)
        pki = s.state / "pki"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        with httpx.Client(base_url=s.server, verify=ctx, timeout=30) as c:
            yield s, c
    finally:
        s.stop(quiet=True)


CM = f"/api/v1/namespaces/{NS}/configmaps"


def cm(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}}


def create_until_ok(c: httpx.Client, name: str, within: float) -> dict:
    deadline = time.monotonic() + within
    while True:
        try:
            r = c.post(CM, json=cm(name), timeout=10)
            if r.status_code in (201, 409):
                return r.json()
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"no recovery within {within}s"
        time.sleep(0.3)


class Watch:
    """A watch read by a thread: its events, and whether the server ended it."""

    def __init__(self, c: httpx.Client, rv: str) -> None:
        self.events: list[dict] = []
        self.ended = threading.Event()
        self.c, self.rv = c, rv
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            with self.c.stream("GET", CM, params={"watch": "true", "resourceVersion": self.rv},
                               timeout=httpx.Timeout(30, read=120)) as r:
                for line in r.iter_lines():
                    if line:
                        self.events.append(json.loads(line))
        except httpx.HTTPError:
            pass
        self.ended.set()

    def wait_for(self, pred, timeout: float = 15) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ev in self.events:
                if pred(ev):
                    return ev
            time.sleep(0.05)
        raise AssertionError(f"no matching event; got {[(e['type'], e['object'].get('metadata', {}).get('name')) for e in self.events]}")


def names(ev: dict) -> str:
    return ev["object"].get("metadata", {}).get("name", "")


def check_failing_write(c: httpx.Client) -> None:
    t0 = time.monotonic()
    r = c.post(CM, json=cm(f"x{uuid.uuid4().hex[:6]}"), timeout=30)
    took = time.monotonic() - t0
    assert r.status_code in (503, 504), r.text
    assert took <= 10, took
    assert r.headers.get("Retry-After"), r.headers


def test_etcd_stop_and_kill(private):
    stack, c = private
    acked = [create_until_ok(c, f"before-{i}", 30)["metadata"]["name"] for i in range(3)]
    listed = c.get(CM, params={"resourceVersion": "0"}).json()
    w = Watch(c, listed["metadata"]["resourceVersion"])
    time.sleep(0.5)
    etcd = stack.pid("etcd")
    os.kill(etcd, signal.SIGSTOP)
    try:
        check_failing_write(c)
        r = c.get(CM, params={"resourceVersion": "0"})
        assert r.status_code == 200 and {i["metadata"]["name"] for i in r.json()["items"]} >= set(acked)
        assert c.get(f"{CM}/before-0", params={"resourceVersion": "0"}).status_code == 200
        assert not w.ended.is_set()
    finally:
        os.kill(etcd, signal.SIGCONT)
    acked.append(create_until_ok(c, "after-stop", 20)["metadata"]["name"])
    w.wait_for(lambda ev: ev["type"] == "ADDED" and names(ev) == "after-stop")

    os.kill(etcd, signal.SIGKILL)
    time.sleep(0.5)
    check_failing_write(c)
    assert c.get(CM, params={"resourceVersion": "0"}).status_code == 200
    stack.spawn("etcd")
    assert not stack.wait(["etcd"], 30)
    acked.append(create_until_ok(c, "after-kill", 30)["metadata"]["name"])
    w.wait_for(lambda ev: ev["type"] == "ADDED" and names(ev) == "after-kill", 30)
    listed = c.get(CM).json()
    assert set(acked) <= {i["metadata"]["name"] for i in listed["items"]}


def test_storage_kill_9_and_restart(private):
    stack, c = private
    first = create_until_ok(c, "s-before", 30)
    w = Watch(c, first["metadata"]["resourceVersion"])
    time.sleep(0.5)
    pid = stack.pid("storage")
    os.killpg(pid, signal.SIGKILL)
    assert w.ended.wait(15), "the watch was not ended when storage died"
    last_rv = first["metadata"]["resourceVersion"]
    for ev in w.events:
        if ev["type"] in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            last_rv = ev["object"]["metadata"]["resourceVersion"]
    stack.spawn("storage")
    assert not stack.wait(["storage"], 30)
    created = create_until_ok(c, "s-after", 30)
    # The client resumes from its last resourceVersion (or relists after a 410).
    w2 = Watch(c, last_rv)
    ev = w2.wait_for(lambda ev: ev["type"] == "ERROR" or names(ev) == "s-after", 20)
    if ev["type"] == "ERROR":
        assert ev["object"]["code"] == 410
    got = c.get(f"{CM}/s-after")
    assert got.status_code == 200 and got.json()["metadata"]["uid"] == created["metadata"]["uid"]


def test_registry_kill_9_and_restart(private):
    """Every client watch shares the proxy's one Watches stream to the registry: when the registry
    dies, each of them ends (an ERROR Status or the end of the stream), and once it is back new
    watches and requests work without restarting the proxy."""
    stack, c = private
    first = create_until_ok(c, "r-before", 30)
    watches = [Watch(c, first["metadata"]["resourceVersion"]) for _ in range(3)]
    time.sleep(0.5)
    os.killpg(stack.pid("registry"), signal.SIGKILL)
    for w in watches:
        assert w.ended.wait(15), "a watch was not ended when the registry died"
        errors = [ev for ev in w.events if ev["type"] == "ERROR"]
        assert all(ev["object"]["code"] in (500, 503, 504) for ev in errors), errors
    stack.spawn("registry")
    assert not stack.wait(["registry"], 30)
    created = create_until_ok(c, "r-after", 30)
    w = Watch(c, first["metadata"]["resourceVersion"])
    assert names(w.wait_for(lambda ev: names(ev) == "r-after", 20)) == "r-after"
    assert c.get(f"{CM}/r-after").json()["metadata"]["uid"] == created["metadata"]["uid"]
