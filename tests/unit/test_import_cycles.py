"""No import circle in services/: every module's imports (top-level, in functions, under TYPE_CHECKING,
relative ones resolved) make a graph without a cycle, so the layers (the library, services.apis, the
services) hold by construction and no import needs hiding to work."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "services"


def modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (its file, whether it is a package's __init__)."""
    out = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def imported(node: ast.Import | ast.ImportFrom, module: str, package: bool) -> list[str]:
    """The dotted names an import statement names: modules, or a module's attributes."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if package else module.split(".")[:-1]
        anchor = anchor[:len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" for a in node.names]


def graph() -> dict[str, set[str]]:
    """Module -> the modules of services/ it imports. `from p import x` is an edge to p.x when that is a
    module, else to p (where x is defined); importing a module also runs its packages' __init__ (an edge to
    each package the importer is not itself inside)."""
    known = modules()
    out: dict[str, set[str]] = {}
    for module, (path, package) in known.items():
        deps = out.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for name in imported(node, module, package):
                while name and name not in known:
                    name = name.rpartition(".")[0]
                if name and name != module:
                    deps.add(name)
                    deps.update(_outer_packages(name, module, known))
    return out


def _outer_packages(name: str, importer: str, known: dict[str, tuple[Path, bool]]) -> list[str]:
    """The packages whose __init__ importing `name` runs first: its ancestors, except those the importer
    is itself inside (already being initialised when it runs)."""
    parts = name.split(".")
    outer = [".".join(parts[:i]) for i in range(1, len(parts))]
    return [p for p in outer if p in known and importer != p and not importer.startswith(p + ".")]


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(g[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def path_through(g: dict[str, set[str]], component: list[str]) -> list[str]:
    """One cycle inside a component, start to start, to print."""
    members = set(component)
    start = component[0]
    seen = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(g[node] & members):
                if child == start:
                    return seen[node] + [start]
                if child not in seen:
                    seen[child] = seen[node] + [child]
                    nxt.append(child)
        frontier = nxt
    return component


def test_no_import_cycle_in_services():
    g = graph()
    found = cycles(g)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(path_through(g, c)) for c in found)


def test_the_graph_sees_every_kind_of_import():
    """Imports in functions, under TYPE_CHECKING and relative ones all count."""
    g = graph()
    assert "services.apiserver.resource" in g["services.apiserver.catalogue"]
    assert "services.apis.schemas" in g["services.admission.typechecking"]  # imported inside functions
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


SERVICES = ("admission", "apf", "auth", "controllermanager", "kit", "pizza", "proxy", "registry", "storage")


def test_the_resource_model_imports_no_service():
    """The library and the built-in API groups stand below every service: the proxy and admission read the
    kinds' definitions without the registry."""
    g = graph()
    for module, deps in g.items():
        if module.startswith(("services.apiserver", "services.apis")):
            bad = sorted(d for d in deps if d.split(".")[1] in SERVICES)
            assert not bad, f"{module} imports {bad}"
        if module.startswith(("services.proxy", "services.admission")):
            bad = sorted(d for d in deps if d.startswith("services.registry"))
            assert not bad, f"{module} imports {bad}"
