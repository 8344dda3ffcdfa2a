"""Each built-in kind's strategy (kube's pkg/registry/<group>/<kind>/strategy.go), extending the library's
Strategy (services.apiserver.registry.rest); one module per API group, and what several share (podspec,
workload)."""
from __future__ import annotations

import base64
import binascii
import re

_B64 = re.compile(r"[A-Za-z0-9+/]")


def base64_error(value: str) -> str | None:
    """encoding/base64's error for a []byte JSON field, or None when the value decodes."""
    try:
        base64.b64decode(value, validate=True)
        return None
    except (binascii.Error, ValueError):
        pass
    for i, ch in enumerate(value):
        if ch == "=":
            return f"illegal base64 data at input byte {i}"
        if not _B64.match(ch):
            return f"illegal base64 data at input byte {i}"
    return f"illegal base64 data at input byte {len(value) - len(value) % 4}"
