"""A webhook clientConfig's rules (k8s.io/apiserver/pkg/util/webhook/validation.go), with kube's messages: the
admission webhook configurations and the CRDs' conversion webhooks both check theirs with it."""
from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from cryptography import x509

from services.apiserver import validation as v

from .client import ca_bundle


def validate_url(url: str, field: str) -> list[v.Cause]:
    """ValidateWebhookURL with https forced."""
    causes: list[v.Cause] = []
    parts = urlsplit(url)
    if parts.scheme != "https":
        causes.append(v.invalid(field, url, "'https' is the only allowed URL scheme"))
    if not parts.hostname:
        causes.append(v.invalid(field, url, "host must be specified"))
    if parts.username or parts.password:
        causes.append(v.invalid(field, url, "user information is not permitted in the URL"))
    if parts.fragment:
        causes.append(v.invalid(field, url, "fragments are not permitted in the URL"))
    if parts.query:
        causes.append(v.invalid(field, url, "query parameters are not permitted in the URL"))
    return causes


def validate_service(service: dict[str, Any], field: str) -> list[v.Cause]:
    """ValidateWebhookService."""
    causes: list[v.Cause] = []
    if not service.get("name"):
        causes.append(v.required(f"{field}.name", "service name is required"))
    if not service.get("namespace"):
        causes.append(v.required(f"{field}.namespace", "service namespace is required"))
    port = service.get("port")
    if not isinstance(port, int) or not 1 <= port <= 65535:
        causes.append(v.invalid(f"{field}.port", port, "port is not valid: must be between 1 and 65535, "
                                "inclusive"))
    path = service.get("path")
    if path is not None and not str(path).startswith("/"):
        causes.append(v.invalid(f"{field}.path", path, "must start with a '/'"))
    return causes


def validate_client_config(cc: Any, field: str) -> list[v.Cause]:
    """Exactly one of url or service, each by its rules."""
    if not isinstance(cc, dict):
        return [v.required(field, "exactly one of url or service is required")]
    url, service = cc.get("url"), cc.get("service")
    if (url is None) == (service is None):
        return [v.required(field, "exactly one of url or service is required")]
    if url is not None:
        return validate_url(str(url), f"{field}.url")
    return validate_service(service if isinstance(service, dict) else {}, f"{field}.service")


def ca_bundle_error(cc: dict[str, Any]) -> str | None:
    """Why the clientConfig's caBundle holds no usable certificate (Go's cert.ParseCertsPEM), None when it does
    (or is empty)."""
    data = ca_bundle(cc)
    if not data:
        return None
    try:
        if not x509.load_pem_x509_certificates(data):
            return "data does not contain any valid RSA or ECDSA certificates"
    except ValueError:
        if b"-----BEGIN CERTIFICATE-----" in data:
            return "x509: malformed certificate"
        return "data does not contain any valid RSA or ECDSA certificates"
    return None


def validate_ca_bundle(cc: dict[str, Any], field: str) -> list[v.Cause]:
    """ValidateCABundle: the value shown as Go shows a []byte."""
    why = ca_bundle_error(cc)
    if why is None:
        return []
    return [v.invalid_go(field, "[]byte{" + ", ".join(f"0x{b:x}" for b in ca_bundle(cc)) + "}", why)]
