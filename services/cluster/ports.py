"""Ports of a local stack: chosen free by the OS (`apiary up --port 0`), checked before a process
binds them, so that a port already taken is named rather than found by a process failing to start."""
from __future__ import annotations

import errno
import socket
from collections.abc import Iterable


class PortTaken(Exception):
    """A port a process of the stack is to listen on is held by another process (or is no port)."""

    def __init__(self, port: int, what: str, why: str = "is already in use on 127.0.0.1") -> None:
        super().__init__(f"port {port} ({what}) {why}")
        self.port, self.what = port, what


def allocate(count: int) -> list[int]:
    """`count` distinct ports the OS says are free on loopback now.

    Every socket stays bound until all are chosen, so the OS cannot hand one port out twice; a
    process that binds one a moment later may still find it taken (the launcher's check names it).
    """
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def is_free(port: int) -> bool:
    """Whether a listener could bind 127.0.0.1:port now. SO_REUSEADDR as the services set it: a
    port in TIME_WAIT from a stack just stopped is free, one another process listens on is not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def check_free(ports: Iterable[tuple[int, str]]) -> None:
    """Raise PortTaken for the first (port, what it is for) that is no port, else the first that is
    not free."""
    ports = list(ports)
    for port, what in ports:
        if not 0 < port < 65536:
            raise PortTaken(port, what, "is out of range (a port offset too large?)")
    for port, what in ports:
        if not is_free(port):
            raise PortTaken(port, what)
