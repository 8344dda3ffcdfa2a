"""Strategies of certificates.k8s.io/v1 CertificateSigningRequests (kube's pkg/registry/certificates/certificates
and pkg/apis/certificates/validation).

A CSR is immutable once created but for its status, written through two subresources that split the concerns
of approval and issuance: /approval changes only the conditions (Approved, Denied), /status the other conditions
and the certificate. spec.username, uid, groups and extra are the requester's, set at create from the request's
user; a CSR is never created approved.
"""
from __future__ import annotations

import base64
import copy
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import rsa

from apiary_pb import envelope_pb2 as pb
from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy, SubresourceStrategy, now_rfc3339

from . import base64_error

APPROVED, DENIED, FAILED = "Approved", "Denied", "Failed"
LEGACY_UNKNOWN_SIGNER = "kubernetes.io/legacy-unknown"
MIN_EXPIRATION_SECONDS = 600

# the key usages a request may name (kube's certificates.KeyUsage values)
USAGES = ("any", "cert sign", "client auth", "code signing", "content commitment", "crl sign", "data encipherment",
          "decipher only", "digital signature", "email protection", "encipher only", "ipsec end system",
          "ipsec tunnel", "ipsec user", "key agreement", "key encipherment", "microsoft sgc", "netscape sgc",
          "ocsp signing", "s/mime", "server auth", "signing", "timestamping")
_TRUE_ONLY = (APPROVED, DENIED, FAILED)  # condition types whose status may only be True
_STATUS_VALUES = ("False", "True", "Unknown")
_MAX_DOMAIN = v.DNS1123_SUBDOMAIN_MAX
_MAX_SIGNER_NAME = _MAX_DOMAIN + (v.DNS1123_SUBDOMAIN_MAX + v.DNS1123_LABEL_MAX + 1) + 1


def decoded(value: Any) -> bytes:
    """A []byte field's bytes (its JSON is base64; canonicalize refused what does not decode)."""
    return base64.b64decode(value) if isinstance(value, str) and value else b""


def parse_csr(pem: bytes) -> x509.CertificateSigningRequest:
    """certificates.ParseCSR: the first PEM block must be a CERTIFICATE REQUEST; ValueError with kube's words."""
    start = pem.find(b"-----BEGIN ")
    if start < 0 or not pem[start:].startswith(b"-----BEGIN CERTIFICATE REQUEST-----"):
        raise ValueError("PEM block type must be CERTIFICATE REQUEST")
    try:
        return x509.load_pem_x509_csr(pem[start:])
    except ValueError as e:
        raise ValueError(f"x509: malformed certificate request: {e}") from None


def _request_error(pem: bytes) -> str | None:
    """validateCSR: a parseable request whose signature checks."""
    try:
        csr = parse_csr(pem)
    except ValueError as e:
        return str(e)
    try:
        valid = csr.is_signature_valid
    except (InvalidSignature, ValueError, TypeError):
        valid = False
    if valid:
        return None
    # crypto/x509's words for the key types Go checks
    return "crypto/rsa: verification error" if isinstance(csr.public_key(), rsa.RSAPublicKey) else \
        "x509: ECDSA verification failure"


def _certificate_error(pem: bytes) -> str | None:
    """validateCertificate: empty, or one or more CERTIFICATE PEM blocks without headers, each a certificate."""
    if not pem:
        return None
    blocks = 0
    rest = pem
    while (start := rest.find(b"-----BEGIN ")) >= 0:
        line_end = rest.find(b"-----", start + 11)
        kind = rest[start + 11:line_end].decode(errors="replace")
        end_marker = f"-----END {kind}-----".encode()
        end = rest.find(end_marker, start)
        if line_end < 0 or end < 0:
            break
        block = rest[start:end + len(end_marker)]
        if kind != "CERTIFICATE":
            return f"only CERTIFICATE PEM blocks are allowed, found {v.quote(kind)}"
        if b":" in block.split(b"\n", 1)[-1].split(b"\n", 1)[0]:
            return "no PEM block headers are permitted"
        try:
            x509.load_pem_x509_certificate(block)
        except ValueError as e:
            return f"x509: malformed certificate: {e}"
        blocks += 1
        rest = rest[end + len(end_marker):]
    if blocks == 0:
        return "must contain at least one CERTIFICATE PEM block"
    return None


def validate_signer_name(field: str, name: str) -> list[v.Cause]:
    """ValidateSignerName: <fully qualified domain>/<path>, each part DNS-1123."""
    if not name:
        return [v.required(field)]
    segments = name.split("/")
    if len(segments) != 2:
        return [v.invalid(field, name, "must be a fully qualified domain and path of the form "
                                       "'example.com/signer-name'")]
    domain, path = segments
    causes: list[v.Cause] = []
    if len(domain) > _MAX_DOMAIN:
        causes.append(v.too_long(field, _MAX_DOMAIN))
    labels = domain.split(".")
    for label in labels:
        errs = v.is_dns1123_label(label)
        if errs:
            causes += [v.invalid(field, domain, f"validating label {v.quote(label)}: {e}") for e in errs]
            break
    if len(labels) < 2:
        causes.append(v.invalid(field, domain, "should be a domain with at least two segments separated by dots"))
    for label in path.split("."):
        errs = v.is_dns1123_subdomain(label)
        if errs:
            causes += [v.invalid(field, path, f"validating label {v.quote(label)}: {e}") for e in errs]
            break
    if len(name) > _MAX_SIGNER_NAME:
        causes.append(v.too_long(field, _MAX_SIGNER_NAME))
    return causes


def _conditions(obj: Obj) -> list[Obj]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return [c for c in conditions if isinstance(c, dict)]


def _of_type(obj: Obj, typ: str) -> list[Obj]:
    return [c for c in _conditions(obj) if c.get("type") == typ]


def _validate_conditions(obj: Obj, old: Obj | None) -> list[v.Cause]:
    """validateConditions, with the tolerances kube keeps for what the stored object already has."""
    causes: list[v.Cause] = []
    old_types = [c.get("type") for c in _conditions(old)] if old is not None else []
    allow_empty_type = "" in old_types or None in old_types
    allow_duplicates = len(old_types) != len(set(old_types))
    allow_both = APPROVED in old_types and DENIED in old_types
    seen: set[str] = set()
    approved = denied = False
    for i, c in enumerate(_conditions(obj)):
        f = f"status.conditions[{i}]"
        typ = c.get("type") or ""
        if not typ and not allow_empty_type:
            causes.append(v.required(f"{f}.type"))
        allowed = ("True",) if typ in _TRUE_ONLY else _STATUS_VALUES
        status = c.get("status") or ""
        if not status:
            causes.append(v.required(f"{f}.status"))
        elif status not in allowed:
            causes.append(v.not_supported(f"{f}.status", status, allowed))
        if not allow_both:
            if typ == APPROVED:
                approved = True
                if denied:
                    causes.append(v.invalid(f"{f}.type", typ, "Approved and Denied conditions are mutually exclusive"))
            elif typ == DENIED:
                denied = True
                if approved:
                    causes.append(v.invalid(f"{f}.type", typ, "Approved and Denied conditions are mutually exclusive"))
        if not allow_duplicates:
            if typ in seen:
                causes.append(v.duplicate(f"{f}.type", typ))
            seen.add(typ)
    return causes


def validate_csr(obj: Obj, old: Obj | None) -> list[v.Cause]:
    """validateCertificateSigningRequest: the request, usages, signer, duration, conditions and certificate."""
    spec = obj.get("spec") or {}
    old_spec = (old or {}).get("spec") or {}
    causes: list[v.Cause] = []
    request = decoded(spec.get("request"))
    if (err := _request_error(request)) is not None:
        shown = "[]byte(nil)" if spec.get("request") is None else \
            "[]byte{" + ", ".join(f"0x{b:x}" for b in request) + "}"  # Go's %#v of the []byte
        causes.append(v.invalid_go("spec.request", shown, err))
    usages = spec.get("usages") or []
    if not usages:
        causes.append(v.required("spec.usages"))
    old_usages = old_spec.get("usages") or []
    if old is None or all(u in USAGES for u in old_usages):
        causes += [v.not_supported(f"spec.usages[{i}]", u, USAGES) for i, u in enumerate(usages) if u not in USAGES]
    if old is None or len(set(old_usages)) == len(old_usages):
        seen: set[str] = set()
        for i, u in enumerate(usages):
            if u in seen:
                causes.append(v.duplicate(f"spec.usages[{i}]", u))
            seen.add(u)
    signer = spec.get("signerName") or ""
    if signer == LEGACY_UNKNOWN_SIGNER and old_spec.get("signerName") != LEGACY_UNKNOWN_SIGNER:
        causes.append(v.invalid("spec.signerName", signer, "the legacy signerName is not allowed via this API version"))
    elif signer != LEGACY_UNKNOWN_SIGNER:
        causes += validate_signer_name("spec.signerName", signer)
    expiration = spec.get("expirationSeconds")
    if isinstance(expiration, int) and expiration < MIN_EXPIRATION_SECONDS:
        causes.append(v.invalid("spec.expirationSeconds", expiration,
                                "may not specify a duration less than 600 seconds (10 minutes)"))
    causes += _validate_conditions(obj, old)
    certificate = decoded((obj.get("status") or {}).get("certificate"))
    old_certificate = decoded(((old or {}).get("status") or {}).get("certificate"))
    arbitrary = old is not None and (certificate == old_certificate or _certificate_error(old_certificate) is not None)
    if not arbitrary and (err := _certificate_error(certificate)) is not None:
        causes.append(v.invalid("status.certificate", "<certificate data>", err))
    return causes


def validate_csr_update(obj: Obj, old: Obj, approval: bool = False, certificate: bool = False) -> list[v.Cause]:
    """validateCertificateSigningRequestUpdate: approval conditions only through /approval, the certificate only
    through /status and only once; no Approved, Denied or Failed condition ever removed."""
    causes = validate_csr(obj, old)
    for typ in (APPROVED, DENIED, FAILED):
        if len(_of_type(obj, typ)) < len(_of_type(old, typ)):
            causes.append(v.forbidden("status.conditions", f'updates may not remove a condition of type "{typ}"'))
    if not approval:
        for typ in (APPROVED, DENIED):
            new_c, old_c = _of_type(obj, typ), _of_type(old, typ)
            if len(new_c) > len(old_c):
                causes.append(v.forbidden("status.conditions", f'updates may not add a condition of type "{typ}"'))
            elif len(new_c) == len(old_c) and new_c != old_c:
                causes.append(v.forbidden("status.conditions",
                                          f'updates may not modify a condition of type "{typ}"'))
    new_cert = (obj.get("status") or {}).get("certificate") or ""
    old_cert = (old.get("status") or {}).get("certificate") or ""
    if new_cert != old_cert:
        if not certificate:
            causes.append(v.forbidden("status.certificate", "updates may not set certificate content"))
        elif old_cert:
            causes.append(v.forbidden("status.certificate", "updates may not modify existing certificate content"))
    return causes + v.validate_object_meta_update(obj.get("metadata") or {}, old.get("metadata") or {})


def _populate_condition_timestamps(obj: Obj, old: Obj) -> None:
    """populateConditionTimestamps: lastUpdateTime now where unset; lastTransitionTime kept from an old condition
    of the same type and status, else now."""
    now = now_rfc3339()
    for c in _conditions(obj):
        c.setdefault("lastUpdateTime", now)
        if not c.get("lastTransitionTime"):
            c["lastTransitionTime"] = next(
                (o["lastTransitionTime"] for o in _conditions(old)
                 if o.get("type") == c.get("type") and o.get("status") == c.get("status")
                 and o.get("lastTransitionTime")), now)


class CertificateSigningRequestStrategy(Strategy):
    status_fields = ("status",)

    def canonicalize(self, obj: Obj) -> None:
        for value in ((obj.get("spec") or {}).get("request"), (obj.get("status") or {}).get("certificate")):
            if isinstance(value, str) and (err := base64_error(value)):
                raise self.cannot_handle(err)
        for c in _conditions(obj):  # SetDefaults_CertificateSigningRequestCondition
            if not c.get("status"):
                c["status"] = "True"

    def validate_name(self, obj: Obj, name: str) -> list[str]:
        return []  # ValidateCertificateRequestName: "We don't care what you call your certificate requests."

    def selectable_fields(self, obj: Obj) -> dict[str, str]:
        return super().selectable_fields(obj) | {"spec.signerName": (obj.get("spec") or {}).get("signerName") or ""}

    def prepare_for_create_as(self, obj: Obj, user: pb.UserInfo) -> None:
        """The requester's identity in the spec, whatever the request said; the status empty."""
        spec = obj.setdefault("spec", {})
        for f in ("username", "uid", "groups", "extra"):
            spec.pop(f, None)
        if user.name:
            spec["username"] = user.name
        if user.uid:
            spec["uid"] = user.uid
        if user.groups:
            spec["groups"] = list(user.groups)
        if user.extra:
            spec["extra"] = {k: list(val.values) for k, val in user.extra.items()}
        obj["status"] = {}

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        super().prepare_for_update(obj, old)
        if "spec" in old:
            obj["spec"] = copy.deepcopy(old["spec"])
        else:
            obj.pop("spec", None)

    def validate(self, obj: Obj) -> list[v.Cause]:
        return super().validate(obj) + validate_csr(obj, None)

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        meta = v.validate_object_meta(obj.get("metadata") or {}, False, lambda n: [])
        return meta + validate_csr_update(obj, old)

    def for_subresource(self, subresource: str) -> Strategy:
        if subresource == "status":
            return CertificateSigningRequestStatusStrategy(self, ("status",))
        if subresource == "approval":
            return CertificateSigningRequestApprovalStrategy(self, ("status",))
        return self


class CertificateSigningRequestStatusStrategy(SubresourceStrategy):
    """/status: the certificate and the conditions but Approved and Denied, which stay as stored."""

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        super().prepare_for_update(obj, old)
        status = obj.get("status")
        if not isinstance(status, dict):
            status = obj["status"] = {}
        kept = [c for c in _conditions(obj) if c.get("type") not in (APPROVED, DENIED)]
        restored = [copy.deepcopy(c) for c in _conditions(old) if c.get("type") in (APPROVED, DENIED)]
        if kept or restored or "conditions" in status:
            status["conditions"] = restored + kept
        _populate_condition_timestamps(obj, old)

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        meta = v.validate_object_meta(obj.get("metadata") or {}, False, lambda n: [])
        return meta + validate_csr_update(obj, old, certificate=True)


class CertificateSigningRequestApprovalStrategy(SubresourceStrategy):
    """/approval: the conditions only; the certificate stays as stored."""

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        super().prepare_for_update(obj, old)
        status = obj.get("status")
        if not isinstance(status, dict):
            status = obj["status"] = {}
        old_cert = (old.get("status") or {}).get("certificate")
        if old_cert:
            status["certificate"] = old_cert
        else:
            status.pop("certificate", None)
        _populate_condition_timestamps(obj, old)

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        meta = v.validate_object_meta(obj.get("metadata") or {}, False, lambda n: [])
        return meta + validate_csr_update(obj, old, approval=True)
