"""OpenAPI v3 documents, one per group-version, as kube-apiserver serves /openapi/v3/<path> (kube-openapi's
builder): paths from a catalogue's resource definitions, schemas from the server's definitions (Kubernetes'
own for the registry, services/apis/schemas.py; an aggregated server's kinds beside them for the kit)."""
from __future__ import annotations

from typing import Any, Protocol

import orjson

from .catalogue import Catalogue, ResourceInfo
from .typed import REF_PREFIX

Obj = dict[str, Any]
META = "io.k8s.apimachinery.pkg.apis.meta.v1."


class Definitions(Protocol):
    """The schemas a document names and carries (the module services.apis.schemas is one)."""

    KUBERNETES_VERSION: str

    def definition_for(self, group: str, version: str, kind: str) -> str: ...

    def refs_of(self, names: list[str]) -> dict[str, Obj]: ...

_STR = {"type": "string", "uniqueItems": True}
_BOOL = {"type": "boolean", "uniqueItems": True}
_INT = {"type": "integer", "uniqueItems": True}


def _q(name: str, desc: str, schema: Obj = _STR) -> Obj:
    return {"name": name, "in": "query", "description": desc, "schema": dict(schema)}


PRETTY = _q("pretty", "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent "
            "indicates a browser or command-line HTTP tool (curl and wget).")
DRY_RUN = _q("dryRun", "When present, indicates that modifications should not be persisted. An invalid or "
             "unrecognized dryRun directive will result in an error response and no further processing of the "
             "request. Valid values are: - All: all dry run stages will be processed")
FIELD_MANAGER = _q("fieldManager", "fieldManager is a name associated with the actor or entity that is making "
                   "these changes. The value must be less than or 128 characters long, and only contain printable "
                   "characters, as defined by https://golang.org/pkg/unicode/#IsPrint.")
FIELD_VALIDATION = _q("fieldValidation", "fieldValidation instructs the server on how to handle objects in the "
                      "request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - "
                      "Ignore: This will ignore any unknown fields that are silently dropped from the object, and "
                      "will ignore all but the last duplicate field that the decoder encounters. - Warn: This will "
                      "send a warning via the standard warning response header for each unknown field that is "
                      "dropped from the object, and for each duplicate field that is encountered. - Strict: This "
                      "will fail the request with a BadRequest error if any unknown fields would be dropped from "
                      "the object, or if any duplicate fields are present.")
FORCE = _q("force", "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields "
           "owned by other people. Force flag must be unset for non-apply patch requests.", _BOOL)
GRACE = _q("gracePeriodSeconds", "The duration in seconds before the object should be deleted.", _INT)
PROPAGATION = _q("propagationPolicy", "Whether and how garbage collection will be performed. Acceptable values "
                 "are: 'Orphan', 'Background', 'Foreground'.")
ORPHAN = _q("orphanDependents", "Deprecated: please use the PropagationPolicy, this field will be deprecated in "
            "1.7.", _BOOL)
IGNORE_READ_ERR = _q("ignoreStoreReadErrorWithClusterBreakingPotential", "if set to true, it will trigger an "
                     "unsafe deletion of the resource in case the normal deletion flow fails with a corrupt "
                     "object error.", _BOOL)
LIST_PARAMS = [
    _q("allowWatchBookmarks", "allowWatchBookmarks requests watch events with type \"BOOKMARK\".", _BOOL),
    _q("continue", "The continue option should be set when retrieving more results from the server."),
    _q("fieldSelector", "A selector to restrict the list of returned objects by their fields. Defaults to "
       "everything."),
    _q("labelSelector", "A selector to restrict the list of returned objects by their labels. Defaults to "
       "everything."),
    _q("limit", "limit is a maximum number of responses to return for a list call.", _INT),
    _q("resourceVersion", "resourceVersion sets a constraint on what resource versions a request may be served "
       "from."),
    _q("resourceVersionMatch", "resourceVersionMatch determines how resourceVersion is applied to list calls."),
    _q("sendInitialEvents", "`sendInitialEvents=true` may be set together with `watch=true`.", _BOOL),
    _q("timeoutSeconds", "Timeout for the list/watch call.", _INT),
    _q("watch", "Watch for changes to the described resources and return them as a stream of add, update, and "
       "remove notifications. Specify resourceVersion.", _BOOL),
]
DELETE_COLLECTION_PARAMS = [p for p in LIST_PARAMS if p["name"] not in ("allowWatchBookmarks", "watch")]

MEDIA = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")
PATCH_MEDIA = ("application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json",
               "application/strategic-merge-patch+json")


def _ref(name: str) -> Obj:
    return {"$ref": REF_PREFIX + name}


def _content(schema_name: str, media: tuple[str, ...] = MEDIA) -> Obj:
    return {m: {"schema": _ref(schema_name)} for m in media}


def _responses(schema_name: str, codes: tuple[str, ...] = ("200",)) -> Obj:
    text = {"200": "OK", "201": "Created", "202": "Accepted"}
    out: Obj = {c: {"description": text[c], "content": _content(schema_name)} for c in codes}
    out["401"] = {"description": "Unauthorized"}
    return out


def _path_param(name: str, desc: str) -> Obj:
    return {"name": name, "in": "path", "description": desc, "required": True, "schema": dict(_STR)}


def _op_name(r: ResourceInfo) -> str:
    if not r.group:
        return "CoreV1"
    first = r.group.split(".")[0]
    return first[:1].upper() + first[1:] + r.version[:1].upper() + r.version[1:]


def _tag(r: ResourceInfo) -> str:
    if not r.group:
        return "core_v1"
    return r.group.split(".")[0] + "_" + r.version


def resource_paths(r: ResourceInfo, schema: str, definitions: Definitions) -> dict[str, Obj]:
    base = "/api/v1" if not r.group else f"/apis/{r.group}/{r.version}"
    gvk = {"group": r.group, "version": r.version, "kind": r.kind}
    op = _op_name(r)
    ns_word = "Namespaced" if r.namespaced else ""
    kind = r.kind
    list_schema = "" if r.virtual else definitions.definition_for(r.group, r.version, r.list_kind)
    coll = f"{base}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else f"{base}/{r.plural}"
    item = f"{coll}/{{name}}"
    watch_coll = (f"{base}/watch/namespaces/{{namespace}}/{r.plural}" if r.namespaced
                  else f"{base}/watch/{r.plural}")
    common = [PRETTY]
    ns_param = [_path_param("namespace", "object name and auth scope, such as for teams and projects")] \
        if r.namespaced else []
    name_param = [_path_param("name", f"name of the {kind}")]

    def operation(action: str, op_id: str, desc: str, params: list[Obj], responses: Obj,
                  body: Obj | None = None) -> Obj:
        out: Obj = {"tags": [_tag(r)], "description": desc, "operationId": op_id}
        if params:
            out["parameters"] = params
        if body is not None:
            out["requestBody"] = body
        out["responses"] = responses
        out["x-kubernetes-action"] = action
        out["x-kubernetes-group-version-kind"] = dict(gvk)
        return out

    write_params = [DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION]
    if r.virtual:
        # Create-only kinds (the reviews) have one operation: POST on the collection.
        return {coll: {
            "post": operation("post", f"create{op}{ns_word}{kind}", f"create a {kind}", write_params,
                              _responses(schema, ("200", "201", "202")),
                              {"content": _content(schema), "required": True}),
            "parameters": ns_param + common,
        }}
    delete_body = {"content": _content(META + "DeleteOptions", MEDIA[:2] + MEDIA[2:])}
    paths: dict[str, Obj] = {
        coll: {
            "get": operation("list", f"list{op}{ns_word}{kind}", f"list or watch objects of kind {kind}",
                             LIST_PARAMS, _responses(list_schema)),
            "post": operation("post", f"create{op}{ns_word}{kind}", f"create a {kind}", write_params,
                              _responses(schema, ("200", "201", "202")),
                              {"content": _content(schema), "required": True}),
            "parameters": ns_param + common,
        },
        item: {
            "get": operation("get", f"read{op}{ns_word}{kind}", f"read the specified {kind}", [],
                             _responses(schema)),
            "put": operation("put", f"replace{op}{ns_word}{kind}", f"replace the specified {kind}",
                             write_params, _responses(schema, ("200", "201")),
                             {"content": _content(schema), "required": True}),
            "delete": operation("delete", f"delete{op}{ns_word}{kind}", f"delete a {kind}",
                                [DRY_RUN, GRACE, IGNORE_READ_ERR, ORPHAN, PROPAGATION],
                                _responses(META + "Status", ("200", "202")), delete_body),
            "patch": operation("patch", f"patch{op}{ns_word}{kind}",
                               f"partially update the specified {kind}", write_params + [FORCE],
                               _responses(schema, ("200", "201")),
                               {"content": {m: {"schema": _ref(META + "Patch")} for m in PATCH_MEDIA},
                                "required": True}),
            "parameters": name_param + ns_param + common,
        },
        watch_coll: {
            "get": operation("watchlist", f"watch{op}{ns_word}{kind}List",
                             f"watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter "
                             "with a list operation instead.", [],
                             _responses(META + "WatchEvent")),
            "parameters": LIST_PARAMS + ns_param + common,
        },
    }
    if "deletecollection" in r.verbs:
        paths[coll]["delete"] = operation("deletecollection", f"delete{op}Collection{ns_word}{kind}",
                                          f"delete collection of {kind}",
                                          DELETE_COLLECTION_PARAMS + [DRY_RUN, GRACE, IGNORE_READ_ERR, ORPHAN,
                                                                      PROPAGATION],
                                          _responses(META + "Status"), delete_body)
    if r.namespaced:
        paths[f"{base}/{r.plural}"] = {
            "get": operation("list", f"list{op}{kind}ForAllNamespaces",
                             f"list or watch objects of kind {kind}", [], _responses(list_schema)),
            "parameters": LIST_PARAMS + common,
        }
    for s in r.subresources:
        sub_path = f"{item}/{s.name}"
        ops: Obj = {"parameters": name_param + ns_param + common}
        title = s.name
        # serviceaccounts/token, <workload>/scale, pods/binding: the request and answer are a kind of their
        # own (TokenRequest, autoscaling/v1 Scale, Binding)
        sub_schema = schema if s.group is None and s.kind == r.kind else definitions.definition_for(
            s.group if s.group is not None else r.group, s.version or r.version, s.kind)
        if "create" in s.verbs:
            post = operation("post", f"create{op}{ns_word}{kind}{title.capitalize()}",
                             f"create {title} of a {kind}", write_params,
                             _responses(sub_schema, ("200", "201", "202")),
                             {"content": _content(sub_schema), "required": True})
            post["x-kubernetes-group-version-kind"] = {"group": s.group if s.group is not None else r.group,
                                                       "version": s.version or r.version, "kind": s.kind}
            ops["post"] = post
        if "get" in s.verbs:
            ops["get"] = operation("get", f"read{op}{ns_word}{kind}{title.capitalize()}",
                                   f"read {title} of the specified {kind}", [], _responses(sub_schema))
        if "update" in s.verbs:
            ops["put"] = operation("put", f"replace{op}{ns_word}{kind}{title.capitalize()}",
                                   f"replace {title} of the specified {kind}", write_params,
                                   _responses(sub_schema, ("200", "201")), {"content": _content(sub_schema),
                                                                             "required": True})
        if "patch" in s.verbs:
            ops["patch"] = operation("patch", f"patch{op}{ns_word}{kind}{title.capitalize()}",
                                     f"partially update {title} of the specified {kind}", write_params + [FORCE],
                                     _responses(sub_schema, ("200", "201")),
                                     {"content": {m: {"schema": _ref(META + "Patch")} for m in PATCH_MEDIA},
                                      "required": True})
        paths[sub_path] = ops
    return paths


def document(catalogue: Catalogue, definitions: Definitions, group: str, version: str) -> Obj:
    paths: dict[str, Obj] = {}
    names = [META + n for n in ("DeleteOptions", "Status", "WatchEvent", "Patch")]
    for r in catalogue.in_group_version(group, version):
        schema = definitions.definition_for(r.group, r.version, r.kind)
        names += [schema] if r.virtual else [schema, definitions.definition_for(r.group, r.version, r.list_kind)]
        names += [definitions.definition_for(s.group if s.group is not None else r.group, s.version or r.version,
                                         s.kind)
                  for s in r.subresources if s.group is not None or s.kind != r.kind]
        paths.update(resource_paths(r, schema, definitions))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": definitions.KUBERNETES_VERSION},
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": definitions.refs_of(names),
                       "securitySchemes": {"BearerToken": {"type": "apiKey", "description": "Bearer Token "
                                                           "authentication", "name": "authorization",
                                                           "in": "header"}}},
        "security": [{"BearerToken": []}],
    }


def documents(catalogue: Catalogue, definitions: Definitions) -> dict[str, bytes]:
    out = {}
    for g, ver in catalogue.group_versions():
        key = f"apis/{g}/{ver}" if g else f"api/{ver}"
        out[key] = orjson.dumps(document(catalogue, definitions, g, ver))
    return out
