"""What the apiary wheel ships beside its modules (pyproject.toml): the data the services and the
launcher read at run time, and the `apiary` command's entry point."""
from __future__ import annotations

import tomllib

from services.cluster import cli
from services.cluster.stack import DEFAULT_AUDIT_POLICY, ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_launchers_audit_policy_is_the_manifests() -> None:
    assert DEFAULT_AUDIT_POLICY.read_text() == (ROOT / "k8s" / "base" / "audit-policy.yaml").read_text()


def test_the_data_read_at_run_time_is_package_data() -> None:
    data = PYPROJECT["tool"]["setuptools"]["package-data"]
    assert DEFAULT_AUDIT_POLICY.parent == ROOT / "services" / "cluster"
    assert DEFAULT_AUDIT_POLICY.name in data["services.cluster"]
    assert "schemas.json" in data["services.apis"]  # services/apis/schemas.py reads it
    assert sorted(p.name for p in (ROOT / "services").rglob("*") if p.suffix in (".json", ".yaml", ".yml")) == sorted(
        [*data["services.cluster"], *data["services.apis"]])


def test_the_console_script_is_the_cli() -> None:
    module, _, function = PYPROJECT["project"]["scripts"]["apiary"].partition(":")
    assert (module, function) == (cli.__name__, cli.main.__name__)


def test_the_dependencies_are_the_requirements_files() -> None:
    files = PYPROJECT["tool"]["setuptools"]["dynamic"]["dependencies"]["file"]
    assert files == ["requirements-runtime.txt", "requirements-cluster.txt"]
    for name in files:  # setuptools takes whole lines: a comment after a requirement would break it
        lines = [line for line in (ROOT / name).read_text().splitlines() if line and not line.startswith("#")]
        assert lines and all("#" not in line and not line.startswith("-") for line in lines)
