"""Admission and conversion webhooks under test, as envtest's WebhookInstallOptions install them.

A test (or the operator it runs) serves its webhooks over HTTPS on loopback; this module makes the
serving certificate for 127.0.0.1, signed by a CA of its own, and registers the webhooks with the
cluster by URL with that CA as caBundle: Validating/MutatingWebhookConfigurations written as an
operator ships them (clientConfig.service with a path) are pointed at https://127.0.0.1:<port><path>,
and a CRD's conversion webhook the same way. `uninstall` removes what was registered. `serve` runs a
small HTTPS server for tests that answer the reviews themselves instead of an operator's server.
"""
from __future__ import annotations

import base64
import copy
import datetime
import ipaddress
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
COLLECTIONS = {"ValidatingWebhookConfiguration": f"{ADMISSION}/validatingwebhookconfigurations",
               "MutatingWebhookConfiguration": f"{ADMISSION}/mutatingwebhookconfigurations"}
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

# A review's request in, the review's response out (without uid: serve() copies it).
ReviewHandler = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class ServingCertificate:
    ca_pem: bytes
    cert_file: Path
    key_file: Path

    @property
    def ca_bundle(self) -> str:
        """The CA as a webhook's clientConfig.caBundle wants it (base64 of the PEM)."""
        return base64.b64encode(self.ca_pem).decode()

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        return ctx


def make_serving_certificate(directory: Path, host: str = "127.0.0.1", days: int = 7) -> ServingCertificate:
    """A fresh CA and a serving certificate for host signed by it, in directory (tls.crt, tls.key, ca.crt)."""
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "apiary-webhook-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    try:
        san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        san = x509.DNSName(host)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    (directory / "ca.crt").write_bytes(ca_pem)
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    return ServingCertificate(ca_pem, cert_file, key_file)


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS has free now on host (for a webhook server started by someone else, e.g. kopf)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _raise_for(r: httpx.Response, what: str) -> None:
    if r.status_code >= 400:
        try:
            message = r.json().get("message") or r.text
        except ValueError:
            message = r.text
        raise RuntimeError(f"{what}: {r.status_code} {message}")


class WebhookInstallOptions:
    """The webhooks of one test (or session) against one cluster: certificate, port, registrations."""

    def __init__(self, client: httpx.Client, directory: Path, host: str = "127.0.0.1", port: int = 0) -> None:
        self.client, self.host = client, host
        self.port = port or free_port(host)
        self.certificate = make_serving_certificate(directory, host)
        self._installed: list[str] = []
        self._conversions: dict[str, dict[str, Any] | None] = {}

    def url(self, path: str = "") -> str:
        return f"https://{self.host}:{self.port}/{path.lstrip('/')}"

    def client_config(self, path: str) -> dict[str, str]:
        return {"url": self.url(path), "caBundle": self.certificate.ca_bundle}

    def install(self, configuration: dict[str, Any]) -> dict[str, Any]:
        """Register a Validating/MutatingWebhookConfiguration with every webhook's clientConfig pointed
        at this server (the path of its service, or of its url, is kept); replaces one of that name."""
        kind = configuration.get("kind", "")
        if kind not in COLLECTIONS:
            raise ValueError(f"not a webhook configuration: {kind!r}")
        obj = copy.deepcopy(configuration)
        for hook in obj.get("webhooks") or []:
            given = hook.get("clientConfig") or {}
            path = (given.get("service") or {}).get("path") or httpx.URL(given.get("url") or "/").path
            hook["clientConfig"] = self.client_config(path)
        collection, name = COLLECTIONS[kind], obj["metadata"]["name"]
        self.client.delete(f"{collection}/{name}")
        r = self.client.post(collection, json=obj)
        _raise_for(r, f"{kind} {name}")
        self._installed.append(f"{collection}/{name}")
        return dict(r.json())

    def install_conversion(self, crd: str, path: str, review_versions: tuple[str, ...] = ("v1",)) -> None:
        """Point a CRD's conversion at this server (strategy Webhook); uninstall restores what it had."""
        r = self.client.get(f"{CRDS}/{crd}")
        _raise_for(r, f"CustomResourceDefinition {crd}")
        self._conversions.setdefault(crd, r.json()["spec"].get("conversion"))
        conversion = {"strategy": "Webhook", "webhook": {
            "clientConfig": self.client_config(path), "conversionReviewVersions": list(review_versions)}}
        r = self.client.patch(f"{CRDS}/{crd}", json={"spec": {"conversion": conversion}},
                              headers={"Content-Type": "application/merge-patch+json"})
        _raise_for(r, f"CustomResourceDefinition {crd}")

    def uninstall(self) -> None:
        for path in reversed(self._installed):
            self.client.delete(path)
        self._installed.clear()
        for crd, conversion in self._conversions.items():
            before = conversion or {"strategy": "None"}
            body = {"spec": {"conversion": {**before, "webhook": before.get("webhook")}}}
            self.client.patch(f"{CRDS}/{crd}", json=body, headers={"Content-Type": "application/merge-patch+json"})
        self._conversions.clear()

    @contextmanager
    def serve(self, handlers: dict[str, ReviewHandler]) -> Iterator[None]:
        """Answer AdmissionReviews and ConversionReviews on https://host:port<path> with handlers[path]
        (in a thread) while the block runs."""
        server = ThreadingHTTPServer((self.host, self.port), _handler_class(handlers))
        server.daemon_threads = True
        server.socket = self.certificate.ssl_context().wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever, name="apiary-webhooks", daemon=True)
        thread.start()
        try:
            yield
        finally:
            server.shutdown()
            server.server_close()
            thread.join()


def _handler_class(handlers: dict[str, ReviewHandler]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            handle = handlers.get(self.path.split("?")[0])
            if handle is None:
                self.send_error(404)
                return
            review = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            request = review.get("request") or {}
            response = {**handle(request), "uid": request.get("uid", "")}
            body = json.dumps({"apiVersion": review.get("apiVersion"), "kind": review.get("kind"),
                               "response": response}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
