"""One kind, several versions or groups, one storage (conversion.py): what storage holds, what every served
version reads (objects stored by older code included), the storage version discovery names."""
from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from apiary_pb import envelope_pb2 as pb
from services.apis.install import new_catalogue
from services.apis.strategies.events import CONVERSION as EVENTS
from services.apis.strategies.events import TO_CORE
from services.common import envelope, errors

from .conftest import ADMIN, Client

CATALOGUE = new_catalogue()

GROUP = "admissionregistration.k8s.io"
Obj = dict[str, Any]
POLICY = {"metadata": {"name": "stamp"}, "spec": {
    "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                            "resources": ["configmaps"]}]},
    "mutations": [{"patchType": "ApplyConfiguration",
                   "applyConfiguration": {"expression": "Object{metadata: Object.metadata{labels: {'a': 'b'}}}"}}]}}


def info(group: str, version: str, plural: str) -> Any:
    found = CATALOGUE.lookup(group, version, plural)
    assert found is not None
    return found


async def call(handlers: Any, verb: str, version: str, name: str = "", body: Any = None) -> tuple[int, Obj]:
    return await Client(handlers)(verb, "mutatingadmissionpolicies", name=name, body=body, group=GROUP,
                                  version=version, user=ADMIN)


async def test_mutating_policies_are_stored_in_the_storage_version(handlers: Any, storage: Any) -> None:
    code, _ = await call(handlers, "create", "v1alpha1",
                         body={"apiVersion": f"{GROUP}/v1alpha1", "kind": "MutatingAdmissionPolicy", **POLICY})
    assert code == 201
    stored = storage.data["/registry/mutatingadmissionpolicies/stamp"]
    assert (stored.api_version, stored.kind) == (f"{GROUP}/v1beta1", "MutatingAdmissionPolicy")
    assert orjson.loads(stored.body)["spec"]["mutations"] == POLICY["spec"]["mutations"]


async def test_policies_stored_by_older_code_read_in_every_version(handlers: Any, storage: Any) -> None:
    # this morning's code stored them without type meta; the first one stored them as v1alpha1
    for name, api_version, kind in (("bare", "", ""), ("alpha", f"{GROUP}/v1alpha1", "MutatingAdmissionPolicy")):
        env = envelope.to_envelope({**POLICY, "metadata": {"name": name, "uid": name, "resourceVersion": "1"}})
        env.api_version, env.kind = api_version, kind
        storage.data[f"/registry/mutatingadmissionpolicies/{name}"] = env
    for version in ("v1", "v1beta1", "v1alpha1"):
        for name in ("bare", "alpha"):
            code, got = await call(handlers, "get", version, name)
            assert (got["apiVersion"], got["kind"]) == (f"{GROUP}/{version}", "MutatingAdmissionPolicy")
            assert got["spec"] == POLICY["spec"]
        _, listed = await call(handlers, "list", version)
        assert {(i["apiVersion"], i["metadata"]["name"]) for i in listed["items"]} == {
            (f"{GROUP}/{version}", "bare"), (f"{GROUP}/{version}", "alpha")}
    # an update through v1 rewrites it in the storage version
    _, got = await call(handlers, "get", "v1", "alpha")
    got["metadata"]["labels"] = {"x": "y"}
    code, _ = await call(handlers, "update", "v1", "alpha", got)
    assert code == 200 and storage.data["/registry/mutatingadmissionpolicies/alpha"].api_version == f"{GROUP}/v1beta1"


def test_an_object_stored_in_a_version_no_conversion_reads_is_a_server_error() -> None:
    events_v1 = info("events.k8s.io", "v1", "events")
    env = pb.Object(api_version="events.k8s.io/v1beta1", kind="Event")
    env.metadata.name = "e"
    try:
        events_v1.served(env)
    except errors.InternalError as e:
        assert "events.k8s.io/v1beta1" in e.message
    else:
        raise AssertionError("read an Event stored in a version nothing converts from")


def test_storage_version_hash_names_the_storage_version() -> None:
    # kube-apiserver's values: events.k8s.io/v1 Events are core/v1 ones in storage
    assert info("events.k8s.io", "v1", "events").storage_version_hash() == "r2yiGXH7wu8="
    assert info("", "v1", "events").storage_version_hash() == "r2yiGXH7wu8="
    hashes = {info(GROUP, v, p).storage_version_hash() for v in ("v1", "v1beta1", "v1alpha1")
              for p in ("mutatingadmissionpolicies",)}
    assert len(hashes) == 1
    assert hashes != {info(GROUP, v, "mutatingadmissionpolicybindings").storage_version_hash() for v in ("v1",)}


_values = st.recursive(st.none() | st.booleans() | st.integers(-2**31, 2**31) | st.text(max_size=8),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                  max_size=3), max_leaves=8)


@given(st.dictionaries(st.sampled_from(sorted(TO_CORE) + ["reason", "type", "series", "action"]), _values))
def test_events_round_trip_through_the_storage_version(body: Obj) -> None:
    events_v1 = info("events.k8s.io", "v1", "events")
    env = envelope.to_envelope({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                                "metadata": {"name": "e", "namespace": "ns"}, **body})
    env.fields["involvedObject.name"] = "x"
    stored = events_v1.stored(env)
    assert (stored.api_version, stored.kind) == ("v1", "Event")
    assert not set(orjson.loads(stored.body)) & set(TO_CORE)
    back = events_v1.served(stored)
    assert orjson.loads(back.body or b"{}") == body
    assert back.metadata == env.metadata and back.fields == env.fields


def test_field_paths_rename_the_top_level_field_only() -> None:
    assert EVENTS.field_path(("f:note",), to_storage=True) == ("f:message",)
    assert EVENTS.field_path(("f:regarding", "f:name"), to_storage=True) == ("f:involvedObject", "f:name")
    assert EVENTS.field_path(("f:involvedObject", "f:name"), to_storage=False) == ("f:regarding", "f:name")
    assert EVENTS.field_path(("f:metadata", "f:labels", "f:note"), to_storage=True) == (
        "f:metadata", "f:labels", "f:note")
