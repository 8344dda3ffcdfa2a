"""The machinery of writes as kube's handlers and Store answer them: apply through the handlers, dry-run,
create rules, finalizers and deletion options, list options."""
from __future__ import annotations

import orjson
import pytest

from services.common import errors
from services.registry import watch

from .conftest import cm, request

APPLY = "application/apply-patch+yaml"


async def test_apply_conflict_force_and_removal_through_the_handlers(api):
    q1, q2 = {"fieldManager": "one"}, {"fieldManager": "two"}
    code, _ = await api("patch", "configmaps", "default", "c", body=cm(data={"a": "1", "b": "2"}),
                        content_type=APPLY, query=q1)
    assert code == 201
    with pytest.raises(errors.Conflict) as e:
        await api("patch", "configmaps", "default", "c", body=cm(data={"a": "9"}), content_type=APPLY, query=q2)
    assert e.value.message == 'Apply failed with 1 conflict: conflict with "one": .data.a'
    _, o = await api("patch", "configmaps", "default", "c", body=cm(data={"a": "9"}), content_type=APPLY,
                     query={**q2, "force": "true"})
    assert o["data"] == {"a": "9", "b": "2"}
    _, o = await api("patch", "configmaps", "default", "c", body=cm(data={"a": "9"}), content_type=APPLY, query=q1)
    assert o["data"] == {"a": "9"}          # one stopped applying b, and nobody else owns it
    rv = o["metadata"]["resourceVersion"]
    _, again = await api("patch", "configmaps", "default", "c", body=cm(data={"a": "9"}), content_type=APPLY,
                         query=q1)
    assert again["metadata"]["resourceVersion"] == rv   # idempotent: nothing written


async def test_apply_dry_run_and_managed_fields_in_config(api, storage):
    await api("patch", "configmaps", "default", "c", body=cm(), content_type=APPLY,
              query={"fieldManager": "m", "dryRun": "All"})
    assert not storage.data
    with pytest.raises(errors.BadRequest):
        await api("patch", "configmaps", "default", "c", body=cm(managedFields=[{"manager": "x"}]),
                  content_type=APPLY, query={"fieldManager": "m"})


async def test_dry_run_create_of_a_taken_name_is_409(api, storage):
    await api("create", "configmaps", "default", body=cm())
    with pytest.raises(errors.AlreadyExists):
        await api("create", "configmaps", "default", body=cm(), query={"dryRun": "All"})
    _, o = await api("patch", "configmaps", "default", "c", body={"data": {"x": "y"}},
                     content_type="application/merge-patch+json", query={"dryRun": "All"})
    assert o["data"]["x"] == "y" and o["metadata"]["resourceVersion"] == "1"
    assert storage.data["/registry/configmaps/default/c"].metadata.resource_version == "1"


async def test_create_with_resource_version_is_refused(api, storage):
    with pytest.raises(errors.APIError) as e:
        await api("create", "configmaps", "default", body=cm(resourceVersion="5"))
    assert e.value.code == 400 and e.value.message == "resourceVersion should not be set on objects to be created"
    assert not storage.data


async def test_finalizers_keep_the_object_and_none_can_be_added(api, storage):
    await api("create", "configmaps", "default", body=cm(finalizers=["example.com/x"]))
    _, o = await api("delete", "configmaps", "default", "c", query={"gracePeriodSeconds": "30"})
    assert o["metadata"]["deletionTimestamp"] and o["metadata"]["deletionGracePeriodSeconds"] == 0
    with pytest.raises(errors.Invalid) as e:
        await api("patch", "configmaps", "default", "c",
                  body={"metadata": {"finalizers": ["example.com/x", "example.com/y"]}},
                  content_type="application/merge-patch+json")
    assert e.value.message == ('ConfigMap "c" is invalid: metadata.finalizers: Forbidden: no new finalizers can be '
                               'added if the object is being deleted, found new finalizers []string{"example.com/y"}')
    _, o = await api("get", "configmaps", "default", "c")
    assert o["metadata"]["finalizers"] == ["example.com/x"]
    await api("patch", "configmaps", "default", "c", body={"metadata": {"finalizers": None}},
              content_type="application/merge-patch+json")
    assert "/registry/configmaps/default/c" not in storage.data


async def test_delete_preconditions_and_policy(api):
    _, o = await api("create", "configmaps", "default", body=cm())
    with pytest.raises(errors.Conflict) as e:
        await api("delete", "configmaps", "default", "c", body={"preconditions": {"uid": "nope"}})
    assert "Precondition failed: UID in precondition: nope" in e.value.message
    with pytest.raises(errors.Invalid):
        await api("delete", "configmaps", "default", "c", query={"propagationPolicy": "Sideways"})
    await api("delete", "configmaps", "default", "c",
              body={"propagationPolicy": "Foreground", "preconditions": {"uid": o["metadata"]["uid"]}})


async def test_deletecollection_with_selectors(api, storage):
    await api("create", "configmaps", "default", body=cm("a", labels={"app": "x"}))
    await api("create", "configmaps", "default", body=cm("b", labels={"app": "y"}))
    await api("create", "configmaps", "default", body=cm("c", labels={"app": "x"}))
    _, out = await api("deletecollection", "configmaps", "default",
                       query={"labelSelector": "app=x", "fieldSelector": "metadata.name=a"})
    assert [i["metadata"]["name"] for i in out["items"]] == ["a"]
    assert sorted(k.rsplit("/", 1)[1] for k in storage.data) == ["b", "c"]


async def test_list_options(api, handlers):
    with pytest.raises(errors.BadRequest) as e:
        await api("list", "configmaps", "default", query={"continue": "abc", "resourceVersion": "5"})
    assert e.value.message == "specifying resource version is not allowed when using continue"
    with pytest.raises(errors.Invalid) as e:
        await api("list", "configmaps", "default", query={"sendInitialEvents": "true"})
    assert "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list" in e.value.message
    with pytest.raises(errors.Invalid) as e:
        watch.Plan(handlers, request("watch", "configmaps", "default", query={"sendInitialEvents": "true"}))
    assert e.value.code == 422
    assert e.value.message == ('ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
                               "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
    watch.Plan(handlers, request("watch", "configmaps", "default",
                                 query={"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}))


async def test_apply_never_owns_the_status_of_the_main_resource(api):
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "labels": {"a": "b"}},
            "status": {"phase": "Terminating"}}
    _, o = await api("patch", "namespaces", "", "n", body=body, content_type=APPLY, query={"fieldManager": "m"})
    assert o["status"]["phase"] == "Active"
    assert o["metadata"]["managedFields"][0]["fieldsV1"] == {"f:metadata": {"f:labels": {"f:a": {}}}}


async def test_field_validation_of_patches(api):
    await api("create", "configmaps", "default", body=cm())
    smp = {"data": {"b": "2"}, "bogus": {"n": 80}}
    with pytest.raises(errors.Invalid) as e:
        await api("patch", "configmaps", "default", "c", body=smp, query={"fieldValidation": "Strict"},
                  content_type="application/strategic-merge-patch+json")
    assert e.value.message == (' "" is invalid: patch: Invalid value: "map[bogus:map[n:80] data:map[b:2]]": '
                               'strict decoding error: unknown field "bogus"')
    with pytest.raises(errors.Invalid) as e:
        await api("patch", "configmaps", "default", "c", body={"bogus": 1}, query={"fieldValidation": "Strict"},
                  content_type="application/merge-patch+json")
    assert e.value.message.endswith('strict decoding error: unknown field "bogus"')
    code, o = await api("patch", "configmaps", "default", "c", body={"bogus": 1},
                        content_type="application/merge-patch+json")
    assert code == 200 and "bogus" not in o and api.last_warnings == ['unknown field "bogus"']
    await api("patch", "configmaps", "default", "c", body={"bogus": 1}, query={"fieldValidation": "Ignore"},
              content_type="application/merge-patch+json")
    assert api.last_warnings == []
    with pytest.raises(errors.BadRequest) as e:
        await api("create", "configmaps", "default", body=cm("d", bogus="x"), query={"fieldValidation": "Strict"})
    assert e.value.message == 'strict decoding error: unknown field "metadata.bogus"'


async def test_applier_owns_what_it_applies_not_the_defaults(api):
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "default"},
           "spec": {"ports": [{"port": 80}]}}
    _, o = await api("patch", "services", "default", "s", body=svc, content_type=APPLY, query={"fieldManager": "a"})
    assert o["spec"]["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    fields = o["metadata"]["managedFields"][0]["fieldsV1"]
    assert fields == {"f:spec": {"f:ports": {'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:port": {}}}}}
    svc["spec"]["ports"][0]["targetPort"] = 8080     # nobody owned the default: no conflict
    _, o = await api("patch", "services", "default", "s", body=svc, content_type=APPLY, query={"fieldManager": "b"})
    assert o["spec"]["ports"][0]["targetPort"] == 8080 and o["spec"]["type"] == "ClusterIP"


async def test_update_manager_defaults_to_the_user_agent(handlers, api):
    req = request("create", "configmaps", "default", body=cm())
    req.user_agent = "OpenAPI-Generator/37.0.2/python"
    resp, _ = await handlers.handle(req)
    o = orjson.loads(resp.body)
    assert [e["manager"] for e in o["metadata"]["managedFields"]] == ["OpenAPI-Generator"]
    req = request("patch", "configmaps", "default", "c", body=cm(data={"z": "1"}), content_type=APPLY)
    req.user_agent = "kubectl/v1.32.0"
    with pytest.raises(errors.Invalid):   # apply names its manager itself
        await handlers.handle(req)
