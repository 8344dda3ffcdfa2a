"""CustomResourceDefinitions installed into a stack from files, as envtest's CRDInstallOptions do:
every .yaml, .yml and .json file of the paths given (directories are read, not recursed into), each
CustomResourceDefinition in them created (or updated when it exists), then waited for until it is
Established and its resources are served. Documents of other kinds are skipped; a file that does not
parse or a definition the API refuses is a CRDError naming the file.

Given a record file (a state directory's crds.sha256), an install whose files hash to what the record
holds, with every definition they name listed Established, writes nothing: `apiary up` or a reused
pytest session on a running cluster costs one LIST, not a write and a wait per definition."""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
SUFFIXES = (".yaml", ".yml", ".json")
POLL = 0.1

# (method, path, body) -> (HTTP status, decoded answer): Stack._api
API = Callable[[str, str, "dict[str, Any] | None"], "tuple[int, dict[str, Any]]"]


class CRDError(Exception):
    """A CRD file that does not parse, or a definition the API refused or did not establish."""


def files(paths: Iterable[Path]) -> list[Path]:
    """The CRD files of `paths`: a file as given, a directory's files with a CRD suffix, sorted."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.iterdir() if p.is_file() and p.suffix in SUFFIXES)
        elif path.is_file():
            found.append(path)
        else:
            raise CRDError(f"{path}: no such file or directory")
    return found


def read(path: Path) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions in one file (a List's items too)."""
    import yaml  # here: a warm `apiary up` with unchanged files reads none of them

    try:
        with path.open() as f:  # a YAML error's position names the file
            docs = [json.load(f)] if path.suffix == ".json" else list(yaml.safe_load_all(f))
    except (ValueError, yaml.YAMLError) as e:
        raise CRDError(f"{path}: does not parse: {e}") from None
    crds: list[dict[str, Any]] = []
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise CRDError(f"{path}: a document is not an object")
        items = doc.get("items") if str(doc.get("kind", "")).endswith("List") else [doc]
        crds += [i for i in items or () if isinstance(i, dict) and i.get("kind") == "CustomResourceDefinition"]
    return crds


def fingerprint(found: Iterable[Path]) -> str:
    """A hash of these files' paths and contents: the same files unchanged, the same hash."""
    h = hashlib.sha256()
    for path in found:
        h.update(str(path.resolve()).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def established(api: API, names: Iterable[str]) -> bool:
    """Whether every CRD named is there and Established (one LIST)."""
    code, listing = api("GET", CRDS, None)
    if code != 200:
        return False
    ok = {(i.get("metadata") or {}).get("name") for i in listing.get("items") or ()
          if any(c.get("type") == "Established" and c.get("status") == "True"
                 for c in (i.get("status") or {}).get("conditions") or ())}
    return set(names) <= ok


def install(api: API, paths: Iterable[Path], timeout: float = 30.0, record: Path | None = None) -> list[str]:
    """Create or update every CRD of `paths`, then wait until each is Established and served;
    their names. With `record`, nothing is written when it holds these files' fingerprint and their
    CRDs are Established (the module docstring); after an install it holds their fingerprint."""
    found = files(paths)
    digest = fingerprint(found)
    if record is not None:
        try:
            recorded = json.loads(record.read_text())
        except (OSError, ValueError):
            recorded = {}
        if recorded.get("sha256") == digest and established(api, recorded.get("names") or ()):
            return list(recorded["names"])
        record.unlink(missing_ok=True)
    written: list[tuple[Path, dict[str, Any]]] = []
    for path in found:
        for crd in read(path):
            written.append((path, apply(api, path, crd)))
    deadline = time.monotonic() + timeout
    for path, crd in written:
        wait_established(api, path, crd["metadata"]["name"], deadline)
        wait_served(api, path, crd, deadline)
    names = [crd["metadata"]["name"] for _, crd in written]
    if record is not None:
        record.write_text(json.dumps({"sha256": digest, "names": names}) + "\n")
    return names


def apply(api: API, path: Path, crd: dict[str, Any]) -> dict[str, Any]:
    """Create the CRD, or replace what is there (kubectl apply's outcome); what the API returned."""
    name = (crd.get("metadata") or {}).get("name", "")
    for _ in range(5):
        code, answer = api("POST", CRDS, crd)
        if code == 409 and name:
            code, current = api("GET", f"{CRDS}/{name}", None)
            if code == 404:
                continue
            update = {**crd, "metadata": {**crd["metadata"],
                                          "resourceVersion": current["metadata"]["resourceVersion"]}}
            code, answer = api("PUT", f"{CRDS}/{name}", update)
            if code == 409:
                continue
        if code in (200, 201):
            return answer
        raise CRDError(f"{path}: CustomResourceDefinition {name or '(no name)'}: {code} {answer.get('message', '')}")
    raise CRDError(f"{path}: CustomResourceDefinition {name}: changed by someone else five times in a row")


def wait_established(api: API, path: Path, name: str, deadline: float) -> None:
    while True:
        code, crd = api("GET", f"{CRDS}/{name}", None)
        conditions = {c.get("type"): c for c in (crd.get("status") or {}).get("conditions") or ()} if code == 200 else {}
        if conditions.get("Established", {}).get("status") == "True":
            return
        refused = conditions.get("NamesAccepted", {})
        if refused.get("status") == "False":
            raise CRDError(f"{path}: CustomResourceDefinition {name}: {refused.get('message', 'names not accepted')}")
        if time.monotonic() > deadline:
            raise CRDError(f"{path}: CustomResourceDefinition {name} is not Established ({code})")
        time.sleep(POLL)


def wait_served(api: API, path: Path, crd: dict[str, Any], deadline: float) -> None:
    """Until discovery lists the resource in each served version, as a client's first request needs."""
    spec = crd["spec"]
    for version in (v["name"] for v in spec.get("versions") or () if v.get("served")):
        while True:
            code, listing = api("GET", f"/apis/{spec['group']}/{version}", None)
            if code == 200 and any(r.get("name") == spec["names"]["plural"] for r in listing.get("resources") or ()):
                break
            if time.monotonic() > deadline:
                raise CRDError(f"{path}: CustomResourceDefinition {crd['metadata']['name']}: "
                               f"{spec['group']}/{version} is not served ({code})")
            time.sleep(POLL)
