"""The Catalogue grows and shrinks at run time (CustomResourceDefinitions add kinds while the server runs), and
what is built from it follows."""
from __future__ import annotations

import pytest

from services.apis.install import GROUP_VERSIONS, new_catalogue
from services.apiserver.catalogue import Catalogue
from services.apiserver.conversion import renamed
from services.apiserver.printers import name_age
from services.apiserver.resource import GroupVersion, ResourceInfo

GROUP = "stable.example.com"


def crontab(version: str = "v1", plural: str = "crontabs", **kw) -> ResourceInfo:
    return ResourceInfo(group=GROUP, version=version, kind="CronTab", plural=plural, singular="crontab",
                        namespaced=True, key_prefix=f"/registry/{GROUP}/crontabs/", **kw)


def test_built_in_catalogue_serves_every_group_version_core_first():
    catalogue = new_catalogue()
    assert catalogue.group_versions()[0] == ("", "v1")
    assert catalogue.group_versions() == [(gv.group, gv.version) for gv in GROUP_VERSIONS]
    configmaps = catalogue.lookup("", "v1", "configmaps")
    assert configmaps is not None and catalogue.lookup_kind("", "v1", "ConfigMap") is configmaps
    assert catalogue.lookup_kind("authentication.k8s.io", "v1", "TokenReview") is None  # never stored
    assert {r.kind for r in catalogue.kinds()} - {r.kind for r in catalogue.resources} == {"TokenRequest"}


def test_add_and_remove_bump_the_generation_and_call_the_listeners():
    catalogue = new_catalogue()
    seen: list[int] = []
    catalogue.subscribe(lambda c: seen.append(c.generation))
    start = catalogue.generation
    v1 = crontab(table=name_age())
    catalogue.add(GroupVersion(GROUP, "v1", 1000, 15, (v1,)))
    assert seen == [start + 1]
    assert catalogue.lookup(GROUP, "v1", "crontabs") is v1
    assert catalogue.lookup_kind(GROUP, "v1", "CronTab") is v1
    assert catalogue.group_versions()[-1] == (GROUP, "v1")
    assert catalogue.priorities()[(GROUP, "v1")] == (1000, 15)
    assert v1 in catalogue.namespaced()
    assert catalogue.convertor(GROUP, "crontabs") is v1.table
    # a second kind joins its group-version; a kind it already serves is refused
    other = crontab(plural="others")
    catalogue.add(GroupVersion(GROUP, "v1", 1000, 15, (other,)))
    assert [r.plural for r in catalogue.in_group_version(GROUP, "v1")] == ["crontabs", "others"]
    with pytest.raises(ValueError, match="already serves crontabs"):
        catalogue.add(GroupVersion(GROUP, "v1", 1000, 15, (crontab(),)))
    catalogue.remove(v1, other)
    assert catalogue.lookup(GROUP, "v1", "crontabs") is None
    assert (GROUP, "v1") not in catalogue.group_versions()
    assert seen == [start + 1, start + 2, start + 3]


def test_equivalents_and_field_paths_follow_the_kinds_sharing_a_storage():
    v1 = crontab()
    catalogue = Catalogue([GroupVersion(GROUP, "v1", 1000, 15, (v1,))])
    assert catalogue.equivalents(v1) == (v1,)
    assert catalogue.field_paths(v1) is None
    v2 = crontab("v2", conversion=renamed(f"{GROUP}/v1", "CronTab", {"schedule": "cron"}))
    catalogue.add(GroupVersion(GROUP, "v2", 1000, 10, (v2,)))
    assert catalogue.equivalents(v1) == (v1, v2)
    translate = catalogue.field_paths(v1)
    assert translate is not None
    assert translate({("f:schedule",)}, f"{GROUP}/v2", f"{GROUP}/v1") == {("f:cron",)}
    catalogue.remove(v2)
    assert catalogue.equivalents(v1) == (v1,) and catalogue.field_paths(v1) is None
