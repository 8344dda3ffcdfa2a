"""What kube's certificate controllers share (pkg/controller/certificates): a controller that handles each
CertificateSigningRequest its informer sees, and the request checks of pkg/apis/certificates/helpers.go."""
from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from services.apis.strategies.certificates import APPROVED, DENIED, parse_csr

from .client import Client, Resource
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

Obj = dict[str, Any]
CSRS = Resource("certificates.k8s.io", "v1", "certificatesigningrequests", "CertificateSigningRequest", False,
                frozenset())
KUBE_APISERVER_CLIENT = "kubernetes.io/kube-apiserver-client"
KUBE_APISERVER_CLIENT_KUBELET = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_SERVING = "kubernetes.io/kubelet-serving"
SYSTEM_NODES = "system:nodes"
NODE_PREFIX = "system:node:"

# the usages kube requires of a kubelet's requests: with key encipherment (RSA keys), or without
KUBELET_CLIENT_USAGES = ({"digital signature", "key encipherment", "client auth"},
                         {"digital signature", "client auth"})
KUBELET_SERVING_USAGES = ({"digital signature", "key encipherment", "server auth"},
                          {"digital signature", "server auth"})


class CSRController:
    """An informer on CertificateSigningRequests and a queue of their names; `handle` gets the object."""

    def __init__(self, client: Client, name: str, handle: Callable[[Obj], Awaitable[None]], workers: int = 1) -> None:
        self.client = client
        self.csrs = client.informer(CSRS)
        self._handle = handle
        self.queue = WorkQueue(name, self._sync, workers)
        self.csrs.add_handler(self._on_csr)

    def _on_csr(self, typ: str, obj: Obj, _old: Obj | None) -> None:
        if typ != "DELETED":
            self.queue.add(obj["metadata"]["name"])

    async def start(self) -> None:
        self.csrs.start()
        await self.csrs.synced.wait()
        self.queue.start()

    async def stop(self) -> None:
        await self.queue.stop()
        await self.csrs.stop()

    async def _sync(self, name: str) -> None:
        csr = self.csrs.store.get(name)
        if csr is not None:
            await self._handle(csr)


def condition_types(csr: Obj) -> set[str]:
    """The types of the conditions that hold (status True; v1 defaults an empty status to True)."""
    return {c.get("type") for c in (csr.get("status") or {}).get("conditions") or []
            if isinstance(c, dict) and (c.get("status") or "True") == "True"}


def approved(csr: Obj) -> bool:
    """IsCertificateRequestApproved: Approved and not Denied."""
    types = condition_types(csr)
    return APPROVED in types and DENIED not in types


def request_of(csr: Obj) -> x509.CertificateSigningRequest:
    return parse_csr(base64.b64decode((csr.get("spec") or {}).get("request") or ""))


def _sans(req: x509.CertificateSigningRequest) -> x509.SubjectAlternativeName | None:
    try:
        return req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None


def _names(req: x509.CertificateSigningRequest, kind: type[x509.GeneralName]) -> list[Any]:
    sans = _sans(req)
    return [] if sans is None else sans.get_values_for_type(kind)  # type: ignore[arg-type]


def _subject(req: x509.CertificateSigningRequest, oid: x509.ObjectIdentifier) -> list[str]:
    return [str(a.value) for a in req.subject.get_attributes_for_oid(oid)]


def common_name(req: x509.CertificateSigningRequest) -> str:
    names = _subject(req, NameOID.COMMON_NAME)
    return names[0] if names else ""


def _usages_error(usages: set[str], allowed: tuple[set[str], set[str]]) -> str | None:
    if usages in allowed:
        return None
    return "usages did not match [" + " ".join(sorted(allowed[0])) + "]"


def kubelet_client_error(req: x509.CertificateSigningRequest, usages: set[str]) -> str | None:
    """ValidateKubeletClientCSR: O=system:nodes only, no SANs, CN system:node:<name>, a kubelet client's usages."""
    if _subject(req, NameOID.ORGANIZATION_NAME) != [SYSTEM_NODES]:
        return "subject organization is not system:nodes"
    for kind, what in ((x509.DNSName, "DNS"), (x509.RFC822Name, "Email"), (x509.IPAddress, "IP"),
                       (x509.UniformResourceIdentifier, "URI")):
        if _names(req, kind):
            return f"{what} subjectAltNames are not allowed"
    if not common_name(req).startswith(NODE_PREFIX):
        return "subject common name does not begin with system:node:"
    return _usages_error(usages, KUBELET_CLIENT_USAGES)


def kubelet_serving_error(req: x509.CertificateSigningRequest, usages: set[str]) -> str | None:
    """ValidateKubeletServingCSR: O=system:nodes only, a DNS or IP SAN, no email or URI, a server's usages."""
    if _subject(req, NameOID.ORGANIZATION_NAME) != [SYSTEM_NODES]:
        return "subject organization is not system:nodes"
    if not _names(req, x509.DNSName) and not _names(req, x509.IPAddress):
        return "DNS or IP subjectAltName is required"
    if _names(req, x509.RFC822Name):
        return "Email subjectAltNames are not allowed"
    if _names(req, x509.UniformResourceIdentifier):
        return "URI subjectAltNames are not allowed"
    if (err := _usages_error(usages, KUBELET_SERVING_USAGES)) is not None:
        return err
    if not common_name(req).startswith(NODE_PREFIX):
        return "subject common name does not begin with system:node:"
    return None


def apiserver_client_error(usages: list[str]) -> str | None:
    """validAPIServerClientUsages: client auth, and at most digital signature and key encipherment besides."""
    for u in usages:
        if u not in ("digital signature", "key encipherment", "client auth"):
            return f"invalid usage for client certificate: {u}"
    if "client auth" not in usages:
        return "missing required usage for client certificate: client auth"
    return None
