"""The pytest plugin as an operator's developer uses it: the example kopf operator's own test suite
(examples/kopf-operator) run by pytest in a subprocess with the plugin, and the plugin's refusals of
bad CRD files before any test runs."""
from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from services.cluster.stack import ROOT, Stack

EXAMPLE = ROOT / "examples" / "kopf-operator"


def plugin() -> str:
    """How pytest is told to load the plugin: by its entry point when apiary is installed."""
    installed = any(e.value == "services.cluster.pytest_plugin" for e in entry_points(group="pytest11", name="apiary"))
    return "apiary" if installed else "services.cluster.pytest_plugin"


def pytest_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", plugin(), "-p", "no:cacheprovider", *args]


def pytest_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def run_pytest(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(pytest_command(*args), check=False, cwd=cwd, env=pytest_env(), capture_output=True,
                          text=True, timeout=timeout)


def test_example_operator_suite_passes_on_its_own_cluster() -> None:
    """Its own cluster (started by the plugin on free ports), CRDs from its pytest.ini, its webhook."""
    proc = run_pytest(EXAMPLE, "-q")
    failures = proc.stdout[proc.stdout.find("= FAILURES ="):]
    assert proc.returncode == 0, failures[:8000] + proc.stdout[-1000:] + proc.stderr[-2000:]
    assert "3 passed" in proc.stdout


def _suite(tmp_path: Path, crd: str) -> Path:
    (tmp_path / "crds").mkdir()
    (tmp_path / "crds" / "widget.yaml").write_text(crd)
    (tmp_path / "test_never_runs.py").write_text(
        "from pathlib import Path\n\n"
        "def test_never_runs(apiary_cluster):\n"
        "    Path(__file__).with_name('ran').touch()\n")
    return tmp_path


def test_a_crd_file_that_does_not_parse_fails_the_session(tmp_path: Path) -> None:
    suite = _suite(tmp_path, "kind: CustomResourceDefinition\nspec: [unclosed\n")
    proc = run_pytest(suite, "--apiary-crds", "crds")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert str(suite / "crds" / "widget.yaml") in proc.stderr
    assert not (suite / "ran").exists()


INVALID_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.apiary.dev}
spec:
  group: example.apiary.dev
  scope: Galactic
  names: {plural: widgets, kind: Widget}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}
"""


def test_an_invalid_crd_fails_the_session_with_the_apis_message(stack: Stack, tmp_path: Path) -> None:
    """Against the shared stack (--apiary-kubeconfig, an existing cluster): the API's 422 and the file."""
    suite = _suite(tmp_path, INVALID_CRD)
    proc = run_pytest(suite, "--apiary-crds", "crds", "--apiary-kubeconfig", str(stack.kubeconfig))
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, out
    assert f"{suite / 'crds' / 'widget.yaml'}: CustomResourceDefinition widgets.example.apiary.dev: 422" in out
    assert 'spec.scope: Unsupported value: "Galactic"' in out
    assert not (suite / "ran").exists()
