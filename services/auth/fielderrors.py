"""field.ErrorList as k8s.io/apimachinery prints it, for kube's configuration validation messages."""
from __future__ import annotations

import json
from typing import Any


def _show(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


class FieldErrors(list[str]):
    """Collected "path: Type value: detail" messages; str() is utilerrors.NewAggregate's text."""

    def invalid(self, path: str, value: Any, detail: str) -> None:
        self.append(f"{path}: Invalid value: {_show(value)}: {detail}")

    def required(self, path: str, detail: str = "") -> None:
        self.append(f"{path}: Required value: {detail}" if detail else f"{path}: Required value")

    def duplicate(self, path: str, value: Any) -> None:
        self.append(f"{path}: Duplicate value: {_show(value)}")

    def not_supported(self, path: str, value: Any, supported: list[str]) -> None:
        self.append(f"{path}: Unsupported value: {_show(value)}: supported values: "
                    + ", ".join(json.dumps(s) for s in supported))

    def forbidden(self, path: str, detail: str) -> None:
        self.append(f"{path}: Forbidden: {detail}")

    def too_many(self, path: str, actual: int, limit: int) -> None:
        self.append(f"{path}: Too many: {actual}: must have at most {limit} items")

    def __str__(self) -> str:
        if len(self) == 1:
            return self[0]
        return "[" + ", ".join(self) + "]"


class ConfigError(ValueError):
    """A configuration file that cannot be used; str() is the message kube would print."""
