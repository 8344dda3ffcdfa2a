"""resource.Quantity (k8s.io/apimachinery/pkg/api/resource): parse to an exact number, print canonically.

Enough for what apiary counts (object-count quotas: whole numbers, with the usual suffixes)."""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {"": 1, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": 10**3, "M": 10**6,
           "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
           "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")
QUANTITY_ERROR = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


def parse(value: object) -> Decimal:
    """The quantity's value; ValueError (with kube's message) for what is no quantity."""
    if isinstance(value, bool):
        raise ValueError(QUANTITY_ERROR)
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    m = _QUANTITY.match(str(value).strip()) if isinstance(value, str) else None
    if not m:
        raise ValueError(QUANTITY_ERROR)
    try:
        number = Decimal(m.group(1))
    except InvalidOperation:
        raise ValueError(QUANTITY_ERROR) from None
    if m.group(2):
        return number * Decimal(10) ** int(m.group(2)[1:])
    return number * _SUFFIX[m.group(3) or ""]


def format_count(n: Decimal | int) -> str:
    """A whole count as kube prints it ("2"); other values in plain decimal form."""
    d = Decimal(n)
    return str(int(d)) if d == d.to_integral_value() else format(d.normalize(), "f")
