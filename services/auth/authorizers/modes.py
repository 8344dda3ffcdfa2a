"""The --authorization-mode modules that need no API objects: AlwaysAllow and AlwaysDeny."""
from __future__ import annotations

from apiary_pb import auth_pb2 as apb

from . import ALLOW, DENY, Authorizer


class AlwaysAllow:
    name = "AlwaysAllow"

    async def authorize(self, attrs: apb.Attributes) -> tuple[str, str]:
        return ALLOW, ""


class AlwaysDeny:
    name = "AlwaysDeny"

    async def authorize(self, attrs: apb.Attributes) -> tuple[str, str]:
        return DENY, "Everything is forbidden."


MODES: dict[str, type] = {"AlwaysAllow": AlwaysAllow, "AlwaysDeny": AlwaysDeny}


def parse_modes(value: str) -> list[Authorizer]:
    """--authorization-mode: a comma list of kube's mode names, each at most once."""
    names = [m.strip() for m in value.split(",") if m.strip()]
    if not names:
        raise ValueError("at least one authorization-mode must be passed")
    seen: set[str] = set()
    out: list[Authorizer] = []
    for n in names:
        if n not in MODES:
            raise ValueError(f"authorization-mode {n!r} is not a valid mode (known: {', '.join(MODES)})")
        if n in seen:
            raise ValueError(f"authorization-mode {n!r} has mode specified more than once")
        seen.add(n)
        out.append(MODES[n]())
    return out
