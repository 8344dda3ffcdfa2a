"""The webhook helper's serving certificate (a CA of its own, 127.0.0.1) and its review server."""
from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

import httpx
from cryptography import x509

from services.cluster.webhooks import WebhookInstallOptions, make_serving_certificate


def test_the_serving_certificate_is_for_loopback_and_signed_by_the_ca(tmp_path: Path) -> None:
    cert = make_serving_certificate(tmp_path)
    ca = x509.load_pem_x509_certificate(cert.ca_pem)
    leaf = x509.load_pem_x509_certificate(cert.cert_file.read_bytes())
    leaf.verify_directly_issued_by(ca)
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert (tmp_path / "ca.crt").read_bytes() == cert.ca_pem
    assert cert.key_file.stat().st_mode & 0o077 == 0


def test_serve_answers_reviews_over_tls_verified_with_the_ca_bundle(tmp_path: Path) -> None:
    hooks = WebhookInstallOptions(httpx.Client(), tmp_path)

    def deny(request: dict[str, Any]) -> dict[str, Any]:
        return {"allowed": False, "status": {"code": 403, "message": f"no {request['name']}"}}

    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "u-1", "name": "thing"}}
    with hooks.serve({"/deny": deny}):
        ctx = ssl.create_default_context(cadata=hooks.certificate.ca_pem.decode())
        with httpx.Client(verify=ctx) as client:
            answer = client.post(hooks.url("/deny"), content=json.dumps(review))
            missing = client.post(hooks.url("/other"), content=json.dumps(review))
    assert answer.json() == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                             "response": {"allowed": False, "uid": "u-1",
                                          "status": {"code": 403, "message": "no thing"}}}
    assert missing.status_code == 404
