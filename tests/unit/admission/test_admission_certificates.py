"""CertificateApproval, CertificateSigning and CertificateSubjectRestriction: the SubjectAccessReviews they ask
(the signer by name, then its domain's wildcard) and kube's texts."""
from __future__ import annotations

import base64
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from apiary_pb import admission_pb2 as adpb
from apiary_pb import auth_pb2
from apiary_pb import envelope_pb2 as pb
from services.admission import authz
from services.admission.attributes import Attributes
from services.admission.plugins import ORDER, enabled_plugins
from services.admission.plugins.certificates import (
    CertificateApproval,
    CertificateSigning,
    CertificateSubjectRestriction,
)
from services.apis.install import new_catalogue
from services.common import identity
from services.common.envelope import to_envelope
from services.common.errors import Forbidden

CATALOGUE = new_catalogue()
CLIENT = "kubernetes.io/kube-apiserver-client"


class Authorizer:
    """The auth service's Authorize: allows what `grants` lists as (user, verb, signer name)."""

    def __init__(self, *grants: tuple[str, str, str]) -> None:
        self.grants = set(grants)
        self.asked: list[tuple[str, str, str, str]] = []

    def Authorize(self, req: Any, timeout: float = 0) -> Any:
        at = req.attributes
        self.asked.append((at.verb, at.api_group, at.resource, at.name))
        allowed = (at.user.name, at.verb, at.name) in self.grants and at.resource == "signers"

        async def answer() -> Any:
            return auth_pb2.AuthorizeResponse(decision="Allow" if allowed else "NoOpinion")
        return answer()


@pytest.fixture
def authorizer():
    def configure(*grants: tuple[str, str, str]) -> Authorizer:
        fake = Authorizer(*grants)
        authz.configure(fake)  # type: ignore[arg-type]
        return fake
    yield configure
    authz.configure(None)


def request_pem(orgs: tuple[str, ...] = ()) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs),
                      x509.NameAttribute(NameOID.COMMON_NAME, "u")])
    req = x509.CertificateSigningRequestBuilder().subject_name(name).sign(key, hashes.SHA256())
    return base64.b64encode(req.public_bytes(serialization.Encoding.PEM)).decode()


def csr(signer: str = CLIENT, orgs: tuple[str, ...] = (), **status: Any) -> dict:
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": "c"},
            "spec": {"request": request_pem(orgs), "signerName": signer, "usages": ["client auth"]},
            "status": status}


def attributes(obj: dict, operation: str, subresource: str = "", old: dict | None = None,
               user: str = "alice") -> Attributes:
    r = adpb.AdmissionRequest(operation=operation, attributes=pb.RequestAttributes(
        api_group="certificates.k8s.io", api_version="v1", resource="certificatesigningrequests",
        subresource=subresource, name="c", user=identity.user_pb(user, ["devs"])))
    r.object.CopyFrom(to_envelope(obj))
    if old is not None:
        r.old_object.CopyFrom(to_envelope(old))
    return Attributes(r, CATALOGUE)


def test_default_on_in_kube_order():
    chosen = enabled_plugins("", "")
    assert [p for p in chosen if p.startswith("Certificate")] == \
        ["CertificateApproval", "CertificateSigning", "CertificateSubjectRestriction"]
    assert ORDER.index("DefaultTolerationSeconds") < ORDER.index("CertificateApproval") < \
        ORDER.index("MutatingAdmissionPolicy")


async def test_approval_asks_for_the_signer_then_its_domain(authorizer):
    approved = csr(conditions=[{"type": "Approved", "status": "True"}])
    fake = authorizer()
    with pytest.raises(Forbidden) as e:
        await CertificateApproval().validate(attributes(approved, "UPDATE", "approval", old=csr()))
    assert e.value.message == ('certificatesigningrequests.certificates.k8s.io "c" is forbidden: user not permitted '
                               'to approve requests with signerName "kubernetes.io/kube-apiserver-client"')
    assert fake.asked == [("approve", "certificates.k8s.io", "signers", CLIENT),
                          ("approve", "certificates.k8s.io", "signers", "kubernetes.io/*")]
    authorizer(("alice", "approve", "kubernetes.io/*"))
    await CertificateApproval().validate(attributes(approved, "UPDATE", "approval", old=csr()))
    # other writes are not this plug-in's
    await CertificateApproval().validate(attributes(approved, "UPDATE", "status", old=csr()))


async def test_signing_checks_the_stored_signer_when_status_changes(authorizer):
    old = csr(conditions=[{"type": "Approved", "status": "True"}])
    new = csr("example.com/mine", conditions=old["status"]["conditions"], certificate="eA==")
    fake = authorizer(("bob", "sign", "example.com/mine"))
    with pytest.raises(Forbidden) as e:
        await CertificateSigning().validate(attributes(new, "UPDATE", "status", old=old, user="bob"))
    assert 'user not permitted to sign requests with signerName "kubernetes.io/kube-apiserver-client"' in \
        e.value.message
    assert fake.asked[0][3] == CLIENT
    fake.asked.clear()
    await CertificateSigning().validate(attributes(old, "UPDATE", "status", old=old, user="bob"))
    assert fake.asked == []  # nothing in the status changed: nothing to check
    authorizer(("bob", "sign", CLIENT))
    await CertificateSigning().validate(attributes(new, "UPDATE", "status", old=old, user="bob"))


async def test_subject_restriction():
    with pytest.raises(Forbidden) as e:
        await CertificateSubjectRestriction().validate(attributes(csr(orgs=("system:masters",)), "CREATE"))
    assert e.value.message.endswith("is forbidden: use of kubernetes.io/kube-apiserver-client signer with "
                                    "system:masters group is not allowed")
    await CertificateSubjectRestriction().validate(attributes(csr(orgs=("devs",)), "CREATE"))
    await CertificateSubjectRestriction().validate(attributes(csr("example.com/x", ("system:masters",)), "CREATE"))
    broken = csr()
    broken["spec"]["request"] = base64.b64encode(b"nope").decode()
    with pytest.raises(Forbidden, match="failed to parse CSR: PEM block type must be CERTIFICATE REQUEST"):
        await CertificateSubjectRestriction().validate(attributes(broken, "CREATE"))
