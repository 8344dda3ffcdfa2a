"""meta.k8s.io/v1 Table output: NAME, the kind's columns, AGE (kube's default printer columns)."""
from __future__ import annotations

import datetime
from typing import Any

from .api import Kind, Obj

NAME_COLUMN = {"name": "Name", "type": "string", "format": "name", "priority": 0,
               "description": "Name must be unique within a namespace. Is required when creating resources, "
               "although some resources may allow a client to request the generation of an appropriate name "
               "automatically. Name is primarily intended for creation idempotence and configuration "
               "definition. Cannot be updated. More info: "
               "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"}
AGE_COLUMN = {"name": "Age", "type": "string", "format": "", "priority": 0,
              "description": "CreationTimestamp is a timestamp representing the server time when this object "
              "was created. It is not guaranteed to be set in happens-before order across separate "
              "operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC."}


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{h // 24}d{h % 24}h" if h % 24 else f"{h // 24}d"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    if h < 24 * 365 * 8:
        y = h // (24 * 365)
        d = (h // 24) % 365
        return f"{y}y{d}d" if d else f"{y}y"
    return f"{h // (24 * 365)}y"


def age(meta: Obj) -> str:
    ts = meta.get("creationTimestamp")
    if not ts:
        return "<unknown>"
    created = datetime.datetime.fromisoformat(str(ts))
    return human_duration((datetime.datetime.now(datetime.UTC) - created).total_seconds())


def column_definitions(kind: Kind) -> list[Obj]:
    cols = [{"name": c.name, "type": c.type, "format": c.format, "description": c.description,
             "priority": c.priority} for c in kind.columns]
    return [NAME_COLUMN, *cols, AGE_COLUMN]


def row(kind: Kind, hub: Obj, rendered: Obj, include_object: str = "Metadata") -> Obj:
    meta = hub.get("metadata") or {}
    cells: list[Any] = [meta.get("name", ""), *(c.cell(hub) for c in kind.columns), age(meta)]
    out: Obj = {"cells": cells}
    if include_object == "Object":
        out["object"] = rendered
    elif include_object != "None":
        out["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
    return out


def table(kind: Kind, rows: list[Obj], list_meta: Obj, columns: bool = True) -> Obj:
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
            "columnDefinitions": column_definitions(kind) if columns else [], "rows": rows}
