"""Reading a kubeconfig into what an HTTPS client needs (client-go's clientcmd, the parts a test uses).

The current context's server, CA, client certificate and key (file or inline data) or bearer token;
inline data is written to files in a directory of the caller's, as ssl wants files.
"""
from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml


@dataclass(frozen=True)
class ClientConfig:
    server: str
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    token: str | None = None
    insecure: bool = False

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file and self.key_file:
            ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        return ctx

    def client(self, timeout: float = 30.0) -> httpx.Client:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return httpx.Client(base_url=self.server, verify=self.ssl_context(), headers=headers, timeout=timeout)


def _named(items: list[dict[str, Any]] | None, name: str, what: str, path: Path) -> dict[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            return item.get(what) or {}
    raise ValueError(f"{path}: no {what} named {name!r}")


def load(path: Path, files: Path, context: str | None = None) -> ClientConfig:
    """The ClientConfig of `context` (default: current-context) of the kubeconfig at path."""
    config = yaml.safe_load(path.read_text()) or {}
    name = context or config.get("current-context")
    if not name:
        raise ValueError(f"{path}: no current-context")
    ctx = _named(config.get("contexts"), name, "context", path)
    cluster = _named(config.get("clusters"), ctx.get("cluster", ""), "cluster", path)
    user = _named(config.get("users"), ctx.get("user", ""), "user", path) if ctx.get("user") else {}
    base = path.parent

    def file_of(key: str) -> Path | None:
        source = cluster if key == "certificate-authority" else user
        if data := source.get(f"{key}-data"):
            files.mkdir(parents=True, exist_ok=True)
            out = files / f"{name}-{key}.pem"
            out.write_bytes(base64.b64decode(data))
            out.chmod(0o600)
            return out
        if ref := source.get(key):
            return base / ref  # relative paths are relative to the kubeconfig, as kubectl reads them
        return None

    return ClientConfig(
        server=str(cluster["server"]).rstrip("/"),
        ca_file=file_of("certificate-authority"),
        cert_file=file_of("client-certificate"),
        key_file=file_of("client-key"),
        token=user.get("token"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
    )
