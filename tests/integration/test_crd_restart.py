"""kill -9 of the registry while custom objects are being created, on a private stack: every create the API
acknowledged (201) is there once the registry is back (restarted with the same command line), and the custom
resource is served again without its CRD being touched."""
from __future__ import annotations

import os
import signal
import ssl
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from services.cluster.stack import Stack
from tests.conftest import TEST_OFFSET
from tests.integration.test_faults import reap, wait_ready
from tests.waiting import wait_for

# The session stack uses TEST_OFFSET; this test kills the registry, so it runs a stack of its own.
OFFSET = TEST_OFFSET + 400
RECOVERY = 30.0
GROUP = "restart.example.com"
CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
       "metadata": {"name": f"notes.{GROUP}"},
       "spec": {"group": GROUP, "scope": "Namespaced", "names": {"plural": "notes", "kind": "Note"},
                "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                    "type": "object", "properties": {"spec": {"type": "object", "properties": {
                        "n": {"type": "integer"}}}}}}}]}}
NOTES = f"/apis/{GROUP}/v1/namespaces/default/notes"


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, httpx.Client, ssl.SSLContext]]:
    s = Stack(tmp_path_factory.mktemp("crd-restart"), OFFSET, aggregated=[])
    try:
        s.start(fresh=True)
        pki = s.state / "pki"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        with httpx.Client(base_url=s.server, verify=ctx, timeout=30) as c:
            yield s, c, ctx
    finally:
        s.stop(quiet=True)


class Creator:
    """Creates notes one after another on its own connection pool, keeping the names acknowledged."""

    def __init__(self, server: str, ctx: ssl.SSLContext) -> None:
        self.client = httpx.Client(base_url=server, verify=ctx, timeout=10)
        self.acked: list[str] = []
        self.acked_at: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            name = f"note-{i}"
            try:
                r = self.client.post(NOTES, json={"apiVersion": f"{GROUP}/v1", "kind": "Note",
                                                  "metadata": {"name": name}, "spec": {"n": i}})
            except httpx.HTTPError:
                time.sleep(0.05)
                i += 1  # it may or may not have been stored: a new name, and only acknowledged ones count
                continue
            if r.status_code == 201:
                self.acked.append(name)
                self.acked_at.append(time.monotonic())
            else:
                time.sleep(0.05)
            i += 1


def test_acknowledged_custom_objects_survive_kill_9_of_the_registry(private) -> None:
    stack, admin, ctx = private
    r = admin.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=CRD)
    assert r.status_code == 201, r.text
    wait_for(lambda: admin.get(NOTES).status_code == 200, RECOVERY, "notes served")
    creator = Creator(stack.server, ctx)
    creator.thread.start()
    try:
        wait_for(lambda: len(creator.acked) >= 20, RECOVERY, "creates before the kill")
        pid = stack.pid("registry")
        assert pid is not None
        os.killpg(pid, signal.SIGKILL)
        reap(pid)
        spawned = time.monotonic()
        stack.spawn("registry")
        wait_ready(stack, "registry", RECOVERY)
        wait_for(lambda: sum(t > spawned for t in creator.acked_at) >= 20, RECOVERY, "creates after the restart")
    finally:
        creator.stop.set()
        creator.thread.join(15)
        creator.client.close()
    listed = admin.get(NOTES)
    assert listed.status_code == 200, listed.text
    stored = {item["metadata"]["name"]: item for item in listed.json()["items"]}
    missing = [name for name in creator.acked if name not in stored]
    assert not missing, f"{len(missing)} acknowledged notes lost: {missing[:10]}"
    assert all(stored[name]["spec"]["n"] == int(name.rsplit("-", 1)[1]) for name in creator.acked)
    crd = admin.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/notes.{GROUP}").json()
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"
