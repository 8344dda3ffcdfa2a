"""client-go's clientcmd, in small: how a client reaches a server, read from a kubeconfig or from a
pod's ServiceAccount, into a Config (rest.Config) that clients are made from.

One loader for every client apiary makes from a kubeconfig: the controller-manager's RESTClient, the
kit's delegated authentication and authorization, and the webhooks (token authentication,
authorization and audit, which kube's webhook.GenericWebhook reads from the same format). The
current context (else the first) names the cluster (server, certificate-authority[-data],
insecure-skip-tls-verify) and the user (client-certificate[-data], client-key[-data], token,
tokenFile); a context that names none takes the first of each.

Inline credentials stay in memory: the CA is handed to the TLS context as data, and the client
certificate and key, which ssl only reads from a file, go through a private temporary file removed
as soon as the context has read it.
"""
from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .fielderrors import ConfigError
from .httpclient import Client

if TYPE_CHECKING:
    from .restclient import RESTClient


@dataclass(frozen=True)
class Config:
    """client-go's rest.Config: the server's URL, the TLS context that trusts it and presents the
    client certificate, and the headers every request carries (a bearer token)."""
    server: str
    ssl: ssl.SSLContext
    headers: dict[str, str] = field(default_factory=dict)

    def rest_client(self, timeout: float = 10.0, user_agent: str = "") -> RESTClient:
        """A RESTClient (services/apiserver/restclient.py) over the library's outbound client; made inside the
        event loop that uses it. Imported here: the services that read a kubeconfig only for a webhook (auth,
        the proxy's audit) never make one, and aiohttp costs a process ~8 MB and ~0.1 s to import."""
        from .restclient import RESTClient

        headers = {**self.headers, "User-Agent": user_agent} if user_agent else self.headers
        return RESTClient(self.server, self.ssl, headers, timeout)

    def client(self, timeout: float | None = 30.0) -> Client:
        """An outbound client (services/apiserver/httpclient.py) of the server's URL with this config's TLS
        and headers; made inside the event loop that uses it."""
        return Client(self.server, self.ssl, self.headers, timeout)


def _read(path: str) -> dict[str, Any]:
    try:
        cfg = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"stat {path}: {e.strerror.lower() if e.strerror else e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"error loading {path}: {e}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"error loading {path}: not a kubeconfig")
    return cfg


def _named(items: Any, name: str, what: str) -> dict[str, Any] | None:
    """The `what` of the entry called `name` (the first entry's when `name` is empty); None if none is."""
    for item in items or []:
        if isinstance(item, dict) and (not name or item.get("name") == name):
            return item.get(what) or {}
    return None


def _data(section: dict[str, Any], key: str, base: Path) -> bytes | None:
    """The bytes of `key-data`, else of the file `key` names (relative to the kubeconfig's directory)."""
    if section.get(f"{key}-data"):
        return base64.b64decode(section[f"{key}-data"], validate=True)
    if section.get(key):
        return (base / section[key]).read_bytes()
    return None


def _tls(cluster: dict[str, Any], user: dict[str, Any], base: Path) -> ssl.SSLContext:
    if cluster.get("insecure-skip-tls-verify"):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        try:
            ca = _data(cluster, "certificate-authority", base)
            # the CA alone is trusted when one is named (client-go's RootCAs), else the system's
            ctx = ssl.create_default_context(cadata=ca.decode()) if ca else ssl.create_default_context()
        except (OSError, ssl.SSLError, ValueError, binascii.Error) as e:
            raise ConfigError(f"unable to load root certificates: {e}") from None
    if user.get("client-certificate") or user.get("client-certificate-data"):
        try:
            if user.get("client-certificate-data") or user.get("client-key-data"):
                cert = _data(user, "client-certificate", base) or b""
                key = _data(user, "client-key", base) or b""
                # mode 0600, removed when closed
                with tempfile.NamedTemporaryFile(prefix="kubeconfig-", suffix=".pem") as f:
                    f.write(cert + b"\n" + key)
                    f.flush()
                    ctx.load_cert_chain(f.name)
            else:
                key_file = user.get("client-key")
                ctx.load_cert_chain(base / user["client-certificate"], base / key_file if key_file else None)
        except (OSError, ssl.SSLError, ValueError, binascii.Error) as e:
            raise ConfigError(f"unable to load client certificate: {e}") from None
    return ctx


def load(path: str) -> Config:
    """The current context's cluster and user of the kubeconfig at `path`; ConfigError with kube's
    message when it cannot be used."""
    cfg = _read(path)
    base = Path(path).resolve().parent
    ctx_name = str(cfg.get("current-context") or "")
    context = _named(cfg.get("contexts"), ctx_name, "context")
    if context is None and ctx_name:
        raise ConfigError(f"invalid configuration: context was not found for specified context: {ctx_name}")
    context = context or {}
    cluster = _named(cfg.get("clusters"), str(context.get("cluster") or ""), "cluster") or {}
    user = _named(cfg.get("users"), str(context.get("user") or ""), "user") or {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise ConfigError(f"invalid configuration: no server found for cluster in {path}")
    token = user.get("token") or ""
    if not token and user.get("tokenFile"):
        try:
            token = (base / user["tokenFile"]).read_text().strip()
        except OSError as e:
            raise ConfigError(f"unable to read the token file: {e}") from None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Config(server, _tls(cluster, user, base), headers)


def load_in_cluster() -> Config:
    """The ServiceAccount's credentials of a pod (rest.InClusterConfig)."""
    sa = Path("/var/run/secrets/kubernetes.io/serviceaccount")
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    ssl_ctx = ssl.create_default_context(cafile=str(sa / "ca.crt"))
    token = (sa / "token").read_text().strip()
    return Config(f"https://{host}:{port}", ssl_ctx, {"Authorization": f"Bearer {token}"})
