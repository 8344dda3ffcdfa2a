"""A list's parts made into the negotiated form one by one (services/proxy/listparts.py): together,
byte for byte the answer the whole list converts to (encoding.encode_answer), in every form."""
from __future__ import annotations

import itertools

import orjson
import pytest

from services.apiserver.negotiation import negotiate_output
from services.common.errors import NotAcceptable
from services.proxy import listparts
from services.proxy.encoding import encode_answer

PARTIAL = "as=PartialObjectMetadataList;g=meta.k8s.io;v="
FORMS = ["application/vnd.kubernetes.protobuf", f"application/json;{PARTIAL}v1",
         f"application/json;{PARTIAL}v1beta1", f"application/vnd.kubernetes.protobuf;{PARTIAL}v1"]


def configmap(i: int) -> dict:
    return {"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": f"c{i}", "namespace": "d", "resourceVersion": str(10 + i), "labels": {"i": str(i)},
                         "creationTimestamp": "2024-01-01T00:00:00Z",
                         "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "v1",
                                            "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                                            "fieldsV1": {"f:data": {"f:x": {}}}}]},
            "data": {"x": "y" * i}}


def registry_parts(n: int, cut: list[int], meta: dict) -> tuple[bytes, list[bytes]]:
    """The whole list, and its parts as the registry sends them (lists.py): the head with the items
    before cut[0], the items up to each next cut (comma-led once items came before), then the end."""
    items = [orjson.dumps(configmap(i)) for i in range(n)]
    head = orjson.dumps({"kind": "ConfigMapList", "apiVersion": "v1", "metadata": meta})[:-1] + b',"items":['
    bounds = [0, *cut, n]
    parts = []
    for k, (a, b) in enumerate(itertools.pairwise(bounds)):
        chunk = b",".join(items[a:b])
        parts.append(chunk if k == 0 or not chunk or a == 0 else b"," + chunk)
    parts = [p for k, p in enumerate(parts) if k == 0 or p]
    parts[0] = head + parts[0]
    whole = head + b",".join(items) + b"]}"
    return whole, [*parts, b"]}"]


@pytest.mark.parametrize("accept", FORMS)
@pytest.mark.parametrize("n,cut", [(7, [2, 3, 6]), (3, [0, 1]), (0, [])])
def test_parts_make_the_answer_of_the_whole_list(accept, n, cut):
    whole, parts = registry_parts(n, cut, {"resourceVersion": "99", "continue": "abc", "remainingItemCount": 4})
    assert b"".join(parts) == whole
    output = negotiate_output(accept)
    assert listparts.streams(output)
    form = listparts.ListParts(output)
    got = [form.first(parts[0]), *(form.part(p) for p in parts[1:]), *form.end()]
    assert b"".join(got) == encode_answer(whole, output)[0]
    if output.format == "json":  # sent as they come: every part's items with it
        assert all(got[:len(parts)]) and not form.end()


def test_forms_converted_whole():
    """YAML is converted whole; a list asked for as one PartialObjectMetadata is kube's 406."""
    assert not listparts.streams(negotiate_output("application/yaml"))
    one = negotiate_output("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
    assert not listparts.streams(one)
    with pytest.raises(NotAcceptable):
        encode_answer(registry_parts(2, [], {})[0], one)
    assert listparts.streams(negotiate_output("application/json;as=Table;g=meta.k8s.io;v=v1"))
