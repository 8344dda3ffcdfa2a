"""The compact profile: the host's command line (each member's flags as `python -m services.<name>`
would get them), which process runs each service and which pid file and log are its, the profile
recorded in the state directory, and the host's log told apart per service in a failed test's report."""
from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

import pytest

from services.cluster import cli, host, processes
from services.cluster.pytest_plugin import by_service
from services.cluster.stack import COMPACT, ClusterError, Stack, service_env


def test_the_host_command_line_round_trips() -> None:
    members = [host.Member("storage", ["--grpc-port", "1", "-v", "2"]), host.Member("apf", [])]
    cmd = host.command(members)
    assert cmd[:2] == ["-m", "services.cluster.host"]
    assert host.parse(cmd[2:]) == members
    assert host.entry_point("apf") == "services.apf.__main__"


@pytest.mark.parametrize("argv, message", [
    ([], "usage"), (["storage"], "usage"), (["--"], "must be followed by a service name"),
    (["--", "apf", "--", "apf"], "named twice"),
])
def test_a_bad_host_command_line(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        host.parse(argv)


def test_a_separator_in_a_members_flags_is_refused() -> None:
    with pytest.raises(ValueError, match="apf"):
        host.command([host.Member("apf", ["--"])])


def test_every_service_runs_in_the_host_with_its_own_ports(tmp_path: Path) -> None:
    s = Stack(tmp_path, 1000, profile=COMPACT, aggregated=[])
    assert s.processes() == ["etcd", COMPACT]
    assert s.process_of("registry") == COMPACT and s.process_of("etcd") == "etcd"
    cmd = s.command(COMPACT)
    members = host.parse(cmd[cmd.index("services.cluster.host") + 1:])
    assert [m.name for m in members] == list(s.service_names())
    for m in members:  # what the service's own process would be given
        assert m.argv == s.command(m.name)[3:]
    full = Stack(tmp_path, 1000, aggregated=[])
    assert full.processes() == ["etcd", *full.service_names()]


def test_a_service_pid_is_the_hosts(tmp_path: Path) -> None:
    s = Stack(tmp_path, profile=COMPACT, aggregated=[])
    s.pids.mkdir(parents=True)
    (s.pids / f"{COMPACT}.pid").write_text("1 0")  # pid 1 with another start time: not ours
    assert s.pid("proxy") is None
    (s.pids / f"{COMPACT}.pid").write_text(f"{os.getpid()} {processes.start_time(os.getpid())}")
    assert s.pid("proxy") == s.pid("storage") == os.getpid()
    assert s.pid("etcd") is None


def test_compact_runs_one_replica(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="one replica"):
        Stack(tmp_path, profile=COMPACT, replicas=2)
    with pytest.raises(ClusterError, match="unknown profile"):
        Stack(tmp_path, profile="tiny")


def test_the_profile_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APIARY_REPLICAS", raising=False)
    assert cli.up_stack(cli.parse(["up", "--state", str(tmp_path)])).profile == "full"
    first = cli.up_stack(cli.parse(["up", "--state", str(tmp_path), "--port", "0", "--profile", COMPACT]))
    first.choose_ports()
    first._write_record()
    assert Stack.from_state(tmp_path).profile == COMPACT
    assert cli.up_stack(cli.parse(["up", "--state", str(tmp_path)])).profile == COMPACT
    assert cli.up_stack(cli.parse(["up", "--state", str(tmp_path), "--profile", "full"])).profile == "full"


def test_the_hosts_log_per_service() -> None:
    lines = [
        "2026-12-03 16:05:29,303 compact INFO services.common.runtime: auth serving gRPC",
        "2026-12-03 16:05:29,304 compact INFO services.controllermanager.serviceaccounts: created ns/default",
        "2026-12-03 16:05:29,305 compact ERROR services.registry.bootstrap: failed",
        "Traceback (most recent call last):",
        "  File x",
        "2026-12-03 16:05:29,306 compact WARNING services.apiserver.storage.cacher: slow",
        "uvicorn said something",
    ]
    assert by_service(lines) == {
        COMPACT: [lines[0], lines[5], lines[6]],
        "controllermanager": [lines[1]],
        "registry": lines[2:5],
    }


def test_the_services_get_a_bytecode_cache_where_the_environment_forbids_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    assert service_env() is None  # Python writes its __pycache__ as usual
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    env = service_env()
    assert env is not None and "PYTHONDONTWRITEBYTECODE" not in env
    assert env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "apiary" / "pycache")  # not beside the sources
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "mine"))
    assert service_env() is None  # the user's own cache


class FakeEntryPoint:
    """A service's __main__ as the host uses it: an assemble that records when its component starts
    and stops (and may fail)."""

    def __init__(self, name: str, events: list[str], fail: bool = False) -> None:
        self.name, self.events, self.fail = name, events, fail

    async def assemble(self, service: object) -> str:
        if self.fail:
            raise SystemExit(f"{self.name}: bad flags")

        async def stop() -> None:
            self.events.append(f"stop {self.name}")
            await asyncio.sleep(0.01)  # the others must not start stopping before this one is done

        service.component(lambda: self.events.append(f"start {self.name}"), stop)  # type: ignore[attr-defined]
        return ""


def loaded(names: list[str], events: list[str], failing: str = "") -> list[tuple[host.Member, object, object]]:
    args = argparse.Namespace(insecure_internal=True, bind_address="127.0.0.1", health_port=0, v=0)
    return [(host.Member(n, []), FakeEntryPoint(n, events, n == failing), args) for n in names]


async def test_the_host_stops_the_apis_clients_first_then_the_others() -> None:
    events: list[str] = []
    stop = asyncio.Event()
    serving = asyncio.create_task(host.serve(loaded(["storage", "controllermanager", "proxy"], events), stop))
    while len(events) < 3:
        await asyncio.sleep(0.01)
    stop.set()
    await serving
    assert sorted(events[:3]) == ["start controllermanager", "start proxy", "start storage"]
    assert events[3] == "stop controllermanager"
    assert sorted(events[4:]) == ["stop proxy", "stop storage"]


def test_a_member_that_cannot_start_stops_the_host() -> None:
    """Its SystemExit (as its own process would end with) once the others have stopped."""
    events: list[str] = []
    with pytest.raises(SystemExit, match="registry: bad flags"):
        asyncio.run(host.serve(loaded(["storage", "registry"], events, failing="registry"), asyncio.Event()))
    assert events in (["start storage", "stop storage"], [])  # the other one stopped too (or never started)


def test_a_running_cluster_keeps_its_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APIARY_REPLICAS", raising=False)
    running = Stack(tmp_path, aggregated=[])
    running._write_record()
    running.pids.mkdir(parents=True)
    (running.pids / "etcd.pid").write_text(f"{os.getpid()} {processes.start_time(os.getpid())}")
    with pytest.raises(ClusterError, match="runs the full profile: `apiary down"):
        cli.up_stack(cli.parse(["up", "--state", str(tmp_path), "--profile", COMPACT]))
    assert cli.up_stack(cli.parse(["up", "--state", str(tmp_path), "--profile", "full"])).profile == "full"


def test_the_compact_profile_runs_one_proxy_worker(tmp_path):
    from services.cluster.stack import ClusterError, Stack

    with pytest.raises(ClusterError, match="one worker"):
        Stack(tmp_path, profile="compact", proxy_workers=2)
