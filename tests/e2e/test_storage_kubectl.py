"""Storage semantics through kubectl and the official Python client: chunked lists, watches,
delete --wait, encryption at rest by default, re-encryption by replace, relist after 410."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from urllib.parse import urlsplit

import aetcd
import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from apiary_pb import envelope_pb2 as pb

pytestmark = pytest.mark.stack
NS = "storage-e2e"


@pytest.fixture(scope="module")
def core(stack, kubectl):
    api_client = config.new_client_from_config(config_file=str(stack.kubeconfig))
    api = client.CoreV1Api(api_client)
    kubectl.run("create", "namespace", NS, check=False)
    yield api
    api_client.close()


def etcd_call(stack, fn):
    u = urlsplit(stack.etcd_url)

    async def run():
        async with aetcd.Client(host=u.hostname, port=u.port) as c:
            return await fn(c)

    return asyncio.run(run())


def test_chunked_get_and_watch(kubectl, core):
    for i in range(5):
        kubectl.run("-n", NS, "create", "configmap", f"chunk-{i}", "--from-literal=a=b")
    out = kubectl.run("-n", NS, "get", "configmaps", "--chunk-size=2", "-o", "name", "-v=6").stdout
    assert [line for line in out.splitlines() if "chunk-" in line] == [f"configmap/chunk-{i}" for i in range(5)]
    log = kubectl.run("-n", NS, "get", "configmaps", "--chunk-size=2", "-v=6").stderr
    assert log.count("limit=2") >= 3  # followed the continue tokens

    w = kubectl.popen("-n", NS, "get", "configmaps", "-w", "-o", "name")
    lines: list[bytes] = []
    threading.Thread(target=lambda: lines.extend(iter(w.stdout.readline, b"")), daemon=True).start()
    try:
        # listed (the chunk-* configmaps): kubectl then watches from the list's resourceVersion
        deadline = time.monotonic() + 15
        while b"configmap/chunk-4\n" not in lines:
            assert time.monotonic() < deadline, lines
            time.sleep(0.05)
        kubectl.run("-n", NS, "create", "configmap", "watched", "--from-literal=a=b")
        kubectl.run("-n", NS, "delete", "configmap", "watched", "--wait", timeout=30)
        deadline = time.monotonic() + 15
        # -o name prints the object of each event: once for ADDED, once for DELETED.
        while time.monotonic() < deadline and lines.count(b"configmap/watched\n") < 2:
            time.sleep(0.1)
        assert lines.count(b"configmap/watched\n") >= 2, lines
    finally:
        w.kill()
        w.wait()
    r = kubectl.run("-n", NS, "get", "configmap", "watched", check=False)
    assert r.returncode != 0 and "NotFound" in r.stderr


def test_list_watch_delete_collection(core):
    for i in range(3):
        core.create_namespaced_config_map(NS, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"dc-{i}", labels={"set": "dc"}), data={"a": "1"}))
    core.create_namespaced_config_map(NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="keep")))
    listed = core.list_namespaced_config_map(NS, label_selector="set=dc")
    rv = listed.metadata.resource_version
    core.patch_namespaced_config_map("dc-0", NS, {"data": {"a": "2"}})
    core.delete_collection_namespaced_config_map(NS, label_selector="set=dc")
    seen: list[tuple[str, str]] = []
    w = watch.Watch()
    timer = threading.Timer(20, w.stop)
    timer.start()
    try:
        for ev in w.stream(core.list_namespaced_config_map, NS, label_selector="set=dc", resource_version=rv,
                           timeout_seconds=15):
            seen.append((ev["type"], ev["object"].metadata.name))
            if len([s for s in seen if s[0] == "DELETED"]) == 3:
                w.stop()
    finally:
        timer.cancel()
    assert ("MODIFIED", "dc-0") in seen
    assert sorted(n for t, n in seen if t == "DELETED") == ["dc-0", "dc-1", "dc-2"]
    assert [c.metadata.name for c in core.list_namespaced_config_map(NS, label_selector="set=dc").items] == []
    assert core.read_namespaced_config_map("keep", NS).metadata.name == "keep"


def test_informer_relists_after_410(stack, core):
    core.create_namespaced_config_map(NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="inf-a")))
    current = core.list_namespaced_config_map(NS).metadata.resource_version
    etcd_call(stack, lambda c: c.compact(int(current), physical=True))
    # An old resourceVersion (before the watch cache's window) gives 410; the informer relists.
    w = watch.Watch()
    with pytest.raises(ApiException) as e:
        for _ in w.stream(core.list_namespaced_config_map, NS, resource_version="1", timeout_seconds=5):
            pass
    assert e.value.status == 410
    relisted = core.list_namespaced_config_map(NS)
    assert "inf-a" in [c.metadata.name for c in relisted.items]
    core.create_namespaced_config_map(NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="inf-b")))
    seen = []
    w = watch.Watch()
    for ev in w.stream(core.list_namespaced_config_map, NS, resource_version=relisted.metadata.resource_version,
                       timeout_seconds=10):
        seen.append((ev["type"], ev["object"].metadata.name))
        if ev["object"].metadata.name == "inf-b":
            w.stop()
    assert ("ADDED", "inf-b") in seen


def test_secrets_are_encrypted_and_replace_reencrypts(stack, kubectl, core):
    kubectl.run("-n", NS, "create", "secret", "generic", "enc", "--from-literal=password=hunter2")
    key = f"/registry/secrets/{NS}/enc".encode()
    value = etcd_call(stack, lambda c: c.get(key)).value
    assert value.startswith(b"k8s:enc:aescbc:v1:key1:") and b"hunter2" not in value
    # A value written in the clear before encryption was configured (identity) ...
    plain_key = f"/registry/secrets/{NS}/legacy".encode()
    obj = pb.Object(api_version="v1", kind="Secret", body=b'{"type":"Opaque","data":{"p":"aHVudGVyMg=="}}')
    obj.metadata.name, obj.metadata.namespace, obj.metadata.uid = "legacy", NS, "legacy-uid"
    obj.metadata.creation_timestamp = "2026-01-01T00:00:00Z"
    etcd_call(stack, lambda c: c.put(plain_key, b"k8s\x00apiary\x00" + obj.SerializeToString()))
    # (the list below is a consistent read: it waits until the watch cache has seen that put)
    # ... is rewritten with the first provider by get | replace, though its content is unchanged.
    listed = kubectl.run("get", "secrets", "-A", "-o", "json").stdout
    kubectl.run("replace", "-f", "-", input=listed)
    value = etcd_call(stack, lambda c: c.get(plain_key)).value
    assert value.startswith(b"k8s:enc:aescbc:v1:key1:")
    got = json.loads(kubectl.run("-n", NS, "get", "secret", "legacy", "-o", "json").stdout)
    assert got["data"] == {"p": "aHVudGVyMg=="}
