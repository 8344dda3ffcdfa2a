"""What client-go expects on the wire, checked with raw HTTP against the stack and decoded with the
generated messages: protobuf answers (k8s envelope, Lists, Status errors, length-prefixed WatchEvent
frames), JSON or 406 for kinds without a message, and PartialObjectMetadata[List] in JSON and
protobuf, for one-shot answers and watches."""
from __future__ import annotations

import struct
from collections.abc import Iterator

import orjson
import pytest

from k8s_pb import meta_v1_pb2 as meta_v1
from k8s_pb import runtime_pb2 as runtime
from services.apis.install import new_catalogue
from services.proxy.protobuf import ENCODABLE, MAGIC, decode_k8s_protobuf

# every kind a request body may carry, as the servers build them
KINDS = new_catalogue().kinds()

pytestmark = pytest.mark.stack
NS = "wire"
PB = "application/vnd.kubernetes.protobuf"
CLIENT_GO = "application/vnd.kubernetes.protobuf, application/json"
CM = f"/api/v1/namespaces/{NS}/configmaps"
PARTIAL = "as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
PARTIAL_LIST = "as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def decode(body: bytes) -> dict:
    assert body.startswith(MAGIC)
    return orjson.loads(decode_k8s_protobuf(body, kinds=ENCODABLE))


def without_type_meta(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}


def go_zero_free(value):
    """Empty strings, lists and maps left out, as Go's omitempty (and protobuf decoding) does."""
    if isinstance(value, dict):
        return {k: go_zero_free(v) for k, v in value.items() if v not in ("", [], {}, None)}
    if isinstance(value, list):
        return [go_zero_free(v) for v in value]
    return value


def same_list(json_list: dict, pb_list: dict) -> None:
    """A List decoded from protobuf is the JSON List, but for its items' TypeMeta (not in protobuf)
    and the empty values Go leaves out."""
    assert pb_list["apiVersion"] == json_list["apiVersion"] and pb_list["kind"] == json_list["kind"]
    assert pb_list.get("metadata", {}) == json_list["metadata"]
    assert [go_zero_free(without_type_meta(i)) for i in pb_list.get("items", [])] == \
        [go_zero_free(without_type_meta(i)) for i in json_list["items"]]


@pytest.fixture(scope="module")
def ns(admin):
    r = admin.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    assert r.status_code in (201, 409), r.text
    return NS


def _list_path(r) -> str:
    prefix = f"/api/{r.version}" if not r.group else f"/apis/{r.group}/{r.version}"
    return f"{prefix}/{r.plural}"


SERVED_WITH_MESSAGES = [r for r in KINDS if r.protobuf and "list" in r.verbs]


@pytest.mark.parametrize("info", SERVED_WITH_MESSAGES, ids=lambda r: f"{r.group or 'core'}.{r.kind}")
def test_every_served_kind_lists_the_same_in_protobuf(admin, ns, info):
    """Every object the stack holds of each kind (bootstrap RBAC, APIServices, namespaces, ...)
    survives JSON -> protobuf: the protobuf List decodes back to the JSON List. Both read at one
    resourceVersion: controllers (namespace deletion, kube-root-ca.crt) change the cluster meanwhile."""
    as_json = admin.get(_list_path(info))
    assert as_json.status_code == 200, as_json.text
    rv = as_json.json()["metadata"]["resourceVersion"]
    as_pb = admin.get(_list_path(info), params={"resourceVersion": rv, "resourceVersionMatch": "Exact"},
                      headers={"Accept": PB})
    assert as_pb.status_code == 200 and as_pb.headers["content-type"] == PB
    same_list(as_json.json(), decode(as_pb.content))


def test_protobuf_envelope_and_verbs(admin, ns):
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pb", "labels": {"a": "b"}},
            "data": {"k": "v"}, "binaryData": {"b": "AAEC"}}
    r = admin.post(CM, json=body, headers={"Accept": CLIENT_GO})
    assert r.status_code == 201 and r.headers["content-type"] == PB, r.content
    unknown = runtime.Unknown.FromString(r.content[len(MAGIC):])
    assert (unknown.typeMeta.apiVersion, unknown.typeMeta.kind) == ("v1", "ConfigMap")
    assert unknown.contentType == "" and unknown.contentEncoding == ""
    created = decode(r.content)
    assert created["data"] == {"k": "v"} and created["binaryData"] == {"b": "AAEC"}
    assert created == admin.get(f"{CM}/pb").json()

    got = admin.get(f"{CM}/pb", headers={"Accept": PB})
    assert decode(got.content) == created
    created["data"]["k"] = "w"
    put = admin.put(f"{CM}/pb", json=created, headers={"Accept": PB})
    assert put.status_code == 200 and decode(put.content)["data"] == {"k": "w"}
    patched = admin.patch(f"{CM}/pb", content=b'{"data":{"x":"y"}}', headers={
        "Accept": PB, "Content-Type": "application/merge-patch+json"})
    assert patched.status_code == 200 and decode(patched.content)["data"] == {"k": "w", "x": "y"}
    gone = admin.delete(f"{CM}/pb", headers={"Accept": PB})
    assert gone.status_code == 200 and gone.headers["content-type"] == PB
    answer = decode(gone.content)
    assert answer["kind"] in ("Status", "ConfigMap")


def test_errors_are_protobuf_status(admin, ns):
    r = admin.get(f"{CM}/nope", headers={"Accept": PB})
    assert r.status_code == 404 and r.headers["content-type"] == PB
    status = decode(r.content)
    assert status["kind"] == "Status" and status["reason"] == "NotFound" and status["code"] == 404
    assert status["details"] == {"name": "nope", "kind": "configmaps"}
    bad = admin.post(CM, json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}},
                     headers={"Accept": PB})
    assert bad.status_code == 422
    invalid = decode(bad.content)
    assert invalid["reason"] == "Invalid" and invalid["details"]["causes"][0]["field"] == "metadata.name"


def test_kinds_without_a_message_answer_json_or_406(admin, ns):
    kind = next((r for r in KINDS if not r.protobuf and "list" in r.verbs and r.namespaced), None)
    assert kind is not None
    path = _list_path(kind)
    r = admin.get(path, headers={"Accept": CLIENT_GO})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json()["kind"] == kind.kind + "List"
    refused = admin.get(path, headers={"Accept": PB})
    assert refused.status_code == 406 and refused.json()["reason"] == "NotAcceptable"


def frames(lines: Iterator[bytes]) -> Iterator[meta_v1.WatchEvent]:
    """Length-prefixed WatchEvents, decoded as the bytes arrive (frames split over chunks)."""
    buf = b""
    for chunk in lines:
        buf += chunk
        while len(buf) >= 4:
            (n,) = struct.unpack(">I", buf[:4])
            if len(buf) < 4 + n:
                break
            yield meta_v1.WatchEvent.FromString(buf[4:4 + n])
            buf = buf[4 + n:]


def test_protobuf_watch_frames(admin, ns):
    listed = admin.get(CM, headers={"Accept": PB})
    rv = decode(listed.content)["metadata"]["resourceVersion"]
    with admin.stream("GET", CM, params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "30"},
                      headers={"Accept": CLIENT_GO}) as w:
        assert w.status_code == 200
        assert w.headers["content-type"] == PB + ";stream=watch"
        r = admin.post(CM, json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched"}})
        assert r.status_code == 201
        assert admin.delete(f"{CM}/watched").status_code == 200
        seen = []
        for ev in frames(w.iter_raw()):
            obj = decode(ev.object.raw)
            assert obj["kind"] == "ConfigMap"
            if obj["metadata"]["name"] == "watched":
                seen.append(ev.type)
            if ev.type == "DELETED":
                break
    assert seen == ["ADDED", "DELETED"]


def test_partial_object_metadata_list_from_a_real_list(admin, ns):
    for i in range(3):
        admin.post(CM, json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"meta-{i}"},
                             "data": {"secret-ish": "x"}})
    full = admin.get(CM).json()
    # the same snapshot: other clients (the controller-manager's lease renewals) move the revision meanwhile
    same = {"resourceVersion": full["metadata"]["resourceVersion"], "resourceVersionMatch": "Exact"}
    for accept, decoder in ((f"application/json;{PARTIAL_LIST}", orjson.loads), (f"{PB};{PARTIAL_LIST}", decode)):
        r = admin.get(CM, params=same, headers={"Accept": accept})
        assert r.status_code == 200, r.text
        partial = decoder(r.content)
        assert partial["apiVersion"] == "meta.k8s.io/v1" and partial["kind"] == "PartialObjectMetadataList"
        assert partial["metadata"]["resourceVersion"] == full["metadata"]["resourceVersion"]
        assert [i["metadata"] for i in partial["items"]] == [i["metadata"] for i in full["items"]]
        assert all(set(i) <= {"apiVersion", "kind", "metadata"} for i in partial["items"])
        if decoder is orjson.loads:  # protobuf items have no TypeMeta, as kube's
            assert all(i["kind"] == "PartialObjectMetadata" for i in partial["items"])
    one = admin.get(f"{CM}/meta-0", headers={"Accept": f"{PB};{PARTIAL},application/json"})
    assert one.headers["content-type"] == PB
    assert decode(one.content) == {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                                   "metadata": admin.get(f"{CM}/meta-0").json()["metadata"]}
    wrong = admin.get(CM, headers={"Accept": f"application/json;{PARTIAL}"})
    assert wrong.status_code == 406 and "is a list" in wrong.json()["message"]
    unknown = admin.get(CM, headers={"Accept": "application/json;as=Bogus;g=meta.k8s.io;v=v1"})
    assert unknown.status_code == 406


def test_partial_object_metadata_watch(admin, ns):
    rv = admin.get(CM).json()["metadata"]["resourceVersion"]
    with admin.stream("GET", CM, params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "30"},
                      headers={"Accept": f"application/json;{PARTIAL}"}) as w:
        assert w.status_code == 200
        admin.post(CM, json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "meta-watched"},
                             "data": {"a": "b"}})
        for line in w.iter_lines():
            ev = orjson.loads(line)
            assert ev["object"].get("kind") == "PartialObjectMetadata" and "data" not in ev["object"], ev
            if ev["object"]["metadata"]["name"] == "meta-watched":
                assert ev["type"] == "ADDED"
                break


def test_a_bookmark_comes_before_the_timeout(admin, ns):
    """kube sends a watch that allows bookmarks one BOOKMARK 2 s before its timeoutSeconds deadline (the
    stack's bookmark interval is a minute: only the deadline brings this one)."""
    rv = admin.get(CM).json()["metadata"]["resourceVersion"]
    with admin.stream("GET", CM, params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "4",
                                         "allowWatchBookmarks": "true"}) as w:
        types = [orjson.loads(line)["type"] for line in w.iter_lines() if line]
    assert types == ["BOOKMARK"]
