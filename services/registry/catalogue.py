"""The resource catalogue: kube's RESTMapper role. It looks served resources up by group, version and
resource; their definitions live in resources/, one module per API group."""
from __future__ import annotations

from .resources import (STANDARD_VERBS, STATUS_VERBS, GroupVersion, ResourceInfo, SubresourceInfo,
                        group_versions)

__all__ = ["STANDARD_VERBS", "STATUS_VERBS", "Catalogue", "DEFAULT_CATALOGUE", "GROUP_PRIORITIES",
           "GroupVersion", "ResourceInfo", "SubresourceInfo"]

GROUP_VERSIONS = group_versions()

# Priorities kube-aggregator gives the local APIServices it registers (apiVersionPriorities).
GROUP_PRIORITIES: dict[tuple[str, str], tuple[int, int]] = {
    (gv.group, gv.version): (gv.group_priority, gv.version_priority) for gv in GROUP_VERSIONS
}


class Catalogue:
    """Every served resource, looked up by group/version/plural."""

    def __init__(self, resources: tuple[ResourceInfo, ...]) -> None:
        self.resources = resources
        self._by_gvr = {(r.group, r.version, r.plural): r for r in resources}

    def lookup(self, group: str, version: str, plural: str) -> ResourceInfo | None:
        return self._by_gvr.get((group, version, plural))

    def group_versions(self) -> list[tuple[str, str]]:
        """(group, version) pairs in catalogue order, core first."""
        seen: list[tuple[str, str]] = []
        for r in self.resources:
            if (r.group, r.version) not in seen:
                seen.append((r.group, r.version))
        return seen

    def in_group_version(self, group: str, version: str) -> list[ResourceInfo]:
        return sorted((r for r in self.resources if r.group == group and r.version == version),
                      key=lambda r: r.plural)

    def namespaced(self) -> list[ResourceInfo]:
        """Namespaced resources that are stored (what a namespace's deletion must empty)."""
        return [r for r in self.resources if r.namespaced and not r.virtual]


DEFAULT_CATALOGUE = Catalogue(tuple(r for gv in GROUP_VERSIONS for r in gv.resources))
