"""Servers the tests and benchmarks talk to: an OIDC issuer, a token webhook, an authorization webhook,
admission webhooks, CRD conversion webhooks and aggregated API servers.

Each is a threading HTTPS server on loopback with a serving certificate from a CA made here
(services.cluster.certs), so the auth service reaches them over verified TLS exactly as it would a real one.
"""
from __future__ import annotations

import abc
import json
import socket
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

from services.cluster import certs


class TLSServer(abc.ABC):
    """A loopback HTTPS server whose handler is `self.handle(method, path, body) -> (code, json)`."""

    keep_alive = False

    def __init__(self, directory: Path, name: str, dns_names: tuple[str, ...] = ()) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        ca = certs.make_ca(directory / f"{name}-ca", f"{name}-ca")
        certs.make_cert(directory / name, ca, "localhost", server=True, dns_names=dns_names)
        self.ca_file = directory / f"{name}-ca.crt"
        self.ca_pem = self.ca_file.read_text()
        self._headers = threading.local()  # the headers of the request this thread is handling
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _do(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                outer._headers.value = {k.lower(): v for k, v in self.headers.items()}
                code, answer = outer.handle(self.command, self.path, body)
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _do

        # HTTP/1.1 keeps connections open between requests (a benchmark's steady state); 1.0 closes each,
        # so that a stopped server is gone for its clients at once
        Handler.protocol_version = "HTTP/1.1" if self.keep_alive else "HTTP/1.0"
        # headers and body go out as two writes: without TCP_NODELAY a kept-alive connection waits for
        # the peer's delayed ACK (40 ms) before the body
        Handler.disable_nagle_algorithm = True
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

    def request_headers(self) -> dict[str, str]:
        """The headers of the request being handled (names lower-cased), for handle()."""
        return self._headers.value  # type: ignore[no-any-return]

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


class ReviewServer(TLSServer):
    """A webhook of review objects (admission, conversion): every review received kept in `calls`, the
    path it came to in `paths` and its `traceparent` header ("" without one) in `traceparents`;
    `answer(review)` gives the reply."""

    def __init__(self, directory: Path, name: str, dns_names: tuple[str, ...] = ()) -> None:
        super().__init__(directory, name, dns_names)
        self.calls: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.traceparents: list[str] = []

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        review = json.loads(body)
        self.calls.append(review)
        self.paths.append(path)
        self.traceparents.append(self.request_headers().get("traceparent", ""))
        return 200, self.answer(review)

    @abc.abstractmethod
    def answer(self, review: dict[str, Any]) -> dict[str, Any]:
        """The reply to one review (each kind of webhook answers its own way)."""


class AdmissionWebhook(ReviewServer):
    """An admission webhook: `decide(request) -> response fields` (allowed, patch, warnings, status, ...)
    answers each AdmissionReview (uid and the review's apiVersion filled in); `delay` seconds of sleep
    first make a slow one; `dns_names` for its serving certificate (a Service's <name>.<namespace>.svc).
    Every review received is kept in `calls`, and the path it came to in `paths`."""

    def __init__(self, directory: Path, name: str, decide: Callable[[dict[str, Any]], dict[str, Any]],
                 delay: float = 0.0, dns_names: tuple[str, ...] = ()) -> None:
        super().__init__(directory, name, dns_names)
        self.decide = decide
        self.delay = delay

    def answer(self, review: dict[str, Any]) -> dict[str, Any]:
        if self.delay:
            time.sleep(self.delay)
        response = {"uid": review["request"]["uid"], **self.decide(review["request"])}
        return {"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": response}


class ConversionWebhook(ReviewServer):
    """A CRD conversion webhook: `convert(object, desiredAPIVersion) -> object` for each object of a
    ConversionReview (apiVersion set to the desired one here), answered with the review's uid and Success;
    `dns_names` for its serving certificate (a Service's <name>.<namespace>.svc). Every review received is
    kept in `calls`, and the path it came to in `paths`."""

    def __init__(self, directory: Path, name: str, convert: Callable[[dict[str, Any], str], dict[str, Any]],
                 dns_names: tuple[str, ...] = ()) -> None:
        super().__init__(directory, name, dns_names)
        self.convert = convert

    def answer(self, review: dict[str, Any]) -> dict[str, Any]:
        req = review["request"]
        desired = req["desiredAPIVersion"]
        converted = [{**self.convert(obj, desired), "apiVersion": desired} for obj in req["objects"]]
        return {"apiVersion": review["apiVersion"], "kind": "ConversionReview",
                "response": {"uid": req["uid"], "result": {"status": "Success"},
                             "convertedObjects": converted}}


class AggregatedBackend:
    """A small aggregated API server for the aggregation tests, on loopback over HTTPS.

    It trusts a request only on a connection whose client certificate the front-proxy CA issued to
    an allowed name (as a real aggregated server does) and answers, for group/version:
      GET  /apis, /apis/<g>, /apis/<g>/<v>             discovery (aggregated v2 by Accept, or legacy)
      GET  /openapi/v3, /openapi/v3/apis/<g>/<v>       OpenAPI v3 of Flunder (for kubectl explain)
      GET  /apis/<g>/<v>/whoamis                        the X-Remote-* and Impersonate-* headers it got
      GET  /apis/<g>/<v>/namespaces/<ns>/flunders       a FlunderList (?watch=true: a watch whose
                                                        events are flushed as objects are created)
      POST /apis/<g>/<v>/namespaces/<ns>/flunders       stores the object (any size); 201
      GET  /apis/<g>/<v>/slows                          never answers
      GET  /apis/<g>/<v>/garbages                       answers bytes that are not HTTP
    Its serving certificate names <service>.<namespace>.svc, signed by its own CA (ca_pem).
    stop() closes every open connection too, so a pooled connection does not outlive it.
    """

    RESOURCES = ("flunders", "whoamis", "slows", "garbages")

    def __init__(self, directory: Path, front_proxy_ca: Path, *, group: str = "wardle.example.com",
                 version: str = "v1alpha1", service: str = "api", namespace: str = "wardle",
                 allowed_names: tuple[str, ...] = ("front-proxy-client",), port: int = 0,
                 name: str = "backend", tls: tuple[Path, Path] | None = None) -> None:
        if tls is None:
            directory.mkdir(parents=True, exist_ok=True)
            ca = certs.make_ca(directory / f"{name}-ca", f"{name}-ca")
            certs.make_cert(directory / name, ca, f"{service}.{namespace}.svc", server=True,
                            dns_names=(f"{service}.{namespace}.svc",))
            self.ca_pem = (directory / f"{name}-ca.crt").read_bytes()
            tls = (directory / f"{name}.crt", directory / f"{name}.key")
        self.cert, self.key = tls
        self.front_proxy_ca, self.allowed = front_proxy_ca, allowed_names
        self.group, self.version = group, version
        self.port = port
        self.objects: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.cond = threading.Condition()
        self.httpd: ThreadingHTTPServer | None = None
        self.open_sockets: set[Any] = set()
        self.connections = 0  # accepted so far: pooled clients reuse theirs
        self.stopping = threading.Event()

    @property
    def gv(self) -> str:
        return f"{self.group}/{self.version}"

    def discovery(self, path: str, accept: str) -> dict[str, Any] | None:
        gv = self.gv
        if path == f"/apis/{gv}":
            return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": [
                {"name": "flunders", "singularName": "flunder", "namespaced": True, "kind": "Flunder",
                 "verbs": ["create", "get", "list", "watch"]}]}
        group = {"name": self.group, "versions": [{"groupVersion": gv, "version": self.version}],
                 "preferredVersion": {"groupVersion": gv, "version": self.version}}
        if path == f"/apis/{self.group}":
            return {"kind": "APIGroup", "apiVersion": "v1", **group}
        if path == "/apis":
            if "as=APIGroupDiscoveryList" in accept:
                return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
                        "items": [{"metadata": {"name": self.group}, "versions": [{
                            "version": self.version, "freshness": "Current", "resources": [{
                                "resource": "flunders", "singularResource": "flunder", "scope": "Namespaced",
                                "responseKind": {"group": self.group, "version": self.version, "kind": "Flunder"},
                                "verbs": ["create", "get", "list", "watch"]}]}]}]}
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}
        return None

    def openapi(self, path: str) -> dict[str, Any] | None:
        gv_path = f"apis/{self.gv}"
        if path == "/openapi/v3":
            return {"paths": {gv_path: {"serverRelativeURL": f"/openapi/v3/{gv_path}?hash=1"}}}
        if path != f"/openapi/v3/{gv_path}":
            return None
        gvk = {"group": self.group, "kind": "Flunder", "version": self.version}
        ref = {"$ref": f"#/components/schemas/com.example.wardle.{self.version}.Flunder"}
        ok = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}
        validation = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}}]

        def op(action: str, params: list[dict[str, Any]] | None = None) -> dict[str, Any]:
            return {"x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk, "responses": ok,
                    "parameters": params or []}
        base = f"/apis/{self.gv}/namespaces/{{namespace}}/flunders"
        paths = {base: {"get": op("list"), "post": op("post", validation)},
                 base + "/{name}": {"get": op("get"), "patch": op("patch", validation)}}
        return {"openapi": "3.0.0", "info": {"title": "wardle", "version": self.version}, "paths": paths,
                "components": {"schemas": {f"com.example.wardle.{self.version}.Flunder": {
                    "description": "A Flunder is the example kind of the aggregation tests.", "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string", "description": "APIVersion of the object."},
                        "kind": {"type": "string", "description": "Kind of the object."},
                        "metadata": {"type": "object", "description": "Standard object's metadata."},
                        "spec": {"type": "object", "description": "FlunderSpec is what a Flunder wants.",
                                 "properties": {"reference": {"type": "string",
                                                              "description": "The name of another flunder."}}}},
                    "x-kubernetes-group-version-kind": [{"group": self.group, "kind": "Flunder",
                                                         "version": self.version}]}}}}

    def start(self) -> "AggregatedBackend":
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                outer.open_sockets.add(self.connection)
                outer.connections += 1

            def finish(self) -> None:
                outer.open_sockets.discard(self.connection)
                super().finish()

            def _json(self, code: int, obj: Any, ctype: str = "application/json") -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _trusted(self) -> bool:
                cert = self.connection.getpeercert()
                cn = dict(x[0] for x in (cert or {}).get("subject", ())).get("commonName")
                return bool(cert) and (not outer.allowed or cn in outer.allowed)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._do()

            def do_POST(self) -> None:  # noqa: N802
                self._do()

            def _do(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                path, _, query = self.path.partition("?")
                outer.requests.append((self.command, self.path))
                if path in ("/healthz", "/readyz", "/livez"):  # kube's always-allowed paths
                    data = b"ok"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if not self._trusted():
                    self._json(401, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 401,
                                     "reason": "Unauthorized", "message": "Unauthorized"})
                    return
                spec = outer.openapi(path)
                if spec is not None:
                    self._json(200, spec)
                    return
                doc = outer.discovery(path.rstrip("/"), self.headers.get("Accept") or "")
                if doc is not None:
                    agg = doc["kind"] == "APIGroupDiscoveryList"
                    self._json(200, doc, "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
                               if agg else "application/json")
                    return
                base = f"/apis/{outer.gv}/"
                rest = path[len(base):].split("/") if path.startswith(base) else []
                if rest == ["whoamis"]:
                    seen: dict[str, list[str]] = {}
                    for k, v in self.headers.items():
                        if k.lower().startswith(("x-remote-", "impersonate-", "authorization")):
                            seen.setdefault(k.lower(), []).append(v)
                    self._json(200, {"kind": "WhoAmI", "headers": seen})
                elif rest == ["slows"]:
                    outer.stopping.wait()
                elif rest == ["garbages"]:
                    self.wfile.write(b"\x00\x01 this is not HTTP\r\n\r\n")
                    self.close_connection = True
                elif len(rest) == 3 and rest[0] == "namespaces" and rest[2] == "flunders":
                    if self.command == "POST":
                        obj = json.loads(body)
                        obj.setdefault("metadata", {})["namespace"] = rest[1]
                        with outer.cond:
                            outer.objects.append(obj)
                            outer.cond.notify_all()
                        self._json(201, {**obj, "receivedBytes": len(body)})
                    elif "watch=true" in query or "watch=1" in query:
                        self._watch()
                    else:
                        self._json(200, {"kind": "FlunderList", "apiVersion": outer.gv,
                                         "metadata": {"resourceVersion": str(len(outer.objects))},
                                         "items": list(outer.objects)})
                else:
                    self._json(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                                     "reason": "NotFound", "message": "not found"})

            def _watch(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                sent = 0
                while not outer.stopping.is_set():
                    with outer.cond:
                        outer.cond.wait_for(lambda: len(outer.objects) > sent or outer.stopping.is_set(), 0.5)
                        new = outer.objects[sent:]
                    for obj in new:
                        self._chunk(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n")
                    sent += len(new)
                self.close_connection = True

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.cert), str(self.key))
        ctx.load_verify_locations(str(self.front_proxy_ca))
        ctx.verify_mode = ssl.CERT_OPTIONAL
        self.stopping.clear()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        with self.cond:
            self.cond.notify_all()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None
        for s in list(self.open_sockets):
            try:
                s.shutdown(2)
            except OSError:
                pass


class SilentServer:
    """Accepts TCP connections on loopback and never says anything (a hung backend)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns: list[Any] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    def start(self) -> "SilentServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


def main(argv: list[str] | None = None) -> None:
    """python -m tools.fakeservers --secure-port N ...: an AggregatedBackend as a process,
    taking the kube-style flags the local runner gives aggregated servers (others are ignored)."""
    import argparse
    import signal

    p = argparse.ArgumentParser(prog="python -m tools.fakeservers")
    p.add_argument("--secure-port", type=int, required=True)
    p.add_argument("--tls-cert-file", required=True)
    p.add_argument("--tls-private-key-file", required=True)
    p.add_argument("--requestheader-client-ca-file", required=True)
    p.add_argument("--requestheader-allowed-names", default="front-proxy-client")
    p.add_argument("--group", default="wardle.example.com")
    p.add_argument("--version", default="v1alpha1")
    args, _ = p.parse_known_args(argv)
    backend = AggregatedBackend(Path("."), Path(args.requestheader_client_ca_file), group=args.group,
                                version=args.version, port=args.secure_port,
                                allowed_names=tuple(n for n in args.requestheader_allowed_names.split(",") if n),
                                tls=(Path(args.tls_cert_file), Path(args.tls_private_key_file)))
    backend.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    backend.stop()


if __name__ == "__main__":
    main()
