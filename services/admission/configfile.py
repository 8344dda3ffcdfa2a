"""--admission-control-config-file: an AdmissionConfiguration naming per-plugin configuration.

    apiVersion: apiserver.config.k8s.io/v1
    kind: AdmissionConfiguration
    plugins:
    - name: EventRateLimit
      path: eventconfig.yaml          # relative to this file, or
      configuration: {...}            # inline
"""
from __future__ import annotations

import os
from typing import Any

import yaml

from services.apiserver.fielderrors import ConfigError

API_VERSIONS = ("apiserver.config.k8s.io/v1", "apiserver.config.k8s.io/v1alpha1", "apiserver.k8s.io/v1alpha1")


def _load(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"unable to read admission control configuration from {path!r} [{e}]") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"unable to parse admission control configuration {path!r}: {e}") from None


def load_admission_configuration(path: str) -> dict[str, dict[str, Any] | None]:
    """Plugin name -> its configuration object (None when the entry gives neither path nor configuration)."""
    doc = _load(path)
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected an AdmissionConfiguration object")
    if doc.get("kind") != "AdmissionConfiguration" or doc.get("apiVersion") not in API_VERSIONS:
        raise ConfigError(f"{path}: expected kind AdmissionConfiguration with apiVersion one of "
                          f"{', '.join(API_VERSIONS)}, got {doc.get('apiVersion')!r}/{doc.get('kind')!r}")
    out: dict[str, dict[str, Any] | None] = {}
    base = os.path.dirname(os.path.abspath(path))
    for i, entry in enumerate(doc.get("plugins") or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise ConfigError(f"{path}: plugins[{i}].name: Required value")
        name = entry["name"]
        if entry.get("configuration") is not None:
            cfg = entry["configuration"]
        elif entry.get("path"):
            p = entry["path"]
            cfg = _load(p if os.path.isabs(p) else os.path.join(base, p))
        else:
            cfg = None
        if cfg is not None and not isinstance(cfg, dict):
            raise ConfigError(f"{path}: configuration of plugin {name!r} must be an object")
        out[name] = cfg
    return out
