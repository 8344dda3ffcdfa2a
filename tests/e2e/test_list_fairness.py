"""No request starves the others, whatever form a LIST is asked for in (issue 24): while a large
LIST is read as JSON, as a Table, as PartialObjectMetadataList (JSON or protobuf) or as protobuf,
GETs made one after another on another connection each wait a small share of the LIST's time.

A form converted whole (the registry building a Table of every item, the proxy decoding the whole
list to make it metadata only or protobuf) holds a process's event loop and the streams between the
services for most of the LIST, and the GET caught behind it waits about as long. Made part by part,
no GET waits for more than a few parts. The criterion is a ratio of two times measured together
(the longest GET ÷ the LIST), not a duration: a loaded machine slows both.

The objects are written straight into etcd in the stored format (as tools/bench_fairness does): the
test is about reading them.
"""
from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time

import httpx
import pytest

from services.cluster.stack import Stack
from services.common.runtime import TRIM_DELAY
from tests.waiting import wait_for
from tools.bench_storage import configmap, key_of, now_rfc3339, write_etcd

pytestmark = pytest.mark.stack
NS = "list-fairness"
COUNT = 8000
PAD = "x" * 8000  # about 8 KiB an object: a LIST of ~66 MB, ~500 parts on each hop
FORMS = {
    "json": "application/json",
    "table": "application/json;as=Table;v=v1;g=meta.k8s.io",
    "partial": "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
    "partial-protobuf": "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
    "protobuf": "application/vnd.kubernetes.protobuf",
}
IDLE_GETS = 20  # printed beside the GETs during the LIST (not asserted)
# The longest GET during the LIST against the LIST's own time: converted whole, the GET caught behind
# the conversion waits about all of it (0.9-1.0 on the old code); part by part, a few parts (< 0.3).
SHARE = 0.5


@pytest.fixture(scope="module")
def filled(admin: httpx.Client, stack: Stack) -> str:
    r = admin.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    assert r.status_code in (201, 409), r.text
    created = now_rfc3339()
    objs = [configmap(NS, f"cm-{i:05d}", {"i": str(i), "pad": PAD}, created) for i in range(COUNT)]
    assert key_of(objs[0]).startswith(f"/registry/configmaps/{NS}/")
    asyncio.run(write_etcd(stack, objs))

    def cached() -> bool:  # the watch cache holds them all (a list at "any" version is served from it)
        r = admin.get(f"/api/v1/namespaces/{NS}/configmaps", params={"resourceVersion": "0"},
                      headers={"Accept": FORMS["partial"]})
        return r.status_code == 200 and len(r.json()["items"]) >= COUNT
    wait_for(cached, 60, what=f"{COUNT} configmaps in the watch cache")
    # One whole LIST first: the heaps of the services grow to hold its parts once, not in the first test.
    assert admin.get(f"/api/v1/namespaces/{NS}/configmaps", timeout=120).status_code == 200
    return NS


# The LIST is read by a process of its own (in a thread here, reading it would hold this process's
# GIL in turns with the GETs measured).
READER = """
import ssl, sys, time
import httpx
url, accept, pki = sys.argv[1:4]
ctx = ssl.create_default_context(cafile=pki + "/ca.crt")
ctx.load_cert_chain(pki + "/admin.crt", pki + "/admin.key")
with httpx.Client(verify=ctx, timeout=120) as c:
    t = time.perf_counter()
    with c.stream("GET", url, headers={"Accept": accept}) as r:
        n = sum(len(b) for b in r.iter_raw())
    print(r.status_code, n, time.perf_counter() - t)
"""


@pytest.mark.parametrize("form", FORMS)
def test_no_get_waits_for_most_of_a_large_list(admin: httpx.Client, stack: Stack, filled: str, form: str) -> None:
    def get() -> float:
        t = time.perf_counter()
        assert admin.get(f"/api/v1/namespaces/{filled}").status_code == 200
        return time.perf_counter() - t

    # The heap trim that follows the previous test's LIST (runtime.TRIM_DELAY after it) comes first.
    time.sleep(2 * TRIM_DELAY)
    idle = [get() for _ in range(IDLE_GETS)]
    reader = subprocess.Popen([sys.executable, "-c", READER, f"{stack.server}/api/v1/namespaces/{filled}/configmaps",
                               FORMS[form], str(stack.state / "pki")], stdout=subprocess.PIPE, text=True)
    during: list[float] = []
    while reader.poll() is None:
        during.append(get())
    out, _ = reader.communicate()
    status, size, seconds = out.split()
    listed = {"status": int(status), "bytes": int(size), "seconds": float(seconds)}
    assert listed["status"] == 200 and listed["bytes"] > COUNT * 40, listed
    share = max(during) / listed["seconds"]
    print(f"{form}: LIST {listed['seconds']:.2f} s, {len(during)} GETs, median {statistics.median(during):.4f} s "
          f"(idle {statistics.median(idle):.4f} s), the longest {max(during):.3f} s: {share:.2f} of the LIST")
    assert share < SHARE, (f"a GET waited {max(during):.3f} s during a {listed['seconds']:.2f} s LIST as {form} "
                           f"({len(during)} GETs, median {statistics.median(during):.4f} s)")
