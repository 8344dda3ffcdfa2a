"""Hostile clients: an unprivileged user sends the YAML alias bomb and its JSON equivalent (100,000
levels of nesting), and dense YAML, in a loop while system:masters requests run; every one of theirs
completes, each within the starvation bound below, while the attack goes on (the attackers are still
sending when the masters' last request is answered). Their latency against idle is a figure, printed
and recorded, not asserted: on a shared 2-core machine a ratio of latencies is a benchmark's job.

Bodies of 3 MiB are measured as well but not asserted. Their cost is not decoding: a plain one
(one long string) parses in milliseconds, but every copy crosses TLS and the proxy's one stream to
the registry, which a large message holds until it is through (issue 9, defect 2, fixed apart); a
dense one (170,000 small objects) is also parsed by the registry with orjson, which holds the GIL
for the whole parse (tens of milliseconds on a quiet machine, about a second on a busy one).

The figures are printed (pytest -s) and written to .apiary/test/hostile-clients.json for
docs/benchmarks.md.
"""
from __future__ import annotations

import json
import ssl
import statistics
import threading
import time

import httpx
import pytest

from tests.integration.test_hostile_input import NS, SSR, yaml_bomb

pytestmark = pytest.mark.stack

SAMPLES = 200
# A masters request that waits this long was starved, not slowed: kube's queue wait limit is 15 s
STARVED_S = 15.0
SSR_HEAD = b'{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview","metadata":{"name":"x",'
Attack = tuple[str, bytes, str, int]  # name, body, content type, the code kube answers


def attack_bodies() -> list[Attack]:
    deep = SSR_HEAD + b'"annotations":{}},"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    # ~300 KiB of YAML: seconds of CPU in a decoding worker
    dense_yaml = b"apiVersion: authentication.k8s.io/v1\nkind: SelfSubjectReview\nx:\n" + b"".join(
        b"- {a: [1, {b: 2}]}\n" for _ in range(15_000))
    return [("yaml-bomb", yaml_bomb(), "application/yaml", 400),
            ("deep-json", deep, "application/json", 400),
            ("dense-yaml-300KiB", dense_yaml, "application/yaml", 201)]


def large_bodies() -> list[Attack]:
    huge = SSR_HEAD + b'"annotations":{"a":"' + b"x" * (3 * 1024 * 1024 - 200) + b'"}}}'
    dense = SSR_HEAD + b'"annotations":{}},"x":[' + b",".join(b'{"a":[1,{"b":2}]}' for _ in range(170_000)) + b"]}"
    assert max(len(huge), len(dense)) < 3 * 1024 * 1024
    return [("huge-json-3MiB", huge, "application/json", 201), ("dense-json-3MiB", dense, "application/json", 201)]


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98]


def masters_latencies(admin: httpx.Client) -> list[float]:
    out = []
    for i in range(SAMPLES):
        t = time.perf_counter()
        path = f"/api/v1/namespaces/{NS}" if i % 2 else f"/api/v1/namespaces/{NS}/configmaps"
        r = admin.get(path, timeout=STARVED_S)
        out.append(time.perf_counter() - t)
        assert r.status_code == 200, r.text
    return out


def under_attack(stack, admin, tokens, bodies: list[Attack]) -> tuple[list[float], dict]:
    """system:masters latencies while each body is sent over and over on its own connection, and
    what the attackers saw."""
    stop = threading.Event()
    seen: dict[str, dict[int, int]] = {name: {} for name, *_ in bodies}
    took: dict[str, list[float]] = {name: [] for name, *_ in bodies}
    sent = [0]
    errors: list[str] = []
    ctx = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))

    def attacker(name: str, body: bytes, ctype: str, code: int) -> None:
        with httpx.Client(base_url=stack.server, verify=ctx, timeout=300,
                          headers={"Authorization": f"Bearer {tokens['alice']}"}) as alice:
            while not stop.is_set():
                t = time.perf_counter()
                r = alice.post(SSR, content=body, headers={"Content-Type": ctype})
                took[name].append(time.perf_counter() - t)
                seen[name][r.status_code] = seen[name].get(r.status_code, 0) + 1
                sent[0] += len(body)
                if r.status_code not in (code, 429):  # APF may hold alice back: that is fine
                    errors.append(f"{name}: {r.status_code} {r.text[:200]}")

    threads = [threading.Thread(target=attacker, args=b, daemon=True) for b in bodies]
    for t in threads:
        t.start()
    time.sleep(2.0)  # the attack under way: a load to measure under, not a synchronisation
    try:
        answered = sum(sum(codes.values()) for codes in seen.values())
        latencies = masters_latencies(admin)
        during = sum(sum(codes.values()) for codes in seen.values()) - answered
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=300)
    assert not errors, errors[:5]
    return latencies, {
        "answers": seen,
        "answered_while_measured": during,
        "mib_sent": round(sent[0] / 2**20, 1),
        "answer_median_ms": {name: round(statistics.median(xs) * 1000, 1) for name, xs in took.items() if xs},
    }


def summary(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(xs) * 1000, 1), "p99_ms": round(p99(xs) * 1000, 1),
            "max_ms": round(max(xs) * 1000, 1)}


def test_hostile_clients_do_not_starve_masters(stack, admin, tokens):
    r = admin.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    assert r.status_code in (201, 409), r.text
    masters_latencies(admin)  # warm up connections and caches
    idle = masters_latencies(admin)
    attacked, attack = under_attack(stack, admin, tokens, attack_bodies())
    figures = {"date": time.strftime("%Y-%m-%d"), "samples": SAMPLES, "idle": summary(idle),
               "attacked": summary(attacked), "attack": attack}
    for large in large_bodies():
        latencies, seen = under_attack(stack, admin, tokens, [large])
        figures[f"{large[0]} (not asserted)"] = {"attacked": summary(latencies), "attack": seen}
    print("\nhostile clients:", json.dumps(figures))
    (stack.state / "hostile-clients.json").write_text(json.dumps(figures, indent=2) + "\n")
    assert sum(attack["answers"]["yaml-bomb"].values()) > 0
    # the masters' requests all completed (masters_latencies asserts each 200 within STARVED_S) while
    # the attack was answered too: it went on through the whole measurement
    assert attack["answered_while_measured"] > 0, figures
