"""managedFields (k8s.io/apiserver endpoints/handlers/fieldmanager over structured-merge-diff's Updater):
which manager owns which fields, by operation (Apply, Update) and subresource.

- Update: the fields a write adds or changes go to its manager; fields it removes leave every manager;
  other managers lose what it changed (an update always wins).
- Apply: the applied configuration merges onto the live object and becomes its manager's whole set;
  fields that manager applied before and no manager owns any more are removed; a change to a field
  another manager owns is a conflict (409) unless forced, which moves the field to the applier.
- kubectl's upgrade from client-side apply: for the manager "kubectl", conflicts on fields whose live
  value is still what the last-applied-configuration annotation says are taken over, and that
  annotation, when present, follows the applied configuration.
- A write carrying `managedFields: []` (or `[{}]`) resets them; one carrying none keeps the live ones.
- An entry keeps the field names of the version it was made in (its apiVersion): for a kind whose versions
  name fields differently (events.k8s.io/v1 and core/v1 Events), the entries made in another version are
  read in the request's names and written back in their own (conversion.field_paths).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import orjson

from services.common import errors

from . import typed
from .conversion import PathTranslator
from .registry.rest import now_rfc3339
from .registry.store import APPLY, UPDATE
from .resource import ResourceInfo
from .typed import Parser, Path

Obj = dict[str, Any]
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
KUBECTL = "kubectl"
MAX_LAST_APPLIED = 256 * 1024
MAX_UPDATE_MANAGERS = 10
ANCIENT_CHANGES = "ancient-changes"

# Fields no manager owns (fieldmanager's stripMeta).
_STRIPPED: frozenset[Path] = frozenset({("f:apiVersion",), ("f:kind",), ("f:metadata",)} | {
    ("f:metadata", "f:" + k) for k in ("name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName",
                                       "generation", "managedFields", "resourceVersion", "deletionTimestamp",
                                       "deletionGracePeriodSeconds")})


@dataclass
class Entry:
    manager: str
    operation: str
    api_version: str
    subresource: str = ""
    time: str = ""
    fields: set[Path] = field(default_factory=set)

    @property
    def key(self) -> tuple[str, str, str, str]:
        # an applier keeps one identity whatever version it applies with (BuildManagerIdentifier)
        return (self.manager, self.operation, self.subresource, "" if self.operation == APPLY else self.api_version)

    def encode(self) -> Obj:
        out: Obj = {"manager": self.manager, "operation": self.operation, "apiVersion": self.api_version}
        if self.time:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = typed.encode(self.fields)
        if self.subresource:
            out["subresource"] = self.subresource
        return out

    def describe(self) -> str:
        """printManager: "name", with its subresource, and for an Update the version it used."""
        text = orjson.dumps(self.manager).decode()
        if self.subresource:
            text += f" with subresource {orjson.dumps(self.subresource).decode()}"
        if self.operation == UPDATE:
            text += f" using {self.api_version}"
        return text


Managers = dict[tuple[str, str, str, str], Entry]


def decode(entries: Any) -> Managers:
    out: Managers = {}
    for e in entries or ():
        if not isinstance(e, dict) or not e.get("manager") and not e.get("fieldsV1"):
            continue
        entry = Entry(str(e.get("manager") or ""), str(e.get("operation") or UPDATE), str(e.get("apiVersion") or ""),
                      str(e.get("subresource") or ""), str(e.get("time") or ""), typed.decode(e.get("fieldsV1")))
        out[entry.key] = entry
    return out


def encode(managers: Managers) -> list[Obj]:
    """Sorted as kube sorts them: operation, time, manager, version, subresource."""
    entries = sorted((e for e in managers.values() if e.fields),
                     key=lambda e: (e.operation, e.time, e.manager, e.api_version, e.subresource))
    return [e.encode() for e in entries]


def is_reset(entries: Any) -> bool:
    return isinstance(entries, list) and (entries == [] or entries == [{}])


def _strip(paths: set[Path]) -> set[Path]:
    return {p for p in paths if p not in _STRIPPED and p[:2] != ("f:metadata", "f:managedFields")}


def _plain(obj: Obj | None) -> Obj | None:
    """The object without its managedFields."""
    if obj is None:
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return dict(obj, metadata={k: v for k, v in meta.items() if k != "managedFields"})


class FieldManager:
    """The field manager of one kind (its schema among the parser's definitions) served at one version."""

    def __init__(self, parser: Parser, schema_name: str, api_version: str,
                 paths: PathTranslator | None = None) -> None:
        self.typed = parser
        self.schema = parser.root(schema_name)
        self.api_version = api_version
        self.paths = paths

    def _decode(self, entries: Any) -> Managers:
        """The entries, their fields in this version's names."""
        managers = decode(entries)
        if self.paths is not None:
            for e in managers.values():
                e.fields = self.paths(e.fields, e.api_version, self.api_version)
        return managers

    def _store(self, meta: Obj, managers: Managers) -> None:
        _cap_updaters(managers)
        if self.paths is not None:
            for e in managers.values():
                e.fields = self.paths(e.fields, self.api_version, e.api_version)
        entries = encode(managers)
        if entries:
            meta["managedFields"] = entries
        else:
            meta.pop("managedFields", None)

    def _compare(self, live: Obj | None, new: Obj) -> tuple[set[Path], set[Path], set[Path]]:
        # the objects compared have no managedFields (_plain): what _strip would drop is _STRIPPED's alone
        if live is None:  # a create: every field of the object is added
            return self.typed.field_set(_plain(new), self.schema) - _STRIPPED, set(), set()
        added, removed, modified = self.typed.compare(_plain(live), _plain(new), self.schema)
        return added - _STRIPPED, removed - _STRIPPED, modified - _STRIPPED

    # Update ----------------------------------------------------------------------------------

    def update(self, live: Obj | None, new: Obj, manager: str, subresource: str = "") -> None:
        """Record an Update (create, PUT, non-apply patch) in new's managedFields."""
        meta = new.setdefault("metadata", {})
        requested = meta.get("managedFields")
        live_entries = (live or {}).get("metadata", {}).get("managedFields")
        if subresource:
            managers = self._decode(live_entries)
        elif is_reset(requested):
            managers = {}
        else:
            managers = self._decode(requested) or self._decode(live_entries)
        added, removed, modified = self._compare(live, new)
        changed = added | modified
        for e in managers.values():
            e.fields -= removed
            e.fields -= changed
        if manager:
            mine = Entry(manager, UPDATE, self.api_version, subresource)
            prev = managers.get(mine.key)
            if changed:
                mine.fields = changed | (prev.fields if prev else set())
                mine.time = now_rfc3339()
                managers[mine.key] = mine
        self._store(meta, managers)

    # Apply -----------------------------------------------------------------------------------

    def apply(self, live: Obj | None, config: Obj, manager: str, subresource: str = "",
              force: bool = False) -> Obj:
        """The live object with config applied by manager, its managedFields updated; 409 on conflicts."""
        if (config.get("metadata") or {}).get("managedFields") is not None:
            raise errors.BadRequest("metadata.managedFields must be nil")
        try:
            return self._apply(live, config, manager, subresource, force)
        except _Conflicts as c:
            if manager != KUBECTL or force or live is None:
                raise c.error() from None
            allowed = self._allowed_from_last_applied(live)
            if any(p not in allowed for paths in c.conflicts.values() for p in paths):
                raise _Conflicts({k: {p for p in v if p not in allowed} for k, v in c.conflicts.items()},
                                 c.managers).error() from None
            return self._apply(live, config, manager, subresource, True)

    def _apply(self, live: Obj | None, config: Obj, manager: str, subresource: str, force: bool) -> Obj:
        managers = self._decode((live or {}).get("metadata", {}).get("managedFields"))
        base = copy.deepcopy(_plain(live)) if live is not None else None
        merged = self.typed.merge(base, config, self.schema)
        mine = Entry(manager, APPLY, self.api_version, subresource)
        prev = managers.get(mine.key)
        last = prev.fields if prev else set()
        mine.fields = _strip(self.typed.field_set(config, self.schema))
        mine.time = prev.time if prev else ""
        managers[mine.key] = mine
        # what this applier applied before and no manager owns any more goes
        owned: set[Path] = set().union(*(e.fields for e in managers.values()))
        holding = {p[:i] for p in owned for i in range(1, len(p))}
        stale = {p for p in _named(last) if p not in owned and p not in holding}
        new = self.typed.remove(merged, self.schema, stale)
        added, removed, modified = self._compare(live, new)
        changed = added | modified
        conflicts = {k: e.fields & changed for k, e in managers.items() if k != mine.key and e.fields & changed}
        if conflicts and not force:
            raise _Conflicts(conflicts, managers)
        for k, e in managers.items():
            if k != mine.key:
                e.fields -= changed
                e.fields -= removed
        if changed or removed or not mine.time:
            mine.time = now_rfc3339()
        if live is not None and manager == KUBECTL:
            self._follow_last_applied(live, new, config)
        self._store(new.setdefault("metadata", {}), managers)
        return new

    def _allowed_from_last_applied(self, live: Obj) -> set[Path]:
        """The fields the last-applied configuration set whose live value it still matches."""
        text = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
        if not text:
            return set()
        try:
            last = orjson.loads(text)
        except orjson.JSONDecodeError:
            return set()
        if not isinstance(last, dict):
            return set()
        was, now = self.typed.leaves(last, self.schema), self.typed.leaves(_plain(live), self.schema)
        return {p for p, val in was.items() if p in now and now[p] == val}

    @staticmethod
    def _follow_last_applied(live: Obj, new: Obj, config: Obj) -> None:
        """lastAppliedUpdater: a server-side apply by kubectl keeps an existing annotation current."""
        if LAST_APPLIED not in ((live.get("metadata") or {}).get("annotations") or {}):
            return
        applied = copy.deepcopy(config)
        ann = (applied.get("metadata") or {}).get("annotations")
        if isinstance(ann, dict):
            ann.pop(LAST_APPLIED, None)
            if not ann:
                applied["metadata"].pop("annotations")
        text = orjson.dumps(applied).decode()
        if len(text) > MAX_LAST_APPLIED:
            return
        new["metadata"].setdefault("annotations", {})[LAST_APPLIED] = text


def _cap_updaters(managers: Managers) -> None:
    """capManagers: beyond MAX_UPDATE_MANAGERS Update entries, the oldest merge, per version, into one
    "ancient-changes" entry carrying the time of the latest one merged."""
    if len(managers) <= MAX_UPDATE_MANAGERS:  # nothing to merge (most writes): no sort
        return
    updaters = sorted((e for e in managers.values() if e.operation == UPDATE and e.fields),
                      key=lambda e: (e.time, e.key))
    count = len(updaters)
    first: dict[str, Entry] = {}
    for e in updaters:
        if count <= MAX_UPDATE_MANAGERS:
            return
        if e.api_version not in first:
            first[e.api_version] = e
            continue
        bucket = Entry(ANCIENT_CHANGES, UPDATE, e.api_version)
        if bucket.key not in managers:
            seed = first[e.api_version]
            managers.pop(seed.key, None)
            bucket.fields = set(seed.fields)
            managers[bucket.key] = bucket
        bucket = managers[bucket.key]
        bucket.fields |= e.fields
        bucket.time = e.time
        del managers[e.key]
        count -= 1


def for_resource(parser: Parser, schema_name: str, info: ResourceInfo, paths: PathTranslator | None) -> FieldManager:
    """The field manager of a request to info (its version, and the other versions' entries translated by
    paths, the catalogue's field_paths(info))."""
    return FieldManager(parser, schema_name, info.api_version, paths)


def _named(paths: set[Path]) -> set[Path]:
    """EnsureNamedFieldsAreMembers: the fields on the way to a member count as members too."""
    out = set(paths)
    for p in paths:
        for i in range(1, len(p)):
            if p[i - 1].startswith("f:"):
                out.add(p[:i])
    return _strip(out)


class _Conflicts(Exception):
    def __init__(self, conflicts: dict[tuple[str, str, str, str], set[Path]], managers: Managers) -> None:
        super().__init__("conflicts")
        self.conflicts = conflicts
        self.managers = managers

    def error(self) -> errors.Conflict:
        """409 naming each field and its manager, in kube's words."""
        pairs = [(self.managers[k].describe(), p) for k in sorted(self.conflicts) for p in sorted(self.conflicts[k])]
        causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {who}",
                   "field": typed.path_string(p)} for who, p in pairs]
        if len(pairs) == 1:
            message = f"Apply failed with 1 conflict: conflict with {pairs[0][0]}: {typed.path_string(pairs[0][1])}"
        else:
            lines: list[str] = []
            for who in sorted({w for w, _ in pairs}):
                lines.append(f"conflicts with {who}:")
                lines.extend(f"- {typed.path_string(p)}" for w, p in pairs if w == who)
            message = f"Apply failed with {len(pairs)} conflicts: " + "\n".join(lines)
        return errors.Conflict(message, details={"causes": causes})
