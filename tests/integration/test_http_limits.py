"""The HTTPS server's limits against real processes: header-read and idle timeouts, request timeouts,
watches that end on time, many watches without memory growth, APF under a flood, and client
certificates that do not verify (401, not a failed handshake).

Tests that need short timeouts or a small APF run on a private stack with its own flags and ports
(the shared test stack's offset + 500); the certificate tests use the shared stack.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from services.cluster.certs import read_tokens
from services.cluster.stack import SECURE_PORT, Stack

# beside the shared test stack (APIARY_TEST_PORT_OFFSET, default 1000) and test_faults.py's (4000)
OFFSET = int(os.environ.get("APIARY_TEST_PORT_OFFSET", "1000")) + 500
READ_HEADER_TIMEOUT = 5.0
IDLE_TIMEOUT = 6.0
REQUEST_TIMEOUT = 5.0
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
UNAUTHORIZED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
TIMEOUT_STATUS = {"metadata": {}, "status": "Failure",
                  "message": "Timeout: request did not complete within the allotted timeout",
                  "reason": "Timeout", "details": {}, "code": 504}


class LimitsStack(Stack):
    """The runner's stack with short HTTP timeouts on the proxy and one APF seat per kind of request."""

    def command(self, name: str) -> list[str]:
        cmd = super().command(name)
        if name == "proxy":
            cmd += ["--read-header-timeout", f"{READ_HEADER_TIMEOUT}s", "--idle-timeout", f"{IDLE_TIMEOUT}s",
                    "--request-timeout", f"{REQUEST_TIMEOUT}s"]
        elif name == "apf":
            cmd += ["--max-requests-inflight", "1", "--max-mutating-requests-inflight", "1",
                    "--apf-queue-wait-seconds", "0.05"]
        return cmd


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = LimitsStack(tmp_path_factory.mktemp("limits"), OFFSET)
    try:
        s.start(fresh=True)
        yield s
    finally:
        s.stop(quiet=True)


def _ctx(stack: Stack, cert: tuple[str, str] | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
    if cert:
        ctx.load_cert_chain(*cert)
    return ctx


def _admin_cert(stack: Stack) -> tuple[str, str]:
    pki = stack.state / "pki"
    return str(pki / "admin.crt"), str(pki / "admin.key")


def _admin(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.server, verify=_ctx(stack, _admin_cert(stack)), timeout=30)


async def _connect(stack: Stack, ctx: ssl.SSLContext) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", SECURE_PORT + stack.offset, ssl=ctx,
                                         server_hostname="localhost")


async def _until_closed(reader: asyncio.StreamReader, limit: float = 60) -> float:
    """Loop time at which the server closed the connection."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(limit):
            while await reader.read(65536):
                pass
    except (ConnectionError, ssl.SSLError):
        pass
    return loop.time()


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _settled_fds(pid: int, within: float = 20) -> int:
    """The proxy's fd count once it has stopped moving (the same over 1.5 s): a proxy still warming up on a
    loaded machine (informers, the aggregator's probes) opens its own connections after /readyz."""
    deadline = time.monotonic() + within
    seen = [_fds(pid)]
    while time.monotonic() < deadline and not (len(seen) >= 4 and len(set(seen[-4:])) == 1):
        time.sleep(0.5)
        seen.append(_fds(pid))
    return max(seen[-4:])


def _wait_fds(pid: int, at_most: int, within: float) -> int:
    deadline = time.monotonic() + within
    while (n := _fds(pid)) > at_most and time.monotonic() < deadline:
        time.sleep(0.5)
    return n


# connection timeouts -----------------------------------------------------------------------------

async def test_idle_and_slowloris_connections_are_closed_by_the_server(private: Stack) -> None:
    pid = private.pid("proxy")
    assert pid is not None
    before = _settled_fds(pid)
    loop = asyncio.get_running_loop()
    ctx = _ctx(private)
    gate = asyncio.Semaphore(50)
    peak = [0]

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, float]:
        async with gate:
            reader, writer = await _connect(private, ctx)
            return reader, writer, loop.time()

    async def idle() -> float:
        """Connected, then nothing: closed by the header-read timeout."""
        reader, writer, opened = await connect()
        closed = await _until_closed(reader)
        peak[0] = max(peak[0], _fds(pid))
        writer.close()
        return closed - opened

    async def slowloris() -> float:
        """One header byte a second: never enough to finish the headers in time."""
        reader, writer, opened = await connect()

        async def drip() -> None:
            for b in b"GET /version HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"x" * 600:
                writer.write(bytes([b]))
                await asyncio.sleep(1)

        dripping = asyncio.create_task(drip())
        closed = await _until_closed(reader)
        dripping.cancel()
        writer.close()
        return closed - opened

    async def keep_alive() -> float:
        """One request, then nothing: open for the idle timeout after the answer, not the header one."""
        reader, writer, _ = await connect()
        writer.write(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        answered = loop.time()
        closed = await _until_closed(reader)
        writer.close()
        return closed - answered

    idle_for, slow_for, kept_for = (sorted(x) for x in await asyncio.gather(
        asyncio.gather(*(idle() for _ in range(200))), asyncio.gather(*(slowloris() for _ in range(50))),
        asyncio.gather(*(keep_alive() for _ in range(20)))))
    print(f"\nclosed after (min/median/max s): "
          f"idle {idle_for[0]:.1f}/{idle_for[100]:.1f}/{idle_for[-1]:.1f}, "
          f"slowloris {slow_for[0]:.1f}/{slow_for[25]:.1f}/{slow_for[-1]:.1f}, "
          f"keep-alive {kept_for[0]:.1f}/{kept_for[10]:.1f}/{kept_for[-1]:.1f}; "
          f"proxy fds {before} before, up to {peak[0]}")
    # closed by the header-read timeout (the slowloris ones although bytes kept coming), give or take a
    # loaded machine; the keep-alive ones by the idle timeout, counted from their answer
    assert READ_HEADER_TIMEOUT - 1 < idle_for[0] and idle_for[-1] < READ_HEADER_TIMEOUT + 20
    assert READ_HEADER_TIMEOUT - 1 < slow_for[0] and slow_for[-1] < READ_HEADER_TIMEOUT + 20
    assert IDLE_TIMEOUT - 1 < kept_for[0] and kept_for[-1] < IDLE_TIMEOUT + 20
    assert _wait_fds(pid, before + 10, 15) <= before + 10


# request timeouts and watches --------------------------------------------------------------------

def test_request_timeout_is_504_with_kubes_status(private: Stack) -> None:
    registry = private.pid("registry")
    assert registry is not None
    with _admin(private) as c:
        assert c.get(CONFIGMAPS).status_code == 200  # authentication cached, connection open
        os.kill(registry, signal.SIGSTOP)  # every answer from the registry now takes forever
        try:
            t = time.monotonic()
            r = c.get(CONFIGMAPS, params={"timeout": "1s"})
            shortened = time.monotonic() - t
            assert r.status_code == 504
            assert r.json() == TIMEOUT_STATUS
            t = time.monotonic()
            r = c.get(f"{CONFIGMAPS}/missing")
            server_limit = time.monotonic() - t
            assert r.status_code == 504
            assert r.json() == TIMEOUT_STATUS
        finally:
            os.kill(registry, signal.SIGCONT)
        print(f"\n504 after {shortened:.2f} s (?timeout=1s) and {server_limit:.2f} s (--request-timeout "
              f"{REQUEST_TIMEOUT:g}s)")
        assert 0.9 < shortened < 4
        assert REQUEST_TIMEOUT - 0.1 < server_limit < REQUEST_TIMEOUT + 5
        deadline = time.monotonic() + 30
        while (r := c.get(CONFIGMAPS)).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert r.status_code == 200
        r = c.get(CONFIGMAPS, params={"timeout": "abc"})
        assert r.status_code == 400
        assert r.json()["message"] == ('invalid timeout specified in the request URL - '
                                       'time: invalid duration "abc"')


def test_watch_ends_after_its_timeout_seconds_beyond_the_request_timeout(private: Stack) -> None:
    with _admin(private) as c:
        seconds = int(REQUEST_TIMEOUT) + 2
        t = time.monotonic()
        with c.stream("GET", CONFIGMAPS, params={"watch": "1", "timeoutSeconds": str(seconds)},
                      timeout=httpx.Timeout(30, read=60)) as r:
            assert r.status_code == 200
            for _ in r.iter_lines():
                pass
        lasted = time.monotonic() - t
        print(f"\nwatch with timeoutSeconds={seconds} lasted {lasted:.2f} s")
        assert seconds - 0.1 < lasted < seconds + 5


def _theil_sen_slope(values: list[int]) -> float:
    """The median of the slopes between every pair of samples: a trend that one outlying sample (a
    burst of pages touched just before it was taken) does not move, as one difference would."""
    slopes = sorted((values[j] - values[i]) / (j - i) for i in range(len(values)) for j in range(i + 1, len(values)))
    return statistics.median(slopes)


WATCH_CYCLES = 5


async def test_2000_watches_opened_and_reset_five_times_do_not_grow_the_proxy(private: Stack) -> None:
    pid = private.pid("proxy")
    assert pid is not None
    ctx = _ctx(private, _admin_cert(private))
    gate = asyncio.Semaphore(200)  # each watch waits up to 0.25 s for a first event before its 200
    request = (f"GET {CONFIGMAPS}?watch=1 HTTP/1.1\r\nHost: localhost\r\n\r\n").encode()

    retried = [0]

    async def open_watch() -> asyncio.StreamWriter:
        async with gate:
            while True:
                reader, writer = await _connect(private, ctx)
                writer.write(request)
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
                except (asyncio.IncompleteReadError, ConnectionError):
                    # closed unanswered: the proxy, too busy with handshakes, read the request after
                    # the stack's short header-read timeout; a client retries
                    writer.close()
                    retried[0] += 1
                    continue
                assert head.startswith(b"HTTP/1.1 200"), head
                return writer

    def reset(writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    def heap_trim() -> tuple[float, float]:
        """The proxy's apiary_heap_trims_total and apiary_heap_trim_pending."""
        text = httpx.get(f"http://127.0.0.1:{private.health_port('proxy')}/metrics", timeout=10).text
        values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                  if line.startswith(("apiary_heap_trims_total ", "apiary_heap_trim_pending "))}
        return values["apiary_heap_trims_total"], values["apiary_heap_trim_pending"]

    def trimmed_since(before: float, within: float = 60) -> bool:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            done, pending = heap_trim()
            if done > before and not pending:
                return True
            time.sleep(0.2)
        return False

    base_fds = _settled_fds(pid)
    rss = [_rss_kib(pid)]
    began = time.monotonic()
    for cycle in range(WATCH_CYCLES):
        trims = (await asyncio.to_thread(heap_trim))[0]
        t = time.monotonic()
        writers = await asyncio.gather(*(open_watch() for _ in range(2000)))
        opened = time.monotonic() - t
        peak = _rss_kib(pid)
        for w in writers:
            reset(w)
        del writers
        fds = await asyncio.to_thread(_wait_fds, pid, base_fds + 20, 60)
        # the proxy gives the closed connections' heap back after the last of them (runtime.released)
        assert await asyncio.to_thread(trimmed_since, trims)
        rss.append(_rss_kib(pid))
        print(f"\ncycle {cycle + 1}: 2000 watches open in {opened:.1f} s ({retried[0]} retried), proxy RSS "
              f"{peak // 1024} MiB with them, {rss[-1] // 1024} MiB after the reset ({fds} fds)")
        retried[0] = 0
        assert fds <= base_fds + 20
    # Issue 9: the proxy does not grow from cycle to cycle. What the first cycle keeps (~40 MiB: pymalloc
    # arenas pinned by a few long-lived objects, 34 -> 75 of 1 MiB) is reused by the next ones (75 -> 76),
    # and the C heap is trimmed after each reset; what stays resident of the trimmed heap still varies by
    # tens of MiB from one sample to the next (119 -> 162 -> 182 on a clean CI run, then flat). So the
    # test judges the trend after the first cycle, not one difference: a leak grows with every cycle
    # (8 KiB per watch: +16 MiB a cycle), a plateau with a high sample does not. The median slope
    # over the samples after cycles 1..5 must stay under half of that leak's.
    slope = _theil_sen_slope(rss[1:])
    print(f"proxy RSS (MiB): start {rss[0] // 1024}, after each cycle {[r // 1024 for r in rss[1:]]}; "
          f"median slope {slope / 1024:+.1f} MiB a cycle; {time.monotonic() - began:.0f} s")
    assert slope <= 8 * 1024


# priority and fairness under a flood ---------------------------------------------------------------

FLOOD = r"""
import asyncio, collections, json, ssl, sys, time
import httpx

url, token, cafile = sys.argv[1:4]
seconds, concurrency = float(sys.argv[4]), int(sys.argv[5])

async def main():
    ctx = ssl.create_default_context(cafile=cafile)
    codes = collections.Counter()
    bodies = {}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, verify=ctx, limits=limits, timeout=30,
                                 headers={"Authorization": f"Bearer {token}"}) as c:
        end = time.monotonic() + seconds
        async def worker():
            while time.monotonic() < end:
                try:
                    r = await c.get("/api/v1/namespaces/default/configmaps")
                except httpx.HTTPError as e:
                    codes[type(e).__name__] += 1
                    continue
                codes[r.status_code] += 1
                if r.status_code not in bodies:
                    bodies[r.status_code] = [r.json(), r.headers.get("retry-after")]
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    print(json.dumps({"codes": codes, "bodies": bodies}))

asyncio.run(main())
"""


def test_flood_by_an_unprivileged_user_gets_429_while_exempt_requests_stay_fast(private: Stack) -> None:
    token = read_tokens(private.state)["alice"]
    cafile = str(private.state / "pki" / "ca.crt")
    with _admin(private) as c:
        idle = []
        for _ in range(50):
            t = time.perf_counter()
            assert c.get(f"{CONFIGMAPS}?limit=1").status_code == 200
            idle.append(time.perf_counter() - t)
        flood = subprocess.Popen([sys.executable, "-c", FLOOD, private.server, token, cafile, "8", "200"],
                                 stdout=subprocess.PIPE, text=True)
        try:
            time.sleep(2)  # the flood is on: a load to measure under, not a synchronisation
            busy, codes = [], []
            while flood.poll() is None and len(busy) < 2000:
                t = time.perf_counter()
                codes.append(c.get(f"{CONFIGMAPS}?limit=1").status_code)
                busy.append(time.perf_counter() - t)
            out, _ = flood.communicate(timeout=60)
        finally:
            if flood.poll() is None:
                flood.kill()
                flood.wait()
    result = json.loads(out)
    idle.sort()
    busy.sort()
    p99 = busy[int(len(busy) * 0.99)]
    print(f"\nflood by alice: {result['codes']}; exempt (system:masters) requests during it: {len(busy)}, "
          f"p50 {busy[len(busy) // 2] * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms "
          f"(idle p50 {idle[len(idle) // 2] * 1000:.1f} ms, p99 {idle[int(len(idle) * 0.99)] * 1000:.1f} ms)")
    assert set(codes) == {200}
    assert len(busy) >= 10
    assert result["codes"].get("429", 0) > 0
    status, retry_after = result["bodies"]["429"]
    assert status["reason"] == "TooManyRequests" and status["code"] == 429
    assert status["message"] == "Too many requests, please try again later."
    assert retry_after is not None
    # alice may not list configmaps: 403 whenever she got a seat. (Some of her connections may also be
    # closed unanswered, when the flooded proxy reads their headers after the stack's short timeout.)
    assert {code for code in result["codes"] if code.isdigit()} <= {"403", "429"}


# client certificates that do not verify ------------------------------------------------------------

def _client_cert(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> tuple[str, str]:
    path.with_suffix(".key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(path.with_suffix(".crt")), str(path.with_suffix(".key"))


def _make(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
          issuer_key: ec.EllipticCurvePrivateKey, start: dt.timedelta, end: dt.timedelta,
          usage: x509.ObjectIdentifier = ExtendedKeyUsageOID.CLIENT_AUTH) -> x509.Certificate:
    now = dt.datetime.now(dt.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now + start).not_valid_after(now + end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(issuer_key, hashes.SHA256()))


@pytest.fixture(scope="module")
def bad_certs(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    pki = stack.state / "pki"
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    admin = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                       x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes-admin")])
    key = ec.generate_private_key(ec.SECP256R1())
    d = tmp_path_factory.mktemp("bad-certs")
    hour = dt.timedelta(hours=1)
    return {
        "self-signed": _client_cert(d / "self-signed", key, _make(admin, key, admin, key, -hour, hour)),
        "expired": _client_cert(d / "expired", key, _make(admin, key, ca.subject, ca_key, -2 * hour, -hour)),
        "not-yet-valid": _client_cert(d / "early", key,
                                      _make(admin, key, ca.subject, ca_key, hour, 2 * hour)),
        "server-only": _client_cert(d / "server-only", key, _make(admin, key, ca.subject, ca_key, -hour, hour,
                                                                  ExtendedKeyUsageOID.SERVER_AUTH)),
    }


@pytest.mark.parametrize("which", ["self-signed", "expired", "not-yet-valid", "server-only"])
def test_a_client_certificate_that_does_not_verify_is_401(stack: Stack, bad_certs: dict, which: str) -> None:
    with httpx.Client(base_url=stack.server, verify=_ctx(stack, bad_certs[which]), timeout=30) as c:
        r = c.get(CONFIGMAPS)
        assert r.status_code == 401
        assert r.headers["content-type"] == "application/json"
        assert r.json() == UNAUTHORIZED
        assert c.get("/version").status_code == 401  # never anonymous either


def test_a_bearer_token_still_authenticates_beside_a_bad_certificate(stack: Stack, bad_certs: dict) -> None:
    """kube's union of authenticators: the x509 one fails, the token one succeeds."""
    token = read_tokens(stack.state)["alice"]
    with httpx.Client(base_url=stack.server, verify=_ctx(stack, bad_certs["self-signed"]), timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as c:
        r = c.post("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                   json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        assert r.status_code == 201, r.text
        assert r.json()["status"]["userInfo"]["username"] == "alice"
