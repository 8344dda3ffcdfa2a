"""A kit Kind compiled to the library's resource model (kube's scheme and install for an aggregated server):
one ResourceInfo per served version, with a Strategy over the kind's hub strategy, its Table, and a
Conversion to the storage version through the hub (the kinds' OpenAPI definitions are openapi.py's), so
that the library's handlers serve a kit kind as they serve a built-in one.

A version's object is what clients send and receive; the hub (kube's internal version) is what the kit's
strategy and admission plug-ins see: `hub` and `served` convert a whole object between the two.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from services.apiserver import printers
from services.apiserver import validation as v
from services.apiserver.catalogue import Catalogue
from services.apiserver.conversion import Conversion
from services.apiserver.registry.rest import Strategy
from services.apiserver.resource import STANDARD_VERBS, GroupVersion, ResourceInfo

from .api import Kind, Obj

TYPE_META = ("apiVersion", "kind", "metadata")


def _body(obj: Obj) -> Obj:
    return {k: val for k, val in obj.items() if k not in TYPE_META}


def _replace_body(obj: Obj, body: Obj) -> None:
    for k in [k for k in obj if k not in TYPE_META]:
        del obj[k]
    obj.update(body)


def hub(kind: Kind, version: str, obj: Obj) -> Obj:
    """A whole object of version as the hub: defaulted and converted; metadata shared, not copied."""
    body = copy.deepcopy(_body(obj))
    served = kind.versions[version]
    served.default(body)
    out = served.to_hub(body)
    out["metadata"] = obj.setdefault("metadata", {})
    return out


def served(kind: Kind, group: str, version: str, hub_obj: Obj) -> Obj:
    """A hub object as version serves it (metadata shared, not copied)."""
    out: Obj = {"apiVersion": f"{group}/{version}", "kind": kind.kind, "metadata": hub_obj.get("metadata") or {}}
    out.update(kind.versions[version].from_hub(copy.deepcopy(_body(hub_obj))))
    return out


class KindStrategy(Strategy):
    """The library's Strategy of one served version of a kit kind: the kind's hub strategy (prepare,
    validate) on the hub form of the object, written back in the version; defaulting as canonicalization."""

    kind: Kind
    group: str

    def _hub(self, obj: Obj) -> Obj:
        return hub(self.kind, self.info.version, obj)

    def _write_back(self, obj: Obj, hub_obj: Obj) -> None:
        _replace_body(obj, _body(served(self.kind, self.group, self.info.version, hub_obj)))

    def canonicalize(self, obj: Obj) -> None:
        body = _body(obj)
        self.kind.versions[self.info.version].default(body)
        _replace_body(obj, body)

    def prepare_for_create(self, obj: Obj) -> None:
        h = self._hub(obj)
        self.kind.strategy.prepare_for_create(h)
        self._write_back(obj, h)

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        h = self._hub(obj)
        self.kind.strategy.prepare_for_update(h, self._hub(copy.deepcopy(old)))
        self._write_back(obj, h)

    def validate(self, obj: Obj) -> list[v.Cause]:
        return super().validate(obj) + self.kind.strategy.validate(self._hub(obj))

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        meta, old_meta = obj.get("metadata") or {}, old.get("metadata") or {}
        return (Strategy.validate(self, obj) + v.validate_object_meta_update(meta, old_meta)
                + self.kind.strategy.validate_update(self._hub(obj), self._hub(copy.deepcopy(old))))


def _strategy_class(group: str, kind: Kind, version: str) -> type[KindStrategy]:
    props = kind.versions[version].schema.get("properties") or {}
    spec_fields = tuple(k for k in props if k not in TYPE_META and k != "status") or ("spec",)
    return type(f"{kind.kind}Strategy", (KindStrategy,), {"kind": kind, "group": group,
                                                          "spec_fields": spec_fields})


def _table(kind: Kind) -> printers.TableConvertor:
    """NAME, the kind's columns (cells read the hub of an object in any served version), AGE."""
    columns = [printers.column(c.name, c.type, c.description, c.format, c.priority) for c in kind.columns]

    def cells(obj: Obj) -> list[Any]:
        version = str(obj.get("apiVersion") or "").rpartition("/")[2]
        h = hub(kind, version if version in kind.versions else kind.storage_version, copy.deepcopy(obj))
        return [c.cell(h) for c in kind.columns]
    return printers.name_age(columns, cells)


def _conversion(group: str, kind: Kind, version: str) -> Conversion | None:
    """To and from the storage version, through the hub; None for the storage version itself."""
    stored = kind.storage_version
    if version == stored:
        return None
    this, storage = kind.versions[version], kind.versions[stored]

    def to_storage(body: Obj) -> Obj:
        body = copy.deepcopy(body)
        this.default(body)
        return storage.from_hub(this.to_hub(body))

    def from_storage(body: Obj) -> Obj:
        body = copy.deepcopy(body)
        storage.default(body)
        return this.from_hub(storage.to_hub(body))
    return Conversion(f"{group}/{stored}", kind.kind, to_storage, from_storage)


def resource_info(group: str, kind: Kind, version: str, etcd_prefix: str) -> ResourceInfo:
    """The kind served in version, stored under <etcd prefix>/<group>/<plural>/; a delete answers the deleted
    object, as kube answers for custom resources."""
    return ResourceInfo(
        group=group, version=version, kind=kind.kind, plural=kind.plural, singular=kind.singular,
        namespaced=kind.namespaced, key_prefix=f"{etcd_prefix.rstrip('/')}/{group}/{kind.plural}/",
        short_names=tuple(kind.short_names), verbs=STANDARD_VERBS, categories=tuple(kind.categories),
        strategy=_strategy_class(group, kind, version), table=_table(kind),
        conversion=_conversion(group, kind, version), return_deleted_object=True)


def catalogue(group: str, kinds: Sequence[Kind], versions: Sequence[str], etcd_prefix: str) -> Catalogue:
    """The server's kinds in each served version, in preference order."""
    gvs = [GroupVersion(group, version, 1000, 100 - i,
                        tuple(resource_info(group, k, version, etcd_prefix) for k in kinds if version in k.versions))
           for i, version in enumerate(versions)]
    return Catalogue(gvs)
