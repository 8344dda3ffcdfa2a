"""Go's time.ParseDuration, for kube's duration flags and configuration fields ("2m", "1m30s", "500ms")."""
from __future__ import annotations

import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds; ValueError with Go's message for anything else."""
    s = text.strip()
    sign = -1.0 if s.startswith("-") else 1.0
    body = s.lstrip("+-")
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(body):
        m = _PART.match(body, pos)
        if m is None:
            raise ValueError(f'time: invalid duration "{text}"')
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not body:
        raise ValueError(f'time: invalid duration "{text}"')
    return sign * total
