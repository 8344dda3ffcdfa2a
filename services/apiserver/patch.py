"""The patch types: JSON patch, JSON merge patch, strategic merge patch (apply is fieldmanager's)."""
from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import jsonpointer
import orjson

from services.common.decoding import loads_json, yaml_to_json
from services.common.errors import BadRequest, Invalid, RequestEntityTooLarge, UnsupportedMediaType

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)
MAX_JSON_PATCH_OPERATIONS = 10000

Obj = dict[str, Any]


def patch_type(content_type: str) -> str:
    media = content_type.split(";")[0].strip().lower()
    if media not in PATCH_TYPES:
        raise UnsupportedMediaType(f"the body of the request was in an unknown format - accepted media types "
                                   f"include: {', '.join(PATCH_TYPES)}")
    return media


def rejected(why: str) -> Invalid:
    """kube's NewGenericServerResponse(422): the detail travels as a cause."""
    return Invalid("the server rejected our request due to an error in our request",
                   details={"causes": [{"reason": "UnexpectedServerResponse", "message": why}]})


def decode_patch(body: bytes, ptype: str) -> Any:
    try:
        return loads_json(body or b"null")
    except ValueError as e:
        if ptype == APPLY_PATCH:
            try:
                return orjson.loads(yaml_to_json(body))
            except BadRequest:
                pass
        raise BadRequest(f"error decoding patch: {e}") from None


# JSON patch (RFC 6902) --------------------------------------------------------


def apply_json_patch(doc: Obj, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise BadRequest("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    if len(ops) > MAX_JSON_PATCH_OPERATIONS:
        # kube: errors.NewRequestEntityTooLargeError
        raise RequestEntityTooLarge(f"Request entity too large: The allowed maximum operations in a JSON patch "
                                    f"is {MAX_JSON_PATCH_OPERATIONS}, got {len(ops)}")
    out = copy.deepcopy(doc)
    op: Any = None
    try:
        for op in ops:   # one at a time, so that a failed test names its path as kube's json-patch does
            out = jsonpatch.JsonPatch([op]).apply(out, in_place=True)
        return out
    except jsonpatch.JsonPatchTestFailed:
        path = op.get("path") if isinstance(op, dict) else None
        raise rejected(f"testing value {path} failed: test failed") from None
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, KeyError, TypeError,
            IndexError, AttributeError) as e:
        raise rejected(str(e) or type(e).__name__) from None


# JSON merge patch (RFC 7386) --------------------------------------------------


def apply_merge_patch(doc: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(doc) if isinstance(doc, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = apply_merge_patch(out.get(k), v)
    return out


def create_merge_patch(original: Any, target: Any) -> Any:
    """The merge patch that turns original into target (for dicts; anything else is replaced)."""
    if not isinstance(original, dict) or not isinstance(target, dict):
        return copy.deepcopy(target)
    out: Obj = {}
    for k in original:
        if k not in target:
            out[k] = None
    for k, v in target.items():
        if k not in original:
            out[k] = copy.deepcopy(v)
        elif original[k] != v:
            out[k] = create_merge_patch(original[k], v)
    return out


# Strategic merge patch ----------------------------------------------------------

_DIRECTIVE = "$patch"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"
_SET_ORDER = "$setElementOrder/"
_RETAIN_KEYS = "$retainKeys"
# mergepatch's errors that kube's patch handler answers 400 (interpretStrategicMergePatchError)
BAD_RETAIN_KEYS = "invalid patch format of retainKeys"
BAD_SET_ELEMENT_ORDER = "invalid patch format of setElementOrder list"
BAD_PRIMITIVE_LIST = "invalid patch format of primitive list"


def apply_strategic_merge_patch(doc: Obj, patch: Any, merge_keys: dict[str, str],
                                replaced: frozenset[str] = frozenset()) -> Obj:
    """Strategic merge: maps merge unless replaced names them, lists replace unless merge_keys names them
    (both by path, from the kind's schema)."""
    if not isinstance(patch, dict):
        raise BadRequest("unable to find api field in struct for the patch: expected a JSON object")
    try:
        return _smp_map(doc, patch, "", _Keys(merge_keys, replaced))
    except _SMPError as e:
        raise rejected(str(e)) from None


class _SMPError(Exception):
    pass


class _Keys(dict[str, str]):
    """merge_keys with the replaced maps beside them."""

    def __init__(self, merge_keys: dict[str, str], replaced: frozenset[str]) -> None:
        super().__init__(merge_keys)
        self.replaced = replaced


def _smp_map(original: Any, patch: Obj, path: str, merge_keys: _Keys) -> Any:
    directive = patch.get(_DIRECTIVE)
    if directive == "replace":
        return _clean({k: v for k, v in patch.items() if k != _DIRECTIVE})
    if directive == "delete":
        return None
    if directive not in (None, "merge"):
        raise _SMPError(f"Unknown patch type: {directive} in map: {patch}")
    out = dict(original) if isinstance(original, dict) else {}
    if _RETAIN_KEYS in patch:
        retain = patch[_RETAIN_KEYS]
        # a list of field names that names every field the patch sets (applyRetainKeysDirective)
        if not isinstance(retain, list) or not all(isinstance(x, str) for x in retain) or any(
                k not in retain for k, v in patch.items() if v is not None and not k.startswith("$")):
            raise BadRequest(BAD_RETAIN_KEYS)
        out = {k: val for k, val in out.items() if k in retain}
    orders: dict[str, list[Any]] = {}
    for k, v in patch.items():
        if k in (_DIRECTIVE, _RETAIN_KEYS):
            continue
        if k.startswith(_SET_ORDER):
            if not isinstance(v, list):
                raise BadRequest(BAD_SET_ELEMENT_ORDER)
            orders[k[len(_SET_ORDER):]] = v
            continue
        if k.startswith(_DELETE_PRIMITIVE):
            if not isinstance(v, list):
                raise BadRequest(BAD_PRIMITIVE_LIST)
            field = k[len(_DELETE_PRIMITIVE):]
            if isinstance(out.get(field), list):
                out[field] = [x for x in out[field] if x not in v]
            continue
        sub = f"{path}.{k}" if path else k
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and sub in merge_keys.replaced and _DIRECTIVE not in v:
            out[k] = _clean(v)
        elif isinstance(v, dict):
            merged = _smp_map(out.get(k), v, sub, merge_keys)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        elif isinstance(v, list) and sub in merge_keys:
            current = out.get(k) if isinstance(out.get(k), list) else []
            out[k] = _smp_list(current, v, merge_keys[sub], sub, merge_keys)
        else:
            out[k] = _clean(v)
    for field, order in orders.items():
        sub = f"{path}.{field}" if path else field
        if isinstance(out.get(field), list) and sub in merge_keys:
            out[field] = _set_element_order(out[field], order, merge_keys[sub], original, field)
    return out


def _clean(value: Any) -> Any:
    """A patch's value as it lands when nothing is there to merge with: no directives, no nulls."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()
                if v is not None and not k.startswith("$") and not k.startswith(_SET_ORDER)}
    if isinstance(value, list):
        return [_clean(x) for x in value if not (isinstance(x, dict) and x.get(_DIRECTIVE) == "delete")]
    return value


def _set_element_order(items: list[Any], order: list[Any], key: str, original: Any, field: str) -> list[Any]:
    """$setElementOrder: the items the order names in that order, the server's others kept where they were
    relative to them (normalizeElementOrder)."""
    def ident(x: Any) -> Any:
        return x.get(key) if key and isinstance(x, dict) else orjson.dumps(x)
    wanted = [ident(x) for x in order]
    rank = {k: i for i, k in enumerate(wanted)}
    server = (original or {}).get(field) if isinstance(original, dict) else None
    server_rank = {ident(x): i for i, x in enumerate(server or [])}
    ordered = sorted((x for x in items if ident(x) in rank), key=lambda x: rank[ident(x)])
    others = [x for x in items if ident(x) not in rank]
    out: list[Any] = []
    while ordered and others:
        head = server_rank.get(ident(ordered[0]))
        if head is not None and server_rank.get(ident(others[0]), len(server_rank)) > head or head is None:
            out.append(ordered.pop(0))
        else:
            out.append(others.pop(0))
    return out + ordered + others


def _smp_list(original: list[Any], patch: list[Any], key: str, path: str, merge_keys: _Keys) -> list[Any]:
    if not key:
        # A set of primitives: union, keeping the original order first.
        for item in patch:
            if isinstance(item, dict) and item.get(_DIRECTIVE) == "replace":
                return [x for x in patch if not isinstance(x, dict)]
        out = list(original)
        out.extend(x for x in patch if x not in out and not isinstance(x, dict))
        return out
    for item in patch:
        if isinstance(item, dict) and item.get(_DIRECTIVE) == "replace":
            return [_clean(x) for x in patch if not (isinstance(x, dict) and _DIRECTIVE in x)]
    out = [copy.deepcopy(x) for x in original]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise _SMPError(f"map: {item} does not contain declared merge key: {key}")
        idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item[key]), None)
        if item.get(_DIRECTIVE) == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(_smp_map({}, item, path, merge_keys))
        else:
            out[idx] = _smp_map(out[idx], item, path, merge_keys)
    return out
