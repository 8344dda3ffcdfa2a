"""The open-loop generator's bookkeeping (tools/bench_openloop.py): the pool hands a connection to the
first waiting request, numbers each request's body, and reads only the headers it needs."""
from __future__ import annotations

from tools.bench_openloop import Pool, header


class FakeConn:
    def __init__(self) -> None:
        self.requests: list[tuple[bytes, float]] = []
        self.due = self.sent = 0.0

    def send(self, request: bytes, due: float) -> None:
        self.requests.append((request, due))
        self.due = self.sent = due


def test_header_reads_a_value_whatever_its_case():
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCONTENT-LENGTH: 42\r\nServer-Timing: registry;dur=1.5\r\n"
    assert header(head, b"\r\ncontent-length:") == b"42"
    assert header(head, b"\r\nserver-timing:") == b"registry;dur=1.5"
    assert header(head, b"\r\naudit-id:") == b""


def test_request_numbers_the_body_and_its_length():
    pool = Pool(b'{"name":"ol-$N"}', b"POST /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"HTTP/1.1 201")
    assert pool.request(7) == b'POST /x HTTP/1.1\r\nContent-Length: 15\r\n\r\n{"name":"ol-7"}'
    fixed = Pool(b"", b"GET /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"HTTP/1.1 200")
    assert fixed.request(3) == b"GET /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n"


def test_a_request_waits_for_the_first_connection_to_come_free():
    pool = Pool(b"", b"GET /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"HTTP/1.1 200")
    a, b = FakeConn(), FakeConn()
    pool.idle.extend([a, b])  # type: ignore[list-item]
    pool.total = 4
    for i in range(4):
        pool.dispatch(i, float(i))
    assert [d for _, d in a.requests] == [0.0] and [d for _, d in b.requests] == [1.0]
    assert list(pool.waiting) == [(2, 2.0), (3, 3.0)] and pool.max_in_flight == 4
    pool.answered(b, b"HTTP/1.1 200 OK", "registry;dur=1")  # type: ignore[arg-type]
    assert [d for _, d in b.requests] == [1.0, 2.0] and list(pool.waiting) == [(3, 3.0)]
    pool.answered(a, b"HTTP/1.1 429 Too Many Requests", "")  # type: ignore[arg-type]
    pool.answered(b, b"HTTP/1.1 200 OK", "")  # type: ignore[arg-type]
    pool.answered(a, b"HTTP/1.1 200 OK", "")  # type: ignore[arg-type]
    assert pool.bad == ["HTTP/1.1 429 Too Many Requests"]
    assert len(pool.samples) == 4 and pool.finished.is_set() and list(pool.idle) == [b, a]
    assert pool.in_flight == 0
