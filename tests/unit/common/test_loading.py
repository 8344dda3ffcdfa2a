"""The cyclic collector rests while a service's modules load (services/common/loading.py): every service's
__main__ calls loading.start() before its other imports when it runs as the program, and runtime.run
resumes the collector with its thresholds. Imported (by tests, tools, the compact host) it leaves it alone."""
from __future__ import annotations

import ast
import gc
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from services.common import runtime

ROOT = Path(__file__).resolve().parents[3]
# the services whose program is their __main__ (runtime.main); the kit's servers and the cluster's
# command are not services' processes
SERVICES = ["admission", "apf", "auth", "controllermanager", "proxy", "registry", "storage"]


def _is_guarded_start(node: ast.stmt) -> bool:
    """`if __name__ == "__main__": loading.start()`"""
    return (isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"
            and [ast.unparse(s) for s in node.body] == ["loading.start()"] and not node.orelse)


@pytest.mark.parametrize("service", SERVICES)
def test_every_service_starts_loading_before_its_other_imports(service: str) -> None:
    body = ast.parse((ROOT / "services" / service / "__main__.py").read_text()).body
    body = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]  # docstring
    body = [s for s in body if not (isinstance(s, ast.ImportFrom) and s.module == "__future__")]
    assert ast.unparse(body[0]) == "from services.common import loading"
    assert _is_guarded_start(body[1]), f"services/{service}/__main__.py: the guarded loading.start() is not next"


def test_imported_a_service_leaves_the_collector_alone() -> None:
    assert gc.isenabled()
    try:
        importlib.import_module("services.storage.__main__")
        assert gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_rests_until_runtime_run_resumes_it() -> None:
    """python -m services.storage, up to runtime.run: the collector rests while the modules load, and runs
    with runtime.GC_THRESHOLDS once the service does."""
    script = """
import gc, runpy, sys
from services.common import runtime

real_run = runtime.run

def run(main):
    print("loaded", gc.isenabled(), flush=True)

    async def serving(stop):
        print("serving", gc.isenabled(), gc.get_threshold(), flush=True)

    real_run(serving)

runtime.run = run
sys.argv = ["python -m services.storage"]
runpy.run_module("services.storage", run_name="__main__", alter_sys=True)
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["loaded False", f"serving True {runtime.GC_THRESHOLDS}"]
