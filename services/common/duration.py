"""Go's time.ParseDuration, for kube's duration flags, configuration fields and ?timeout= ("2m", "1m30s",
"500ms"), with Go's error messages; and the argparse type every service's duration flags use."""
from __future__ import annotations

import argparse
import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_COMPONENT = re.compile(r"(\d*)(?:\.(\d*))?([^\d.]*)")


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_duration(value: str) -> float:
    """Go's time.ParseDuration, in seconds; ValueError with Go's message."""
    orig, s = value, value
    sign = 1.0
    if s[:1] in ("-", "+"):
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"time: invalid duration {_quote(orig)}")
    total = 0.0
    while s:
        m = _COMPONENT.match(s)
        whole, frac, unit = m.group(1), m.group(2), m.group(3)  # type: ignore[union-attr]
        if not whole and not frac:
            raise ValueError(f"time: invalid duration {_quote(orig)}")
        if not unit:
            raise ValueError(f"time: missing unit in duration {_quote(orig)}")
        if unit not in _UNITS:
            raise ValueError(f"time: unknown unit {_quote(unit)} in duration {_quote(orig)}")
        total += float(f"{whole or 0}.{frac or 0}") * _UNITS[unit]
        s = s[m.end():]  # type: ignore[union-attr]
    if total > 9223372036.854775807:
        raise ValueError(f"time: invalid duration {_quote(orig)}")
    return sign * total


def flag(value: str) -> float:
    """An argparse type: a Go duration (1m0s, 32s, 500ms), or a bare number of seconds."""
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return parse_duration(value.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
