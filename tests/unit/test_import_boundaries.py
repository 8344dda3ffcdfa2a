"""The import graph of services/ keeps the shape services/apiserver/__init__.py states: no service
package imports another service's, and the library packages import no service at all.

Every import counts wherever it is written (module level, inside a function, under TYPE_CHECKING)
and relative imports are resolved, so an edge cannot be hidden from this test by moving it.
"""
from __future__ import annotations

import ast
from pathlib import Path

SERVICES = Path(__file__).resolve().parents[2] / "services"

# One process each: none may import another's package.
SERVICE_PACKAGES = frozenset({"proxy", "auth", "apf", "admission", "registry", "storage", "controllermanager",
                              "pizza"})
# The library, lowest layer first: each may import the layers below it, never a service.
LIBRARY_LAYERS = ("common", "apiserver", "apis", "kit")
# The local cluster launcher (services/cluster): it runs the services as processes, so it imports no
# service and only these library layers, and nothing in services/ imports it. Its compact profile's host
# (services/cluster/host.py) loads services' entry points (services.<name>.__main__) by a name made at
# run time, as `python -m` does: no module of a service is imported statically, which this graph checks.
LAUNCHER = "cluster"
LAUNCHER_MAY_IMPORT = ("common", "apiserver")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str, root: Path) -> bool:
    rel = Path(*name.split(".")[1:]) if "." in name else Path()
    return (root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file()


def _imports_by_name(call: ast.Call) -> bool:
    """importlib.import_module("services...") or __import__("services...")."""
    name = getattr(call.func, "attr", getattr(call.func, "id", ""))
    return (name in ("import_module", "__import__") and bool(call.args)
            and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str))


def _imports(path: Path, root: Path) -> set[str]:
    """The modules under services/ that the file at `path` imports."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for a in node.names:  # `from pkg import mod` imports pkg.mod when mod is a module
                found.add(f"{source}.{a.name}" if _is_module(f"{source}.{a.name}", root) else source)
        elif isinstance(node, ast.Call) and _imports_by_name(node):
            found.add(node.args[0].value)  # importlib over a module's name
    return {name for name in found if name.split(".")[0] == root.name}


def import_edges(root: Path = SERVICES) -> set[tuple[str, str]]:
    return {(_module_name(p, root), target)
            for p in sorted(root.rglob("*.py")) for target in _imports(p, root)}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def forbidden(edge: tuple[str, str]) -> str | None:
    """Why an edge breaks the boundaries, or None."""
    src, dst = _package(edge[0]), _package(edge[1])
    if src == dst:
        return None
    if dst == LAUNCHER:
        return f"{src} imports the cluster launcher"
    if src == LAUNCHER and dst in SERVICE_PACKAGES | set(LIBRARY_LAYERS) - set(LAUNCHER_MAY_IMPORT):
        return f"the cluster launcher imports {dst}"
    if dst not in SERVICE_PACKAGES | set(LIBRARY_LAYERS):
        return None
    if src in SERVICE_PACKAGES and dst in SERVICE_PACKAGES:
        return f"the {src} service imports the {dst} service"
    if src in LIBRARY_LAYERS and dst in SERVICE_PACKAGES:
        return f"the library package {src} imports the {dst} service"
    if src in LIBRARY_LAYERS and LIBRARY_LAYERS.index(dst) > LIBRARY_LAYERS.index(src):
        return f"the library package {src} imports {dst}, a layer above it"
    return None


def violations(root: Path = SERVICES) -> list[str]:
    return sorted(f"{a} -> {b}: {why}" for a, b in import_edges(root)
                  if (why := forbidden((a, b))) is not None)


def test_packages_keep_their_boundaries() -> None:
    assert violations() == []


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    root = tmp_path / "services"
    for pkg in ("kit", "proxy", "registry", "apiserver", "common", "cluster"):
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "registry" / "catalogue.py").write_text("")
    (root / "proxy" / "filters.py").write_text("")
    (root / "kit" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from services.registry import catalogue\n"
        "def f():\n    import services.proxy.filters\n")
    (root / "kit" / "d.py").write_text("import importlib\nimportlib.import_module('services.registry')\n")
    (root / "proxy" / "b.py").write_text("from ..registry.catalogue import X\nfrom .filters import Y\n")
    (root / "common" / "c.py").write_text("from services.apiserver import z\n")
    (root / "cluster" / "stack.py").write_text("from services.common import y\nfrom services.kit import x\n")
    (root / "registry" / "e.py").write_text("from services.cluster import stack\n")
    assert violations(root) == [
        "services.cluster.stack -> services.kit: the cluster launcher imports kit",
        "services.common.c -> services.apiserver: the library package common imports apiserver, "
        "a layer above it",
        "services.kit.a -> services.proxy.filters: the library package kit imports the proxy service",
        "services.kit.a -> services.registry.catalogue: the library package kit imports the registry service",
        "services.kit.d -> services.registry: the library package kit imports the registry service",
        "services.proxy.b -> services.registry.catalogue: the proxy service imports the registry service",
        "services.registry.e -> services.cluster.stack: registry imports the cluster launcher",
    ]
