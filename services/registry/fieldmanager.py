"""managedFields (k8s.io/apiserver endpoints/handlers/fieldmanager): which manager set which fields."""
from __future__ import annotations

from typing import Any

from . import patch as patches
from .strategies import now_rfc3339

Obj = dict[str, Any]


def update_managed_fields(obj: Obj, old: Obj | None, *, manager: str, operation: str, subresource: str,
                          api_version: str, merge_keys: Any, applied: Obj | None = None) -> None:
    """One entry per (manager, operation, subresource) naming the fields it set: for an apply, the applied
    configuration's fields; otherwise the fields this write changed (all of them on create)."""
    if not manager:
        return
    meta = obj["metadata"]
    entries = [e for e in meta.get("managedFields") or []
               if not (e.get("manager") == manager and e.get("operation") == operation
                       and (e.get("subresource") or "") == subresource)]
    if applied is not None:
        source = applied
    else:
        plain = {k: val for k, val in obj.items() if k != "metadata"}
        plain["metadata"] = {k: val for k, val in meta.items() if k != "managedFields"}
        if old is None:
            source = plain
        else:
            prev = {k: val for k, val in old.items() if k != "metadata"}
            prev["metadata"] = {k: val for k, val in (old.get("metadata") or {}).items()
                                if k != "managedFields"}
            source = _non_null(patches.create_merge_patch(prev, plain))
    fields = patches.fields_v1(source, merge_keys)
    if not fields and applied is None:
        meta["managedFields"] = entries or meta.get("managedFields") or []
        if not meta["managedFields"]:
            meta.pop("managedFields")
        return
    entry: Obj = {"manager": manager, "operation": operation, "apiVersion": api_version,
                  "time": now_rfc3339(), "fieldsType": "FieldsV1", "fieldsV1": fields}
    if subresource:
        entry["subresource"] = subresource
    meta["managedFields"] = entries + [entry]


def _non_null(patch: Any) -> Any:
    if isinstance(patch, dict):
        return {k: _non_null(val) for k, val in patch.items() if val is not None}
    return patch
