"""The official Python client (`kubernetes`) against the stack: list, then watch from the list's resourceVersion."""
from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client, config, watch

pytestmark = pytest.mark.stack
ROOT_CA = "kube-root-ca.crt"


@pytest.fixture(scope="module")
def core(stack):
    api_client = config.new_client_from_config(config_file=str(stack.kubeconfig))
    yield client.CoreV1Api(api_client)
    api_client.close()


def test_list_then_watch_replays_everything(core):
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="pyclient")))
    # the root-ca-cert-publisher's kube-root-ca.crt comes into every namespace (as on kube): once it is
    # there, the only events after the list are the test's own
    deadline = time.monotonic() + 60
    while not [cm for cm in core.list_namespaced_config_map("pyclient").items if cm.metadata.name == ROOT_CA]:
        assert time.monotonic() < deadline, f"no {ROOT_CA} in the new namespace"
        time.sleep(0.2)
    core.create_namespaced_config_map("pyclient", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="before"),
                                                                     data={"a": "1"}))
    listed = core.list_namespaced_config_map("pyclient")
    assert [cm.metadata.name for cm in listed.items] == ["before", ROOT_CA]
    rv = listed.metadata.resource_version

    core.create_namespaced_config_map("pyclient", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="after"),
                                                                     data={"b": "2"}))
    core.patch_namespaced_config_map("after", "pyclient", {"data": {"b": "3"}})
    core.delete_namespaced_config_map("after", "pyclient")

    seen: list[tuple[str, str]] = []
    w = watch.Watch()
    timer = threading.Timer(20, w.stop)
    timer.start()
    try:
        for ev in w.stream(core.list_namespaced_config_map, "pyclient", resource_version=rv, timeout_seconds=15):
            seen.append((ev["type"], ev["object"].metadata.name))
            if len(seen) == 3:
                w.stop()
    finally:
        timer.cancel()
    assert seen == [("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "after")]


def test_client_errors_are_statuses(core):
    with pytest.raises(client.ApiException) as e:
        core.read_namespaced_config_map("missing", "default")
    assert e.value.status == 404
    assert '"reason":"NotFound"' in e.value.body.replace(" ", "")
