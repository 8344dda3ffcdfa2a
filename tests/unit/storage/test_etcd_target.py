"""The etcd client's members: every --etcd-servers URL, dialed through one gRPC target."""
from __future__ import annotations

import asyncio

import pytest

from services.apiserver.storage.etcd import Etcd, etcd_target, parse_servers


def test_every_member_of_etcd_servers_is_kept():
    assert parse_servers("http://127.0.0.1:2379,http://127.0.0.1:2479, 127.0.0.1:2579") == [
        ("127.0.0.1", 2379), ("127.0.0.1", 2479), ("127.0.0.1", 2579)]
    assert parse_servers("http://etcd") == [("etcd", 2379)]
    with pytest.raises(SystemExit, match="only http://"):
        parse_servers("http://127.0.0.1:2379,https://127.0.0.1:2479")
    with pytest.raises(SystemExit, match="no endpoint"):
        parse_servers(" , ")


def test_one_member_is_dialed_by_name_several_as_an_address_list():
    assert etcd_target([("etcd", 2379)]) == "etcd:2379"  # DNS, as before
    assert etcd_target([("127.0.0.1", 2379), ("127.0.0.1", 2479)]) == "ipv4:127.0.0.1:2379,127.0.0.1:2479"
    assert etcd_target([("::1", 2379), ("::1", 2479)]) == "ipv6:[::1]:2379,[::1]:2479"
    assert etcd_target([("localhost", 2379), ("localhost", 2479)]).startswith(("ipv4:", "ipv6:"))  # resolved
    with pytest.raises(SystemExit, match="all be IPv4 or all IPv6"):
        etcd_target([("127.0.0.1", 2379), ("::1", 2479)])


def test_the_client_balances_round_robin_over_every_member():
    etcd = Etcd("http://127.0.0.1:2379,http://127.0.0.1:2479,http://127.0.0.1:2579", 5.0)
    assert etcd.target == "ipv4:127.0.0.1:2379,127.0.0.1:2479,127.0.0.1:2579"
    assert etcd.endpoint == "127.0.0.1:2379,127.0.0.1:2479,127.0.0.1:2579"
    assert ("grpc.lb_policy_name", "round_robin") in etcd.options

    async def connect_and_close() -> None:
        kv = await etcd.connect()
        assert kv is await etcd.connect() and etcd.channel is not None
        await etcd.close()
        assert etcd.channel is None

    asyncio.run(connect_and_close())
