"""Bounded decoding: go-yaml's alias budget, the depth limit, duplicate fields."""
import orjson
import pytest
import yaml

from services.common import decoding
from services.common.decoding import (
    MAX_DEPTH, duplicate_fields, loads_json, loads_json_fields, too_deep, yaml_to_json)
from services.common.errors import BadRequest


def bomb(levels: int, width: int = 9) -> bytes:
    names = [f"l{i}" for i in range(levels)]
    lines = [f"{names[0]}: &{names[0]} [{','.join('x' * width)}]"]
    lines += [f"{n}: &{n} [{','.join([f'*{p}'] * width)}]" for p, n in zip(names, names[1:])]
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("levels", [4, 9, 12])
def test_alias_bombs_are_refused(levels):
    with pytest.raises(BadRequest) as e:
        yaml_to_json(bomb(levels))
    assert e.value.code == 400
    assert e.value.message == "error converting YAML to JSON: yaml: document contains excessive aliasing"


def test_moderate_aliasing_is_allowed():
    # go-yaml lets small documents take up to 99 % of their nodes from aliases below 400,000 nodes
    assert len(orjson.loads(yaml_to_json(bomb(3)))) == 3
    doc = b"base: &b {x: 1, y: [1, 2, 3]}\nitems:\n" + b"".join(b"- *b\n" for _ in range(200))
    assert orjson.loads(yaml_to_json(doc))["items"][199] == {"x": 1, "y": [1, 2, 3]}


def test_alias_ratio_matches_go_yaml():
    assert decoding._allowed_alias_ratio(1000) == 0.99
    assert decoding._allowed_alias_ratio(4_000_000) == 0.10
    assert decoding._allowed_alias_ratio(2_200_000) == pytest.approx(0.545)


def test_recursive_alias_is_refused():
    with pytest.raises(BadRequest) as e:
        yaml_to_json(b"a: &a [*a]\n")
    assert "contains itself" in e.value.message


def test_yaml_depth_counts_aliases_where_they_expand():
    flow = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert yaml_to_json(flow)
    with pytest.raises(BadRequest) as e:
        yaml_to_json(b"[" + flow + b"]")
    assert e.value.message == f"error converting YAML to JSON: yaml: exceeded max depth of {MAX_DEPTH}"
    half = MAX_DEPTH // 2 + 1
    with pytest.raises(BadRequest):
        yaml_to_json(b"a: &a " + b"[" * half + b"]" * half + b"\nb: " + b"[" * half + b"*a" + b"]" * half)


def test_yaml_errors_and_plain_documents():
    assert yaml_to_json(b"a: 1\nb: [x, {c: d}]\n") == b'{"a":1,"b":["x",{"c":"d"}]}'
    assert yaml_to_json(b"") == b"null"
    for bad in (b"a: [", b"a: 1\n---\nb: 2\n", b"a: \x80\x81"):
        with pytest.raises(BadRequest):
            yaml_to_json(bad)


def test_json_depth():
    ok = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert loads_json(ok)
    with pytest.raises(ValueError, match="exceeded max depth of 200"):
        loads_json(b"[" + ok + b"]")
    wide = orjson.dumps({"items": [{"a": [1]} for _ in range(500)]})  # many brackets, shallow
    assert not too_deep(orjson.loads(wide), wide)
    with pytest.raises(ValueError):
        loads_json(b"[" * 2000 + b"]" * 2000)  # orjson's own limit (1024) comes first


def test_duplicate_fields_in_document_order():
    body = b'{"metadata":{"name":"a","name":"b"},"spec":{"x":[{"k":1,"k" : 2}]},"metadata":{}}'
    assert loads_json_fields(body)[1] == ["metadata.name", "spec.x[0].k", "metadata"]
    # colons and quote-colon pairs inside strings only make the exact scan run
    for clean in (b'{"a":{"b":"c\\":d"},"e":[{"f":1}]}', b'{"t":"12:00:00","u" : "http://x"}'):
        assert loads_json_fields(clean) == (orjson.loads(clean), [])
    assert duplicate_fields(b'{"a":1, "a" :2}', 1) == ["a"]
    with pytest.raises(ValueError, match="exceeded max depth"):
        loads_json_fields(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))


def test_libyaml_is_used():
    assert decoding._Loader is yaml.CSafeLoader
