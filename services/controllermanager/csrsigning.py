"""kube's csrsigning controller (pkg/controller/certificates/signer): kube's built-in signers sign approved
requests with the cluster's CA (--cluster-signing-cert-file / --cluster-signing-key-file).

One controller per signer, as kube runs them: kubernetes.io/kube-apiserver-client (client auth, with at most
digital signature and key encipherment besides), kubernetes.io/kube-apiserver-client-kubelet and
kubernetes.io/kubelet-serving (a kubelet's client and serving requests, checked as kube checks them). A request
a signer refuses gets a Failed condition (reason SignerValidationFailure); a valid one its certificate in
status.certificate, valid for spec.expirationSeconds when given (at least 10 minutes, at most
--cluster-signing-duration) else for --cluster-signing-duration, from 5 minutes ago (a lifetime under 8 hours
counted from now), never past the CA's own expiry.
"""
from __future__ import annotations

import base64
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from services.common.errors import NotFound

from .certificates import (
    CSRS,
    KUBE_APISERVER_CLIENT,
    KUBE_APISERVER_CLIENT_KUBELET,
    KUBELET_SERVING,
    CSRController,
    Obj,
    apiserver_client_error,
    approved,
    condition_types,
    kubelet_client_error,
    kubelet_serving_error,
    request_of,
)
from .client import Client

log = logging.getLogger(__name__)

DEFAULT_DURATION = dt.timedelta(days=365)  # --cluster-signing-duration's default, 8760h
MIN_DURATION = dt.timedelta(minutes=10)
BACKDATE = dt.timedelta(minutes=5)
SHORT = dt.timedelta(hours=8)  # 5 minutes of backdating is about 1% of it

_KEY_USAGES = {"signing": "digital_signature", "digital signature": "digital_signature",
               "content commitment": "content_commitment", "key encipherment": "key_encipherment",
               "key agreement": "key_agreement", "data encipherment": "data_encipherment",
               "cert sign": "key_cert_sign", "crl sign": "crl_sign", "encipher only": "encipher_only",
               "decipher only": "decipher_only"}
_EXT_KEY_USAGES = {"any": ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE, "server auth": ExtendedKeyUsageOID.SERVER_AUTH,
                   "client auth": ExtendedKeyUsageOID.CLIENT_AUTH, "code signing": ExtendedKeyUsageOID.CODE_SIGNING,
                   "email protection": ExtendedKeyUsageOID.EMAIL_PROTECTION,
                   "s/mime": ExtendedKeyUsageOID.EMAIL_PROTECTION,
                   "ipsec end system": x509.ObjectIdentifier("1.3.6.1.5.5.7.3.5"),
                   "ipsec tunnel": x509.ObjectIdentifier("1.3.6.1.5.5.7.3.6"),
                   "ipsec user": x509.ObjectIdentifier("1.3.6.1.5.5.7.3.7"),
                   "timestamping": ExtendedKeyUsageOID.TIME_STAMPING, "ocsp signing": ExtendedKeyUsageOID.OCSP_SIGNING,
                   "microsoft sgc": x509.ObjectIdentifier("1.3.6.1.4.1.311.10.3.3"),
                   "netscape sgc": x509.ObjectIdentifier("2.16.840.1.113730.4.1")}

SignerKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey


@dataclass(frozen=True)
class CertificateAuthority:
    """The signing CA (kube's authority.CertificateAuthority), read from PEM files."""
    certificate: x509.Certificate
    key: SignerKey

    @classmethod
    def load(cls, cert_file: str, key_file: str) -> CertificateAuthority:
        cert = x509.load_pem_x509_certificate(Path(cert_file).read_bytes())
        key = serialization.load_pem_private_key(Path(key_file).read_bytes(), None)
        if not isinstance(key, (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey,
                                ed448.Ed448PrivateKey)):
            raise ValueError(f"{key_file}: not a key that can sign certificates")
        return cls(cert, key)

    def sign(self, req: x509.CertificateSigningRequest, usages: list[str], ttl: dt.timedelta,
             now: dt.datetime) -> bytes:
        """The PEM certificate for req (PermissiveSigningPolicy): the request's subject and DNS, IP, email and URI
        names, the usages asked for, no other extension of the request, never a CA."""
        ca_not_after = self.certificate.not_valid_after_utc
        if now >= ca_not_after:
            raise ValueError(f"refusing to sign a certificate that expired in the past: NotAfter={ca_not_after}")
        not_before = now - BACKDATE
        # a short-lived certificate's end is not backdated: it keeps all of its lifetime from now
        not_after = min(now + ttl if ttl < SHORT else not_before + ttl, ca_not_after)
        builder = (x509.CertificateBuilder()
                   .subject_name(req.subject).issuer_name(self.certificate.subject)
                   .public_key(req.public_key())  # type: ignore[arg-type]
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(not_before).not_valid_after(not_after)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
        bits = {_KEY_USAGES[u] for u in usages if u in _KEY_USAGES}
        if bits:
            flags = {f: f in bits for f in set(_KEY_USAGES.values())}
            if not flags["key_agreement"]:  # only meaningful with key agreement
                flags["encipher_only"] = flags["decipher_only"] = False
            builder = builder.add_extension(x509.KeyUsage(**flags), critical=True)
        ext = list(dict.fromkeys(_EXT_KEY_USAGES[u] for u in usages if u in _EXT_KEY_USAGES))
        if ext:
            builder = builder.add_extension(x509.ExtendedKeyUsage(ext), critical=False)
        try:
            sans = req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            names = [n for n in sans if isinstance(n, (x509.DNSName, x509.IPAddress, x509.RFC822Name,
                                                       x509.UniformResourceIdentifier))]
            if names:
                builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        except x509.ExtensionNotFound:
            pass
        try:
            ski = self.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
            builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski),
                                            critical=False)
        except x509.ExtensionNotFound:
            pass
        algorithm = None if isinstance(self.key, (ed25519.Ed25519PrivateKey, ed448.Ed448PrivateKey)) \
            else hashes.SHA256()
        cert = builder.sign(self.key, algorithm)  # type: ignore[arg-type]
        return cert.public_bytes(serialization.Encoding.PEM)


def certificate_duration(expiration_seconds: object, max_duration: dt.timedelta) -> dt.timedelta:
    """signer.duration: the requested lifetime within [10 minutes, the signer's maximum]; the maximum if none."""
    if not isinstance(expiration_seconds, int) or isinstance(expiration_seconds, bool):
        return max_duration
    requested = dt.timedelta(seconds=expiration_seconds)
    return max(MIN_DURATION, min(requested, max_duration))


def signer_error(signer_name: str, req: x509.CertificateSigningRequest, usages: list[str]) -> str | None:
    """The signer's own checks of a request it recognizes (kube's per-signer verification functions)."""
    if signer_name == KUBE_APISERVER_CLIENT:
        return apiserver_client_error(usages)
    if signer_name == KUBE_APISERVER_CLIENT_KUBELET:
        return kubelet_client_error(req, set(usages))
    return kubelet_serving_error(req, set(usages))


SIGNERS = (KUBE_APISERVER_CLIENT, KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING)


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class CSRSigningController(CSRController):
    """kube's csrsigning controller: every built-in signer, on one informer and queue."""

    def __init__(self, client: Client, ca: CertificateAuthority, max_duration: dt.timedelta = DEFAULT_DURATION,
                 clock: Callable[[], dt.datetime] = now_utc) -> None:
        super().__init__(client, "csrsigning", self.handle)
        self.ca, self.max_duration, self.clock = ca, max_duration, clock

    def result(self, csr: Obj) -> Obj | None:
        """The request's new status if this controller has something to write, else None."""
        spec, status = csr.get("spec") or {}, csr.get("status") or {}
        signer = spec.get("signerName")
        if signer not in SIGNERS or not approved(csr) or "Failed" in condition_types(csr) or \
                status.get("certificate"):
            return None
        usages = list(spec.get("usages") or [])
        try:
            req = request_of(csr)
            err = signer_error(signer, req, usages)
        except ValueError as e:
            raise ValueError(f"unable to parse csr {csr['metadata']['name']!r}: {e}") from None
        if err is not None:
            return {**status, "conditions": [*(status.get("conditions") or []), {
                "type": "Failed", "status": "True", "reason": "SignerValidationFailure", "message": err,
                "lastUpdateTime": self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")}]}
        pem = self.ca.sign(req, usages, certificate_duration(spec.get("expirationSeconds"), self.max_duration),
                           self.clock())
        return {**status, "certificate": base64.b64encode(pem).decode()}

    async def handle(self, csr: Obj) -> None:
        status = self.result(csr)
        if status is None:
            return
        try:
            await self.client.update(CSRS, {**csr, "status": status}, "status")
        except NotFound:
            return
        log.info("csrsigning: %s %s", "signed" if status.get("certificate") else "refused", csr["metadata"]["name"])
