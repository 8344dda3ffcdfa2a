"""An admission plugin written in Python, found through a real entry point (a distribution's
entry_points.txt on the admission service's path) and enabled by --enable-admission-plugins."""
from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.cluster.stack import ROOT, Stack

PLUGINS = ROOT / "tests" / "plugins"


def install_entry_point(site: Path) -> None:
    """A distribution declaring RefusePrefix in the apiary.admission_plugins group (what pip writes)."""
    dist = site / "apiary_test_plugins-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: apiary-test-plugins\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[apiary.admission_plugins]\nRefusePrefix = refuse_prefix_plugin:factory\n")


@pytest.fixture()
def plugin_stack(stack: Stack, tmp_path: Path) -> Iterator[Stack]:
    """The test stack's admission service restarted with RefusePrefix enabled (and restored afterwards)."""
    install_entry_point(tmp_path)
    config = tmp_path / "admission.yaml"
    config.write_text("apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n"
                      "- name: RefusePrefix\n  configuration: {prefix: reserved-}\n")
    old_path = os.environ.get("PYTHONPATH")

    def restart(extra: list[str], pythonpath: str | None) -> None:
        pid = stack.pid("admission")
        if pid:
            os.killpg(pid, 15)
            while stack.pid("admission"):
                time.sleep(0.1)
        stack.extra["admission"] = extra
        if pythonpath is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = pythonpath
        try:
            stack.spawn("admission")
        finally:
            if old_path is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old_path
        assert not stack.wait(["admission"], 60), "admission did not become ready"

    restart(["--enable-admission-plugins", "NamespaceLifecycle,RefusePrefix",
             "--admission-control-config-file", str(config)],
            os.pathsep.join(p for p in (str(tmp_path), str(PLUGINS), old_path) if p))
    try:
        yield stack
    finally:
        restart([], old_path)


def test_python_plugin_from_entry_point(plugin_stack: Stack, kubectl: Any) -> None:
    ns = f"pyplug-{uuid.uuid4().hex[:6]}"
    kubectl.run("create", "namespace", ns)
    refused = kubectl.run("-n", ns, "create", "configmap", "reserved-x", check=False)
    assert refused.returncode != 0
    assert ('configmaps "reserved-x" is forbidden: names starting with \'reserved-\' are reserved'
            in refused.stderr)
    # allowed names are created, mutated by the same plugin
    kubectl.run("-n", ns, "create", "configmap", "fine")
    who = kubectl.run("-n", ns, "get", "configmap", "fine", "-o",
                      "jsonpath={.metadata.annotations.example\\.com/created-by}").stdout
    assert who and who != "<no value>"
    # the plugin reads namespaces through the shared informers: a labelled namespace is exempt
    kubectl.run("label", "namespace", ns, "example.com/allow-any-name=true")
    deadline = time.monotonic() + 30
    while kubectl.run("-n", ns, "create", "configmap", "reserved-y", check=False).returncode != 0:
        assert time.monotonic() < deadline, "the namespace label never reached the plugin"
        time.sleep(0.2)
    kubectl.run("delete", "namespace", ns, "--wait=false")


def test_unknown_plugin_is_refused_at_start() -> None:
    from services.admission.__main__ import parse_args, resolve_plugins

    with pytest.raises(SystemExit, match="plugin 'NoSuchPlugin' is unknown"):
        resolve_plugins(parse_args(["--enable-admission-plugins", "NoSuchPlugin"]))
