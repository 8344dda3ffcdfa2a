"""CustomResourceDefinitions from files, installed into a cluster and waited for until Established.

What envtest's CRDInstallOptions do: read CRDs from files and directories (YAML or JSON, several
documents a file), create them (or update what a reused cluster already holds) and wait until every
one is Established, so that its resources are served before the first test or the first `kubectl`.
A file that does not parse, or a CRD the API refuses, is reported with the file's path and the API's
message.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
SUFFIXES = (".yaml", ".yml", ".json")


class CRDError(Exception):
    """A CRD that could not be read or installed; the message names its file."""


@dataclass(frozen=True)
class CRDFile:
    path: Path
    crd: dict[str, Any]

    @property
    def name(self) -> str:
        return str((self.crd.get("metadata") or {}).get("name") or "")


def files_of(paths: Iterable[str | Path]) -> list[Path]:
    """The files given, and the CRD files directly inside the directories given (sorted)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.iterdir() if f.is_file() and f.suffix in SUFFIXES)
        elif p.is_file():
            out.append(p)
        else:
            raise CRDError(f"{p}: no such file or directory")
    return out


def load(paths: Iterable[str | Path]) -> list[CRDFile]:
    """Every CustomResourceDefinition document of the files; anything else in them is an error."""
    out: list[CRDFile] = []
    for path in files_of(paths):
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            raise CRDError(f"{path}: {e}") from None
        for doc in docs:
            if doc is None:
                continue
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
                raise CRDError(f"{path}: a {kind!r} document, not a CustomResourceDefinition")
            out.append(CRDFile(path, doc))
    return out


def _message(r: httpx.Response) -> str:
    try:
        return str(r.json().get("message") or r.text)
    except (json.JSONDecodeError, AttributeError):
        return r.text


def apply(client: httpx.Client, f: CRDFile) -> str:
    """Create the CRD, or replace the one of the same name (a reused cluster): its name."""
    r = client.post(CRDS, json=f.crd)
    if r.status_code == 409 and f.name:
        for _ in range(5):
            current = client.get(f"{CRDS}/{f.name}")
            if current.status_code != 200:
                break
            body = {**f.crd, "metadata": {**f.crd["metadata"],
                                          "resourceVersion": current.json()["metadata"]["resourceVersion"]}}
            r = client.put(f"{CRDS}/{f.name}", json=body)
            if r.status_code != 409:
                break
    if r.status_code not in (200, 201):
        raise CRDError(f"{f.path}: {f.name or 'a CustomResourceDefinition'}: {r.status_code} {_message(r)}")
    return str(r.json()["metadata"]["name"])


def established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def wait_established(client: httpx.Client, names: Iterable[str], timeout: float = 30.0) -> None:
    pending = set(names)
    deadline = time.monotonic() + timeout
    while pending:
        for name in sorted(pending):
            r = client.get(f"{CRDS}/{name}")
            if r.status_code == 200 and established(r.json()):
                pending.discard(name)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise CRDError(f"not Established after {timeout:.0f} s: {', '.join(sorted(pending))}")
        time.sleep(0.05)


def install(client: httpx.Client, paths: Iterable[str | Path], timeout: float = 30.0) -> list[str]:
    """Apply every CRD of the paths and wait until all are Established: their names."""
    names = [apply(client, f) for f in load(paths)]
    wait_established(client, names, timeout)
    return names
