"""events.k8s.io/v1 Events: the same storage as core/v1 Events, each version converted as kube converts it."""
from __future__ import annotations

from typing import Any

import orjson
import pytest

from apiary_pb import registry_pb2 as rpb
from services.common import errors, identity
from services.registry.watch import Plan

NS = "default"
Obj = dict[str, Any]


def events_request(verb: str, name: str = "", body: Obj | None = None, group: str = "events.k8s.io",
                   content_type: str = "application/json", **kw: Any) -> rpb.APIRequest:
    return rpb.APIRequest(verb=verb, group=group, version="v1", resource="events", namespace=NS, name=name,
                          body=orjson.dumps(body) if body is not None else b"", content_type=content_type,
                          user=identity.user_pb("admin", ["system:masters"]), **kw)


async def call(handlers, *args: Any, **kw: Any) -> tuple[int, Obj]:
    resp, _ = await handlers.handle(events_request(*args, **kw))
    return resp.code, orjson.loads(resp.body)


def new_event(name: str, **extra: Any) -> Obj:
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name, "namespace": NS},
            "regarding": {"kind": "ConfigMap", "namespace": NS, "name": "c"}, "reason": "Tested",
            "note": "it happened", "type": "Warning", "action": "Testing", "eventTime": "2026-01-02T03:04:05.5Z",
            "reportingController": "example.com/tester", "reportingInstance": "tester-1", **extra}


async def test_created_in_events_v1_read_in_both_versions(handlers):
    code, got = await call(handlers, "create", body=new_event("e1"))
    assert code == 201 and got["apiVersion"] == "events.k8s.io/v1" and got["note"] == "it happened"
    assert got["eventTime"] == "2026-01-02T03:04:05.500000Z"
    code, core = await call(handlers, "get", "e1", group="")
    assert core["apiVersion"] == "v1" and core["kind"] == "Event"
    assert core["involvedObject"] == {"kind": "ConfigMap", "namespace": NS, "name": "c"}
    assert (core["message"], core["reportingComponent"], core["reportingInstance"]) == (
        "it happened", "example.com/tester", "tester-1")
    assert "note" not in core and "regarding" not in core
    # a core/v1 Event reads as events.k8s.io/v1
    legacy = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e2", "namespace": NS},
              "involvedObject": {"kind": "ConfigMap", "namespace": NS, "name": "c"}, "reason": "Old",
              "message": "legacy", "type": "Normal", "count": 3, "source": {"component": "kubelet"},
              "firstTimestamp": "2026-01-02T03:04:05Z", "lastTimestamp": "2026-01-02T03:04:06Z"}
    assert (await call(handlers, "create", body=legacy, group=""))[0] == 201
    code, ev = await call(handlers, "get", "e2")
    assert ev["apiVersion"] == "events.k8s.io/v1"
    assert (ev["note"], ev["deprecatedCount"], ev["deprecatedSource"], ev["deprecatedFirstTimestamp"]) == (
        "legacy", 3, {"component": "kubelet"}, "2026-01-02T03:04:05Z")
    code, listed = await call(handlers, "list")
    assert listed["kind"] == "EventList" and listed["apiVersion"] == "events.k8s.io/v1"
    assert [(i["apiVersion"], i["metadata"]["name"]) for i in listed["items"]] == [
        ("events.k8s.io/v1", "e1"), ("events.k8s.io/v1", "e2")]
    code, listed = await call(handlers, "list", group="")
    assert [(i["apiVersion"], i.get("message")) for i in listed["items"]] == [("v1", "it happened"), ("v1", "legacy")]
    # the core field selectors find an event created in events.k8s.io/v1
    code, found = await call(handlers, "list", group="", query={"fieldSelector": "involvedObject.name=c,type=Warning"})
    assert [i["metadata"]["name"] for i in found["items"]] == ["e1"]
    # both tables print the same cells
    code, t1 = await call(handlers, "get", "e1", table=True)
    code, t2 = await call(handlers, "get", "e1", group="", table=True)
    assert t1["rows"][0]["cells"][1:8] == t2["rows"][0]["cells"][1:8]
    assert t1["rows"][0]["cells"][3] == "configmap/c"


async def test_events_v1_strict_validation_and_immutable_fields(handlers):
    bad = new_event("bad", type="Odd", deprecatedCount=2, series={"count": 1})
    del bad["eventTime"]
    with pytest.raises(errors.Invalid) as e:
        await call(handlers, "create", body=bad)
    msgs = [f"{c['field']}: {c['message']}" for c in e.value.details["causes"]]
    assert msgs == ['series.count: Invalid value: "": should be at least 2',
                    "series.lastObservedTime: Required value",
                    "eventTime: Required value",
                    'type: Invalid value: "": has invalid value: Odd',
                    'count: Invalid value: "": needs to be unset']
    code, got = await call(handlers, "create", body=new_event("e3"))
    got["note"] = "changed"
    with pytest.raises(errors.Invalid) as e:
        await call(handlers, "update", "e3", body=got)
    assert [c["field"] for c in e.value.details["causes"]] == ["message"]
    got["note"] = "it happened"
    got["series"] = {"count": 2, "lastObservedTime": "2026-01-02T03:04:07Z"}
    code, upd = await call(handlers, "update", "e3", body=got)
    assert code == 200 and upd["series"]["count"] == 2


async def test_watch_frames_are_converted(handlers):
    await call(handlers, "create", body=new_event("w1"))
    code, core = await call(handlers, "get", "w1", group="")
    from apiary_pb import envelope_pb2 as pb
    from services.common import envelope

    ev = pb.WatchEvent(type="ADDED", object=envelope.to_envelope(core))
    ev.object.body = orjson.dumps({k: v for k, v in core.items() if k not in ("apiVersion", "kind", "metadata")})
    plan = Plan(handlers, events_request("watch"))
    frame, last = plan.frame(ev.SerializeToString())
    doc = orjson.loads(frame)
    assert not last and doc["type"] == "ADDED"
    assert doc["object"]["apiVersion"] == "events.k8s.io/v1" and doc["object"]["note"] == "it happened"


def managed(obj: Obj) -> dict[str, tuple[str, set[str]]]:
    """manager -> (apiVersion, its top-level fields)."""
    return {e["manager"]: (e["apiVersion"], set(e["fieldsV1"]) - {"f:metadata"}) for e in obj["metadata"]["managedFields"]}


async def test_managed_fields_keep_their_versions_names_and_follow_changes_in_the_other(handlers):
    code, _ = await call(handlers, "create", body=new_event("m1"), query={"fieldManager": "recorder"})
    assert code == 201
    code, core = await call(handlers, "get", "m1", group="")
    # each entry is read in its own version's names, whichever version asks
    assert managed(core)["recorder"][0] == "events.k8s.io/v1" and "f:note" in managed(core)["recorder"][1]
    core["message"] = "rewritten"
    code, core = await call(handlers, "update", "m1", body=core, group="", query={"fieldManager": "editor"})
    assert code == 200
    fields = managed(core)
    assert fields["editor"] == ("v1", {"f:message"})
    # the recorder lost the field the editor changed, under its own name
    assert fields["recorder"][0] == "events.k8s.io/v1" and "f:note" not in fields["recorder"][1]
    assert "f:regarding" in fields["recorder"][1]


async def test_apply_conflicts_across_groups(handlers):
    apply = {"apiVersion": "events.k8s.io/v1", "kind": "Event", **{k: v for k, v in new_event("a1").items()
                                                                    if k not in ("apiVersion", "kind")}}
    q = {"fieldManager": "applier"}
    code, _ = await call(handlers, "patch", "a1", body=apply, query=q, content_type="application/apply-patch+yaml")
    assert code == 201
    core_apply = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "a1", "namespace": NS},
                  "message": "another story"}
    with pytest.raises(errors.Conflict) as e:
        await call(handlers, "patch", "a1", body=core_apply, group="", query={"fieldManager": "other"},
                   content_type="application/apply-patch+yaml")
    assert '"applier"' in e.value.message and ".message" in e.value.message
