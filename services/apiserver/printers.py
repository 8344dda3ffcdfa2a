"""meta.k8s.io/v1 Table output (kube's TableConvertor): the shared columns and helpers; each kind's columns
are part of its definition (ResourceInfo.table, set by services/apis), looked up in the Catalogue."""
from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from apiary_pb import envelope_pb2 as pb
from services.common import envelope

Obj = dict[str, Any]

NAME_DESC = ("Name must be unique within a namespace. Is required when creating resources, although some resources "
             "may allow a client to request the generation of an appropriate name automatically. Name is primarily "
             "intended for creation idempotence and configuration definition. Cannot be updated. More info: "
             "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names")
AGE_DESC = ("CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
            "guaranteed to be set in happens-before order across separate operations. Clients may not set this "
            "value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null "
            "for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/"
            "api-conventions.md#metadata")


def column(name: str, typ: str, description: str, fmt: str = "", priority: int = 0) -> Obj:
    return {"name": name, "type": typ, "format": fmt, "description": description, "priority": priority}


NAME = column("Name", "string", NAME_DESC, "name")
AGE = column("Age", "string", AGE_DESC)


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 60 * 2:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def age(obj: Obj, now: datetime.datetime | None = None) -> str:
    ts = (obj.get("metadata") or {}).get("creationTimestamp")
    if not ts:
        return "<unknown>"
    try:
        created = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return "<unknown>"
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return human_duration((now - created).total_seconds())


def parse_time(ts: Any) -> datetime.datetime | None:
    """A metav1.Time or MicroTime as stored (UTC, "Z"); None when unset or unreadable (Go's zero time)."""
    if not ts or not isinstance(ts, str):
        return None
    try:
        t = datetime.datetime.fromisoformat(ts)
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=datetime.timezone.utc)


def since(ts: Any, now: datetime.datetime | None = None) -> str:
    """translateTimestampSince / translateMicroTimestampSince."""
    t = parse_time(ts)
    if t is None:
        return "<unknown>"
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return human_duration((now - t).total_seconds())


def first_three(addresses: list[str]) -> str:
    """kube's formatEndpoints and formatEndpointSlice: three at most, then "+ N more..."."""
    if not addresses:
        return "<none>"
    text = ",".join(addresses[:3])
    return text + f" + {len(addresses) - 3} more..." if len(addresses) > 3 else text


@dataclass(frozen=True)
class TableConvertor:
    """A kind's Table: every column definition, and the function giving every cell of a row."""
    columns: tuple[Obj, ...]
    cells: Callable[[Obj], list[Any]]
    # Name, <extra columns>, Age: the shape most kinds print
    name_age: bool = False


def name_age(extra: list[Obj] | None = None,
             cells: Callable[[Obj], list[Any]] = lambda o: []) -> TableConvertor:
    """Name, the extra columns, Age."""
    return TableConvertor((NAME, *(extra or ()), AGE),
                          lambda o: [(o.get("metadata") or {}).get("name", ""), *cells(o), age(o)], True)


DEFAULT_TABLE = name_age()
# rest.NewDefaultTableConvertor: what kube prints for a kind without a printer of its own
CREATED_AT_TABLE = TableConvertor((NAME, column("Created At", "date", AGE_DESC)), lambda o: [
    (o.get("metadata") or {}).get("name", ""), (o.get("metadata") or {}).get("creationTimestamp") or ""])


def column_definitions(convertor: TableConvertor) -> list[Obj]:
    return list(convertor.columns)


def row(convertor: TableConvertor, obj: Obj, include_object: str) -> Obj:
    out: Obj = {"cells": convertor.cells(obj)}
    if include_object == "Object":
        out["object"] = obj
    elif include_object != "None":
        out["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                         "metadata": obj.get("metadata") or {}}
    return out


def table(convertor: TableConvertor, items: list[pb.Object], list_meta: Obj, include_object: str,
          with_columns: bool = True) -> Obj:
    rows = [row(convertor, envelope.from_envelope(e), include_object) for e in items]
    return {
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
        "columnDefinitions": column_definitions(convertor) if with_columns else [],
        "rows": rows,
    }


def table_head(convertor: TableConvertor, list_meta: Obj) -> bytes:
    """A list's Table up to its first row: `{"kind":"Table",...,"columnDefinitions":[...],"rows":[`."""
    return orjson.dumps({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
                         "columnDefinitions": column_definitions(convertor)})[:-1] + b',"rows":['


def json_rows(convertor: TableConvertor, json_items: bytes, include_object: str) -> bytes:
    """The rows of items given as their JSON (comma-separated, as storage renders a list's part),
    comma-separated: a large list's Table is made part by part, never decoded whole."""
    if not json_items:
        return b""
    objs = orjson.loads(b"[" + json_items + b"]")
    return orjson.dumps([row(convertor, o, include_object) for o in objs])[1:-1]
