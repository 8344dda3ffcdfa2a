"""compose.yaml's tracing: off unless asked. The `traces` receiver runs only in the `tracing` profile, and
the init service writes a TracingConfiguration (which `apiary exec` passes to every service) only when
APIARY_TRACING_RATE is set; the commands it gives are ones the apiary command and the receiver accept."""
from __future__ import annotations

import os
import subprocess

import pytest
import yaml

from services.cluster import cli, otlpreceiver
from services.cluster.stack import ROOT

COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_the_receiver_is_only_in_the_tracing_profile() -> None:
    services = COMPOSE["services"]
    assert services["traces"]["profiles"] == ["tracing"]
    assert [n for n, s in services.items() if "profiles" in s] == ["traces"]
    command = services["traces"]["command"]
    assert command[:3] == ["python", "-m", "services.cluster.otlpreceiver"]
    with pytest.raises(SystemExit):  # --help: the flags are the receiver's own
        otlpreceiver.main([*command[3:], "--help"])


@pytest.mark.parametrize("rate, flags", [
    ("", []),
    ("1000000", ["--tracing-endpoint", "127.0.0.1:4317", "--tracing-rate", "1000000"]),
])
def test_init_configures_tracing_only_when_asked(rate: str, flags: list[str]) -> None:
    init = COMPOSE["services"]["init"]
    script = init["entrypoint"][2].replace("$$", "$").split(" && ")[0]  # compose's interpolation, then sh's
    assert script.startswith("python -m services.cluster init ")
    env = {**os.environ, "APIARY_TRACING_RATE": rate}
    out = subprocess.run(["sh", "-c", script.replace("python -m services.cluster", "echo", 1)],
                         env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out == ["init", "--state", "/state", *flags]
    args = cli.parse(out)
    assert (args.tracing_endpoint, args.tracing_rate) == ("127.0.0.1:4317" if rate else "", int(rate or 1000000))
