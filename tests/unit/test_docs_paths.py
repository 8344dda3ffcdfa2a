"""Every file or module the docs (README.md, k8s/README.md, docs/*.md) name exists, so a module moved or
renamed cannot leave the docs behind.

A path is checked as written (`services/proxy/app.py`, `tests/unit/<service>/` up to its placeholder,
`services/auth/authenticators/{jwt,jwks}.py` for each name in braces); a path ending in a name
(`services/common/backoff.Backoff`) or a dotted module name (`services.common.errors.APIError`) must name a
module and, after it, something that module defines.
"""
from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "k8s" / "README.md", *(ROOT / "docs").glob("*.md")])

# Made by `make setup` (generated, git-ignored) or by a run (`make bench`'s history), not in the repository.
GENERATED = frozenset({"services/apis/schemas.json", "docs/bench-history/"})

TOP = "services|tests|tools|proto|k8s|docs|observability"
PATH = re.compile(rf"(?<![\w./-])((?:{TOP})/(?:[\w./<>*-]|\{{[\w.,]*\}})*)")
MODULE = re.compile(r"(?<![\w./-])(services(?:\.\w+)+)")
FILE_SUFFIXES = frozenset({".py", ".md", ".json", ".yaml", ".yml", ".proto", ".txt", ".toml", ".sh"})


@cache
def _defines(module: Path) -> frozenset[str]:
    """The names a module defines or imports at its top level."""
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return frozenset(names)


def _module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _names_something(parts: list[str], attribute: str) -> bool:
    """`parts` is a module (file or package) that defines `attribute`, or a package holding it as a module."""
    module = _module_file(parts)
    if module is None:
        return False
    return attribute in _defines(module) or _module_file([*parts, attribute]) is not None


def _expand(path: str) -> list[str]:
    """`a/{b,c}.py` -> a/b.py, a/c.py."""
    match = re.search(r"\{([^{}]*)\}", path)
    if match is None:
        return [path]
    before, after = path[:match.start()], path[match.end():]
    return [p for alt in match[1].split(",") for p in _expand(before + alt + after)]


def path_exists(path: str) -> bool:
    path = re.split(r"[<*]", path, maxsplit=1)[0]
    if path in GENERATED:
        return True
    if (ROOT / path).exists():
        return True
    head, _, last = path.rstrip("/").rpartition("/")
    stem, dot, attribute = last.partition(".")
    if not dot or Path(last).suffix in FILE_SUFFIXES:
        return False
    return _names_something([*head.split("/"), stem], attribute.split(".")[0])


def module_exists(name: str) -> bool:
    parts = name.split(".")
    if _module_file(parts) is not None:
        return True
    return len(parts) > 2 and _names_something(parts[:-1], parts[-1])


def stale_references(text: str) -> list[str]:
    missing = [p for raw in PATH.findall(text) for p in _expand(raw.rstrip(".")) if not path_exists(p)]
    missing += [m for m in MODULE.findall(text) if not module_exists(m)]
    return missing


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_docs_name_only_what_exists(doc: Path) -> None:
    assert stale_references(doc.read_text()) == []


def test_stale_references_are_found() -> None:
    assert stale_references(
        "services/proxy/app.py and services/apis/<group>.py, tests/unit/<service>/, services/common/mux/,"
        " services/common/backoff.Backoff, services/auth/authenticators/{jwt,jwks}.py,"
        " services.common.errors.APIError,"
        " services/apis/schemas.json; python -m services.storage"
    ) == []
    assert stale_references(
        "services/common/mux.py, services/storage/cacher.py, services/common/backoff.Nope,"
        " services/auth/authenticators/{jwt,gone}.py, services.common.kubeconfig.load"
    ) == ["services/common/mux.py", "services/storage/cacher.py", "services/common/backoff.Nope",
          "services/auth/authenticators/gone.py", "services.common.kubeconfig.load"]
