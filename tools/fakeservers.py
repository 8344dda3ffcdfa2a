"""Servers the auth tests and benchmarks talk to: an OIDC issuer, a token webhook and an authorization webhook.

Each is a threading HTTPS server on loopback with a serving certificate from a CA made here
(tools.certs), so the auth service reaches them over verified TLS exactly as it would a real one.
"""
from __future__ import annotations

import abc
import json
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tools import certs


class TLSServer(abc.ABC):
    """A loopback HTTPS server whose handler is `self.handle(method, path, body) -> (code, json)`."""

    def __init__(self, directory: Path, name: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        ca = certs.make_ca(directory / f"{name}-ca", f"{name}-ca")
        certs.make_cert(directory / name, ca, "localhost", server=True)
        self.ca_file = directory / f"{name}-ca.crt"
        self.ca_pem = self.ca_file.read_text()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _do(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                code, answer = outer.handle(self.command, self.path, body)
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _do

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(directory / f"{name}.crt"), str(directory / f"{name}.key"))
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.url = f"https://localhost:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @abc.abstractmethod
    def handle(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        """(status, JSON answer) for one request: what each kind of test server serves."""

    def start(self) -> "TLSServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def kubeconfig(self, path: Path, route: str = "/") -> Path:
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: hook\n  cluster:\n    server: {self.url}{route}\n"
            f"    certificate-authority: {self.ca_file}\n"
            "users:\n- name: apiserver\n  user: {}\n"
            "contexts:\n- name: hook\n  context:\n    cluster: hook\n    user: apiserver\n"
            "current-context: hook\n")
        return path


class Issuer(TLSServer):
    """An OIDC provider: discovery document, JWKS, and keys it can rotate (RS256 or ES256)."""

    def __init__(self, directory: Path, name: str = "issuer", alg: str = "RS256") -> None:
        super().__init__(directory, name)
        self.alg = alg
        self.keys: list[tuple[str, Any]] = []
        self.jwks_fetches = 0
        self.rotate()

    def rotate(self, keep_old: bool = False) -> str:
        """A new signing key (the first); the old ones leave the JWKS unless keep_old."""
        key = rsa.generate_private_key(65537, 2048) if self.alg.startswith(("RS", "PS")) \
            else ec.generate_private_key(ec.SECP256R1())
        kid = uuid.uuid4().hex[:12]
        self.keys = [(kid, key), *(self.keys if keep_old else [])]
        return kid

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        if path == "/.well-known/openid-configuration":
            return 200, {"issuer": self.url, "jwks_uri": f"{self.url}/jwks",
                         "id_token_signing_alg_values_supported": [self.alg]}
        if path == "/jwks":
            self.jwks_fetches += 1
            keys = []
            for kid, key in self.keys:
                jwk = json.loads(jwt.algorithms.get_default_algorithms()[self.alg].to_jwk(key.public_key()))
                keys.append({**jwk, "kid": kid, "use": "sig", "alg": self.alg})
            return 200, {"keys": keys}
        return 404, {}

    def token(self, claims: dict[str, Any] | None = None, *, aud: Any = "apiary", iss: str | None = None,
              lifetime: float = 600, kid: str | None = None, key: Any = None, **more: Any) -> str:
        now = int(time.time())
        body: dict[str, Any] = {"iss": iss or self.url, "aud": aud, "iat": now, "exp": now + int(lifetime),
                                "sub": "alice"}
        body.update(claims or {})
        body.update(more)
        body = {k: v for k, v in body.items() if v is not None}
        signing_kid, signing_key = self.keys[0]
        return jwt.encode(body, key or signing_key, algorithm=self.alg, headers={"kid": kid or signing_kid})


class TokenWebhook(TLSServer):
    """A TokenReview webhook: tokens in `users` are authenticated as that user, others refused."""

    def __init__(self, directory: Path, users: dict[str, dict[str, Any]]) -> None:
        super().__init__(directory, "token-webhook")
        self.users = users
        self.calls: list[dict[str, Any]] = []

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        review = json.loads(body)
        self.calls.append(review)
        user = self.users.get(review["spec"]["token"])
        status: dict[str, Any] = {"authenticated": user is not None}
        if user is not None:
            status["user"] = user
        return 200, {"apiVersion": review["apiVersion"], "kind": "TokenReview", "status": status}


class AuthzWebhook(TLSServer):
    """A SubjectAccessReview webhook deciding by `decide(review) -> status`."""

    def __init__(self, directory: Path, decide: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        super().__init__(directory, "authz-webhook")
        self.decide = decide
        self.calls: list[dict[str, Any]] = []

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        review = json.loads(body)
        self.calls.append(review)
        return 200, {"apiVersion": review["apiVersion"], "kind": "SubjectAccessReview",
                     "status": self.decide(review)}
