from __future__ import annotations

import asyncio
import base64

import orjson
import pytest

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.apis.install import new_catalogue
from services.apiserver import printers
from services.common import errors
from services.registry import watch
from services.registry.bootstrap import bootstrap
from tests.waiting import until

from .conftest import cm, request

CATALOGUE = new_catalogue()


async def test_create_get_list(api, storage):
    code, obj = await api("create", "configmaps", "default", body=cm())
    assert code == 201
    meta = obj["metadata"]
    assert meta["uid"] and meta["resourceVersion"] == "1" and meta["creationTimestamp"].endswith("Z")
    assert "generation" not in meta
    stored = storage.data["/registry/configmaps/default/c"]
    assert stored.fields["metadata.name"] == "c" and stored.fields["metadata.namespace"] == "default"
    assert stored.metadata.resource_version == "1"
    code, got = await api("get", "configmaps", "default", "c")
    assert code == 200 and got == obj
    await api("create", "configmaps", "other", body=cm(ns=""))
    code, lst = await api("list", "configmaps", "default")
    assert lst["kind"] == "ConfigMapList" and lst["apiVersion"] == "v1"
    assert [i["metadata"]["namespace"] for i in lst["items"]] == ["default"]
    assert lst["items"][0]["kind"] == "ConfigMap"
    code, lst = await api("list", "configmaps", "")
    assert len(lst["items"]) == 2 and lst["metadata"]["resourceVersion"] == "2"
    assert "storage" in api.last_timing


async def test_list_prefix_ends_with_slash(api, storage):
    await api("create", "configmaps", "a", body=cm(ns="a"))
    await api("create", "configmaps", "ab", body=cm(ns="ab"))
    _, lst = await api("list", "configmaps", "a")
    assert [i["metadata"]["namespace"] for i in lst["items"]] == ["a"]


async def test_list_limit_and_continue(api):
    for n in "abc":
        await api("create", "configmaps", "default", body=cm(n))
    _, page = await api("list", "configmaps", "default", query={"limit": "2"})
    assert len(page["items"]) == 2 and page["metadata"]["continue"]
    _, rest = await api("list", "configmaps", "default",
                        query={"limit": "2", "continue": page["metadata"]["continue"]})
    assert [i["metadata"]["name"] for i in rest["items"]] == ["c"]


async def test_not_found_message(api):
    with pytest.raises(errors.NotFound) as e:
        await api("get", "configmaps", "default", "nope")
    assert e.value.message == 'configmaps "nope" not found'
    with pytest.raises(errors.NotFound) as e:
        await api("get", "apiservices", "", "v1.nope")
    assert e.value.message == 'apiservices.apiregistration.k8s.io "v1.nope" not found'
    with pytest.raises(errors.NotFound):
        await api("get", "pods", "default", "x")


async def test_already_exists(api):
    await api("create", "configmaps", "default", body=cm())
    with pytest.raises(errors.AlreadyExists) as e:
        await api("create", "configmaps", "default", body=cm())
    assert e.value.message == 'configmaps "c" already exists'


async def test_generate_name_retries(api, storage, monkeypatch):
    from services.apiserver.registry import store as h
    names = iter(["x-aaaaa", "x-aaaaa", "x-bbbbb"])
    monkeypatch.setattr(h, "generate_name", lambda base: next(names))
    body = cm(name="", generateName="x-")
    del body["metadata"]["name"]
    assert (await api("create", "configmaps", "default", body=body))[1]["metadata"]["name"] == "x-aaaaa"
    assert (await api("create", "configmaps", "default", body=body))[1]["metadata"]["name"] == "x-bbbbb"


def test_generate_name_alphabet():
    from services.apiserver.registry.store import NAME_ALPHABET, generate_name
    n = generate_name("a" * 70)
    assert len(n) == 63 and all(c in NAME_ALPHABET for c in n[-5:])


async def test_generate_name_is_validated_as_a_name_prefix(api):
    body = cm(name="", generateName="a" * 300)
    del body["metadata"]["name"]
    with pytest.raises(errors.Invalid) as e:
        await api("create", "configmaps", "default", body=body)
    assert [c["field"] for c in e.value.details["causes"]] == ["metadata.generateName"]
    assert "must be no more than 253 characters" in e.value.message
    body["metadata"]["generateName"] = "a" * 252 + "-"  # the trailing dash of a prefix is allowed
    created = (await api("create", "configmaps", "default", body=body))[1]
    assert len(created["metadata"]["name"]) == 63
    with pytest.raises(errors.Invalid) as e:  # a namespace's name is a label: 63 at most
        await api("create", "namespaces", body={"metadata": {"generateName": "n" * 64}})
    assert "must be no more than 63 characters" in e.value.message


async def test_name_required_and_invalid(api):
    with pytest.raises(errors.Invalid) as e:
        await api("create", "configmaps", "default", body={"metadata": {}})
    assert e.value.message == 'ConfigMap "" is invalid: metadata.name: Required value: name or generateName is required'
    with pytest.raises(errors.Invalid) as e:
        await api("create", "namespaces", body={"metadata": {"name": "a.b"}})
    assert "a lowercase RFC 1123 label" in e.value.message
    assert e.value.details["causes"][0]["field"] == "metadata.name"


async def test_version_kind_checks(api):
    with pytest.raises(errors.BadRequest) as e:
        await api("create", "configmaps", "default", body={**cm(), "apiVersion": "apps/v1"})
    assert e.value.message == "the API version in the data (apps/v1) does not match the expected API version (v1)"
    with pytest.raises(errors.BadRequest) as e:
        await api("create", "configmaps", "default", body={**cm(), "kind": "Secret"})
    assert e.value.code == 400
    with pytest.raises(errors.BadRequest):
        await api("create", "configmaps", "default", body=b"{not json")
    code, obj = await api("create", "configmaps", "default", body={"metadata": {"name": "d"}})
    assert obj["kind"] == "ConfigMap" and obj["apiVersion"] == "v1"


async def test_namespace_mismatch_and_cluster_scope(api):
    with pytest.raises(errors.BadRequest) as e:
        await api("create", "configmaps", "default", body=cm(ns="other"))
    assert e.value.message == "the namespace of the provided object does not match the namespace sent on the request"
    _, ns = await api("create", "namespaces", body={"metadata": {"name": "team", "namespace": "x"}})
    assert "namespace" not in ns["metadata"]
    assert ns["spec"] == {"finalizers": ["kubernetes"]} and ns["status"] == {"phase": "Active"}
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team"}


async def test_field_validation(api):
    body = {**cm(), "spec": {"foo": 1}}
    body["metadata"]["bogus"] = 1
    with pytest.raises(errors.BadRequest) as e:
        await api("create", "configmaps", "default", body=body, query={"fieldValidation": "Strict"})
    assert e.value.message == 'strict decoding error: unknown field "metadata.bogus", unknown field "spec"'
    code, obj = await api("create", "configmaps", "default", body=body)
    assert api.last_warnings == ['unknown field "metadata.bogus"', 'unknown field "spec"']
    assert "spec" not in obj
    with pytest.raises(errors.Invalid):
        await api("create", "configmaps", "default", body=cm("z"), query={"fieldValidation": "Loose"})
    with pytest.raises(errors.BadRequest) as e:
        await api("create", "configmaps", "default", body=cm("y", data={"a": 1}))
    assert e.value.message.startswith('ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot '
                                      'unmarshal number')


async def test_update_cas_and_unconditional(api, storage):
    _, obj = await api("create", "configmaps", "default", body=cm())
    obj["data"] = {"a": "2"}
    code, upd = await api("update", "configmaps", "default", "c", body=obj)
    assert code == 200 and upd["metadata"]["resourceVersion"] == "2"
    assert upd["metadata"]["uid"] == obj["metadata"]["uid"]
    with pytest.raises(errors.Conflict) as e:
        await api("update", "configmaps", "default", "c", body=obj)
    assert e.value.message == ('Operation cannot be fulfilled on configmaps "c": the object has been modified; '
                               'please apply your changes to the latest version and try again')
    del obj["metadata"]["resourceVersion"]
    obj["metadata"]["creationTimestamp"] = "2000-01-01T00:00:00Z"
    storage.fail_updates = 2
    code, upd2 = await api("update", "configmaps", "default", "c", body=obj)
    assert upd2["metadata"]["creationTimestamp"] == upd["metadata"]["creationTimestamp"]
    obj["metadata"]["uid"] = "other"
    with pytest.raises(errors.Conflict) as e:
        await api("update", "configmaps", "default", "c", body=obj)
    assert "Precondition failed: UID in precondition: other" in e.value.message


async def test_a_patch_racing_another_write_is_applied_again_not_refused(api, storage):
    """kube's GuaranteedUpdate re-reads and patches again on a storage conflict (a kopf operator's status
    write racing a client's merge patch met a 409 here); a stale resourceVersion named by the patch or
    the update is still a Conflict (test_patch_types, test_update_cas_and_unconditional)."""
    await api("create", "configmaps", "default", body=cm())
    storage.fail_updates = 2
    code, o = await api("patch", "configmaps", "default", "c", body={"data": {"b": "2"}},
                        content_type="application/merge-patch+json")
    assert code == 200 and o["data"]["b"] == "2"


async def test_update_name_mismatch_and_missing(api):
    await api("create", "configmaps", "default", body=cm())
    with pytest.raises(errors.BadRequest) as e:
        await api("update", "configmaps", "default", "y", body=cm("x"))
    assert e.value.message == "the name of the object (x) does not match the name on the URL (y)"
    with pytest.raises(errors.NotFound):
        await api("update", "configmaps", "default", "x", body=cm("x"))


async def test_noop_update_does_not_write(api, storage):
    _, obj = await api("create", "configmaps", "default", body=cm())
    storage.calls.clear()
    _, same = await api("update", "configmaps", "default", "c", body=obj)
    assert "update" not in storage.calls and same["metadata"]["resourceVersion"] == "1"


async def test_patch_types(api):
    await api("create", "configmaps", "default", body=cm())
    _, o = await api("patch", "configmaps", "default", "c", body={"data": {"b": "2", "a": None}},
                     content_type="application/merge-patch+json")
    assert o["data"] == {"b": "2"}
    _, o = await api("patch", "configmaps", "default", "c", body=[{"op": "add", "path": "/data/c", "value": "3"}],
                     content_type="application/json-patch+json")
    assert o["data"] == {"b": "2", "c": "3"}
    with pytest.raises(errors.Invalid) as e:
        await api("patch", "configmaps", "default", "c", body=[{"op": "test", "path": "/data/c", "value": "9"}],
                  content_type="application/json-patch+json")
    assert e.value.code == 422
    with pytest.raises(errors.BadRequest):
        await api("patch", "configmaps", "default", "c", body=b"[{", content_type="application/json-patch+json")
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u1"}
    _, o = await api("patch", "configmaps", "default", "c", body={"metadata": {"ownerReferences": [ref]}},
                     content_type="application/strategic-merge-patch+json")
    ref2 = dict(ref, uid="u2", name="p")
    _, o = await api("patch", "configmaps", "default", "c", body={"metadata": {"ownerReferences": [ref2]}},
                     content_type="application/strategic-merge-patch+json")
    assert [r["uid"] for r in o["metadata"]["ownerReferences"]] == ["u1", "u2"]
    with pytest.raises(errors.UnsupportedMediaType):
        await api("patch", "configmaps", "default", "c", body={}, content_type="text/plain")
    with pytest.raises(errors.NotFound):
        await api("patch", "configmaps", "default", "zz", body={}, content_type="application/merge-patch+json")
    with pytest.raises(errors.Conflict):
        await api("patch", "configmaps", "default", "c", body={"metadata": {"resourceVersion": "1"}},
                  content_type="application/merge-patch+json")


async def test_apply(api):
    body = cm("ap")
    with pytest.raises(errors.Invalid) as e:
        await api("patch", "configmaps", "default", "ap", body=body, content_type="application/apply-patch+yaml")
    assert "fieldManager: Required value" in e.value.message
    q = {"fieldManager": "kubectl"}
    code, o = await api("patch", "configmaps", "default", "ap", body=body,
                        content_type="application/apply-patch+yaml", query=q)
    assert code == 201
    assert o["metadata"]["managedFields"][0]["manager"] == "kubectl"
    assert o["metadata"]["managedFields"][0]["operation"] == "Apply"
    body["data"] = {"a": "1", "b": "2"}
    code, o = await api("patch", "configmaps", "default", "ap", body=body,
                        content_type="application/apply-patch+yaml", query=q)
    assert code == 200 and o["data"] == {"a": "1", "b": "2"}
    body["metadata"]["resourceVersion"] = "999"
    with pytest.raises(errors.Conflict):
        await api("patch", "configmaps", "default", "ap", body=body,
                  content_type="application/apply-patch+yaml", query=q)


async def test_dry_run_never_writes(api, storage, admission):
    q = {"dryRun": "All"}
    code, o = await api("create", "configmaps", "default", body=cm(), query=q)
    assert code == 201 and o["metadata"]["uid"] and not storage.data
    assert admission.requests[0][1].dry_run
    await api("create", "configmaps", "default", body=cm())
    await api("patch", "configmaps", "default", "c", body={"data": {"x": "y"}},
              content_type="application/merge-patch+json", query=q)
    await api("delete", "configmaps", "default", "c", query=q)
    stored = storage.data["/registry/configmaps/default/c"]
    assert stored.metadata.resource_version == "1"


async def test_admission_flow(api, admission):
    def mutate(req):
        if req.operation != "CREATE":
            return None
        o = pb.Object()
        o.CopyFrom(req.object)
        o.metadata.labels["mutated"] = "yes"
        return o

    admission.mutate = mutate
    _, o = await api("create", "configmaps", "default", body=cm())
    assert o["metadata"]["labels"] == {"mutated": "yes"}
    ops = [(phase, r.operation) for phase, r in admission.requests]
    assert ops == [("admit", "CREATE"), ("validate", "CREATE")]
    req = admission.requests[0][1].attributes
    assert req.user.name == "alice" and req.namespace == "default" and req.resource == "configmaps"
    req = admission.requests[0][1]
    assert orjson.loads(req.options)["kind"] == "CreateOptions"
    assert "admission" in api.last_timing
    admission.deny = errors.forbidden("configmaps", "", "d", "denied by policy")
    with pytest.raises(errors.Forbidden):
        await api("create", "configmaps", "default", body=cm("d"))


async def test_admission_mutation_cannot_skip_validation(api, admission):
    def mutate(req):
        o = pb.Object()
        o.CopyFrom(req.object)
        o.metadata.labels["bad key!"] = "x"
        return o

    admission.mutate = mutate
    with pytest.raises(errors.Invalid):
        await api("create", "configmaps", "default", body=cm())


async def test_delete_plain_and_preconditions(api, storage):
    _, o = await api("create", "configmaps", "default", body=cm())
    with pytest.raises(errors.Conflict) as e:
        await api("delete", "configmaps", "default", "c", body={"preconditions": {"uid": "x"}})
    assert "Precondition failed: UID in precondition: x" in e.value.message
    code, d = await api("delete", "configmaps", "default", "c")
    # kube's Store.finalizeDelete: a Status naming what is gone (details.kind is the resource)
    assert code == 200 and d == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                 "details": {"name": "c", "kind": "configmaps", "uid": o["metadata"]["uid"]}}
    assert not storage.data
    with pytest.raises(errors.Invalid):
        await api("delete", "configmaps", "default", "c", query={"propagationPolicy": "Sometimes"})


async def test_delete_answers_the_object_for_kinds_that_return_it(api, storage):
    """ReturnDeletedObject kinds (serviceaccounts, services, namespaces, resourcequotas in kube) answer
    the deleted object; dry-run answers as the real delete would."""
    await api("create", "serviceaccounts", "default", body={"apiVersion": "v1", "kind": "ServiceAccount",
                                                            "metadata": {"name": "sa"}})
    code, d = await api("delete", "serviceaccounts", "default", "sa", query={"dryRun": "All"})
    assert code == 200 and d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "sa"
    code, d = await api("delete", "serviceaccounts", "default", "sa")
    assert code == 200 and d["kind"] == "ServiceAccount" and not storage.data
    await api("create", "configmaps", "default", body=cm())
    code, d = await api("delete", "configmaps", "default", "c", query={"dryRun": "All"})
    assert code == 200 and d["kind"] == "Status" and d["details"]["name"] == "c" and storage.data


async def test_delete_with_finalizers(api, storage):
    await api("create", "configmaps", "default", body=cm(finalizers=["example.com/keep"]))
    code, d = await api("delete", "configmaps", "default", "c")
    assert code == 200 and d["metadata"]["deletionTimestamp"]
    assert d["metadata"]["deletionGracePeriodSeconds"] == 0
    assert "/registry/configmaps/default/c" in storage.data
    _, o = await api("patch", "configmaps", "default", "c", body={"metadata": {"finalizers": None}},
                     content_type="application/merge-patch+json")
    assert "/registry/configmaps/default/c" not in storage.data


@pytest.mark.parametrize("policy,finalizer", [("Foreground", "foregroundDeletion"), ("Orphan", "orphan")])
async def test_delete_propagation_sets_the_garbage_collectors_finalizer(api, storage, policy, finalizer):
    await api("create", "configmaps", "default", body=cm(finalizers=["example.com/keep"]))
    code, d = await api("delete", "configmaps", "default", "c", query={"propagationPolicy": policy})
    assert code == 200 and d["metadata"]["deletionTimestamp"]
    assert d["metadata"]["finalizers"] == ["example.com/keep", finalizer]
    # deleted again with the other policy: the garbage collector's finalizer is swapped, as kube's store does
    other = "Orphan" if policy == "Foreground" else "Foreground"
    _, d = await api("delete", "configmaps", "default", "c", query={"propagationPolicy": other})
    assert d["metadata"]["finalizers"] == ["example.com/keep",
                                           "orphan" if finalizer == "foregroundDeletion" else "foregroundDeletion"]
    # Background takes both away: only the object's own finalizer holds it
    _, d = await api("delete", "configmaps", "default", "c", query={"propagationPolicy": "Background"})
    assert d["metadata"]["finalizers"] == ["example.com/keep"]


async def test_delete_orphan_without_finalizers_keeps_the_object_for_the_collector(api, storage):
    await api("create", "configmaps", "default", body=cm())
    _, d = await api("delete", "configmaps", "default", "c", body={"orphanDependents": True})
    assert d["metadata"]["finalizers"] == ["orphan"] and "/registry/configmaps/default/c" in storage.data
    code, d = await api("delete", "configmaps", "default", "c", query={"propagationPolicy": "Background"})
    assert code == 200 and "/registry/configmaps/default/c" not in storage.data


async def test_deletecollection_honours_propagation(api, storage):
    await api("create", "configmaps", "default", body=cm("a"))
    await api("create", "configmaps", "default", body=cm("b"))
    _, lst = await api("deletecollection", "configmaps", "default", query={"propagationPolicy": "Foreground"})
    assert [i["metadata"]["finalizers"] for i in lst["items"]] == [["foregroundDeletion"], ["foregroundDeletion"]]
    assert len(storage.data) == 2


async def test_deletecollection(api, storage):
    await api("create", "configmaps", "default", body=cm("a", labels={"x": "1"}))
    await api("create", "configmaps", "default", body=cm("b"))
    code, lst = await api("deletecollection", "configmaps", "default", query={"labelSelector": "x=1"})
    assert [i["metadata"]["name"] for i in lst["items"]] == ["a"]
    assert list(storage.data) == ["/registry/configmaps/default/b"]
    with pytest.raises(errors.MethodNotAllowed):
        await api("deletecollection", "namespaces")


async def test_secret_strategy(api, storage):
    code, s = await api("create", "secrets", "default",
                        body={"metadata": {"name": "s"}, "stringData": {"u": "admin"}, "data": {"p": "cGFzcw=="}})
    assert s["type"] == "Opaque" and s["data"] == {"p": "cGFzcw==", "u": base64.b64encode(b"admin").decode()}
    assert "stringData" not in s
    assert storage.data["/registry/secrets/default/s"].fields["type"] == "Opaque"
    with pytest.raises(errors.BadRequest) as e:
        await api("create", "secrets", "default", body={"metadata": {"name": "t"}, "data": {"p": "not base64!"}})
    assert "illegal base64 data at input byte 3" in e.value.message
    s["type"] = "kubernetes.io/tls"
    with pytest.raises(errors.Invalid) as e:
        await api("update", "secrets", "default", "s", body=s)
    assert 'type: Invalid value: "kubernetes.io/tls": field is immutable' in e.value.message


async def test_immutable_configmap(api):
    _, o = await api("create", "configmaps", "default", body={**cm(), "immutable": True})
    o["data"] = {"a": "2"}
    with pytest.raises(errors.Invalid) as e:
        await api("update", "configmaps", "default", "c", body=o)
    assert "data: Forbidden: field is immutable when `immutable` is set" in e.value.message
    o["data"] = {"a": "1"}
    o["metadata"]["labels"] = {"ok": "yes"}
    code, _ = await api("update", "configmaps", "default", "c", body=o)
    assert code == 200


async def test_namespace_status_preserved_and_subresources(api):
    await api("create", "namespaces", body={"metadata": {"name": "n"}})
    _, o = await api("get", "namespaces", "", "n")
    o["status"] = {"phase": "Terminating"}
    o["spec"] = {"finalizers": []}
    _, u = await api("update", "namespaces", "", "n", body=o)
    assert u["status"] == {"phase": "Active"} and u["spec"] == {"finalizers": ["kubernetes"]}
    _, u = await api("update", "namespaces", "", "n", body=o, subresource="finalize")
    assert u["spec"] == {"finalizers": []} and u["status"] == {"phase": "Active"}
    with pytest.raises(errors.MethodNotAllowed):
        await api("patch", "namespaces", "", "n", body={}, subresource="finalize",
                  content_type="application/merge-patch+json")
    with pytest.raises(errors.NotFound):
        await api("get", "namespaces", "", "n", subresource="bogus")


async def test_namespace_delete_and_finalizer(api, storage, handlers):
    await api("create", "namespaces", body={"metadata": {"name": "doomed"}})
    await api("create", "configmaps", "doomed", body=cm(ns="doomed"))
    await api("create", "secrets", "doomed", body={"metadata": {"name": "s"}})
    await api("create", "configmaps", "kept", body=cm(ns="kept"))
    code, ns = await api("delete", "namespaces", "", "doomed")
    assert code == 200 and ns["status"]["phase"] == "Terminating" and ns["metadata"]["deletionTimestamp"]
    assert storage.data["/registry/namespaces/doomed"].fields["status.phase"] == "Terminating"
    with pytest.raises(errors.Conflict) as e:
        await api("delete", "namespaces", "", "doomed")
    assert "The system is ensuring all content is removed from this namespace" in e.value.message
    # the namespace controller (services/controllermanager) empties it, then finalizes it: the last
    # finalizer gone, the namespace goes
    _, ns = await api("get", "namespaces", "", "doomed")
    ns["spec"]["finalizers"] = []
    await api("update", "namespaces", "", "doomed", body=ns, subresource="finalize")
    assert "/registry/namespaces/doomed" not in storage.data


async def test_apiservice(api):
    body = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1.example.com"},
            "spec": {"group": "example.com", "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10,
                     "service": {"namespace": "ns", "name": "svc"}}}
    _, o = await api("create", "apiservices", body=body)
    assert o["spec"]["service"]["port"] == 443 and o["status"] == {}
    bad = orjson.loads(orjson.dumps(body))
    bad["metadata"]["name"] = "v2.example.com"
    bad["spec"]["groupPriorityMinimum"] = 0
    with pytest.raises(errors.Invalid) as e:
        await api("create", "apiservices", body=bad)
    fields = [c["field"] for c in e.value.details["causes"]]
    assert fields == ["metadata.name", "spec.groupPriorityMinimum"]
    o["status"] = {"conditions": [{"type": "Available", "status": "False", "reason": "FailedDiscoveryCheck"}]}
    _, u = await api("update", "apiservices", "", "v1.example.com", body=o)
    assert u["status"] == {}
    _, u = await api("update", "apiservices", "", "v1.example.com", body=o, subresource="status")
    assert u["status"]["conditions"][0]["reason"] == "FailedDiscoveryCheck"
    _, t = await api("get", "apiservices", "", "v1.example.com", table=True)
    assert t["rows"][0]["cells"][1:3] == ["ns/svc", "False (FailedDiscoveryCheck)"]


async def test_bootstrap_again_only_lists(handlers, storage):
    """A restarted registry finds its bootstrap objects stored: it lists them and creates nothing (its
    readiness waits on this), and recreates one that was deleted."""
    await bootstrap(handlers, handlers.catalogue)
    created = storage.calls.count("create")
    assert created > 40
    storage.calls.clear()
    await bootstrap(handlers, handlers.catalogue)
    # one LIST per resource; the ServiceCIDR's status read (already Ready: not written)
    assert sorted(storage.calls) == ["get"] + ["list"] * 6
    del storage.data["/registry/namespaces/kube-public"]
    storage.calls.clear()
    await bootstrap(handlers, handlers.catalogue)
    assert storage.calls.count("create") == 1
    assert "/registry/namespaces/kube-public" in storage.data


async def test_bootstrap_idempotent(handlers, storage, api):
    await bootstrap(handlers, handlers.catalogue)
    await bootstrap(handlers, handlers.catalogue)
    assert "/registry/namespaces/kube-system" in storage.data
    # API Priority and Fairness' bootstrap configuration, levels and schemas, marked for auto-update
    _, fs = await api("get", "flowschemas", "", "global-default", group="flowcontrol.apiserver.k8s.io")
    assert fs["spec"]["priorityLevelConfiguration"] == {"name": "global-default"}
    assert fs["metadata"]["annotations"] == {"apf.kubernetes.io/autoupdate-spec": "true"}
    _, levels = await api("list", "prioritylevelconfigurations", group="flowcontrol.apiserver.k8s.io")
    assert {o["metadata"]["name"] for o in levels["items"]} >= {"exempt", "catch-all", "workload-low"}
    _, svc = await api("get", "apiservices", "", "v1.")
    assert svc["spec"] == {"group": "", "version": "v1", "groupPriorityMinimum": 18000, "versionPriority": 1}
    cond = svc["status"]["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Available", "True", "Local")
    _, t = await api("list", "apiservices", table=True)
    assert [r["cells"][:3] for r in t["rows"]] == [["v1.", "Local", "True"],
                                                  ["v1.admissionregistration.k8s.io", "Local", "True"],
                                                  ["v1.apiextensions.k8s.io", "Local", "True"],
                                                  ["v1.apiregistration.k8s.io", "Local", "True"],
                                                  ["v1.apps", "Local", "True"],
                                                  ["v1.authentication.k8s.io", "Local", "True"],
                                                  ["v1.authorization.k8s.io", "Local", "True"],
                                                  ["v1.autoscaling", "Local", "True"],
                                                  ["v1.batch", "Local", "True"],
                                                  ["v1.certificates.k8s.io", "Local", "True"],
                                                  ["v1.coordination.k8s.io", "Local", "True"],
                                                  ["v1.discovery.k8s.io", "Local", "True"],
                                                  ["v1.events.k8s.io", "Local", "True"],
                                                  ["v1.flowcontrol.apiserver.k8s.io", "Local", "True"],
                                                  ["v1.networking.k8s.io", "Local", "True"],
                                                  ["v1.node.k8s.io", "Local", "True"],
                                                  ["v1.policy", "Local", "True"],
                                                  ["v1.rbac.authorization.k8s.io", "Local", "True"],
                                                  ["v1.scheduling.k8s.io", "Local", "True"],
                                                  ["v1.storage.k8s.io", "Local", "True"],
                                                  ["v1alpha1.admissionregistration.k8s.io", "Local", "True"],
                                                  ["v1beta1.admissionregistration.k8s.io", "Local", "True"],
                                                  ["v2.autoscaling", "Local", "True"]]


async def test_table_list(api):
    await api("create", "configmaps", "default", body=cm())
    _, t = await api("list", "configmaps", "default", table=True)
    assert t["kind"] == "Table" and t["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert t["columnDefinitions"][0]["format"] == "name"
    row = t["rows"][0]
    assert row["cells"][:2] == ["c", 1] and row["object"]["kind"] == "PartialObjectMetadata"
    _, t = await api("list", "configmaps", "default", table=True, query={"includeObject": "None"})
    assert "object" not in t["rows"][0]


def watching(storage, resource: str) -> bool:
    """A watch of resource is open on the fake storage (an event written now reaches it)."""
    return any(prefix.startswith(f"/registry/{resource}/") for prefix, _ in storage.watchers)


async def test_watch_frames(handlers, api, storage):
    req = request("watch", "configmaps", "default", query={"resourceVersion": "5"})
    got: list[dict] = []

    async def consume():
        async for f in watch.frames(handlers, req):
            got.append(orjson.loads(f))
            if len(got) == 2:
                return

    task = asyncio.create_task(consume())
    await until(lambda: watching(storage, "configmaps"), what="the watch open on storage")
    _, o = await api("create", "configmaps", "default", body=cm())
    await api("delete", "configmaps", "default", "c")
    await asyncio.wait_for(task, 1)
    assert [e["type"] for e in got] == ["ADDED", "DELETED"]
    assert got[0]["object"] == o


async def test_watch_error_and_table(handlers, api, storage):
    frames = [orjson.loads(f) async for f in watch.frames(
        handlers, request("watch", "configmaps", "default", query={"resourceVersion": "1"}))]
    assert frames == [{"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                   "status": "Failure", "message": "too old resource version: 1",
                                                   "reason": "Gone", "code": 410}}]
    req = request("watch", "configmaps", "default", table=True)
    it = watch.frames(handlers, req)
    nxt = asyncio.create_task(it.__anext__())
    await until(lambda: watching(storage, "configmaps"), what="the watch open on storage")
    await api("create", "configmaps", "default", body=cm())
    ev = orjson.loads(await asyncio.wait_for(nxt, 1))
    assert ev["object"]["kind"] == "Table" and len(ev["object"]["rows"]) == 1
    await it.aclose()


async def test_list_in_parts_is_the_same_list(api, handlers, storage):
    """APIRequest.chunked (the proxy's JSON lists): the first part carries the list's metadata, the
    items follow as storage sends them; together, byte for byte the list in one piece."""
    for n in ("a", "b", "c"):
        await api("create", "configmaps", "default", body=cm(n))
    whole, _ = await handlers.handle(request("list", "configmaps", "default"))
    req = request("list", "configmaps", "default")
    req.chunked = True
    first, _ = await handlers.handle(req)
    assert first.more is not None
    rest = [p async for p in first.more]
    assert len(rest) == 4  # the items as storage sent them, then the end of the list
    assert first.body.endswith(b'"items":[') and rest[0][:1] == b"{" and all(p[:1] == b"," for p in rest[1:3])
    assert first.body + b"".join(rest) == whole.body
    assert [i["metadata"]["name"] for i in orjson.loads(whole.body)["items"]] == ["a", "b", "c"]
    # an empty list in parts
    req = request("list", "configmaps", "other")
    req.chunked = True
    empty, _ = await handlers.handle(req)
    assert orjson.loads(empty.body + b"".join([p async for p in empty.more]))["items"] == []


@pytest.mark.parametrize("include", ["", "None", "Object"])
async def test_table_in_parts_is_the_same_table(api, handlers, storage, include):
    """A Table asked for in parts is made of storage's parts as they come, a part's rows at a time;
    together, byte for byte the Table of the decoded objects (printers.table)."""
    for n in ("a", "b", "c"):
        await api("create", "configmaps", "default", body=cm(n, labels={"x": n}))
    query = {"includeObject": include} if include else {}
    req = request("list", "configmaps", "default", table=True, query=query)
    req.chunked = True
    first, _ = await handlers.handle(req)
    assert first.more is not None
    rest = [p async for p in first.more]
    assert len(rest) == 4  # the rows of each of storage's parts, then the end of the Table
    whole, _ = await handlers.handle(request("list", "configmaps", "default", table=True, query=query))
    assert first.body + b"".join(rest) == whole.body
    listed = await storage.List(spb.ListRequest(prefix="/registry/configmaps/default/"))
    items = [CATALOGUE.lookup("", "v1", "configmaps").served(e) for e in listed.items]
    expected = printers.table(CATALOGUE.convertor("", "configmaps"), items,
                              {"resourceVersion": listed.resource_version}, include or "Metadata")
    assert orjson.loads(whole.body) == expected
    assert [r["cells"][0] for r in expected["rows"]] == ["a", "b", "c"]


async def test_duplicate_fields_per_field_validation(api):
    body = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","name":"b"},"data":{"k":"1"},"bogus":1}'
    with pytest.raises(errors.BadRequest) as e:
        await api("create", "configmaps", "default", body=body, query={"fieldValidation": "Strict"})
    assert e.value.message == 'strict decoding error: duplicate field "metadata.name", unknown field "bogus"'
    code, obj = await api("create", "configmaps", "default", body=body)
    assert code == 201 and obj["metadata"]["name"] == "b"  # the last one wins, as in Go
    assert api.last_warnings == ['duplicate field "metadata.name"', 'unknown field "bogus"']
    await api("create", "configmaps", "default", body=body.replace(b'"b"', b'"c"'),
              query={"fieldValidation": "Ignore"})
    assert api.last_warnings == []


@pytest.mark.parametrize("limit, message", [
    ("9999999999999999999999999999999999999999", 'strconv.ParseInt: parsing "9999999999999999999999999999999999999999": '
                                                 "value out of range"),
    ("abc", 'strconv.ParseInt: parsing "abc": invalid syntax'),
    ("1_000", 'strconv.ParseInt: parsing "1_000": invalid syntax'),
])
async def test_limit_is_parsed_as_kube_does(api, limit, message):
    with pytest.raises(errors.BadRequest) as e:
        await api("list", "configmaps", "default", query={"limit": limit})
    assert e.value.message == message


@pytest.mark.parametrize("patch, message", [
    ({"$setElementOrder/data": 5}, "invalid patch format of setElementOrder list"),
    ({"metadata": {"$retainKeys": 5}}, "invalid patch format of retainKeys"),
    ({"data": {"$retainKeys": ["a"], "b": "2"}}, "invalid patch format of retainKeys"),
    ({"$deleteFromPrimitiveList/finalizers": "x"}, "invalid patch format of primitive list"),
])
async def test_strategic_merge_directives_are_checked(api, patch, message):
    await api("create", "configmaps", "default", body=cm())
    with pytest.raises(errors.BadRequest) as e:
        await api("patch", "configmaps", "default", "c", body=patch,
                  content_type="application/strategic-merge-patch+json")
    assert e.value.message == message


async def test_deep_patches_are_refused(api):
    await api("create", "configmaps", "default", body=cm())
    deep = b'{"data":' + b'{"a":' * 300 + b"1" + b"}" * 301
    for ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        with pytest.raises(errors.BadRequest) as e:
            await api("patch", "configmaps", "default", "c", body=deep, content_type=ctype)
        assert e.value.message == "error decoding patch: exceeded max depth of 200"


async def test_misrouted_verbs_are_405(api):
    """kube's routes: POST only on a collection, PUT and PATCH only on an object."""
    await api("create", "configmaps", "default", body=cm())
    with pytest.raises(errors.MethodNotAllowed):
        await api("create", "configmaps", "default", "c", body=cm())
    with pytest.raises(errors.MethodNotAllowed):
        await api("update", "configmaps", "default", body=cm())
    with pytest.raises(errors.MethodNotAllowed):
        await api("patch", "configmaps", "default", body={}, content_type="application/merge-patch+json")


async def test_lease_validation_and_table(api):
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
             "spec": {"holderIdentity": "me", "leaseDurationSeconds": 0, "leaseTransitions": -1}}
    with pytest.raises(errors.Invalid) as e:
        await api("create", "leases", "default", body=lease)
    assert [c["field"] for c in e.value.details["causes"]] == ["spec.leaseDurationSeconds", "spec.leaseTransitions"]
    lease["spec"].update(leaseDurationSeconds=15, leaseTransitions=0)
    code, _ = await api("create", "leases", "default", body=lease)
    assert code == 201
    _, t = await api("list", "leases", "default", table=True)
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Holder", "Age"]
    assert t["rows"][0]["cells"][:2] == ["l", "me"]
