"""The registry's JSON answers in the form content negotiation chose (negotiation.Output).

The registry answers JSON (objects, Lists, Status, watch events one per line); here, in one place
for every kind, they become YAML, metadata only (as=PartialObjectMetadata[List];g=meta.k8s.io, which
client-go's metadata informers ask for), or Kubernetes protobuf (protobuf.py's message table, built
from the kinds' definitions). A plain JSON answer or a Table is sent on untouched.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

import orjson

from services.apiserver.negotiation import Output, json_to_yaml
from services.common.decoding import loads_json
from services.common.errors import APIError, NotAcceptable

_META_GROUP = "meta.k8s.io/"


def protobuf() -> ModuleType:
    """services/proxy/protobuf.py, imported by the first request that needs kube's protobuf: its fifteen
    generated modules of messages and the table built from them were about a third of the proxy's
    imports, on the path of every start and so of every restart's outage."""
    from . import protobuf as module

    return module


def for_kind(output: Output, api_version: str, kind: str) -> Output:
    """The form to answer a request on a resource of this kind with: protobuf only for a kind with
    a message (kube answers CRDs in JSON when Accept allows it, 406 when it does not)."""
    if output.format != "protobuf" or output.partial or protobuf().has_message(api_version, kind):
        return output
    if output.fallback is not None:
        return output.fallback
    raise NotAcceptable("only the following media types are accepted: application/json, application/yaml")


def partial_object(obj: dict[str, Any], api_version: str) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": obj.get("metadata") or {}}


def as_partial(obj: dict[str, Any], output: Output) -> dict[str, Any]:
    """kube's transformation to PartialObjectMetadata or PartialObjectMetadataList (a Status is
    answered as it is); 406 when a list is asked for as one object or the other way round."""
    if obj.get("kind") == "Status" and obj.get("apiVersion") == "v1":
        return obj
    api_version = _META_GROUP + output.partial_version
    is_list = isinstance(obj.get("items"), list)
    if output.partial == "PartialObjectMetadata":
        if is_list:
            raise NotAcceptable(f"you requested PartialObjectMetadata, but the requested object is a list "
                                f"({obj.get('kind')})")
        return partial_object(obj, api_version)
    if not is_list:
        raise NotAcceptable(f"you requested PartialObjectMetadataList, but the requested object is not a "
                            f"list ({obj.get('kind')})")
    return {"kind": "PartialObjectMetadataList", "apiVersion": api_version, "metadata": obj.get("metadata") or {},
            "items": [partial_object(i, api_version) for i in obj["items"]]}


def encode_answer(body: bytes, output: Output) -> tuple[bytes, str]:
    """A one-shot answer (object, List or Status) and its content type."""
    if not body or not output.transforms:
        return body, output.content_type
    if output.format == "yaml" and not output.partial:
        return json_to_yaml(body), output.content_type
    obj = loads_json(body)
    if output.partial:
        obj = as_partial(obj, output)
    return _encode(obj, output)


def _encode(obj: dict[str, Any], output: Output) -> tuple[bytes, str]:
    if output.format == "protobuf":
        if protobuf().has_message(obj.get("apiVersion", ""), obj.get("kind", "")) or output.fallback is None:
            return protobuf().encode_object(obj), output.content_type
        output = output.fallback  # an answer of another kind than the resource's (a subresource's)
    data = orjson.dumps(obj)
    if output.format == "yaml":
        return json_to_yaml(data), output.content_type
    return data, output.content_type


def encode_event(line: bytes, output: Output) -> bytes:
    """One watch event (a JSON line from the registry) as the stream carries it: a JSON line, or a
    length-prefixed protobuf WatchEvent."""
    if not output.transforms:
        return line + b"\n"
    event = loads_json(line)
    obj = event.get("object")
    if output.partial and isinstance(obj, dict) and event.get("type") != "ERROR":
        # events carry single objects: PartialObjectMetadata whichever of the two the client named
        event["object"] = partial_object(obj, _META_GROUP + output.partial_version)
    if output.format == "protobuf":
        return protobuf().watch_frame(event)
    return orjson.dumps(event) + b"\n"


def encode_error(err: APIError, output: Output | None) -> tuple[bytes, str]:
    """An error's Status in the negotiated form (protobuf for a protobuf client, JSON otherwise)."""
    if output is not None and output.format == "protobuf":
        return protobuf().encode_object(err.status()), output.content_type
    return err.body(), "application/json"
