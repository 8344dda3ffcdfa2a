"""An HTTPS client for a webhook described by a kubeconfig file (kube's webhook.GenericWebhook).

The kubeconfig's current context (else its first cluster and user) gives the server URL, the CA
(certificate-authority or -data, insecure-skip-tls-verify) and the client credentials
(client-certificate/-key or their -data, a token). One pooled client per webhook; a call that fails
(connection, timeout, non-2xx, undecodable answer) raises WebhookError with the reason.
"""
from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import yaml

from services.apiserver.fielderrors import ConfigError


class WebhookError(Exception):
    pass


@dataclass
class Connection:
    server: str
    ssl_context: ssl.SSLContext | bool
    token: str = ""


def _named(items: Any, name: str | None) -> dict[str, Any]:
    for it in items or []:
        if isinstance(it, dict) and (name is None or it.get("name") == name):
            return it
    return {}


def load_kubeconfig(path: str) -> Connection:
    try:
        with open(path, encoding="utf-8") as f:
            cfg = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"stat {path}: {e.strerror.lower() if e.strerror else e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"error loading {path}: {e}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"error loading {path}: not a kubeconfig")
    base = os.path.dirname(os.path.abspath(path))
    ctx_name = cfg.get("current-context")
    context = (_named(cfg.get("contexts"), ctx_name).get("context") or {}) if ctx_name else {}
    cluster = _named(cfg.get("clusters"), context.get("cluster")).get("cluster") or {}
    user = _named(cfg.get("users"), context.get("user")).get("user") or {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise ConfigError(f"invalid configuration: no server found for cluster in {path}")

    def file(key: str, holder: dict[str, Any]) -> str | None:
        if holder.get(f"{key}-data"):
            tmp = tempfile.NamedTemporaryFile("wb", delete=False, prefix="apiary-webhook-")
            tmp.write(base64.b64decode(holder[f"{key}-data"]))
            tmp.close()
            return tmp.name
        value = holder.get(key)
        if not value:
            return None
        return value if os.path.isabs(value) else os.path.join(base, value)

    verify: ssl.SSLContext | bool
    if server.startswith("https://"):
        if cluster.get("insecure-skip-tls-verify"):
            verify = ssl.create_default_context()
            verify.check_hostname = False
            verify.verify_mode = ssl.CERT_NONE
        else:
            ca = file("certificate-authority", cluster)
            try:
                verify = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
            except (OSError, ssl.SSLError) as e:
                raise ConfigError(f"unable to load root certificates: {e}") from None
        cert, key = file("client-certificate", user), file("client-key", user)
        if cert:
            try:
                verify.load_cert_chain(cert, key)
            except (OSError, ssl.SSLError) as e:
                raise ConfigError(f"unable to load client certificate: {e}") from None
    else:
        verify = False
    return Connection(server, verify, str(user.get("token") or ""))


class WebhookClient:
    def __init__(self, conn: Connection, timeout: float) -> None:
        self.conn = conn
        headers = {"Authorization": f"Bearer {conn.token}"} if conn.token else {}
        self._client = httpx.AsyncClient(verify=conn.ssl_context, timeout=timeout, headers=headers, trust_env=False)

    async def post(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = await self._client.post(self.conn.server, content=orjson.dumps(body),
                                        headers={"Content-Type": "application/json", "Accept": "application/json"})
        except httpx.TimeoutException:
            raise WebhookError(f"Post \"{self.conn.server}\": context deadline exceeded") from None
        except httpx.HTTPError as e:
            raise WebhookError(f"Post \"{self.conn.server}\": {e or type(e).__name__}") from None
        if not 200 <= r.status_code < 300:
            raise WebhookError(f"the server responded with the status code {r.status_code} but did not return "
                               f"more information")
        try:
            answer = orjson.loads(r.content)
        except orjson.JSONDecodeError as e:
            raise WebhookError(f"couldn't decode the webhook's answer: {e}") from None
        if not isinstance(answer, dict):
            raise WebhookError("couldn't decode the webhook's answer: not an object")
        return answer

    async def aclose(self) -> None:
        await self._client.aclose()
