"""/openapi/v2: the Swagger 2.0 document, converted from the registry's OpenAPI v3 documents.

kube-apiserver serves one Swagger 2.0 document for every group-version, as JSON and as the protobuf
encoding of gnostic's openapi.v2.Document. kubectl reads the protobuf one for client-side validation
(the models of List items, and the fieldValidation query-param check of its v2 verifier).

The conversion follows kube-openapi's v3 -> v2 differences: `#/components/schemas/X` refs become
`#/definitions/X`, a ref wrapped in a one-element allOf becomes a bare $ref (with the description kept),
requestBody becomes a body parameter, parameter schemas are flattened, responses keep one schema.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import yaml

from gnostic_pb import openapi_v2_pb2 as oa

from .negotiation import parse_media_type

Obj = dict[str, Any]

V3_REF = "#/components/schemas/"
V2_REF = "#/definitions/"
JSON = "application/json"
# kube-openapi serves both subtypes; kubectl (client-go) asks for the deprecated "@" one, and the answer
# carries the current one as its Content-Type.
PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
_PROTOBUF_SUBTYPES = ("com.github.proto-openapi.spec.v2@v1.0+protobuf",
                      "com.github.proto-openapi.spec.v2.v1.0+protobuf")
METHODS = ("get", "put", "post", "delete", "options", "head", "patch")

try:
    _Dumper: Any = yaml.CSafeDumper
except AttributeError:  # pragma: no cover
    _Dumper = yaml.SafeDumper

# Schema keywords that mean the same in v3 and Swagger 2.0 and are copied as they are.
_SCHEMA_SCALARS = ("format", "title", "description", "default", "multipleOf", "maximum", "exclusiveMaximum",
                   "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems",
                   "uniqueItems", "maxProperties", "minProperties", "required", "enum", "type", "readOnly",
                   "example", "discriminator")


# v3 -> v2 (JSON) ------------------------------------------------------------------


def _ref(ref: str) -> str:
    return V2_REF + ref[len(V3_REF):] if ref.startswith(V3_REF) else ref


def convert_schema(s: Any) -> Any:
    if not isinstance(s, dict):
        return s
    all_of = s.get("allOf")
    if (isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict)
            and "$ref" in all_of[0] and "properties" not in s and "type" not in s):
        # kube's v3 documents wrap a described ref as {"allOf": [{"$ref": ...}], "default": {}}; v2 has
        # {"$ref": ..., "description": ...} (kube-openapi's v2 parser rejects a $ref next to a type).
        out: Obj = {"$ref": _ref(all_of[0]["$ref"])}
        if "description" in s:
            out["description"] = s["description"]
        out.update((k, v) for k, v in s.items() if k.startswith("x-"))
        return out
    out = {}
    for k, v in s.items():
        if k == "$ref":
            out["$ref"] = _ref(v)
        elif k in _SCHEMA_SCALARS or k.startswith("x-"):
            out[k] = v
        elif k == "properties":
            out[k] = {name: convert_schema(p) for name, p in v.items()}
        elif k == "items":
            out[k] = convert_schema(v)
        elif k == "additionalProperties":
            out[k] = v if isinstance(v, bool) else convert_schema(v)
        elif k == "allOf":
            out[k] = [convert_schema(x) for x in v]
        elif k == "nullable" and v:
            out["x-nullable"] = True
        # oneOf, anyOf, not, writeOnly, ...: no Swagger 2.0 equivalent; dropped as kube-openapi does
    return out


def convert_parameter(p: Obj) -> Obj:
    if "$ref" in p:
        return {"$ref": p["$ref"]}
    out: Obj = {}
    schema = p.get("schema") or {}
    for k in ("uniqueItems", "type", "format", "enum", "default"):
        if k in schema:
            out[k] = schema[k]
    for k in ("description", "name", "in", "required"):
        if k in p:
            out[k] = p[k]
    if p.get("in") == "path":
        out["required"] = True
    out.update((k, v) for k, v in p.items() if k.startswith("x-"))
    return out


def _first_schema(content: Mapping[str, Any]) -> Any:
    for media in content.values():
        if isinstance(media, dict) and "schema" in media:
            return convert_schema(media["schema"])
    return None


def convert_operation(op: Obj, patch: bool) -> Obj:
    out: Obj = {}
    for k in ("tags", "summary", "description", "operationId", "deprecated"):
        if k in op:
            out[k] = op[k]
    body = op.get("requestBody")
    consumes = ["*/*"]
    if patch and body:
        consumes = list((body.get("content") or {}).keys()) or consumes
    out["consumes"] = consumes
    produces: list[str] = []
    responses: Obj = {}
    for code, resp in (op.get("responses") or {}).items():
        r: Obj = {"description": resp.get("description", "")}
        content = resp.get("content") or {}
        schema = _first_schema(content)
        if schema is not None:
            r["schema"] = schema
        produces += [m for m in content if m not in produces]
        responses[code] = r
    if produces:
        out["produces"] = produces
    out["schemes"] = ["https"]
    params: list[Obj] = []
    if body:
        bp: Obj = {"name": "body", "in": "body"}
        if body.get("required"):
            bp["required"] = True
        schema = _first_schema(body.get("content") or {})
        if schema is not None:
            bp["schema"] = schema
        if body.get("description"):
            bp["description"] = body["description"]
        params.append(bp)
    params += [convert_parameter(p) for p in op.get("parameters") or []]
    if params:
        out["parameters"] = params
    out["responses"] = responses
    out.update((k, v) for k, v in op.items() if k.startswith("x-"))
    return out


def convert_path_item(item: Obj) -> Obj:
    out: Obj = {}
    for m in METHODS:
        if m in item:
            out[m] = convert_operation(item[m], m == "patch")
    if item.get("parameters"):
        out["parameters"] = [convert_parameter(p) for p in item["parameters"]]
    out.update((k, v) for k, v in item.items() if k.startswith("x-"))
    return out


def convert(docs: Iterable[Obj]) -> Obj:
    """One Swagger 2.0 document from the OpenAPI v3 documents of every group-version."""
    paths: Obj = {}
    definitions: Obj = {}
    security_definitions: Obj = {}
    info: Obj = {"title": "Kubernetes", "version": "unversioned"}
    for doc in docs:
        info = doc.get("info") or info
        for path, item in (doc.get("paths") or {}).items():
            paths.setdefault(path, convert_path_item(item))
        components = doc.get("components") or {}
        for name, schema in (components.get("schemas") or {}).items():
            if name not in definitions:
                definitions[name] = convert_schema(schema)
        for name, scheme in (components.get("securitySchemes") or {}).items():
            if scheme.get("type") == "apiKey":
                keys = ("description", "type", "name", "in")
                security_definitions.setdefault(name, {k: scheme[k] for k in keys if k in scheme})
    out: Obj = {"swagger": "2.0", "info": {k: info[k] for k in ("title", "version") if k in info},
                "paths": dict(sorted(paths.items())), "definitions": dict(sorted(definitions.items()))}
    if security_definitions:
        out["securityDefinitions"] = security_definitions
        out["security"] = [{name: []} for name in security_definitions]
    return out


# v2 JSON -> gnostic protobuf -----------------------------------------------------------


def _any(value: Any) -> oa.Any:
    """gnostic keeps extension, default, enum and example values as their YAML text."""
    if isinstance(value, (dict, list)):
        text = yaml.dump(value, Dumper=_Dumper, default_flow_style=False, sort_keys=False)
    else:
        text = orjson.dumps(value).decode() + "\n"  # a JSON scalar is a YAML scalar, quoted where needed
    return oa.Any(yaml=text)


def _extensions(obj: Obj) -> list[oa.NamedAny]:
    return [oa.NamedAny(name=k, value=_any(v)) for k, v in obj.items() if k.startswith("x-")]


def schema_pb(s: Obj) -> oa.Schema:
    out = oa.Schema()
    if "$ref" in s:
        out._ref = s["$ref"]
    for key, attr in (("format", "format"), ("title", "title"), ("description", "description"),
                      ("pattern", "pattern"), ("discriminator", "discriminator")):
        if key in s:
            setattr(out, attr, s[key])
    for key, attr in (("multipleOf", "multiple_of"), ("maximum", "maximum"), ("minimum", "minimum")):
        if key in s:
            setattr(out, attr, float(s[key]))
    for key, attr in (("maxLength", "max_length"), ("minLength", "min_length"), ("maxItems", "max_items"),
                      ("minItems", "min_items"), ("maxProperties", "max_properties"),
                      ("minProperties", "min_properties")):
        if key in s:
            setattr(out, attr, int(s[key]))
    for key, attr in (("exclusiveMaximum", "exclusive_maximum"), ("exclusiveMinimum", "exclusive_minimum"),
                      ("uniqueItems", "unique_items"), ("readOnly", "read_only")):
        if key in s:
            setattr(out, attr, bool(s[key]))
    if "default" in s:
        out.default.CopyFrom(_any(s["default"]))
    if "example" in s:
        out.example.CopyFrom(_any(s["example"]))
    out.required.extend(s.get("required") or [])
    out.enum.extend(_any(v) for v in s.get("enum") or [])
    if "type" in s:
        t = s["type"]
        out.type.value.extend(t if isinstance(t, list) else [t])
    if "items" in s:
        items = s["items"]
        out.items.schema.extend(schema_pb(i) for i in (items if isinstance(items, list) else [items]))
    if "additionalProperties" in s:
        ap = s["additionalProperties"]
        if isinstance(ap, bool):
            out.additional_properties.boolean = ap
        else:
            out.additional_properties.schema.CopyFrom(schema_pb(ap))
    out.all_of.extend(schema_pb(x) for x in s.get("allOf") or [])
    if "properties" in s:
        out.properties.SetInParent()
        out.properties.additional_properties.extend(oa.NamedSchema(name=k, value=schema_pb(v))
                                                    for k, v in s["properties"].items())
    out.vendor_extension.extend(_extensions(s))
    return out


def _parameter_pb(p: Obj) -> oa.ParametersItem:
    item = oa.ParametersItem()
    if "$ref" in p:
        item.json_reference._ref = p["$ref"]
        return item
    where = p.get("in", "")
    if where == "body":
        body = item.parameter.body_parameter
        body.name, body.required = p.get("name", ""), bool(p.get("required"))
        setattr(body, "in", "body")
        body.description = p.get("description", "")
        if "schema" in p:
            body.schema.CopyFrom(schema_pb(p["schema"]))
        body.vendor_extension.extend(_extensions(p))
        return item
    nb = item.parameter.non_body_parameter
    sub: Any = nb.path_parameter_sub_schema if where == "path" else nb.query_parameter_sub_schema
    sub.required = bool(p.get("required"))
    setattr(sub, "in", where)
    sub.description, sub.name = p.get("description", ""), p.get("name", "")
    sub.type, sub.format = p.get("type", ""), p.get("format", "")
    sub.unique_items = bool(p.get("uniqueItems"))
    if "default" in p:
        sub.default.CopyFrom(_any(p["default"]))
    sub.enum.extend(_any(v) for v in p.get("enum") or [])
    sub.vendor_extension.extend(_extensions(p))
    return item


def _operation_pb(op: Obj) -> oa.Operation:
    out = oa.Operation(tags=op.get("tags") or [], summary=op.get("summary", ""),
                       description=op.get("description", ""), operation_id=op.get("operationId", ""),
                       produces=op.get("produces") or [], consumes=op.get("consumes") or [],
                       schemes=op.get("schemes") or [], deprecated=bool(op.get("deprecated")))
    out.parameters.extend(_parameter_pb(p) for p in op.get("parameters") or [])
    out.responses.SetInParent()
    for code, resp in (op.get("responses") or {}).items():
        r = oa.Response(description=resp.get("description", ""))
        if "schema" in resp:
            r.schema.schema.CopyFrom(schema_pb(resp["schema"]))
        r.vendor_extension.extend(_extensions(resp))
        out.responses.response_code.append(
            oa.NamedResponseValue(name=code, value=oa.ResponseValue(response=r)))
    out.vendor_extension.extend(_extensions(op))
    return out


def document_pb(doc: Obj) -> oa.Document:
    """gnostic's openapi.v2.Document for a Swagger 2.0 document, as kube-openapi's ToProtoBinary makes it."""
    out = oa.Document(swagger=doc.get("swagger", "2.0"))
    info = doc.get("info") or {}
    out.info.title, out.info.version = info.get("title", ""), info.get("version", "")
    out.info.description = info.get("description", "")
    out.paths.SetInParent()
    for path, item in (doc.get("paths") or {}).items():
        pi = oa.PathItem()
        for m in METHODS:
            if m in item:
                getattr(pi, m).CopyFrom(_operation_pb(item[m]))
        pi.parameters.extend(_parameter_pb(p) for p in item.get("parameters") or [])
        pi.vendor_extension.extend(_extensions(item))
        out.paths.path.append(oa.NamedPathItem(name=path, value=pi))
    out.definitions.SetInParent()
    out.definitions.additional_properties.extend(oa.NamedSchema(name=k, value=schema_pb(v))
                                                 for k, v in (doc.get("definitions") or {}).items())
    if "securityDefinitions" in doc:
        out.security_definitions.SetInParent()
        for name, sd in doc["securityDefinitions"].items():
            item = oa.SecurityDefinitionsItem()
            key = item.api_key_security
            key.type, key.name = sd.get("type", ""), sd.get("name", "")
            key.description = sd.get("description", "")
            setattr(key, "in", sd.get("in", ""))
            out.security_definitions.additional_properties.append(
                oa.NamedSecurityDefinitionsItem(name=name, value=item))
    for req in doc.get("security") or []:
        out.security.append(oa.SecurityRequirement(additional_properties=[
            oa.NamedStringArray(name=k, value=oa.StringArray(value=v)) for k, v in req.items()]))
    out.vendor_extension.extend(_extensions(doc))
    return out


# serving ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Built:
    """The encoded /openapi/v2 answers and their ETag (kube-openapi: SHA-512 of the JSON, upper-case hex)."""
    source: str  # digest of the v3 documents it was built from
    json: bytes
    protobuf: bytes
    etag: str


def source_digest(v3: Mapping[str, bytes]) -> str:
    h = hashlib.sha256()
    for key in sorted(v3):
        h.update(key.encode() + b"\0" + hashlib.sha256(v3[key]).digest())
    return h.hexdigest()


def build(v3: Mapping[str, bytes], previous: Built | None = None) -> Built:
    """The v2 answers for these v3 documents; previous when they are built from the same documents."""
    source = source_digest(v3)
    if previous is not None and previous.source == source:
        return previous
    doc = convert(orjson.loads(v3[key]) for key in sorted(v3, key=_doc_order))
    body = orjson.dumps(doc)
    return Built(source, body, document_pb(doc).SerializeToString(), hashlib.sha512(body).hexdigest().upper())


def _doc_order(key: str) -> tuple[int, str]:
    return (0 if key.startswith("api/") else 1, key)


def negotiate(accept: str) -> str | None:
    """JSON or PROTOBUF for an Accept header as kube-openapi's handler picks, or None (406)."""
    ranges = [parse_media_type(p) for p in (accept or "*/*").split(",") if p.strip()]
    # goautoneg: by q, then the more specific first, else as listed
    ranges = sorted((r for r in ranges if r.q > 0),
                    key=lambda r: (-r.q, r.type == "*", r.subtype == "*"))
    for r in ranges:
        if r.type not in ("application", "*"):
            continue
        if r.subtype in ("json", "*"):
            return JSON
        if r.subtype in _PROTOBUF_SUBTYPES:
            return PROTOBUF
    return None
