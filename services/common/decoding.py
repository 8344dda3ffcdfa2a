"""Bounded decoding of request bodies: JSON and YAML into objects, with kube's limits on alias
expansion and limits on nesting depth, so that a small hostile body cannot cost more than its size.

kube-apiserver decodes YAML with go-yaml, which since CVE-2019-11253 refuses a document whose alias
expansion outgrows the document ("yaml: document contains excessive aliasing", allowedAliasRatio in
gopkg.in/yaml.v2 decode.go); the same rule is applied here to the composed node graph before any
object is built. Nesting is limited to MAX_DEPTH levels (see there).
"""
from __future__ import annotations

import json
import re
from typing import Any

import orjson
import yaml

from .errors import BadRequest

try:  # libyaml when available: an order of magnitude faster than the pure-Python codec
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader

# kube allows 10000 levels (Go's encoding/json maxNestingDepth, go-yaml's max depth), but apiary's
# own encoder (orjson) writes at most 254 and an object travels wrapped a few levels deeper (list,
# watch event, AdmissionReview, Table); 200 leaves room for that, far above any real object.
MAX_DEPTH = 200

# go-yaml's alias budget (decode.go allowedAliasRatio): up to 400,000 decoded nodes 99 % may come
# from alias expansion, from 4,000,000 only 10 %, linearly in between.
_ALIAS_RATIO_LOW, _ALIAS_RATIO_HIGH = 400_000, 4_000_000
EXCESSIVE_ALIASING = "yaml: document contains excessive aliasing"
_KEY_TOKEN = re.compile(rb'"\s*:')
_INT = re.compile(r"[+-]?[0-9]+")


def depth_error() -> str:
    return f"exceeded max depth of {MAX_DEPTH}"


def _allowed_alias_ratio(decoded: int) -> float:
    if decoded <= _ALIAS_RATIO_LOW:
        return 0.99
    if decoded >= _ALIAS_RATIO_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decoded - _ALIAS_RATIO_LOW) / (_ALIAS_RATIO_HIGH - _ALIAS_RATIO_LOW)


def parse_int64(value: str) -> int:
    """An integer query parameter as kube's parameter codec reads it (strconv.ParseInt), with its
    errors as kube's 400 messages."""
    if not _INT.fullmatch(value):
        raise BadRequest(f'strconv.ParseInt: parsing "{value}": invalid syntax')
    n = int(value)
    if not -2**63 <= n < 2**63:
        raise BadRequest(f'strconv.ParseInt: parsing "{value}": value out of range')
    return n


# JSON ---------------------------------------------------------------------------------------


def _shape(obj: Any) -> tuple[int, int]:
    """(nesting depth, number of object keys) of a decoded body, walked a level at a time (a list
    comprehension per level, no recursion); counting stops past MAX_DEPTH."""
    keys, depth, level = 0, 0, [obj]
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            return depth, keys
        nxt: list[Any] = []
        for o in level:
            if type(o) is dict:
                keys += len(o)
                nxt += [c for c in o.values() if type(c) is dict or type(c) is list]
            elif type(o) is list:
                nxt += [c for c in o if type(c) is dict or type(c) is list]
        level = nxt
    return depth, keys


def too_deep(obj: Any, body: bytes) -> bool:
    """Whether obj, decoded from body, nests more than MAX_DEPTH objects and arrays. Most bodies are
    cleared by counting their brackets (none nests deeper than it opens), without a walk."""
    if body.count(b"{") + body.count(b"[") <= MAX_DEPTH:
        return False
    return _shape(obj)[0] > MAX_DEPTH


def loads_json(body: bytes) -> Any:
    """orjson.loads with the depth limit; raises ValueError (orjson's JSONDecodeError is one)."""
    obj = orjson.loads(body)
    if isinstance(obj, (dict, list)) and too_deep(obj, body):
        raise ValueError(depth_error())
    return obj


def loads_json_fields(body: bytes) -> tuple[Any, list[str]]:
    """loads_json, and the fields the body repeats (see duplicate_fields), with one walk."""
    obj = orjson.loads(body)
    depth, keys = _shape(obj)
    if depth > MAX_DEPTH:
        raise ValueError(depth_error())
    return obj, duplicate_fields(body, keys)


class _Pairs(list):
    """An object's members in document order, duplicates kept (json object_pairs_hook)."""


def duplicate_fields(body: bytes, keys: int) -> list[str]:
    """The paths of fields that occur twice in one object of the JSON body (kube's strict decoding:
    'duplicate field "metadata.name"'), in document order. keys is the number of keys the decoded
    body holds: every key in the text is followed by a colon, so when the text has no more colons
    (or, counted more closely, quote-colon pairs) than that, no key was repeated and dropped, and
    the exact, slower scan is skipped."""
    if body.count(b":") == keys or len(_KEY_TOKEN.findall(body)) == keys:
        return []
    tree = json.loads(body, object_pairs_hook=_Pairs)
    found: list[str] = []
    # (value, its path, whether its key repeats one before it); popped in document order
    stack: list[tuple[Any, str, bool]] = [(tree, "", False)]
    while stack:
        o, path, repeated = stack.pop()
        if repeated:
            found.append(path)
        items: list[tuple[Any, str, bool]] = []
        if isinstance(o, _Pairs):
            seen: set[str] = set()
            for k, v in o:
                items.append((v, f"{path}.{k}" if path else k, k in seen))
                seen.add(k)
        elif isinstance(o, list):
            items = [(v, f"{path}[{i}]", False) for i, v in enumerate(o)]
        stack.extend(reversed(items))
    return found


# YAML ---------------------------------------------------------------------------------------


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return node.value
    return []


def check_yaml_graph(root: yaml.Node) -> None:
    """go-yaml's counting over the composed graph, in document order: every node decoded counts, and
    an alias counts its whole target again. A node met a second time is an alias (an anchor precedes
    its aliases); one met while still open is an alias of its own ancestor. Depth counts the depth
    the expanded object would have."""
    done: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded node count, expanded height)
    decoded, aliased = 1, 0
    # frames: [node, its children, next child index, expanded count so far, height so far]
    stack: list[list[Any]] = [[root, _children(root), 0, 1, 1]]
    open_ids = {id(root)}
    while stack:
        frame = stack[-1]
        node, children, i = frame[0], frame[1], frame[2]
        if i == len(children):
            stack.pop()
            open_ids.discard(id(node))
            done[id(node)] = (frame[3], frame[4])
            if stack:
                stack[-1][3] += frame[3]
                stack[-1][4] = max(stack[-1][4], frame[4] + 1)
            continue
        frame[2] = i + 1
        child = children[i]
        cid = id(child)
        if cid in open_ids:
            raise BadRequest("error converting YAML to JSON: yaml: anchor value contains itself")
        seen = done.get(cid)
        if seen is not None:
            size, height = seen
            decoded += 1 + size
            aliased += size
            if aliased > 100 and decoded > 1000 and aliased / decoded > _allowed_alias_ratio(decoded):
                raise BadRequest(f"error converting YAML to JSON: {EXCESSIVE_ALIASING}")
            if len(stack) + height > MAX_DEPTH:
                raise BadRequest(f"error converting YAML to JSON: yaml: {depth_error()}")
            frame[3] += size
            frame[4] = max(frame[4], height + 1)
            continue
        decoded += 1
        if isinstance(child, yaml.ScalarNode):
            done[cid] = (1, 0)
            frame[3] += 1
            continue
        if len(stack) + 1 > MAX_DEPTH:
            raise BadRequest(f"error converting YAML to JSON: yaml: {depth_error()}")
        open_ids.add(cid)
        stack.append([child, _children(child), 0, 1, 1])


def yaml_to_json(body: bytes) -> bytes:
    """One YAML document as JSON, refused with a 400 when it is malformed, aliases excessively or
    nests too deep."""
    try:
        loader = _Loader(body)
        try:
            node = loader.get_single_node()
            if node is None:
                obj = None
            else:
                check_yaml_graph(node)
                obj = loader.construct_document(node)
        finally:
            loader.dispose()
        return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)
    except (yaml.YAMLError, orjson.JSONEncodeError, UnicodeDecodeError) as e:
        raise BadRequest(f"error converting YAML to JSON: {e}") from None
