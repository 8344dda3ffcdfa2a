from __future__ import annotations

from typing import Any

import pytest

from apiary_pb import admission_pb2 as adpb
from apiary_pb import envelope_pb2 as pb
from services.admission.attributes import Attributes
from services.admission.chain import Chain
from services.admission.plugins.namespace_lifecycle import NamespaceLifecycle
from services.admission.server import AdmissionServicer
from services.apis.install import new_catalogue
from services.common.envelope import to_envelope
from services.common.errors import Forbidden, InternalError, NotFound

CATALOGUE = new_catalogue()


def ns(name: str, phase: str = "Active", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta, "status": {"phase": phase}}


class FakeLister:
    def __init__(self, cached: dict[str, dict], live: dict[str, dict] | None = None,
                 synced: bool = True) -> None:
        self.cached = cached
        self.live = live if live is not None else dict(cached)
        self.live_calls: list[str] = []
        self._synced = synced
        self.live_error: Exception | None = None

    def get(self, name: str):
        return self.cached.get(name)

    async def live_get(self, name: str):
        self.live_calls.append(name)
        if self.live_error:
            raise self.live_error
        return self.live.get(name)

    async def wait_synced(self, timeout: float) -> bool:
        return self._synced

    def synced(self) -> bool:
        return self._synced


def request(op: str, resource: str = "configmaps", namespace: str = "team", name: str = "cm",
            group: str = "", obj: dict | None = None) -> Attributes:
    r = adpb.AdmissionRequest(operation=op, attributes=pb.RequestAttributes(
        api_group=group, api_version="v1", resource=resource, namespace=namespace, name=name))
    if obj is not None:
        r.object.CopyFrom(to_envelope(obj))
    return Attributes(r, CATALOGUE)


def configmap(name: str = "cm", generate: bool = False) -> dict:
    meta = {"generateName": "cm-"} if generate else {"name": name}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, "namespace": "team"},
            "data": {"a": "b"}}


async def test_create_in_active_namespace_is_allowed() -> None:
    lister = FakeLister({"team": ns("team")})
    await NamespaceLifecycle(lister).admit(request("CREATE", obj=configmap()))
    assert lister.live_calls == []


async def test_create_in_missing_namespace_is_not_found_after_live_lookup() -> None:
    lister = FakeLister({})
    with pytest.raises(NotFound) as e:
        await NamespaceLifecycle(lister).admit(request("CREATE", obj=configmap()))
    assert e.value.message == 'namespaces "team" not found'
    assert e.value.details == {"name": "team", "kind": "namespaces"}
    assert lister.live_calls == ["team"]


async def test_cache_miss_but_namespace_just_created() -> None:
    lister = FakeLister({}, live={"team": ns("team")})
    await NamespaceLifecycle(lister).admit(request("CREATE", obj=configmap()))
    assert lister.live_calls == ["team"]


@pytest.mark.parametrize("namespace", [ns("team", phase="Terminating"), ns("team", deleting=True)])
async def test_create_in_terminating_namespace_is_forbidden(namespace: dict) -> None:
    lister = FakeLister({"team": namespace})
    with pytest.raises(Forbidden) as e:
        await NamespaceLifecycle(lister).admit(request("CREATE", obj=configmap()))
    err = e.value
    assert err.message == ('configmaps "cm" is forbidden: unable to create new content in namespace team '
                           "because it is being terminated")
    assert err.status()["details"] == {
        "name": "cm", "kind": "configmaps",
        "causes": [{"reason": "NamespaceTerminating", "message": "namespace team is being terminated",
                    "field": "metadata.namespace"}],
    }
    assert err.status()["code"] == 403


async def test_terminating_message_names_group_and_unknown_for_generate_name() -> None:
    lister = FakeLister({"team": ns("team", phase="Terminating")})
    with pytest.raises(Forbidden) as e:
        await NamespaceLifecycle(lister).admit(request("CREATE", resource="deployments", group="apps",
                                                       name="", obj=configmap(generate=True)))
    assert e.value.message.startswith('deployments.apps "Unknown" is forbidden: unable to create new content')
    assert e.value.details["group"] == "apps"


async def test_update_and_delete_in_terminating_namespace_are_allowed() -> None:
    lister = FakeLister({"team": ns("team", phase="Terminating")})
    plugin = NamespaceLifecycle(lister)
    await plugin.admit(request("UPDATE", obj=configmap()))
    await plugin.admit(request("DELETE"))


async def test_update_in_missing_namespace_is_not_found() -> None:
    with pytest.raises(NotFound):
        await NamespaceLifecycle(FakeLister({})).admit(request("UPDATE", obj=configmap()))


@pytest.mark.parametrize("name", ["default", "kube-system", "kube-public"])
async def test_immortal_namespaces(name: str) -> None:
    with pytest.raises(Forbidden) as e:
        await NamespaceLifecycle(FakeLister({})).admit(request("DELETE", resource="namespaces", namespace="",
                                                               name=name))
    assert e.value.message == f'namespaces "{name}" is forbidden: this namespace may not be deleted'
    assert e.value.details == {"name": name, "kind": "namespaces"}


async def test_namespace_objects_and_cluster_scoped_resources_pass() -> None:
    lister = FakeLister({})
    plugin = NamespaceLifecycle(lister)
    await plugin.admit(request("CREATE", resource="namespaces", namespace="", name="new",
                               obj=ns("new")))
    await plugin.admit(request("DELETE", resource="namespaces", namespace="", name="team"))
    await plugin.admit(request("CREATE", resource="clusterroles", group="rbac.authorization.k8s.io",
                               namespace="", name="r", obj={"metadata": {"name": "r"}}))
    await plugin.admit(request("CREATE", resource="localsubjectaccessreviews", group="authorization.k8s.io",
                               obj={"metadata": {}}))
    assert lister.live_calls == []


async def test_recently_deleted_namespace_forces_a_live_lookup() -> None:
    lister = FakeLister({"team": ns("team")}, live={"team": ns("team", phase="Terminating")})
    plugin = NamespaceLifecycle(lister)
    await plugin.admit(request("CREATE", obj=configmap()))      # the stale cache says Active
    await plugin.admit(request("DELETE", resource="namespaces", namespace="", name="team"))
    with pytest.raises(Forbidden):
        await plugin.admit(request("CREATE", obj=configmap()))
    assert lister.live_calls == ["team"]


async def test_not_synced_and_live_lookup_failure() -> None:
    with pytest.raises(Forbidden, match="not yet ready to handle request"):
        await NamespaceLifecycle(FakeLister({}, synced=False)).admit(request("CREATE", obj=configmap()))
    lister = FakeLister({})
    lister.live_error = InternalError("boom")
    with pytest.raises(InternalError, match="Internal error occurred: boom"):
        await NamespaceLifecycle(lister).admit(request("CREATE", obj=configmap()))


async def test_servicer_does_not_echo_the_object() -> None:
    """NamespaceLifecycle never mutates: Admit answers no patch, and neither phase sends the object back."""
    servicer = AdmissionServicer(Chain([NamespaceLifecycle(FakeLister({"team": ns("team")}))]), CATALOGUE)
    req = request("CREATE", obj=configmap()).request
    resp = await servicer.Admit(req, None)
    assert resp == adpb.AdmissionResponse(no_validators=True)
    resp = await servicer.Validate(req, None)
    assert resp == adpb.AdmissionResponse()
