"""client-go's clientcmd, in small: how a client reaches the API server, read from a kubeconfig (the
current context's cluster: server, certificate-authority[-data], insecure-skip-tls-verify; and user:
client-certificate[-data]/client-key[-data], token, tokenFile) or from a pod's ServiceAccount, into a
Config (rest.Config) that clients are made from: a RESTClient (aiohttp) here, an httpx client by the kit
for its delegated authentication and authorization."""
from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .restclient import RESTClient


def _named(items: list[dict[str, Any]] | None, name: str, what: str) -> dict[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            return item.get(what) or {}
    raise ValueError(f"kubeconfig: no {what} named {name!r}")


def _file(section: dict[str, Any], key: str, base: Path) -> str:
    """The path of `key` or of its `key-data` written to a private temporary file."""
    if section.get(f"{key}-data"):
        fd, path = tempfile.mkstemp(prefix="kubeconfig-", suffix=".pem")
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(section[f"{key}-data"]))
        return path
    value = section.get(key) or ""
    return str(base / value) if value and not os.path.isabs(value) else value


@dataclass(frozen=True)
class Config:
    """client-go's rest.Config: the API server's URL, the TLS context that trusts it and presents the
    client certificate, and the headers every request carries (a bearer token)."""
    server: str
    ssl: ssl.SSLContext
    headers: dict[str, str] = field(default_factory=dict)

    def rest_client(self, timeout: float = 10.0, user_agent: str = "") -> RESTClient:
        """An aiohttp client (services/common/restclient.py); made inside the event loop that uses it."""
        headers = {**self.headers, "User-Agent": user_agent} if user_agent else self.headers
        return RESTClient(self.server, self.ssl, headers, timeout)


def load(path: str) -> Config:
    """The current context's cluster and user of the kubeconfig at `path`."""
    base = Path(path).resolve().parent
    cfg = yaml.safe_load(Path(path).read_text()) or {}
    ctx_name = cfg.get("current-context") or (cfg.get("contexts") or [{}])[0].get("name", "")
    context = _named(cfg.get("contexts"), ctx_name, "context")
    cluster = _named(cfg.get("clusters"), context.get("cluster", ""), "cluster")
    user = _named(cfg.get("users"), context.get("user", ""), "user") if context.get("user") else {}
    ssl_ctx = ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        ssl_ctx.check_hostname = False
        ssl_ctx.verify_mode = ssl.CERT_NONE
    elif ca := _file(cluster, "certificate-authority", base):
        ssl_ctx.load_verify_locations(ca)
    cert, key = _file(user, "client-certificate", base), _file(user, "client-key", base)
    if cert and key:
        ssl_ctx.load_cert_chain(cert, key)
    headers = {}
    token = user.get("token") or (Path(user["tokenFile"]).read_text().strip() if user.get("tokenFile") else "")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return Config(cluster["server"], ssl_ctx, headers)


def load_in_cluster() -> Config:
    """The ServiceAccount's credentials of a pod (rest.InClusterConfig)."""
    sa = Path("/var/run/secrets/kubernetes.io/serviceaccount")
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    ssl_ctx = ssl.create_default_context(cafile=str(sa / "ca.crt"))
    token = (sa / "token").read_text().strip()
    return Config(f"https://{host}:{port}", ssl_ctx, {"Authorization": f"Bearer {token}"})

