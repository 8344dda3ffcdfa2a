"""No request starves the others, whatever form a LIST is asked for in (issue 24): while a large
LIST is read as JSON, as a Table, as PartialObjectMetadataList (JSON or protobuf) or as protobuf,
GETs made one after another on another connection are not held for the LIST.

A form converted whole (the registry building a Table of every item, the proxy decoding the whole
list to make it metadata only or protobuf) holds a process's event loop and the streams between the
services for most of the LIST: the GET caught behind it is held until the conversion is over, and
completes about when the LIST does, before or after it (outstanding for 0.89-0.99 of the LIST on
6f70980; 0.82-1.0 with the proxy asking the registry for every list whole again). Made part by part,
no GET waits for more than a few parts (0.01-0.24 of the LIST).

The GETs are put in order with the LIST on the machine's monotonic clock, and the LIST's own span is
the ruler: no GET may be outstanding for two thirds of it. Counting the GETs that complete before the
LIST does cannot tell a stall: those before and after it are many on a quiet machine (up to 142 in a
stalled LIST, as few as 78 in a fair one on a loaded machine). A stall is in every LIST of the form, a
neighbour's burst of load in one (a GET slowed to 0.53 of a LIST once in CI): a form fails only when
each of ATTEMPTS LISTs held a GET. How long the GETs took is a figure of
`python -m tools.bench_fairness --forms ...` (ratio_p50, share_max), not asserted here.

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
# The part of the LIST's span no GET may be outstanding for: behind a whole conversion the held GET is
# outstanding for most of it (>= 0.82 measured); part by part, <= 0.24 (0.53 once, under load).
HELD = 2 / 3
ATTEMPTS = 3  # LISTs read before a form is judged to hold the GETs (the first that holds none passes)


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
# GIL in turns with the GETs). It prints when it sent the request and when the last byte came, on the
# machine's monotonic clock (one clock for every process), so the GETs can be put in order with them.
READER = """
import ssl, sys, time
import httpx
url, accept, pki = sys.argv[1:4]
ctx = ssl.create_default_context(cafile=pki + "/ca.crt")
ctx.load_cert_chain(pki + "/admin.crt", pki + "/admin.key")
with httpx.Client(verify=ctx, timeout=120) as c:
    c.get(url.rsplit("/", 1)[0])  # the connection's handshake before the LIST
    sent = time.monotonic()
    with c.stream("GET", url, headers={"Accept": accept}) as r:
        n = sum(len(b) for b in r.iter_raw())
    print(r.status_code, n, sent, time.monotonic())
"""


def gets_beside_a_list(admin: httpx.Client, stack: Stack, ns: str, form: str) -> str | None:
    """One LIST as `form`, read by another process while this one makes GETs one after another: what
    was seen when a GET stayed outstanding for HELD of the LIST's span, else None."""
    def get() -> tuple[float, float]:
        sent = time.monotonic()
        assert admin.get(f"/api/v1/namespaces/{ns}").status_code == 200
        return sent, time.monotonic()

    # The heap trim that follows the previous LIST (runtime.TRIM_DELAY after it) comes first.
    time.sleep(2 * TRIM_DELAY)
    idle = [done - sent for sent, done in (get() for _ in range(IDLE_GETS))]
    reader = subprocess.Popen([sys.executable, "-c", READER, f"{stack.server}/api/v1/namespaces/{ns}/configmaps",
                               FORMS[form], str(stack.state / "pki")], stdout=subprocess.PIPE, text=True)
    gets: list[tuple[float, float]] = []
    while reader.poll() is None:
        gets.append(get())
    out, _ = reader.communicate()
    status, size, list_sent, list_done = out.split()
    assert int(status) == 200 and int(size) > COUNT * 40, out
    began, ended = float(list_sent), float(list_done)
    # the GETs outstanding while the LIST was in flight (the one sent just before it too), and the part of
    # the LIST's span each was outstanding for; held: HELD of it or more
    during = [(sent, done) for sent, done in gets if sent < ended and done > began]
    overlap = [(min(done, ended) - max(sent, began)) / (ended - began) for sent, done in during]
    took = [done - sent for sent, done in during]
    seen = (f"{form}: LIST {ended - began:.2f} s; {sum(done < ended for _, done in during)} of the {len(during)} "
            f"GETs beside it completed before it (median {statistics.median(took or [0]):.4f} s, idle "
            f"{statistics.median(idle):.4f} s), the longest {max(took, default=0):.3f} s, outstanding for "
            f"{max(overlap, default=0):.2f} of the LIST")
    print(seen)
    return seen if max(overlap, default=0) >= HELD else None


@pytest.mark.parametrize("form", FORMS)
def test_no_get_waits_for_most_of_a_large_list(admin: httpx.Client, stack: Stack, filled: str, form: str) -> None:
    # A stall behind a whole conversion is in every LIST of the form; a neighbour's burst of load that
    # holds one LIST's GET is not: another LIST is read before the form is judged.
    seen = []
    for _ in range(ATTEMPTS):
        if (failed := gets_beside_a_list(admin, stack, filled, form)) is None:
            return
        seen.append(failed)
    pytest.fail(f"in each of {ATTEMPTS} LISTs, a GET was outstanding for {HELD:.2f} of it or more:\n"
                + "\n".join(seen))
