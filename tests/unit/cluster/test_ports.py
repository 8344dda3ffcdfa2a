"""Ports chosen by the OS (Stack(free_ports=True)), recorded in the state directory, and a port
already taken named before a process is started on it."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from services.cluster import ports
from services.cluster.stack import ClusterError, Stack


def test_allocate_gives_distinct_ports() -> None:
    # (whether each is still free a moment later depends on the machine's other processes)
    chosen = ports.allocate(40)
    assert len(set(chosen)) == 40 and all(0 < p < 65536 for p in chosen)


def test_a_listening_port_is_not_free_and_is_named() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not ports.is_free(port)
        with pytest.raises(ports.PortTaken, match=rf"port {port} \(proxy https\) is already in use"):
            ports.check_free([(ports.allocate(1)[0], "etcd client"), (port, "proxy https")])


def test_every_listener_of_every_process_gets_its_own_port(tmp_path: Path) -> None:
    s = Stack(tmp_path, free_ports=True, replicas=2)
    s.choose_ports()
    keys = [f"{n}:{k}" for n in s.names() for k in s.port_kinds(n)]
    assert sorted(s.ports) == sorted(keys)
    assert len(set(s.ports.values())) == len(keys)
    assert {"etcd:client", "etcd:peer", "proxy:https", "proxy-1:https", "storage-1:grpc",
            "controllermanager:health", "pizza-apiserver:https"} <= set(keys)
    assert "controllermanager:grpc" not in keys  # it serves no gRPC
    cmd = s.command("proxy-1")
    assert cmd[cmd.index("--secure-port") + 1] == str(s.ports["proxy-1:https"])
    assert cmd[cmd.index("--storage-address") + 1] == (
        f"127.0.0.1:{s.ports['storage:grpc']},127.0.0.1:{s.ports['storage-1:grpc']}")
    assert s.etcd_url == f"http://127.0.0.1:{s.ports['etcd:client']}"
    assert s.server == f"https://127.0.0.1:{s.ports['proxy:https']}"


def test_the_state_records_the_ports_for_down_status_and_reuse(tmp_path: Path) -> None:
    s = Stack(tmp_path, free_ports=True, replicas=2, aggregated=[])
    s.choose_ports()
    s._write_record()
    again = Stack.from_state(tmp_path)
    assert (again.free_ports, again.replicas, again.aggregated, again.ports) == (True, 2, [], s.ports)
    assert again.server == s.server
    assert json.loads((tmp_path / "stack.json").read_text())["ports"] == s.ports


def test_offset_ports_are_kubes_plus_the_offset(tmp_path: Path) -> None:
    s = Stack(tmp_path, 1000)
    assert (s.port("etcd", "client"), s.port("etcd", "peer"), s.port("proxy", "https")) == (3379, 3380, 7443)
    assert s.port("pizza-apiserver", "https") == 9444
    s._write_record()
    assert Stack.from_state(tmp_path).server == "https://127.0.0.1:7443"
    assert Stack.from_state(tmp_path / "none").server == "https://127.0.0.1:6443"  # nothing recorded


def test_a_stack_never_started_with_free_ports_has_none(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="no client port chosen for etcd"):
        _ = Stack(tmp_path, free_ports=True).etcd_url


def _stack_with_its_proxy_port_held(tmp_path: Path) -> tuple[Stack, socket.socket]:
    """A stack whose proxy port (6443 + offset) another socket listens on, all its other ports free
    (an offset is tried until that holds: the machine's other processes use ports too)."""
    for offset in range(30000, 45000, 37):
        s = Stack(tmp_path, offset=offset, aggregated=[], detach=True)
        others = [s.port(n, k) for n in s.names() for k in s.port_kinds(n) if (n, k) != ("proxy", "https")]
        held = socket.socket()
        try:
            held.bind(("127.0.0.1", s.port("proxy", "https")))
        except OSError:
            held.close()
            continue
        if all(ports.is_free(p) for p in others):
            held.listen()
            return s, held
        held.close()
    raise AssertionError("no offset with only the proxy's port taken")


def test_start_names_a_taken_port_before_starting_anything(tmp_path: Path) -> None:
    s, held = _stack_with_its_proxy_port_held(tmp_path)
    with held, pytest.raises(ClusterError, match=rf"port {s.port('proxy', 'https')} \(proxy https\) is already in use"):
        s.start()
    assert not (tmp_path / "pids").exists()


def test_a_port_offset_past_the_last_port_is_named(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"port 65566 \(storage grpc\) is out of range"):
        Stack(tmp_path, offset=45511, aggregated=[], detach=True).start()
