"""A body is decoded once per hop and a written object serialized once; the package boundaries that keep
the generic store below the endpoints."""
from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest

from services.common import errors
from services.common.decoding import MAX_DEPTH

from .conftest import cm, request

ROOT = Path(__file__).resolve().parents[3]
MARK = "decoded-once-" + "x" * 64   # only the object's own JSON holds it


@pytest.fixture
def codec(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts orjson parses and serializations of the test object (its body holds MARK)."""
    counts: Counter[str] = Counter()
    loads, dumps = orjson.loads, orjson.dumps

    def counting_loads(data, *a, **kw):  # type: ignore[no-untyped-def]
        if MARK.encode() in (data if isinstance(data, bytes) else str(data).encode()):
            counts["parse"] += 1
        return loads(data, *a, **kw)

    def counting_dumps(obj, *a, **kw):  # type: ignore[no-untyped-def]
        out = dumps(obj, *a, **kw)
        if MARK.encode() in out:
            counts["serialize"] += 1
        return out

    monkeypatch.setattr(orjson, "loads", counting_loads)
    monkeypatch.setattr(orjson, "dumps", counting_dumps)
    return counts


async def _handle(handlers, codec, *args, **kwargs) -> int:
    """One request through the registry, counted from the body's arrival to the answer's bytes."""
    req = request(*args, **kwargs)
    codec.clear()
    resp, _ = await handlers.handle(req)
    if args[0] == "delete":  # a ConfigMap deleted is answered by a Status naming it
        assert orjson.loads(resp.body)["details"]["name"] == args[3]
    else:
        assert MARK.encode() in resp.body
    return resp.code


async def test_create_decodes_once_and_serializes_for_admission_and_storage(handlers, admission, codec):
    assert await _handle(handlers, codec, "create", "configmaps", "default", body=cm(data={"k": MARK})) == 201
    # the body, parsed once; the object serialized for the mutating phase, then once for the validating
    # phase, storage and the answer together (Admit answers no object to decode again)
    assert codec == {"parse": 1, "serialize": 2}
    assert [phase for phase, _ in admission.requests] == ["admit", "validate"]


async def test_update_and_delete_send_the_stored_envelope_not_a_new_one(handlers, storage, codec):
    await _handle(handlers, codec, "create", "configmaps", "default", body=cm(data={"k": MARK}))
    body = cm(data={"k": MARK, "l": "1"})
    assert await _handle(handlers, codec, "update", "configmaps", "default", "c", body=body) == 200
    # the body and the current object parsed once each; the old object travels as storage gave it
    assert codec == {"parse": 2, "serialize": 2}
    assert await _handle(handlers, codec, "delete", "configmaps", "default", "c") == 200
    assert codec == {"parse": 1} and not storage.data


async def test_json_errors_are_the_registrys(api):
    """The proxy passes JSON on unparsed; the registry refuses it with kube's 400s."""
    with pytest.raises(errors.BadRequest) as e:
        await api("create", "configmaps", "default", body=b'{"a":')
    assert e.value.message.startswith("couldn't get version/kind; json parse error:")
    deep = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    with pytest.raises(errors.BadRequest) as e:
        await api("create", "configmaps", "default", body=b'{"a":' + deep + b"}")
    assert e.value.message == f"couldn't get version/kind; json parse error: exceeded max depth of {MAX_DEPTH}"
    await api("create", "configmaps", "default", body=cm())
    with pytest.raises(errors.BadRequest) as e:
        await api("patch", "configmaps", "default", "c", body=b'{"a":' + deep + b"}",
                  content_type="application/merge-patch+json")
    assert e.value.message.startswith("error decoding patch: exceeded max depth")


def test_generic_store_imports_nothing_from_the_endpoints():
    code = ("import sys, services.apiserver.registry.store\n"
            "print(sorted(m for m in sys.modules if m.startswith('services.registry')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
