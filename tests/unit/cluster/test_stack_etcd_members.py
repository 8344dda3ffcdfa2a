"""The local runner's etcd cluster: member processes, their ports (+100 per member), the flags that
make them one cluster, and every member's URL given to each etcd client."""
from __future__ import annotations

from pathlib import Path

import pytest

from services.cluster.aggregated import PIZZA
from services.cluster.stack import ClusterError, Stack, kube_style_flags


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_one_member_is_the_stack_as_before():
    s = Stack(Path("/tmp/apiary-unused"), 1000)
    assert s.names()[:2] == ("etcd", "storage")
    assert s.etcd_url == "http://127.0.0.1:3379"
    etcd = s.command("etcd")
    assert flag(etcd, "--name") == "apiary" and flag(etcd, "--data-dir") == "/tmp/apiary-unused/etcd"
    assert flag(etcd, "--initial-cluster") == "apiary=http://127.0.0.1:3380"
    assert flag(s.command("storage"), "--etcd-servers") == "http://127.0.0.1:3379"


def test_members_are_named_and_ported_as_replicas():
    s = Stack(Path("/tmp/apiary-unused"), 1000, etcd_members=3, aggregated=[PIZZA])
    assert s.names()[:4] == ("etcd", "etcd-1", "etcd-2", "storage")
    assert [s.port(m, "client") for m in s.etcd_names()] == [3379, 3479, 3579]
    assert [s.port(m, "peer") for m in s.etcd_names()] == [3380, 3480, 3580]
    assert s.port_kinds("etcd-2") == ("client", "peer")
    assert s.process_of("etcd-1") == "etcd-1"


def test_each_member_knows_the_whole_cluster():
    s = Stack(Path("/tmp/apiary-unused"), 1000, etcd_members=3)
    cluster = "apiary=http://127.0.0.1:3380,apiary-1=http://127.0.0.1:3480,apiary-2=http://127.0.0.1:3580"
    for member, name, client, peer in [("etcd", "apiary", 3379, 3380), ("etcd-2", "apiary-2", 3579, 3580)]:
        cmd = s.command(member)
        assert flag(cmd, "--name") == name
        assert flag(cmd, "--data-dir") == f"/tmp/apiary-unused/{member}"
        assert flag(cmd, "--listen-client-urls") == flag(cmd, "--advertise-client-urls") == f"http://127.0.0.1:{client}"
        assert flag(cmd, "--listen-peer-urls") == f"http://127.0.0.1:{peer}"
        assert flag(cmd, "--initial-cluster") == cluster
        assert flag(cmd, "--initial-cluster-state") == "new"


def test_every_etcd_client_gets_every_member():
    s = Stack(Path("/tmp/apiary-unused"), 1000, etcd_members=3, replicas=2)
    every = "http://127.0.0.1:3379,http://127.0.0.1:3479,http://127.0.0.1:3579"
    assert flag(s.command("storage"), "--etcd-servers") == every
    assert flag(s.command("storage-1"), "--etcd-servers") == every
    assert flag(kube_style_flags(s, PIZZA), "--etcd-servers") == every


def test_free_ports_for_every_member(tmp_path: Path):
    s = Stack(tmp_path, free_ports=True, etcd_members=3)
    s.choose_ports()
    ports = [s.port(m, k) for m in s.etcd_names() for k in ("client", "peer")]
    assert len(set(ports)) == 6
    assert s.etcd_url == ",".join(f"http://127.0.0.1:{s.port(m, 'client')}" for m in s.etcd_names())


def test_the_compact_profile_keeps_etcd_beside_its_host():
    s = Stack(Path("/tmp/apiary-unused"), 1000, etcd_members=3, profile="compact")
    assert s.processes()[:4] == ["etcd", "etcd-1", "etcd-2", "compact"]


def test_members_changed_over_existing_data_needs_fresh(tmp_path: Path):
    Stack(tmp_path, 1000)._write_record()
    (tmp_path / "etcd").mkdir()
    with pytest.raises(ClusterError, match="1-member cluster: start it with --fresh"):
        Stack(tmp_path, 1000, etcd_members=3).start()
    with pytest.raises(ClusterError, match="at least one member"):
        Stack(tmp_path, etcd_members=0)


def test_the_leader_stops_after_its_followers():
    s = Stack(Path("/tmp/apiary-unused"), 1000, etcd_members=3)
    s.etcd_leader = lambda: "etcd-1"  # type: ignore[method-assign]
    assert s.etcd_stop_stages(s.etcd_names()) == [["etcd", "etcd-2"], ["etcd-1"]]
    s.etcd_leader = lambda: None  # type: ignore[method-assign]  # none answers: all together
    assert s.etcd_stop_stages(s.etcd_names()) == [["etcd", "etcd-1", "etcd-2"]]
    assert Stack(Path("/tmp/apiary-unused"), 1000).etcd_stop_stages(["etcd"]) == [["etcd"]]
    one = Stack(Path("/tmp/apiary-unused"), 1000)
    one.etcd_leader = lambda: "etcd-1"  # type: ignore[method-assign]
    # members of an earlier start with more: not this stack's to ask
    assert one.etcd_stop_stages(["etcd", "etcd-1"]) == [["etcd", "etcd-1"]]
