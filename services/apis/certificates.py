"""certificates.k8s.io/v1: CertificateSigningRequest, with its /approval and /status subresources."""
from __future__ import annotations

from services.apiserver.printers import AGE, NAME, TableConvertor, age, column, human_duration
from services.apiserver.registry.rest import Obj
from services.apiserver.resource import STATUS_VERBS, GroupVersion, ResourceInfo, SubresourceInfo

from . import schemas
from .kinds import status
from .strategies.certificates import APPROVED, DENIED, FAILED, CertificateSigningRequestStrategy

GROUP = "certificates.k8s.io"
_SPEC = schemas.ALL["io.k8s.api.certificates.v1.CertificateSigningRequestSpec"]["properties"]
_STATUS = schemas.ALL["io.k8s.api.certificates.v1.CertificateSigningRequestStatus"]["properties"]


def csr_condition(csr: Obj) -> str:
    """extractCSRStatus: Denied, else Approved, else Pending; then ",Failed" and ",Issued" where they hold."""
    types = {c.get("type") for c in (csr.get("status") or {}).get("conditions") or [] if isinstance(c, dict)}
    text = "Denied" if DENIED in types else APPROVED if APPROVED in types else "Pending"
    if FAILED in types:
        text += ",Failed"
    if (csr.get("status") or {}).get("certificate"):
        text += ",Issued"
    return text


def _row(csr: Obj) -> list[object]:
    spec = csr.get("spec") or {}
    seconds = spec.get("expirationSeconds")
    return [(csr.get("metadata") or {}).get("name", ""), age(csr), spec.get("signerName") or "<none>",
            spec.get("username") or "", human_duration(seconds) if isinstance(seconds, int) else "<none>",
            csr_condition(csr)]


CSR_TABLE = TableConvertor((
    NAME, AGE,
    column("SignerName", "string", _SPEC["signerName"]["description"]),
    column("Requestor", "string", _SPEC["request"]["description"]),
    column("RequestedDuration", "string", _SPEC["expirationSeconds"]["description"]),
    column("Condition", "string", _STATUS["conditions"]["description"]),
), _row)

CSR = ResourceInfo(
    group=GROUP, version="v1", kind="CertificateSigningRequest", plural="certificatesigningrequests",
    singular="certificatesigningrequest", namespaced=False, key_prefix="/registry/certificatesigningrequests/",
    short_names=("csr",), subresources=(SubresourceInfo("approval", "CertificateSigningRequest", STATUS_VERBS),
                                        status("CertificateSigningRequest")),
    strategy=CertificateSigningRequestStrategy, table=CSR_TABLE,
    protobuf="k8s.io.api.certificates.v1.CertificateSigningRequest",
)

V1 = GroupVersion(GROUP, "v1", 17300, 15, (CSR,))

GROUP_VERSIONS = (V1,)
