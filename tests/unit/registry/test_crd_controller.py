"""The registry's CRD controller over the handlers: names accepted, Established, the custom resource served
(pruned, defaulted, validated against its schema) with its APIService, a name conflict, and deletion
(objects first, then the CRD, then the resource leaves the catalogue)."""
from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable

import orjson
import pytest

from services.apis.install import new_catalogue
from services.common import errors, identity
from services.registry.admission import AdmissionClient
from services.registry.auth import AuthClient
from services.registry.crd import CRDController
from services.registry.rest import new_handlers
from services.registry.storage_client import StorageClient

from .conftest import Client
from .fakes import FakeAdmission, FakeAuth, FakeStorage
from .test_crd_validation import CRONTAB

ADMIN = identity.user_pb("admin", ["system:masters"])
G = "apiextensions.k8s.io"
CT = "stable.example.com"


@pytest.fixture
async def env() -> AsyncIterator[tuple[Client, CRDController]]:
    handlers = new_handlers(new_catalogue(), StorageClient(FakeStorage()),  # type: ignore[arg-type]
                            AdmissionClient(FakeAdmission()), AuthClient(FakeAuth()))  # type: ignore[arg-type]
    controller = CRDController(handlers)
    task = asyncio.create_task(controller.run())
    yield Client(handlers), controller
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def eventually(check: Callable[[], object], timeout: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            if await check():  # type: ignore[misc]
                return
        except errors.APIError:
            pass
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def conditions(crd: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in crd["status"].get("conditions") or []}


def schema_crd() -> dict:
    body = copy.deepcopy(CRONTAB)
    body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].update({
        "replicas": {"type": "integer", "minimum": 1, "default": 1}, "image": {"type": "string"}})
    body["spec"]["versions"][0]["subresources"] = {"status": {}, "scale": {
        "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.labelSelector"}}
    body["spec"]["versions"][0]["additionalPrinterColumns"] = [
        {"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"},
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] = {
        "type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return body


async def test_established_and_served(env):
    api, controller = env
    await api("create", "customresourcedefinitions", body=schema_crd(), group=G, user=ADMIN)

    async def established() -> bool:
        _, got = await api("get", "customresourcedefinitions", "", "crontabs.stable.example.com", group=G, user=ADMIN)
        return conditions(got).get("Established") == ("True", "InitialNamesAccepted")
    await eventually(established)
    _, got = await api("get", "customresourcedefinitions", "", "crontabs.stable.example.com", group=G, user=ADMIN)
    assert conditions(got)["NamesAccepted"] == ("True", "NoConflicts")
    assert got["status"]["acceptedNames"] == {"plural": "crontabs", "singular": "crontab", "kind": "CronTab",
                                              "listKind": "CronTabList", "shortNames": ["ct"]}
    info = controller.catalogue.lookup(CT, "v1", "crontabs")
    assert info is not None and info.namespaced and info.short_names == ("ct",)
    _, apiservice = await api("get", "apiservices", "", "v1.stable.example.com", group="apiregistration.k8s.io",
                              user=ADMIN)
    assert apiservice["spec"]["groupPriorityMinimum"] == 1000
    assert apiservice["status"]["conditions"][0]["reason"] == "Local"

    body = {"apiVersion": f"{CT}/v1", "kind": "CronTab", "metadata": {"name": "c", "namespace": "default"},
            "spec": {"cronSpec": "* * * * */5", "image": "img", "unknown": 1}, "status": {"x": 1}}
    code, obj = await api("create", "crontabs", "default", body=body, group=CT, user=ADMIN)
    assert code == 201
    assert obj["spec"] == {"cronSpec": "* * * * */5", "image": "img", "replicas": 1}
    assert "status" not in obj and obj["metadata"]["generation"] == 1
    assert api.last_warnings == ['unknown field "spec.unknown"']
    _, table = await api("list", "crontabs", "default", group=CT, user=ADMIN, table=True)
    assert [(c["name"], c["type"], c["priority"]) for c in table["columnDefinitions"]] == [
        ("Name", "string", 0), ("Spec", "string", 0), ("Replicas", "integer", 1), ("Age", "date", 0)]
    assert table["rows"][0]["cells"] == ["c", "* * * * */5", 1, obj["metadata"]["creationTimestamp"]]
    bad = copy.deepcopy(body)
    bad["metadata"]["name"], bad["spec"]["replicas"] = "d", 0
    with pytest.raises(errors.Invalid) as e:
        await api("create", "crontabs", "default", body=bad, group=CT, user=ADMIN)
    assert e.value.message == ('CronTab.stable.example.com "d" is invalid: spec.replicas: Invalid value: 0: '
                               'spec.replicas in body should be greater than or equal to 1')
    # server-side apply, a spec change (generation moves) and /status (it does not)
    applied = {"apiVersion": f"{CT}/v1", "kind": "CronTab", "metadata": {"name": "c", "namespace": "default"},
               "spec": {"cronSpec": "* * * * */5", "image": "img2"}}
    code, obj = await api("patch", "crontabs", "default", "c", body=orjson.dumps(applied), group=CT, user=ADMIN,
                          content_type="application/apply-patch+yaml", query={"fieldManager": "me"})
    assert code == 200 and obj["spec"]["image"] == "img2" and obj["metadata"]["generation"] == 2
    assert obj["metadata"]["managedFields"][-1]["fieldsV1"] == {"f:spec": {"f:cronSpec": {}, "f:image": {}}}
    code, obj = await api("update", "crontabs", "default", "c", body={**obj, "status": {"ready": True}}, group=CT,
                          user=ADMIN, subresource="status")
    assert obj["status"] == {"ready": True} and obj["metadata"]["generation"] == 2
    # /scale through the definition's paths
    await api("update", "crontabs", "default", "c", group=CT, user=ADMIN, subresource="status",
              body={**obj, "status": {"replicas": 2, "labelSelector": "app=c"}})
    _, scale = await api("get", "crontabs", "default", "c", group=CT, user=ADMIN, subresource="scale")
    assert (scale["kind"], scale["spec"], scale["status"]) == ("Scale", {"replicas": 1},
                                                              {"replicas": 2, "selector": "app=c"})
    code, scale = await api("patch", "crontabs", "default", "c", body={"spec": {"replicas": 5}}, group=CT,
                            user=ADMIN, subresource="scale", content_type="application/merge-patch+json")
    assert code == 200 and scale["spec"]["replicas"] == 5
    _, got = await api("get", "crontabs", "default", "c", group=CT, user=ADMIN)
    assert got["spec"]["replicas"] == 5 and got["metadata"]["generation"] == 3
    with pytest.raises(errors.UnsupportedMediaType):
        await api("patch", "crontabs", "default", "c", body={"spec": {}}, group=CT, user=ADMIN,
                  content_type="application/strategic-merge-patch+json")

    code, deleting = await api("delete", "customresourcedefinitions", "", "crontabs.stable.example.com", group=G,
                               user=ADMIN)
    assert code == 200 and deleting["metadata"]["deletionTimestamp"]

    async def gone() -> bool:
        return controller.catalogue.lookup(CT, "v1", "crontabs") is None and \
            not (await api("list", "customresourcedefinitions", group=G, user=ADMIN))[1]["items"]
    await eventually(gone)
    with pytest.raises(errors.NotFound):
        await api("get", "apiservices", "", "v1.stable.example.com", group="apiregistration.k8s.io", user=ADMIN)


async def test_second_crd_with_taken_names_is_not_accepted(env):
    api, controller = env
    await api("create", "customresourcedefinitions", body=copy.deepcopy(CRONTAB), group=G, user=ADMIN)
    other = copy.deepcopy(CRONTAB)
    other["metadata"]["name"] = "crontabz.stable.example.com"
    other["spec"]["names"] = {"plural": "crontabz", "singular": "crontabz", "kind": "CronTab"}
    await api("create", "customresourcedefinitions", body=other, group=G, user=ADMIN)

    async def refused() -> bool:
        _, got = await api("get", "customresourcedefinitions", "", "crontabz.stable.example.com", group=G,
                           user=ADMIN)
        return conditions(got).get("NamesAccepted") == ("False", "ListKindConflict")
    await eventually(refused)
    _, got = await api("get", "customresourcedefinitions", "", "crontabz.stable.example.com", group=G, user=ADMIN)
    assert conditions(got)["Established"] == ("False", "NotAccepted")
    assert got["status"]["acceptedNames"] == {"plural": "crontabz", "singular": "crontabz", "kind": ""}
    assert next(c["message"] for c in got["status"]["conditions"]) == '"CronTabList" is already in use'
    assert controller.catalogue.lookup(CT, "v1", "crontabz") is None


async def test_two_replicas_agree():
    """Two registry replicas over one storage: both serve the resource, the status is written once and stays."""
    storage = FakeStorage()
    replicas = [new_handlers(new_catalogue(), StorageClient(storage),  # type: ignore[arg-type]
                             AdmissionClient(FakeAdmission()), AuthClient(FakeAuth()))  # type: ignore[arg-type]
                for _ in range(2)]
    controllers = [CRDController(h) for h in replicas]
    tasks = [asyncio.create_task(c.run()) for c in controllers]
    try:
        api = Client(replicas[0])
        await api("create", "customresourcedefinitions", body=copy.deepcopy(CRONTAB), group=G, user=ADMIN)

        async def established_and_served() -> bool:
            _, got = await api("get", "customresourcedefinitions", "", "crontabs.stable.example.com", group=G,
                               user=ADMIN)
            return conditions(got).get("Established") == ("True", "InitialNamesAccepted") and \
                all(c.catalogue.lookup(CT, "v1", "crontabs") is not None for c in controllers)
        await eventually(established_and_served)
        _, first = await api("get", "customresourcedefinitions", "", "crontabs.stable.example.com", group=G,
                             user=ADMIN)
        await asyncio.sleep(0.2)
        _, later = await api("get", "customresourcedefinitions", "", "crontabs.stable.example.com", group=G,
                             user=ADMIN)
        assert later["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        code, _ = await Client(replicas[1])("create", "crontabs", "default", group=CT, user=ADMIN, body={
            "apiVersion": f"{CT}/v1", "kind": "CronTab", "metadata": {"name": "x"}, "spec": {"cronSpec": "* * * * *"}})
        assert code == 201
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_two_versions_over_one_storage(env):
    api, controller = env
    body = copy.deepcopy(CRONTAB)
    v1 = body["spec"]["versions"][0]
    body["spec"]["versions"] = [{**copy.deepcopy(v1), "name": "v1beta1", "storage": False, "deprecated": True}, v1]
    await api("create", "customresourcedefinitions", body=body, group=G, user=ADMIN)

    async def served() -> bool:
        return controller.catalogue.lookup(CT, "v1beta1", "crontabs") is not None
    await eventually(served)
    code, created = await api("create", "crontabs", "default", group=CT, version="v1beta1", user=ADMIN, body={
        "apiVersion": f"{CT}/v1beta1", "kind": "CronTab", "metadata": {"name": "old"}, "spec": {"replicas": 2}})
    assert code == 201 and created["apiVersion"] == f"{CT}/v1beta1"
    assert api.last_warnings == [f"{CT}/v1beta1 CronTab is deprecated"]
    _, got = await api("get", "crontabs", "default", "old", group=CT, user=ADMIN)
    assert got["apiVersion"] == f"{CT}/v1" and got["spec"] == {"replicas": 2}
    _, listed = await api("list", "crontabs", "default", group=CT, version="v1beta1", user=ADMIN)
    assert [i["apiVersion"] for i in listed["items"]] == [f"{CT}/v1beta1"]
