"""core/v1 Events: strategy (kube's legacyValidateEvent for v1), selectable fields, printer, and the verbs."""
from __future__ import annotations

import datetime

import pytest

from services.apis import schemas
from services.apis.core import event_row
from services.apis.install import new_catalogue
from services.apiserver import openapi, printers
from services.apiserver.registry.rest import strategy_for
from services.common import errors

CATALOGUE = new_catalogue()

INFO = CATALOGUE.lookup("", "v1", "events")
NOW = datetime.datetime(2024, 1, 1, 1, 0, tzinfo=datetime.timezone.utc)


def _s():
    return strategy_for(INFO)


def event(name: str = "c.1", ns: str = "default", **fields):
    obj = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": ns},
           "involvedObject": {"kind": "ConfigMap", "namespace": ns, "name": "c", "uid": "u-1", "apiVersion": "v1"},
           "reason": "Tested", "message": "hello", "type": "Normal", "source": {"component": "tester"},
           "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:55:00Z", "count": 3}
    obj.update(fields)
    return obj


def test_catalogue_entry():
    assert INFO.kind == "Event" and INFO.namespaced and INFO.short_names == ("ev",)
    assert INFO.key("ns1", "e") == "/registry/events/ns1/e"
    assert set(INFO.verbs) == {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
    assert INFO.storage_version_hash() == "r2yiGXH7wu8="  # kube-apiserver's value for core/v1 events


def test_namespace_must_match_involved_object():
    s = _s()
    assert s.validate(event()) == []
    bad = event(involvedObject={"kind": "ConfigMap", "namespace": "other", "name": "c"})
    causes = s.validate(bad)
    assert causes == [{"reason": "FieldValueInvalid", "field": "involvedObject.namespace",
                       "message": 'Invalid value: "other": does not match event.namespace'}]
    # An involvedObject without a namespace (cluster-scoped) is only allowed in "default" ...
    cluster = {"kind": "Node", "name": "n1"}
    assert s.validate(event(involvedObject=cluster)) == []
    assert [c["field"] for c in s.validate(event(ns="kube-system", involvedObject=cluster))] == \
        ["involvedObject.namespace"]
    # ... or, for events with eventTime set, in kube-system as well.
    new_style = {"eventTime": "2024-01-01T00:00:00.000000Z", "reportingComponent": "x.io/ctl",
                 "reportingInstance": "ctl-1", "action": "Act"}
    assert s.validate(event(ns="kube-system", involvedObject=cluster, **new_style)) == []


def test_new_style_event_rules():
    s = _s()
    causes = s.validate(event(eventTime="2024-01-01T00:00:00.000000Z", reason=""))
    assert [(c["field"], c["reason"]) for c in causes] == [
        ("reportingComponent", "FieldValueRequired"), ("reportingComponent", "FieldValueInvalid"),
        ("reportingInstance", "FieldValueRequired"), ("action", "FieldValueRequired"),
        ("reason", "FieldValueRequired")]
    long = event(eventTime="2024-01-01T00:00:00.000000Z", reportingComponent="ctl", reportingInstance="i" * 129,
                 action="a", message="m" * 1025)
    assert [(c["field"], c["message"]) for c in s.validate(long)] == [
        ("reportingInstance", 'Invalid value: "": can have at most 128 characters'),
        ("message", 'Invalid value: "": can have at most 1024 characters')]


def test_type_is_free_form_in_core_v1():
    # kube checks Normal|Warning only for events.k8s.io (strict validation), not for core/v1 writes.
    assert _s().validate(event(type="Custom")) == []


def test_object_meta_checked_after_event_rules():
    s = _s()
    # v1 event names are path segments (kube's rest.BeforeCreate), not DNS subdomains.
    assert s.validate(event(name="Has_Upper.1")) == []
    assert [c["field"] for c in s.validate(event(name="a/b"))] == ["metadata.name"]
    old = event()
    old["metadata"]["uid"] = "u"
    new = event()
    new["metadata"]["uid"] = "other"
    assert [c["field"] for c in s.validate_update(new, old)] == ["metadata.uid"]


def test_canonicalize_times():
    s = _s()
    obj = event(firstTimestamp="2024-01-01T02:00:00+02:00", eventTime="2024-01-01T00:00:00.5Z",
                series={"count": 2, "lastObservedTime": "2024-01-01T00:00:01Z"})
    s.canonicalize(obj)
    assert obj["firstTimestamp"] == "2024-01-01T00:00:00Z"
    assert obj["eventTime"] == "2024-01-01T00:00:00.500000Z"
    assert obj["series"]["lastObservedTime"] == "2024-01-01T00:00:01.000000Z"
    with pytest.raises(errors.BadRequest) as e:
        s.canonicalize(event(lastTimestamp="yesterday"))
    assert e.value.message.startswith('Event in version "v1" cannot be handled as a Event: parsing time '
                                      '"yesterday"')


def test_selectable_fields():
    fields = _s().selectable_fields(event(involvedObject={
        "kind": "Pod", "namespace": "default", "name": "p", "uid": "u", "apiVersion": "v1",
        "resourceVersion": "7", "fieldPath": "spec.containers{c}"}))
    assert fields == {
        "metadata.name": "c.1", "metadata.namespace": "default",
        "involvedObject.kind": "Pod", "involvedObject.namespace": "default", "involvedObject.name": "p",
        "involvedObject.uid": "u", "involvedObject.apiVersion": "v1", "involvedObject.resourceVersion": "7",
        "involvedObject.fieldPath": "spec.containers{c}", "reason": "Tested", "reportingComponent": "",
        "source": "tester", "type": "Normal"}
    # source falls back to reportingComponent (kube's ReportingController)
    f = _s().selectable_fields(event(source={}, reportingComponent="x.io/ctl"))
    assert f["source"] == "x.io/ctl" and f["reportingComponent"] == "x.io/ctl"


def test_printer_columns_and_row():
    cols = printers.column_definitions(CATALOGUE.convertor("", "events"))
    assert [(c["name"], c["priority"]) for c in cols] == [
        ("Last Seen", 0), ("Type", 0), ("Reason", 0), ("Object", 0), ("Subobject", 1), ("Source", 1),
        ("Message", 0), ("First Seen", 1), ("Count", 1), ("Name", 1)]
    assert cols[-1]["format"] == "name"
    row = event_row(event(message="  hi \n", source={"component": "tester", "host": "node-1"}), NOW)
    assert row == ["5m", "Normal", "Tested", "configmap/c", "", "tester, node-1", "hi", "60m", 3, "c.1"]


def test_printer_fallbacks():
    # no lastTimestamp: last = first; no firstTimestamp: eventTime; no count: 1; no name: kind alone
    o = event(firstTimestamp=None, lastTimestamp=None, count=None, eventTime="2024-01-01T00:59:30.000000Z",
              source={}, reportingComponent="ctl", reportingInstance="i-1",
              involvedObject={"kind": "Node", "name": ""})
    assert event_row(o, NOW) == ["30s", "Normal", "Tested", "node", "", "ctl, i-1", "hello", "30s", 1,
                                          "c.1"]
    series = event(series={"count": 5, "lastObservedTime": "2024-01-01T00:58:00.000000Z"})
    row = event_row(series, NOW)
    assert row[0] == "2m" and row[8] == 5
    assert event_row({"metadata": {"name": "x"}}, NOW)[:4] == ["<unknown>", "", "", ""]


def test_openapi_schema():
    doc = openapi.document(CATALOGUE, schemas, "", "v1")
    names = doc["components"]["schemas"]
    for n in ("Event", "EventList", "EventSource", "EventSeries", "ObjectReference"):
        assert schemas.CORE + n in names
    assert schemas.META + "MicroTime" in names
    ev = names[schemas.CORE + "Event"]
    assert ev["x-kubernetes-group-version-kind"] == [{"group": "", "kind": "Event", "version": "v1"}]
    assert ev["required"] == ["metadata", "involvedObject"]
    assert "/api/v1/namespaces/{namespace}/events/{name}" in doc["paths"]
    assert doc["paths"]["/api/v1/events"]["get"]["operationId"] == "listCoreV1EventForAllNamespaces"
    assert schemas.check(event(count="x"), schemas.CORE + "Event", "Event")[1] == \
        "json: cannot unmarshal string into Go struct field Event.count of type int32"


async def test_create_list_field_selector_and_table(api, storage):
    code, e = await api("create", "events", "default", body=event())
    assert code == 201 and e["metadata"]["uid"]
    await api("create", "events", "default", body=event("other.1", involvedObject={
        "kind": "Secret", "namespace": "default", "name": "s"}))
    stored = storage.data["/registry/events/default/c.1"]
    assert stored.fields["involvedObject.name"] == "c" and stored.fields["involvedObject.kind"] == "ConfigMap"
    # what kubectl describe sends
    sel = "involvedObject.name=c,involvedObject.namespace=default,involvedObject.kind=ConfigMap," \
          "involvedObject.uid=u-1"
    _, lst = await api("list", "events", "default", query={"fieldSelector": sel})
    assert lst["kind"] == "EventList" and [i["metadata"]["name"] for i in lst["items"]] == ["c.1"]
    _, t = await api("list", "events", "default", table=True)
    assert [r["cells"][3] for r in t["rows"]] == ["configmap/c", "secret/s"]
    with pytest.raises(errors.Invalid) as err:
        await api("create", "events", "default", body=event("bad", involvedObject={"namespace": "x"}))
    assert 'involvedObject.namespace: Invalid value: "x": does not match event.namespace' in err.value.message
