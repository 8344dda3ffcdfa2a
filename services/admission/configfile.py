"""--admission-control-config-file: an AdmissionConfiguration naming per-plugin configuration.

    apiVersion: apiserver.config.k8s.io/v1
    kind: AdmissionConfiguration
    plugins:
    - name: EventRateLimit
      path: eventconfig.yaml          # relative to this file, or
      configuration: {...}            # inline

Decoded leniently, as kube's admission.ReadAdmissionConfiguration decodes it; each plugin's own
configuration stays the object it is (kube's runtime.Unknown), for the plugin to read.
"""
from __future__ import annotations

import os
from typing import Any

from services.apiserver.configdecode import LenientStruct, decode, read_yaml
from services.apiserver.fielderrors import ConfigError, quote


class AdmissionPluginConfiguration(LenientStruct):
    name: str = ""
    path: str = ""
    configuration: dict[str, Any] | None = None


class AdmissionConfiguration(LenientStruct):
    plugins: list[AdmissionPluginConfiguration] = []


KINDS = {(version, "AdmissionConfiguration"): AdmissionConfiguration
         for version in ("apiserver.config.k8s.io/v1", "apiserver.config.k8s.io/v1alpha1", "apiserver.k8s.io/v1alpha1")}


def _load(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return read_yaml(f.read())
    except OSError as e:
        raise ConfigError(f"unable to read admission control configuration from {quote(path)} [{e}]") from None
    except ConfigError as e:
        raise ConfigError(f"unable to parse admission control configuration {quote(path)}: {e}") from None


def load_admission_configuration(path: str) -> dict[str, dict[str, Any] | None]:
    """Plugin name -> its configuration object (None when the entry gives neither path nor configuration)."""
    doc = _load(path)
    try:
        config = decode(doc, KINDS)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    out: dict[str, dict[str, Any] | None] = {}
    base = os.path.dirname(os.path.abspath(path))
    for i, entry in enumerate(config.plugins):
        if not entry.name:
            raise ConfigError(f"{path}: plugins[{i}].name: Required value")
        cfg = entry.configuration
        if cfg is None and entry.path:
            cfg = _load(os.path.join(base, entry.path))  # an absolute path stays as it is
            if cfg is not None and not isinstance(cfg, dict):
                raise ConfigError(f"{path}: configuration of plugin {entry.name!r} must be an object")
        out[entry.name] = cfg
    return out
