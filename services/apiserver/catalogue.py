"""The resource catalogue: kube's RESTMapper and EquivalentResourceMapper roles, with the priorities
kube-aggregator gives each group-version. Each service builds one in its main from the built-in API groups
(services.apis.install) and passes it to what needs it: discovery, OpenAPI, printing, conversion, admission
matching, the proxy's protobuf decoding.

It grows and shrinks at run time (CustomResourceDefinitions add kinds while the server runs): each change
bumps `generation` and calls the listeners, so that what is built from it is built again.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from .conversion import Paths, PathTranslator
from .printers import DEFAULT_TABLE, TableConvertor
from .resource import GroupVersion, ResourceInfo

Listener = Callable[["Catalogue"], None]


class Catalogue:
    """Every served resource, looked up by group/version/plural or kind, in the order its group-versions
    were added (core first)."""

    def __init__(self, group_versions: Iterable[GroupVersion] = ()) -> None:
        self._group_versions: list[GroupVersion] = []
        self._listeners: list[Listener] = []
        self.generation = 0
        self.resources: tuple[ResourceInfo, ...] = ()
        self._kinds: tuple[ResourceInfo, ...] = ()
        self._by_gvr: dict[tuple[str, str, str], ResourceInfo] = {}
        self._by_gvk: dict[tuple[str, str, str], ResourceInfo] = {}
        self._convertors: dict[tuple[str, str], TableConvertor] = {}
        self._equivalents: dict[ResourceInfo, tuple[ResourceInfo, ...]] = {}
        self._field_paths: dict[ResourceInfo, PathTranslator | None] = {}
        self.add(*group_versions)

    # Change ------------------------------------------------------------------------------

    def add(self, *group_versions: GroupVersion) -> None:
        """Serve more: a group-version already served gains the new resources (and keeps its priorities)."""
        for gv in group_versions:
            i = self._index(gv.group, gv.version)
            if i is None:
                self._group_versions.append(gv)
                continue
            old = self._group_versions[i]
            taken = {r.plural for r in old.resources} & {r.plural for r in gv.resources}
            if taken:
                raise ValueError(f"{gv.group}/{gv.version} already serves {', '.join(sorted(taken))}")
            self._group_versions[i] = dataclasses.replace(old, resources=old.resources + gv.resources,
                                                          kinds=old.kinds + gv.kinds)
        self._changed()

    def remove(self, *resources: ResourceInfo) -> None:
        """Stop serving resources; a group-version left without any goes with them."""
        gone = set(resources)
        kept = []
        for gv in self._group_versions:
            left = tuple(r for r in gv.resources if r not in gone)
            if left:
                kept.append(dataclasses.replace(gv, resources=left) if len(left) != len(gv.resources) else gv)
        self._group_versions = kept
        self._changed()

    def subscribe(self, listener: Listener) -> None:
        """listener(catalogue) after each change."""
        self._listeners.append(listener)

    def _index(self, group: str, version: str) -> int | None:
        return next((i for i, gv in enumerate(self._group_versions) if (gv.group, gv.version) == (group, version)),
                    None)

    def _changed(self) -> None:
        self.resources = tuple(r for gv in self._group_versions for r in gv.resources)
        self._kinds = tuple(r for gv in self._group_versions for r in gv.resources + gv.kinds)
        self._by_gvr = {(r.group, r.version, r.plural): r for r in self.resources}
        self._by_gvk = {}
        for r in self.resources:
            if not r.virtual:
                self._by_gvk.setdefault((r.group, r.version, r.kind), r)
        # by group and resource: every version of a resource prints the same columns
        self._convertors = {(r.group, r.plural): r.table for r in self._kinds if r.table is not None}
        self._equivalents.clear()
        self._field_paths.clear()
        self.generation += 1
        for listener in self._listeners:
            listener(self)

    # Lookups -----------------------------------------------------------------------------

    def lookup(self, group: str, version: str, plural: str) -> ResourceInfo | None:
        return self._by_gvr.get((group, version, plural))

    def lookup_kind(self, group: str, version: str, kind: str) -> ResourceInfo | None:
        """The stored resource of a kind (the RESTMapper's RESTMapping)."""
        return self._by_gvk.get((group, version, kind))

    def kinds(self) -> tuple[ResourceInfo, ...]:
        """Every kind a request body may carry: the resources and the subresources' own kinds."""
        return self._kinds

    def group_versions(self) -> list[tuple[str, str]]:
        """(group, version) pairs in catalogue order, core first."""
        return [(gv.group, gv.version) for gv in self._group_versions if gv.resources]

    def priorities(self) -> dict[tuple[str, str], tuple[int, int]]:
        """The priorities kube-aggregator gives the local APIServices it registers (apiVersionPriorities)."""
        return {(gv.group, gv.version): (gv.group_priority, gv.version_priority) for gv in self._group_versions}

    def in_group_version(self, group: str, version: str) -> list[ResourceInfo]:
        return sorted((r for r in self.resources if r.group == group and r.version == version),
                      key=lambda r: r.plural)

    def namespaced(self) -> list[ResourceInfo]:
        """Namespaced resources that are stored (what a namespace's deletion must empty)."""
        return [r for r in self.resources if r.namespaced and not r.virtual]

    def convertor(self, group: str, resource: str) -> TableConvertor:
        """The Table columns of a resource (Name and Age for a kind without its own)."""
        return self._convertors.get((group, resource), DEFAULT_TABLE)

    # One storage, several versions ----------------------------------------------------------

    def equivalents(self, info: ResourceInfo) -> tuple[ResourceInfo, ...]:
        """The definitions sharing info's storage (kube's EquivalentResourceMapper), info first: the versions
        and groups an admission webhook's rule may name to be called, converted, for a request to info."""
        found = self._equivalents.get(info)
        if found is None:
            found = self._equivalents[info] = (info,) + tuple(
                i for i in self.kinds() if i is not info and not i.virtual and info.key_prefix
                and i.key_prefix == info.key_prefix)
        return found

    def field_paths(self, info: ResourceInfo) -> PathTranslator | None:
        """How the field manager reads the managedFields entries made in another version of info's storage:
        their paths (field_paths(paths, entry's apiVersion, wanted apiVersion)) through the storage version's
        names, as kube's field manager compares objects converted to each entry's version. None when every
        version sharing info's storage has the same field names (the common case: nothing to translate)."""
        if info not in self._field_paths:
            self._field_paths[info] = self._path_translator(info)
        return self._field_paths[info]

    def _path_translator(self, info: ResourceInfo) -> PathTranslator | None:
        sharing = {i.api_version: i.conversion for i in self.kinds()
                   if not i.virtual and i.key_prefix == info.key_prefix}
        if not any(c is not None and c.renames for c in sharing.values()):
            return None

        def translate(paths: Paths, from_version: str, to_version: str) -> Paths:
            if from_version == to_version:
                return paths
            source, target = sharing.get(from_version), sharing.get(to_version)
            out = set()
            for p in paths:
                if source is not None:
                    p = source.field_path(p, to_storage=True)
                if target is not None:
                    p = target.field_path(p, to_storage=False)
                out.add(p)
            return out
        return translate
