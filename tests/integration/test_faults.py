"""Faults against a private stack (real processes, its own state directory and ports): etcd hung,
then kill -9 of each service and of etcd under steady writes and watches, each restarted with the
same command line. Nothing acknowledged may be lost, no resourceVersion acknowledged twice, every
watch event delivered exactly once to a client that resumes from its last resourceVersion, and no
service may log a traceback or an asyncio error. How long each kill left the API refusing writes
is printed and written to .apiary/faults.json (recorded in docs/benchmarks.md); the test only
asserts recovery within RECOVERY seconds, since timings on a shared machine are noise."""
from __future__ import annotations

import json
import os
import re
import signal
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import TEST_OFFSET
from services.cluster.certs import read_tokens
from services.cluster.stack import ROOT, Stack

# The session stack uses TEST_OFFSET; this suite kills processes, so it runs a stack of its own.
OFFSET = TEST_OFFSET + 500
NS = "faults"
CM = f"/api/v1/namespaces/{NS}/configmaps"
RECOVERY = 30.0
KILLED = ("storage", "registry", "apf", "admission", "auth", "proxy", "etcd")
REPORT = ROOT / ".apiary" / "faults.json"
# What a service must never log: a traceback, or asyncio complaining about a task or a generator.
BAD_LOG = re.compile(r"Traceback|Task was destroyed|aclose\(\)|Task exception was never retrieved|"
                     r"was never awaited|Exception ignored")


class FaultStack(Stack):
    """The runner's stack with a shorter etcd deadline, so that writes fail fast when etcd hangs."""

    def command(self, name: str) -> list[str]:
        cmd = super().command(name)
        if name == "storage":
            cmd += ["--etcd-request-timeout", "5s"]
        return cmd


@dataclass
class Private:
    stack: FaultStack
    admin: httpx.Client
    ssl: ssl.SSLContext
    tokens: dict[str, str]

    def client(self, user: str = "admin") -> httpx.Client:
        """A new connection pool: the admin certificate, or a user's bearer token."""
        headers = {} if user == "admin" else {"Authorization": f"Bearer {self.tokens[user]}"}
        ctx = self.ssl if user == "admin" else ssl.create_default_context(
            cafile=str(self.stack.state / "pki" / "ca.crt"))
        return httpx.Client(base_url=self.stack.server, verify=ctx, headers=headers, timeout=10,
                            transport=self.transport(ctx))

    def transport(self, verify: ssl.SSLContext) -> httpx.BaseTransport | None:
        """How a client's requests reach the stack (None: httpx's own, to the one proxy)."""
        return None


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Private]:
    s = FaultStack(tmp_path_factory.mktemp("faults"), OFFSET)
    try:
        try:
            s.start(fresh=True, timeout=30)
        except SystemExit:  # a port taken for a moment by some client's ephemeral port: once more
            s.stop(quiet=True)
            s.start(fresh=True)
        pki = s.state / "pki"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        with httpx.Client(base_url=s.server, verify=ctx, timeout=30) as c:
            p = Private(s, c, ctx, read_tokens(s.state))
            setup_namespace(p)
            yield p
    finally:
        s.stop(quiet=True)


def setup_namespace(p: Private) -> None:
    """The namespace, and alice allowed to write configmaps there (her requests are not exempt)."""
    c = p.admin
    assert c.post("/api/v1/namespaces", json={"metadata": {"name": NS}}).status_code == 201
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}"
    r = c.post(f"{rbac}/roles", json={"metadata": {"name": "cm"}, "rules": [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]})
    assert r.status_code == 201, r.text
    r = c.post(f"{rbac}/rolebindings", json={
        "metadata": {"name": "cm"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]})
    assert r.status_code == 201, r.text
    with p.client("alice") as alice:
        deadline = time.monotonic() + 10
        while alice.get(CM).status_code != 200:
            assert time.monotonic() < deadline, "alice's binding never took effect"
            time.sleep(0.2)


def cm(name: str, data: dict[str, str] | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data or {"a": "b"}}


def create_until_ok(c: httpx.Client, name: str, within: float) -> dict:
    deadline = time.monotonic() + within
    while True:
        try:
            r = c.post(CM, json=cm(name), timeout=10)
            if r.status_code in (201, 409):
                return r.json()
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"no recovery within {within}s"
        time.sleep(0.3)


class Watch:
    """One watch read by a thread: its events, and whether the server ended it."""

    def __init__(self, c: httpx.Client, rv: str) -> None:
        self.events: list[dict] = []
        self.ended = threading.Event()
        self.open = threading.Event()  # the server answered: the watch is established
        self.c, self.rv = c, rv
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            with self.c.stream("GET", CM, params={"watch": "true", "resourceVersion": self.rv},
                               timeout=httpx.Timeout(30, read=120)) as r:
                self.open.set()
                for line in r.iter_lines():
                    if line:
                        self.events.append(json.loads(line))
        except httpx.HTTPError:
            pass
        self.ended.set()

    def wait_for(self, pred, timeout: float = 15) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ev in self.events:
                if pred(ev):
                    return ev
            time.sleep(0.05)
        raise AssertionError(f"no matching event; got {[(e['type'], name_of(e)) for e in self.events]}")


def name_of(ev: dict) -> str:
    return ev["object"].get("metadata", {}).get("name", "")


def check_failing_write(c: httpx.Client) -> None:
    t0 = time.monotonic()
    r = c.post(CM, json=cm(f"x{uuid.uuid4().hex[:6]}"), timeout=30)
    took = time.monotonic() - t0
    assert r.status_code in (503, 504), r.text
    assert took <= 10, took
    assert r.headers.get("Retry-After"), r.headers


def test_etcd_stop_and_kill(private):
    """etcd hung (SIGSTOP): writes fail within the etcd deadline, reads and watches go on from the
    cache; then etcd killed: the same, and everything recovers once it is back."""
    stack, c = private.stack, private.admin
    acked = [create_until_ok(c, f"before-{i}", 30)["metadata"]["name"] for i in range(3)]
    listed = c.get(CM, params={"resourceVersion": "0"}).json()
    w = Watch(c, listed["metadata"]["resourceVersion"])
    assert w.open.wait(15) and not w.ended.is_set(), "the watch did not start"
    etcd = stack.pid("etcd")
    os.kill(etcd, signal.SIGSTOP)
    try:
        check_failing_write(c)
        r = c.get(CM, params={"resourceVersion": "0"})
        assert r.status_code == 200 and {i["metadata"]["name"] for i in r.json()["items"]} >= set(acked)
        assert c.get(f"{CM}/before-0", params={"resourceVersion": "0"}).status_code == 200
        assert not w.ended.is_set()
    finally:
        os.kill(etcd, signal.SIGCONT)
    acked.append(create_until_ok(c, "after-stop", 20)["metadata"]["name"])
    w.wait_for(lambda ev: ev["type"] == "ADDED" and name_of(ev) == "after-stop")

    os.kill(etcd, signal.SIGKILL)
    reap(etcd)
    check_failing_write(c)
    assert c.get(CM, params={"resourceVersion": "0"}).status_code == 200
    stack.spawn("etcd")
    assert not stack.wait(["etcd"], 30)
    acked.append(create_until_ok(c, "after-kill", 30)["metadata"]["name"])
    w.wait_for(lambda ev: ev["type"] == "ADDED" and name_of(ev) == "after-kill", 30)
    listed = c.get(CM).json()
    assert set(acked) <= {i["metadata"]["name"] for i in listed["items"]}


# kill -9 under load ----------------------------------------------------------------------------


@dataclass
class Ack:
    name: str
    rv: int
    data: dict[str, str]
    at: float


@dataclass
class Writer:
    """Creates configmaps and updates each once (with its resourceVersion); keeps the ledger of
    acknowledged writes, the names whose last write has an unknown outcome, and the time of every
    success (the unavailability figures come from the gaps between them)."""

    user: str
    index: int
    acks: list[Ack] = field(default_factory=list)
    uncertain: set[str] = field(default_factory=set)
    successes: list[float] = field(default_factory=list)
    failures: int = 0
    unexpected: list[tuple[float, str]] = field(default_factory=list)  # answers no fault explains

    def run(self, p: Private, stop: threading.Event) -> None:
        n = 0
        with p.client(self.user) as c:
            while not stop.is_set():
                n += 1
                name = f"{self.user}-{self.index}-{n}"
                data = {"writer": name, "v": "0", "pad": uuid.uuid4().hex}
                obj = self._write(c, "POST", CM, cm(name, data), 201)
                if obj is not None:
                    data = {**data, "v": "1"}
                    body = cm(name, data)
                    body["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
                    self._write(c, "PUT", f"{CM}/{name}", body, 200)
                time.sleep(0.03)

    def _write(self, c: httpx.Client, method: str, url: str, body: dict, ok: int) -> dict | None:
        name = body["metadata"]["name"]
        try:
            r = c.request(method, url, json=body, timeout=5)
        except httpx.HTTPError:
            self.uncertain.add(name)
            return self._failed()
        if r.status_code != ok:
            if r.status_code >= 500:  # the write may still have happened
                self.uncertain.add(name)
            elif r.status_code != 429:
                what = f"{method} {name}: {r.status_code} {r.text.strip()}"
                self.unexpected.append((time.monotonic(), what))
            return self._failed()
        obj = r.json()
        now = time.monotonic()
        if obj["metadata"]["name"] != name:
            self.unexpected.append((now, f"{method} {name}: answered with {obj['metadata']['name']} at "
                                         f"{obj['metadata']['resourceVersion']}"))
            return self._failed()
        self.acks.append(Ack(name, int(obj["metadata"]["resourceVersion"]), obj["data"], now))
        self.successes.append(now)
        self.uncertain.discard(name)
        return obj

    def _failed(self) -> None:
        self.failures += 1
        time.sleep(0.05)  # the writer's retry pause (its loop tries again), not a synchronisation
        return None


class Watcher:
    """A client that keeps one watch open: on any end it resumes from the last resourceVersion it
    saw (a bookmark's included), and after 410 Gone it relists."""

    def __init__(self, p: Private) -> None:
        self.p = p
        self.events: list[tuple[str, str, int, dict]] = []   # (type, name, rv, data)
        self.relists: list[tuple[int, dict[str, tuple[int, dict]]]] = []
        self.resumes = 0
        self.rv = 0
        self.trace: list[tuple[float, str]] = []  # what happened to the watch, for a failure's message

    def run(self, stop: threading.Event) -> None:
        with self.p.client() as c:
            while not self.rv and not stop.is_set():
                self._relist(c)
            while not stop.is_set():
                try:
                    self._watch(c, stop)
                except (httpx.HTTPError, json.JSONDecodeError):
                    pass
                self.resumes += 1
                time.sleep(0.05)

    def _relist(self, c: httpx.Client) -> None:
        """One try (the watcher's loop tries again after a pause while the API is down)."""
        try:
            r = c.get(CM, timeout=10)
        except httpx.HTTPError:
            time.sleep(0.1)
            return
        if r.status_code != 200:
            time.sleep(0.1)
            return
        body = r.json()
        self.rv = int(body["metadata"]["resourceVersion"])
        items = {i["metadata"]["name"]: (int(i["metadata"]["resourceVersion"]), i["data"]) for i in body["items"]}
        self.relists.append((self.rv, items))

    def _watch(self, c: httpx.Client, stop: threading.Event) -> None:
        params = {"watch": "true", "resourceVersion": str(self.rv), "allowWatchBookmarks": "true",
                  "timeoutSeconds": "30"}
        with c.stream("GET", CM, params=params, timeout=httpx.Timeout(10, read=40)) as r:
            self.trace.append((time.monotonic(), f"watch from {self.rv}: {r.status_code}"))
            if r.status_code != 200:
                return
            for line in r.iter_lines():
                if not line:
                    continue
                ev = json.loads(line)
                obj = ev["object"]
                if ev["type"] == "ERROR":
                    self.trace.append((time.monotonic(), f"ERROR {obj.get('code')} {obj.get('message')}"))
                    if obj.get("code") == 410:
                        self.rv = 0
                        while not self.rv and not stop.is_set():
                            self._relist(c)
                    return
                rv = int(obj["metadata"]["resourceVersion"])
                if stop.is_set():
                    return
                if ev["type"] != "BOOKMARK":
                    self.events.append((ev["type"], obj["metadata"]["name"], rv, obj.get("data") or {}))
                    self.trace.append((time.monotonic(), f"{ev['type']} {rv}"))
                else:
                    self.trace.append((time.monotonic(), f"BOOKMARK {rv}"))
                self.rv = rv


@dataclass
class Kill:
    service: str
    killed_at: float
    start_seconds: float = 0.0
    figures: dict[str, float] = field(default_factory=dict)


def max_gap(successes: list[float], since: float, until: float) -> float:
    """The longest time within [since, until] with no write acknowledged."""
    points = [since] + [t for t in successes if since < t <= until]
    if len(points) == 1:
        return until - since
    return max(b - a for a, b in zip(points, points[1:]))


def reap(pid: int) -> None:
    """Wait for a killed process to be gone (the stack's processes are this process's children)."""
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        while os.path.exists(f"/proc/{pid}"):
            time.sleep(0.01)


def wait_ready(stack: Stack, name: str, timeout: float) -> float:
    """Seconds from now until the service answers ready (etcd: healthy)."""
    t0 = time.monotonic()
    while not stack.healthy(name):
        assert stack.pid(name) is not None, f"{name} exited; see {stack.logs / (name + '.log')}"
        assert time.monotonic() - t0 < timeout, f"{name} not ready within {timeout}s"
        time.sleep(0.02)
    return time.monotonic() - t0


def recovered(writers: list[Writer], after: float, timeout: float) -> float:
    """When every writer has had a write acknowledged after `after`."""
    deadline = after + timeout
    while True:
        firsts = [next((t for t in reversed(w.successes) if t > after), None) for w in writers]
        if firsts and all(firsts):
            return max(firsts)  # type: ignore[type-var]
        assert time.monotonic() < deadline, "the API did not recover"
        time.sleep(0.05)


class Load:
    """The steady load of the kill tests, started: 4 writers (admin and alice, 2 each) and 2 watchers on
    threads; `stop` ends the writers, `stop_watching` the watchers."""

    def __init__(self, private: Private) -> None:
        self.stop, self.stop_watching = threading.Event(), threading.Event()
        self.writers = [Writer("admin", i) for i in range(2)] + [Writer("alice", i) for i in range(2)]
        self.watchers = [Watcher(private) for _ in range(2)]
        self.threads = [threading.Thread(target=w.run, args=(private, self.stop), daemon=True)
                        for w in self.writers]
        self.threads += [threading.Thread(target=w.run, args=(self.stop_watching,), daemon=True)
                         for w in self.watchers]
        for t in self.threads:
            t.start()


def test_kill_9_each_under_load(private):
    stack = private.stack
    load = Load(private)
    stop, stop_watching, writers, watchers, threads = (load.stop, load.stop_watching, load.writers,
                                                       load.watchers, load.threads)
    kills: list[Kill] = []
    try:
        recovered(writers, time.monotonic(), RECOVERY)
        time.sleep(1)  # a second of steady load before the first kill: the behaviour measured is a gap in it
        for name in KILLED:
            pid = stack.pid(name)
            assert pid is not None, name
            k = Kill(name, time.monotonic())
            os.killpg(pid, signal.SIGKILL)
            reap(pid)
            spawned = time.monotonic()
            stack.spawn(name)
            k.start_seconds = wait_ready(stack, name, RECOVERY)
            back = recovered(writers, spawned + k.start_seconds, RECOVERY)
            time.sleep(1.5)  # steady load again before the next kill
            for user in ("admin", "alice"):
                succ = sorted(t for w in writers if w.user == user for t in w.successes)
                k.figures[user] = max_gap(succ, k.killed_at, back)
            k.figures["all"] = max_gap(sorted(t for w in writers for t in w.successes), k.killed_at, back)
            kills.append(k)
            print(f"\n{name}: start {k.start_seconds:.2f}s, unavailable {k.figures}", flush=True)
    finally:
        stop.set()
        for t in threads[:len(writers)]:
            t.join(15)
        # the watchers stop once they have seen the last write
        last = max((a.rv for w in writers for a in w.acks), default=0)
        deadline = time.monotonic() + RECOVERY
        while any(w.rv < last for w in watchers) and time.monotonic() < deadline:
            time.sleep(0.1)
        stop_watching.set()
    report(kills, sum(len(w.acks) for w in writers))
    print("watchers: " + "; ".join(f"{len(w.events)} events, {w.resumes} resumes, {len(w.relists) - 1} relists "
                                   "after 410" for w in watchers))
    check_ledger(private, writers, watchers, kills)
    for k in kills:
        assert k.figures["all"] < RECOVERY, k


def report(kills: list[Kill], writes: int) -> None:
    rows = [{"service": k.service, "start_seconds": round(k.start_seconds, 2),
             "unavailable_seconds": round(k.figures["all"], 2),
             "unavailable_exempt_seconds": round(k.figures["admin"], 2),
             "unavailable_nonexempt_seconds": round(k.figures["alice"], 2)} for k in kills]
    print(f"\nunavailability per kill -9 (seconds with no write acknowledged; start = spawn to ready); "
          f"{writes} writes acknowledged")
    for r in rows:
        print(f"  {r['service']:10} unavailable {r['unavailable_seconds']:5.2f} s (system:masters "
              f"{r['unavailable_exempt_seconds']:.2f}, alice {r['unavailable_nonexempt_seconds']:.2f}); "
              f"start {r['start_seconds']:.2f} s")
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    doc = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "writes": writes, "kills": rows}
    REPORT.write_text(json.dumps(doc, indent=2) + "\n")


def around(w: Watcher, rv: int, kills: list[Kill]) -> str:
    """The watcher's trace around where the event at rv should have come, with the kills."""
    lines = sorted([(t, f"watcher: {what}") for t, what in w.trace] +
                   [(k.killed_at, f"--- kill -9 {k.service}") for k in kills])
    near = next((i for i, (_, what) in enumerate(lines)
                 if what.split()[-1].isdigit() and int(what.split()[-1]) > rv), len(lines))
    return "\n".join(f"{t:.3f} {what}" for t, what in lines[max(0, near - 15):near + 5])


def check_ledger(p: Private, writers: list[Writer], watchers: list[Watcher], kills: list[Kill],
                 killed: tuple[str, ...] = KILLED) -> None:
    timeline = [(k.killed_at, f"--- kill -9 {k.service}") for k in kills]
    unexpected = sorted([u for w in writers for u in w.unexpected] + timeline)
    assert len(kills) == len(killed) and unexpected, "no kill to check the writes against"
    assert all(what.startswith("---") for _, what in unexpected), \
        "\n".join(f"{t:.3f} {x}" for t, x in unexpected)
    acks = [a for w in writers for a in w.acks]
    assert len(acks) > 100, len(acks)
    by_rv: dict[int, list[Ack]] = {}
    for a in acks:
        by_rv.setdefault(a.rv, []).append(a)
    assert by_rv
    twice = sorted([(a.at, f"{a.name} acknowledged at {a.rv}") for same in by_rv.values() if len(same) > 1
                    for a in same] + timeline)
    assert all(len(same) == 1 for same in by_rv.values()), "a resourceVersion was acknowledged twice:\n" + \
        "\n".join(f"{t:.3f} {x}" for t, x in twice)
    uncertain = set().union(*(w.uncertain for w in writers))

    # every acknowledged write is there: the last one of each object as it is now
    listed = p.admin.get(CM, timeout=30).json()
    now = {i["metadata"]["name"]: i for i in listed["items"]}
    last: dict[str, Ack] = {}
    for a in sorted(acks, key=lambda a: a.rv):
        last[a.name] = a
    for name, a in last.items():
        obj = now.get(name)
        assert obj is not None, f"acknowledged {name} at {a.rv} is gone"
        rv = int(obj["metadata"]["resourceVersion"])
        if name in uncertain:
            assert rv >= a.rv, (name, rv, a.rv)
        else:
            assert (rv, obj["data"]) == (a.rv, a.data), (name, rv, a.rv)

    # ... and every one of them, with its content, in each watcher's events, exactly once and in order
    for w in watchers:
        assert w.rv >= max(by_rv), "a watcher never caught up with the last write"
        events = list(w.events)
        seen = [(name, rv) for _, name, rv, _ in events]
        assert len(seen) == len(set(seen)), "an event was delivered twice"
        assert [rv for _, rv in seen] == sorted(rv for _, rv in seen), "events out of order"
        by_rv = {rv: (name, data) for _, name, rv, data in events}
        relisted = [rv for rv, _ in w.relists[1:]]
        for a in acks:
            if a.rv <= w.relists[0][0]:
                continue
            got = by_rv.get(a.rv)
            if got is None and any(r >= a.rv for r in relisted):
                continue  # after a 410 the relist stands for the events it covers
            assert got == (a.name, a.data), f"{a} delivered as {got}:\n{around(w, a.rv, kills)}"


def test_read_modify_write_with_retry_on_409(private):
    """16 clients increment one counter (GET, +1, PUT with its resourceVersion, again on 409)."""
    c = private.admin
    assert c.post(CM, json=cm("counter", {"n": "0"})).status_code == 201
    done: list[int] = []
    conflicts: list[int] = []

    def client() -> None:
        ok = retried = 0
        with private.client() as cc:
            for _ in range(5):
                while True:
                    obj = cc.get(f"{CM}/counter").json()
                    obj["data"]["n"] = str(int(obj["data"]["n"]) + 1)
                    r = cc.put(f"{CM}/counter", json=obj)
                    if r.status_code == 409:
                        retried += 1
                        continue
                    assert r.status_code == 200, r.text
                    ok += 1
                    break
        done.append(ok)
        conflicts.append(retried)

    threads = [threading.Thread(target=client) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sum(done) == 80
    assert c.get(f"{CM}/counter").json()["data"]["n"] == str(sum(done))
    print(f"\nread-modify-write: {sum(done)} updates, {sum(conflicts)} conflicts retried")


def _proxy_metric(stack: Stack, name: str, labels: dict[str, str] | None = None) -> float:
    text = httpx.get(f"http://127.0.0.1:{stack.health_port('proxy')}/metrics", timeout=10).text
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            if sample.name == name and sample.labels == (labels or {}):
                return sample.value
    return 0.0


def test_kill_9_of_apf_falls_back_to_max_in_flight_and_the_objects_come_back(private):
    """alice's requests classified by a FlowSchema of her own; apf killed under her load: her requests go on
    under the proxy's max-in-flight limits (no FlowSchema named), and once apf is back her schema classifies
    them again, read from the objects (the bootstrap configuration knows nothing of it)."""
    stack, c = private.stack, private.admin
    flowcontrol = "/apis/flowcontrol.apiserver.k8s.io/v1"
    level = {"metadata": {"name": "faults-alice"}, "spec": {"type": "Limited", "limited": {
        "nominalConcurrencyShares": 5, "limitResponse": {"type": "Reject"}}}}
    schema = {"metadata": {"name": "faults-alice"}, "spec": {
        "priorityLevelConfiguration": {"name": "faults-alice"}, "matchingPrecedence": 300,
        "distinguisherMethod": {"type": "ByUser"},
        "rules": [{"subjects": [{"kind": "User", "user": {"name": "alice"}}],
                   "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"],
                                      "clusterScope": True}]}]}}
    assert c.post(f"{flowcontrol}/prioritylevelconfigurations", json=level).status_code == 201
    r = c.post(f"{flowcontrol}/flowschemas", json=schema)
    assert r.status_code == 201, r.text
    fs_uid = r.json()["metadata"]["uid"]
    headers: list[str | None] = []   # alice's answers' FlowSchema uid (None: no FlowSchema named)
    codes: dict[int, int] = {}
    stop = threading.Event()

    def alice_load() -> None:
        with private.client("alice") as alice:
            while not stop.is_set():
                try:
                    resp = alice.get(CM, timeout=10)
                except httpx.HTTPError:
                    codes[0] = codes.get(0, 0) + 1
                    continue
                codes[resp.status_code] = codes.get(resp.status_code, 0) + 1
                headers.append(resp.headers.get("X-Kubernetes-PF-FlowSchema-UID"))
                time.sleep(0.01)

    def seen(pred, what: str) -> None:
        mark = len(headers)
        deadline = time.monotonic() + RECOVERY
        while not any(pred(h) for h in headers[mark:]):
            assert time.monotonic() < deadline, f"{what} not seen within {RECOVERY}s"
            time.sleep(0.05)

    threads = [threading.Thread(target=alice_load, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        seen(lambda h: h == fs_uid, "alice classified by her FlowSchema")
        admitted = _proxy_metric(stack, "apiary_apf_fallback_requests_total",
                                 {"request_kind": "readOnly", "decision": "admitted"})
        pid = stack.pid("apf")
        assert pid is not None
        os.killpg(pid, signal.SIGKILL)
        reap(pid)
        seen(lambda h: h is None, "an answer under the max-in-flight limits")
        assert _proxy_metric(stack, "apiary_apf_fallback") == 1
        assert _proxy_metric(stack, "apiary_apf_fallback_requests_total",
                             {"request_kind": "readOnly", "decision": "admitted"}) > admitted
        stack.spawn("apf")
        wait_ready(stack, "apf", RECOVERY)
        seen(lambda h: h == fs_uid, "alice classified by her FlowSchema again")
        assert _proxy_metric(stack, "apiary_apf_fallback") == 0
    finally:
        stop.set()
        for t in threads:
            t.join(15)
        c.delete(f"{flowcontrol}/flowschemas/faults-alice")
        c.delete(f"{flowcontrol}/prioritylevelconfigurations/faults-alice")
    assert set(codes) <= {200, 429} and codes.get(200), codes  # never a 5xx, never a broken connection


def test_no_traceback_or_asyncio_error_logged(private):
    """Last in the module: every service log, across every restart above."""
    bad = []
    for log in sorted(private.stack.logs.glob("*.log")):
        for i, line in enumerate(log.read_text(errors="replace").splitlines()):
            if BAD_LOG.search(line):
                bad.append(f"{log.name}:{i + 1}: {line}")
    assert not bad, "\n".join(bad[:40])
