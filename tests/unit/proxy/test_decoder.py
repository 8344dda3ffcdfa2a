"""BodyDecoder: small bodies inline, large ones in a worker process, errors as the same Status."""
import asyncio
import os
import signal
import subprocess
import sys

import orjson
import pytest

from services.common.errors import BadRequest, ServiceUnavailable
from services.proxy.decoder import INLINE_BYTES, INLINE_YAML_BYTES, BodyDecoder


@pytest.fixture(scope="module")
def decoder():
    d = BodyDecoder(workers=1)
    d.start()
    yield d
    d.stop()


def test_inline_thresholds():
    assert BodyDecoder.inline("application/yaml", b"x" * INLINE_YAML_BYTES)
    assert BodyDecoder.inline("application/vnd.kubernetes.protobuf", b"x" * INLINE_BYTES)
    assert not BodyDecoder.inline("application/vnd.kubernetes.protobuf", b"x" * (INLINE_BYTES + 1))
    # JSON of any size is passed on to the registry, not parsed: nothing for a worker to do
    for ctype in ("application/json", "application/json; charset=utf-8", "", "application/merge-patch+json"):
        assert BodyDecoder.inline(ctype, b"x" * (INLINE_BYTES + 1))
    assert not BodyDecoder.inline("application/yaml", b"x" * (INLINE_YAML_BYTES + 1))
    assert not BodyDecoder.inline("application/apply-patch+yaml", b"x" * (INLINE_YAML_BYTES + 1))


def test_large_bodies_are_decoded_in_the_worker(decoder):
    data = {f"k{i}": "v" * 50 for i in range(2000)}
    yml = ("data:\n" + "".join(f"  k{i}: {'v' * 50}\n" for i in range(2000))).encode()
    assert len(yml) > INLINE_YAML_BYTES
    out, media = asyncio.run(decoder.decode("create", "application/yaml", yml))
    assert media == "application/json" and orjson.loads(out) == {"data": data}
    big = orjson.dumps({"data": data})
    assert len(big) > INLINE_BYTES
    assert asyncio.run(decoder.decode("update", "application/json", big)) == (big, "application/json")


def test_worker_errors_become_the_same_status(decoder):
    bad = b"a: [" + b"x, " * INLINE_YAML_BYTES
    with pytest.raises(BadRequest) as e:
        asyncio.run(decoder.decode("create", "application/yaml", bad))
    assert e.value.code == 400 and e.value.reason == "BadRequest"
    assert e.value.message.startswith("error converting YAML to JSON:")
    padding = b"#" + b"x" * INLINE_YAML_BYTES + b"\n"
    bomb = padding + b"a: &a [x,x,x,x,x,x,x,x,x]\n" + b"".join(
        f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]\n".encode() for p, n in zip("abcdefgh", "bcdefghi"))
    with pytest.raises(BadRequest) as e:
        asyncio.run(decoder.decode("create", "application/yaml", bomb))
    assert e.value.message == "error converting YAML to JSON: yaml: document contains excessive aliasing"


def test_a_dead_worker_costs_one_answer():
    d = BodyDecoder(workers=1)
    d.start()
    try:
        big = ("data:\n" + "".join(f"  k{i}: {'v' * 50}\n" for i in range(2000))).encode()
        js = orjson.dumps({"data": {f"k{i}": "v" * 50 for i in range(2000)}})
        assert asyncio.run(d.decode("create", "application/yaml", big))[0] == js
        for pid in list(d._pool._processes):  # type: ignore[union-attr]
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(ServiceUnavailable):
            asyncio.run(d.decode("create", "application/yaml", big))
        assert asyncio.run(d.decode("create", "application/yaml", big))[0] == js
    finally:
        d.stop()


def test_starting_starts_no_process():
    """The pool (and multiprocessing's resource tracker, a Python process its queues start) comes with the
    first body that needs a worker, not with the proxy's start, whose cores it would share."""
    code = ("import os; from services.proxy.decoder import BodyDecoder; d = BodyDecoder(); d.start(); "
            "print(repr(open(f'/proc/self/task/{os.getpid()}/children').read().strip()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "''"
