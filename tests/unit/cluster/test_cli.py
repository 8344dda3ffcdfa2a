"""The apiary command's arguments: what `up` starts (options given, else what the state directory
recorded), and the mistakes argparse refuses."""
from __future__ import annotations

from pathlib import Path

import pytest

from services.cluster import cli
from services.cluster.aggregated import PIZZA
from services.cluster.stack import ClusterError, Stack


def test_up_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APIARY_STATE", raising=False)
    monkeypatch.delenv("APIARY_REPLICAS", raising=False)
    args = cli.parse(["up"])
    assert (args.state, args.port, args.port_offset, args.crds, args.detach) == (Path(".apiary"), None, None, [], False)
    s = cli.up_stack(args)
    assert (s.state, s.offset, s.free_ports, s.replicas, s.aggregated, s.detach) == (
        Path(".apiary").resolve(), 0, False, 1, [], False)


def test_up_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APIARY_REPLICAS", raising=False)
    args = cli.parse(["up", "--state", str(tmp_path), "--port", "0", "--crds", "a.yaml", "crds/",
                      "--crds", "b.json", "--replicas", "2", "--detach", "--aggregated", "pizza-apiserver"])
    assert args.crds == [Path("a.yaml"), Path("crds"), Path("b.json")]
    s = cli.up_stack(args)
    assert (s.state, s.free_ports, s.replicas, s.aggregated, s.detach) == (tmp_path, True, 2, [PIZZA], True)
    assert cli.up_stack(cli.parse(["up", "--state", str(tmp_path), "--port-offset", "1000"])).offset == 1000


def test_up_again_finds_what_the_state_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APIARY_REPLICAS", raising=False)
    first = Stack(tmp_path, free_ports=True, replicas=2, aggregated=[PIZZA])
    first.choose_ports()
    first._write_record()
    again = cli.up_stack(cli.parse(["up", "--state", str(tmp_path)]))
    assert (again.free_ports, again.ports, again.replicas, again.aggregated) == (True, first.ports, 2, [PIZZA])
    offset = cli.up_stack(cli.parse(["up", "--state", str(tmp_path), "--port-offset", "7"]))
    assert (offset.free_ports, offset.offset, offset.ports, offset.aggregated) == (False, 7, {}, [])


def test_state_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("APIARY_STATE", str(tmp_path))
    monkeypatch.setenv("APIARY_REPLICAS", "3")
    assert cli.parse(["down"]).state == tmp_path
    assert cli.up_stack(cli.parse(["up"])).replicas == 3


def test_etcd_members_from_the_flag_the_environment_or_the_state(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("APIARY_ETCD_MEMBERS", raising=False)
    assert cli.up_stack(cli.parse(["up", "--state", str(tmp_path)])).etcd_members == 1
    assert cli.up_stack(cli.parse(["up", "--state", str(tmp_path), "--etcd-members", "3"])).etcd_members == 3
    monkeypatch.setenv("APIARY_ETCD_MEMBERS", "3")
    s = cli.up_stack(cli.parse(["up", "--state", str(tmp_path), "--port", "0"]))
    assert s.etcd_members == 3
    s.choose_ports()
    s._write_record()
    monkeypatch.delenv("APIARY_ETCD_MEMBERS")
    again = cli.up_stack(cli.parse(["up", "--state", str(tmp_path)]))
    assert (again.etcd_members, again.ports) == (3, s.ports)
    assert {"etcd:client", "etcd-1:peer", "etcd-2:client"} <= set(again.ports)


@pytest.mark.parametrize("argv, message", [
    (["up", "--port", "8080"], "argument --port: invalid choice"),
    (["up", "--port", "0", "--port-offset", "5"], "not allowed with argument --port"),
    (["up", "--replicas", "0"], "--replicas must be at least 1"),
    (["up", "--etcd-members", "0"], "--etcd-members must be at least 1"),
    (["up", "--crds"], "expected at least one argument"),
    (["up", "--aggregated", "nope"], "argument --aggregated: invalid choice"),
    (["exec"], "the following arguments are required: NAME"),
    ([], "the following arguments are required: COMMAND"),
])
def test_bad_arguments(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.parse(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_kubeconfig_of_no_cluster(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=f"no cluster in {tmp_path}"):
        cli.main(["kubeconfig", "--state", str(tmp_path)])


def test_down_and_status_of_no_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["down", "--state", str(tmp_path)])
    assert "stopped 0 processes" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        cli.main(["status", "--state", str(tmp_path)])
    assert e.value.code == 1


def test_verbosity_reaches_every_service_and_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APIARY_V", raising=False)
    s = cli.up_stack(cli.parse(["up", "--state", str(tmp_path), "--port-offset", "7", "--v", "4",
                                "--aggregated", "pizza-apiserver"]))
    for name in ("storage", "registry", "proxy", "controllermanager"):
        cmd = s.command(name)
        assert cmd[cmd.index("--v") + 1] == "4", name
    pizza = s.command("pizza-apiserver")
    assert pizza[pizza.index("-v") + 1] == "4"
    s._write_record()
    assert cli.up_stack(cli.parse(["up", "--state", str(tmp_path)])).verbosity == 4
    monkeypatch.setenv("APIARY_V", "2")
    assert cli.up_stack(cli.parse(["up", "--state", str(tmp_path / "new")])).verbosity == 2
    assert "--v" not in cli.up_stack(cli.parse(["up", "--state", str(tmp_path / "new"), "--v", "0"])).command("proxy")


def test_tracing_runs_the_receiver_as_a_process_of_the_stack(tmp_path: Path) -> None:
    s = cli.up_stack(cli.parse(["up", "--state", str(tmp_path), "--port-offset", "7", "--tracing"]))
    assert (s.tracing_receiver, s.tracing_rate, s.tracing_collector) == (True, 1_000_000, "127.0.0.1:4324")
    assert s.names()[0] == "otlpreceiver" and s.port_kinds("otlpreceiver") == ("grpc",)
    assert s.command("otlpreceiver")[2:] == ["services.cluster.otlpreceiver", "--port", "4324",
                                             "--out", str(tmp_path / "logs" / "traces.jsonl")]
    assert all(["--tracing-config-file", str(s.tracing_config)] == s.command(n)[i:i + 2]
               for n in ("proxy", "storage") for i in [s.command(n).index("--tracing-config-file")])
    s.init()
    assert "endpoint: 127.0.0.1:4324\nsamplingRatePerMillion: 1000000\n" in s.tracing_config.read_text()
    s._write_record()
    again = cli.up_stack(cli.parse(["up", "--state", str(tmp_path)]))  # what the state recorded
    assert (again.tracing_receiver, again.tracing_rate) == (True, 1_000_000)
    rate = cli.up_stack(cli.parse(["up", "--state", str(tmp_path), "--tracing-rate", "10"]))
    assert rate.tracing_rate == 10
    off = cli.up_stack(cli.parse(["up", "--state", str(tmp_path), "--no-tracing"]))
    assert (off.tracing_receiver, off.tracing_collector, off.tracing_flags()) == (False, "", [])
    assert "otlpreceiver" not in off.names()
    off.init()  # a start without tracing leaves no configuration for `apiary exec` to find
    assert not off.tracing_config.exists()


def test_tracing_off_by_default(tmp_path: Path) -> None:
    s = cli.up_stack(cli.parse(["up", "--state", str(tmp_path)]))
    assert (s.tracing_receiver, s.tracing_rate, s.tracing_flags()) == (False, 0, [])
    assert "--tracing-config-file" not in s.command("proxy")


def test_exec_traces_when_init_configured_tracing(tmp_path: Path) -> None:
    assert cli.configured_collector(tmp_path / "tracing-config.yaml") == ""
    Stack(tmp_path, tracing_endpoint="127.0.0.1:4317", tracing_rate=5).init()
    assert cli.configured_collector(tmp_path / "tracing-config.yaml") == "127.0.0.1:4317"


@pytest.mark.parametrize("argv, message", [
    (["up", "--tracing", "--tracing-rate", "1000001"], "--tracing-rate must be between 0 and 1000000"),
    (["up", "--no-tracing", "--tracing-rate", "5"], "--tracing-rate needs --tracing"),
])
def test_bad_tracing_arguments(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.parse(argv)
    assert message in capsys.readouterr().err
