"""The certificate controllers' decisions without a server: what csrsigning signs (and how), refuses or leaves,
the kubelet request checks csrapproving and the signers share, and when csrcleaner deletes."""
from __future__ import annotations

import base64
import datetime as dt
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from services.controllermanager.__main__ import parse_args
from services.controllermanager.certificates import (
    apiserver_client_error,
    approved,
    kubelet_client_error,
    kubelet_serving_error,
)
from services.controllermanager.csrcleaner import expired
from services.controllermanager.csrsigning import CertificateAuthority, CSRSigningController, certificate_duration

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.timezone.utc)
YEAR = dt.timedelta(days=365)


def make_ca(not_after: dt.datetime = NOW + 10 * YEAR) -> CertificateAuthority:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(NOW - YEAR).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return CertificateAuthority(cert, key)


def request(cn: str, orgs: tuple[str, ...] = (), sans: list[x509.GeneralName] | None = None,
            ca: bool = False) -> x509.CertificateSigningRequest:
    key = ec.generate_private_key(ec.SECP256R1())
    b = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(
        [*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs),
         x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if ca:
        b = b.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    return b.sign(key, hashes.SHA256())


def csr(req: x509.CertificateSigningRequest, signer: str, usages: list[str], conditions: list[dict] | None = None,
        **spec: object) -> dict:
    return {"metadata": {"name": "c", "creationTimestamp": "2026-06-01T11:00:00Z"},
            "spec": {"request": base64.b64encode(req.public_bytes(serialization.Encoding.PEM)).decode(),
                     "signerName": signer, "usages": usages, **spec},
            "status": {"conditions": conditions if conditions is not None else
                       [{"type": "Approved", "status": "True", "lastUpdateTime": "2026-06-01T11:30:00Z"}]}}


def signer(ca: CertificateAuthority | None = None, max_duration: dt.timedelta = YEAR) -> CSRSigningController:
    controller = CSRSigningController.__new__(CSRSigningController)
    controller.ca, controller.max_duration, controller.clock = ca or make_ca(), max_duration, lambda: NOW
    return controller


def issued(status: dict) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(status["certificate"]))


def test_durations():
    assert certificate_duration(None, YEAR) == YEAR
    assert certificate_duration(3600, YEAR) == dt.timedelta(hours=1)
    assert certificate_duration(10 * 365 * 86400, YEAR) == YEAR  # capped by --cluster-signing-duration
    assert certificate_duration(60, YEAR) == dt.timedelta(minutes=10)


def test_signs_a_client_certificate_as_asked():
    ca = make_ca()
    req = request("dave", ("devs",), sans=[x509.DNSName("ignored.example"), x509.RegisteredID(NameOID.COMMON_NAME)],
                  ca=True)
    status = signer(ca).result(csr(req, "kubernetes.io/kube-apiserver-client",
                                   ["digital signature", "key encipherment", "client auth"], expirationSeconds=7200))
    cert = issued(status)
    assert cert.subject == req.subject and cert.issuer == ca.certificate.subject
    assert cert.not_valid_before_utc == NOW - dt.timedelta(minutes=5)
    assert cert.not_valid_after_utc == NOW + dt.timedelta(hours=2)  # short-lived: its end is not backdated
    cert.verify_directly_issued_by(ca.certificate)
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False  # never a CA
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and usage.key_encipherment and not usage.key_cert_sign
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == \
        [ExtendedKeyUsageOID.CLIENT_AUTH]
    # only DNS, IP, email and URI names are copied from the request
    assert list(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value) == \
        [x509.DNSName("ignored.example")]
    assert status["conditions"][0]["type"] == "Approved"


def test_long_lifetimes_are_backdated_and_never_outlive_the_ca():
    status = signer().result(csr(request("dave"), "kubernetes.io/kube-apiserver-client", ["client auth"],
                                 expirationSeconds=86400))
    cert = issued(status)
    assert cert.not_valid_before_utc == NOW - dt.timedelta(minutes=5)
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == dt.timedelta(days=1)
    ca = make_ca(NOW + dt.timedelta(days=30))
    cert = issued(signer(ca).result(csr(request("dave"), "kubernetes.io/kube-apiserver-client", ["client auth"])))
    assert cert.not_valid_after_utc == ca.certificate.not_valid_after_utc


def test_kubelet_serving_certificate():
    req = request("system:node:n1", ("system:nodes",),
                  sans=[x509.DNSName("n1"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = issued(signer().result(csr(req, "kubernetes.io/kubelet-serving", ["digital signature", "server auth"])))
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == \
        [ExtendedKeyUsageOID.SERVER_AUTH]


def test_what_the_signer_leaves_alone():
    s = signer()
    req = request("dave")
    pending = csr(req, "kubernetes.io/kube-apiserver-client", ["client auth"], conditions=[])
    assert s.result(pending) is None
    denied = csr(req, "kubernetes.io/kube-apiserver-client", ["client auth"],
                 conditions=[{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}])
    assert not approved(denied) and s.result(denied) is None
    assert s.result(csr(req, "example.com/custom", ["client auth"])) is None
    failed = csr(req, "kubernetes.io/kube-apiserver-client", ["client auth"],
                 conditions=[{"type": "Approved", "status": "True"}, {"type": "Failed", "status": "True"}])
    assert s.result(failed) is None


def test_what_the_signer_refuses():
    status = signer().result(csr(request("dave"), "kubernetes.io/kube-apiserver-client", ["server auth"]))
    failed = status["conditions"][-1]
    assert (failed["type"], failed["status"], failed["reason"], failed["message"]) == \
        ("Failed", "True", "SignerValidationFailure", "invalid usage for client certificate: server auth")
    assert "certificate" not in status


@pytest.mark.parametrize(("req", "usages", "error"), [
    (request("system:node:n1", ("system:nodes",)), {"digital signature", "client auth"}, None),
    (request("system:node:n1", ("system:nodes",)), {"digital signature", "key encipherment", "client auth"}, None),
    (request("system:node:n1", ("system:nodes", "x")), {"client auth"}, "subject organization is not system:nodes"),
    (request("system:node:n1", ("system:nodes",), [x509.DNSName("n1")]), {"client auth"},
     "DNS subjectAltNames are not allowed"),
    (request("n1", ("system:nodes",)), {"client auth"}, "subject common name does not begin with system:node:"),
    (request("system:node:n1", ("system:nodes",)), {"client auth"},
     "usages did not match [client auth digital signature key encipherment]"),
])
def test_kubelet_client_checks(req, usages, error):
    assert kubelet_client_error(req, usages) == error


def test_kubelet_serving_and_client_usage_checks():
    nodes = ("system:nodes",)
    assert kubelet_serving_error(request("system:node:n1", nodes), {"server auth"}) == \
        "DNS or IP subjectAltName is required"
    assert kubelet_serving_error(request("system:node:n1", nodes, [x509.DNSName("n1"), x509.RFC822Name("a@b.c")]),
                                 {"server auth"}) == "Email subjectAltNames are not allowed"
    assert apiserver_client_error(["digital signature"]) == "missing required usage for client certificate: client auth"
    assert apiserver_client_error(["client auth", "digital signature"]) is None


def test_cleaner_retention():
    def at(**kw):
        return {"metadata": {"creationTimestamp": "2026-06-01T00:00:00Z"}, "status": kw}

    assert not expired(at(), NOW.replace(hour=23))
    assert expired(at(), NOW + dt.timedelta(days=1))  # pending for a day
    denied = at(conditions=[{"type": "Denied", "lastUpdateTime": "2026-06-01T11:30:00Z"}])
    assert not expired(denied, NOW) and expired(denied, NOW + dt.timedelta(hours=1))
    failed = at(conditions=[{"type": "Failed", "lastUpdateTime": "2026-06-01T11:30:00Z"}])
    assert expired(failed, NOW + dt.timedelta(hours=1))
    ca = make_ca()
    cert = signer(ca).result(csr(request("dave"), "kubernetes.io/kube-apiserver-client", ["client auth"],
                                 expirationSeconds=3600))["certificate"]
    issued_ = at(conditions=[{"type": "Approved", "lastUpdateTime": "2026-06-01T11:30:00Z"}], certificate=cert)
    assert not expired(issued_, NOW) and expired(issued_, NOW + dt.timedelta(minutes=31))
    approved_only = at(conditions=[{"type": "Approved", "lastUpdateTime": "2026-06-01T11:30:00Z"}])
    assert not expired(approved_only, NOW + dt.timedelta(hours=5))  # approved, not yet issued: kept


def test_signing_flags(tmp_path):
    base = ["--kubeconfig", "k", "--root-ca-file", "ca.crt"]
    assert "certificatesigningrequest-signing-controller" not in parse_args(base).enabled
    args = parse_args([*base, "--cluster-signing-cert-file", "ca.crt", "--cluster-signing-key-file", "ca.key",
                       "--cluster-signing-duration", "720h"])
    assert "certificatesigningrequest-signing-controller" in args.enabled
    assert args.cluster_signing_duration == 720 * 3600
    assert parse_args([*base, "--controllers", "csrapproving,csrcleaner"]).enabled == \
        ["certificatesigningrequest-approving-controller", "certificatesigningrequest-cleaner-controller"]


class FakeClient:
    """Answers SubjectAccessReviews from `allowed` (subresources) and records the CSR updates."""

    def __init__(self, *allowed: str) -> None:
        self.allowed, self.reviews, self.updates = set(allowed), [], []

    async def request(self, method: str, path: str, body: dict | None = None, **_: object) -> dict:
        attrs = body["spec"]["resourceAttributes"]
        self.reviews.append((body["spec"]["user"], attrs["subresource"], attrs["verb"]))
        return {"status": {"allowed": attrs["subresource"] in self.allowed}}

    async def update(self, res, obj: dict, subresource: str = "") -> dict:
        self.updates.append((subresource, obj))
        return obj


def approver(client: FakeClient):
    from services.controllermanager.csrapproving import CSRApprovingController
    controller = CSRApprovingController.__new__(CSRApprovingController)
    controller.client = client  # type: ignore[assignment]
    return controller


def node_csr(cn: str, username: str) -> dict:
    obj = csr(request(cn, ("system:nodes",)), "kubernetes.io/kube-apiserver-client-kubelet",
              ["digital signature", "client auth"], conditions=[], username=username, groups=["system:nodes"])
    return obj


async def test_approving_asks_selfnodeclient_for_the_node_itself_then_nodeclient():
    client = FakeClient("selfnodeclient")
    await approver(client).handle(node_csr("system:node:n1", "system:node:n1"))
    assert client.reviews == [("system:node:n1", "selfnodeclient", "create")]
    subresource, updated = client.updates[0]
    assert subresource == "approval"
    assert updated["status"]["conditions"] == [{
        "type": "Approved", "status": "True", "reason": "AutoApproved",
        "message": "Auto approving self kubelet client certificate after SubjectAccessReview."}]

    client = FakeClient("nodeclient")
    await approver(client).handle(node_csr("system:node:n1", "bootstrap"))  # not the node: nodeclient only
    assert client.reviews == [("bootstrap", "nodeclient", "create")]
    assert client.updates[0][1]["status"]["conditions"][0]["message"] == \
        "Auto approving kubelet client certificate after SubjectAccessReview."

    client = FakeClient()
    await approver(client).handle(node_csr("system:node:n1", "system:node:n1"))
    assert [r[1] for r in client.reviews] == ["selfnodeclient", "nodeclient"] and client.updates == []


async def test_approving_leaves_what_it_does_not_recognize():
    client = FakeClient("selfnodeclient", "nodeclient")
    decided = node_csr("system:node:n1", "system:node:n1")
    decided["status"]["conditions"] = [{"type": "Denied", "status": "True"}]
    not_a_kubelet = node_csr("n1", "n1")
    other_signer = node_csr("system:node:n1", "system:node:n1")
    other_signer["spec"]["signerName"] = "kubernetes.io/kube-apiserver-client"
    for obj in (decided, not_a_kubelet, other_signer):
        await approver(client).handle(obj)
    assert client.reviews == [] and client.updates == []
