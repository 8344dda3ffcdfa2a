"""The local runner's replicas: process names, ports (+100 per replica) and the peers each is given."""
from __future__ import annotations

from pathlib import Path

from services.cluster.stack import Stack, replica_name, replica_of


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_names_and_ports():
    s = Stack(Path("/tmp/apiary-unused"), 1000, replicas=2)
    assert s.names()[:3] == ("etcd", "storage", "storage-1")
    assert replica_of("storage-1") == ("storage", 1) and replica_of("proxy") == ("proxy", 0)
    assert replica_of("pizza-1") == ("pizza-1", 0)  # not a service of the stack
    assert replica_name("auth", 0) == "auth" and replica_name("auth", 1) == "auth-1"
    assert (s.grpc_port("storage"), s.grpc_port("storage-1")) == (21055, 21155)
    assert (s.health_port("proxy"), s.health_port("proxy-1")) == (10100, 10200)
    assert s.server_of(1) == "https://127.0.0.1:7543"


def test_each_replica_gets_its_ports_and_every_peer_replica():
    s = Stack(Path("/tmp/apiary-unused"), 1000, replicas=2, extra={"registry": ["-v", "4"]})
    cmd = s.command("registry-1")
    assert flag(cmd, "-m") == "services.registry"
    assert flag(cmd, "--grpc-port") == "21154" and flag(cmd, "--health-port") == "10204"
    assert flag(cmd, "--storage-address") == "127.0.0.1:21055,127.0.0.1:21155"
    assert flag(cmd, "--internal-cert-file").endswith("pki/registry.crt")
    assert cmd[-2:] == ["-v", "4"]
    proxy = s.command("proxy-1")
    assert flag(proxy, "--secure-port") == "7543"
    assert flag(proxy, "--audit-log-path").endswith("audit-1.log")


def test_one_replica_is_the_stack_as_before():
    s = Stack(Path("/tmp/apiary-unused"), 1000)
    assert s.names()[:2] == ("etcd", "storage") and "storage-1" not in s.names()
    assert flag(s.command("proxy"), "--registry-address") == "127.0.0.1:21054"
