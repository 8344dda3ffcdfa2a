"""certificates.k8s.io/v1 CertificateSigningRequests: kube's validation (field paths and messages), the requester
recorded at create, the update rules of the resource and of /approval and /status, and the printed row."""
from __future__ import annotations

import base64
import copy
import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from services.apis.certificates import CSR_TABLE
from services.apis.install import new_catalogue
from services.apis.strategies.certificates import validate_signer_name
from services.apiserver.registry.rest import strategy_for
from services.common import identity

INFO = new_catalogue().lookup("certificates.k8s.io", "v1", "certificatesigningrequests")
CLIENT = "kubernetes.io/kube-apiserver-client"


def pem_request(cn: str = "dave", key: object = None) -> bytes:
    key = key or ec.generate_private_key(ec.SECP256R1())
    req = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])).sign(key, hashes.SHA256())  # type: ignore[arg-type]
    return req.public_bytes(serialization.Encoding.PEM)


def pem_certificate() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "x")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


def csr(name: str = "c", **spec: object) -> dict:
    body = {"request": base64.b64encode(pem_request()).decode(), "signerName": CLIENT, "usages": ["client auth"]}
    body.update(spec)
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": name},
            "spec": body}


def fields(causes: list[dict]) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in causes]


def test_definition():
    assert not INFO.namespaced and INFO.short_names == ("csr",)
    assert [s.name for s in INFO.subresources] == ["approval", "status"]
    assert INFO.protobuf == "k8s.io.api.certificates.v1.CertificateSigningRequest"
    assert INFO.storage_version_hash() == "95fRKMXA+00="  # kube-apiserver's
    assert "spec.signerName" in strategy_for(INFO).field_labels


def test_validation_messages():
    s = strategy_for(INFO)
    assert s.validate(csr()) == []
    bad = csr(request=base64.b64encode(b"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n").decode(),
              usages=[], signerName="kubernetes.io/legacy-unknown", expirationSeconds=599)
    got = fields(s.validate(bad))
    assert got[0][0] == "spec.request" and got[0][1].startswith("Invalid value: []byte{0x2d, 0x2d")
    assert got[0][1].endswith(": PEM block type must be CERTIFICATE REQUEST")
    assert got[1:] == [
        ("spec.usages", "Required value"),
        ("spec.signerName", 'Invalid value: "kubernetes.io/legacy-unknown": the legacy signerName is not allowed '
                            "via this API version"),
        ("spec.expirationSeconds", "Invalid value: 599: may not specify a duration less than 600 seconds "
                                   "(10 minutes)"),
    ]
    assert fields(s.validate(csr(usages=["client auth", "client auth", "nope"]))) == [
        ("spec.usages[2]", 'Unsupported value: "nope": supported values: "any", "cert sign", "client auth", '
                           '"code signing", "content commitment", "crl sign", "data encipherment", "decipher only", '
                           '"digital signature", "email protection", "encipher only", "ipsec end system", '
                           '"ipsec tunnel", "ipsec user", "key agreement", "key encipherment", "microsoft sgc", '
                           '"netscape sgc", "ocsp signing", "s/mime", "server auth", "signing", "timestamping"'),
        ("spec.usages[1]", 'Duplicate value: "client auth"'),
    ]


def test_missing_request():
    obj = csr()
    del obj["spec"]["request"]
    assert fields(strategy_for(INFO).validate(obj)) == [
        ("spec.request", "Invalid value: []byte(nil): PEM block type must be CERTIFICATE REQUEST")]


def test_signature_is_checked():
    s = strategy_for(INFO)
    good = pem_request(key=rsa.generate_private_key(public_exponent=65537, key_size=2048))
    der = bytearray(x509.load_pem_x509_csr(good).public_bytes(serialization.Encoding.DER))
    der[-1] ^= 0xFF  # the last byte of the signature
    tampered = b"-----BEGIN CERTIFICATE REQUEST-----\n" + base64.encodebytes(bytes(der)) + \
        b"-----END CERTIFICATE REQUEST-----\n"
    got = fields(s.validate(csr(request=base64.b64encode(tampered).decode())))
    assert got[0][0] == "spec.request" and got[0][1].endswith(": crypto/rsa: verification error")


@pytest.mark.parametrize(("name", "messages"), [
    ("", ["Required value"]),
    ("example.com/a/b", ["Invalid value: \"example.com/a/b\": must be a fully qualified domain and path of the form "
                         "'example.com/signer-name'"]),
    ("example/signer", ['Invalid value: "example": should be a domain with at least two segments separated by dots']),
    ("Example.com/signer", ['Invalid value: "Example.com": validating label "Example": a lowercase RFC 1123 label '
                            "must consist of lower case alphanumeric characters or '-', and must start and end with "
                            "an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
                            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"]),
    ("example.com/" + ".".join(["a" * 250] * 3), ["Too long: must have at most 571 bytes"]),
])
def test_signer_names(name, messages):
    assert [c["message"] for c in validate_signer_name("spec.signerName", name)] == messages


def test_conditions_and_certificate_rules():
    s = strategy_for(INFO)
    both = csr()
    both["status"] = {"conditions": [{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"},
                                     {"type": "Failed", "status": "False"}, {"type": "Approved", "status": "True"}]}
    assert fields(s.validate(both)) == [
        ("status.conditions[1].type", 'Invalid value: "Denied": Approved and Denied conditions are mutually exclusive'),
        ("status.conditions[2].status", 'Unsupported value: "False": supported values: "True"'),
        ("status.conditions[3].type", 'Invalid value: "Approved": Approved and Denied conditions are mutually '
                                      "exclusive"),
        ("status.conditions[3].type", 'Duplicate value: "Approved"'),
    ]
    bad_cert = csr()
    bad_cert["status"] = {"certificate": base64.b64encode(b"junk").decode()}
    assert fields(s.validate(bad_cert)) == [
        ("status.certificate", 'Invalid value: "<certificate data>": must contain at least one CERTIFICATE PEM block')]


def stored(s, obj: dict, user=None) -> dict:
    obj = copy.deepcopy(obj)
    s.prepare_for_create_as(obj, user or identity.user_pb("alice", ["devs", "system:authenticated"]))
    obj["metadata"]["resourceVersion"] = "1"
    return obj


def test_requester_is_recorded_and_status_cleared():
    s = strategy_for(INFO)
    asked = csr(username="root", groups=["system:masters"], uid="0")
    asked["status"] = {"conditions": [{"type": "Approved", "status": "True"}]}
    user = identity.user_pb("alice", ["devs"])
    user.uid = "u-1"
    user.extra["scopes"].values.extend(["a", "b"])
    created = stored(s, asked, user)
    assert created["spec"]["username"] == "alice" and created["spec"]["uid"] == "u-1"
    assert created["spec"]["groups"] == ["devs"] and created["spec"]["extra"] == {"scopes": ["a", "b"]}
    assert created["status"] == {}


def approve(obj: dict, typ: str = "Approved") -> dict:
    new = copy.deepcopy(obj)
    new.setdefault("status", {}).setdefault("conditions", []).append({"type": typ, "status": "True",
                                                                      "reason": "Because"})
    return new


def update(strategy, new: dict, old: dict) -> list[tuple[str, str]]:
    strategy.prepare_for_update(new, old)
    return fields(strategy.validate_update(new, old))


def test_main_resource_keeps_spec_and_status():
    s = strategy_for(INFO)
    old = stored(s, csr())
    new = approve(old)
    new["spec"]["signerName"] = "example.com/other"
    new["metadata"]["labels"] = {"a": "b"}
    assert update(s, new, old) == []
    assert new["spec"] == old["spec"] and new["status"] == old["status"]
    assert new["metadata"]["labels"] == {"a": "b"}


def test_approval_subresource():
    s = strategy_for(INFO)
    approval = s.for_subresource("approval")
    old = stored(s, csr())
    new = approve(old)
    new["spec"]["usages"] = ["server auth"]
    new["status"]["certificate"] = base64.b64encode(pem_certificate()).decode()
    assert update(approval, new, old) == []
    assert new["spec"] == old["spec"] and "certificate" not in new["status"]
    condition = new["status"]["conditions"][0]
    assert condition["lastUpdateTime"] and condition["lastTransitionTime"]
    # a decision is never taken back, nor turned into the other
    denied = copy.deepcopy(new)
    denied["status"]["conditions"] = [{"type": "Denied", "status": "True"}]
    assert update(approval, denied, new) == [
        ("status.conditions", 'Forbidden: updates may not remove a condition of type "Approved"')]


def test_status_subresource():
    s = strategy_for(INFO)
    status = s.for_subresource("status")
    old = stored(s, csr())
    # an approval through /status is dropped: Approved and Denied belong to /approval
    new = approve(old)
    assert update(status, new, old) == []
    assert new["status"]["conditions"] == []
    approved = approve(old)
    s.for_subresource("approval").prepare_for_update(approved, old)
    issued = copy.deepcopy(approved)
    issued["status"]["certificate"] = base64.b64encode(pem_certificate()).decode()
    issued["status"]["conditions"] = []  # the approval cannot be dropped here either
    assert update(status, issued, approved) == []
    assert [c["type"] for c in issued["status"]["conditions"]] == ["Approved"]
    again = copy.deepcopy(issued)
    again["status"]["certificate"] = base64.b64encode(pem_certificate()).decode()
    assert update(status, again, issued) == [
        ("status.certificate", "Forbidden: updates may not modify existing certificate content")]
    garbage = copy.deepcopy(approved)
    garbage["status"]["certificate"] = base64.b64encode(b"-----BEGIN X-----\nAA==\n-----END X-----\n").decode()
    assert update(status, garbage, approved) == [
        ("status.certificate", 'Invalid value: "<certificate data>": only CERTIFICATE PEM blocks are allowed, found '
                               '"X"')]


def test_main_resource_cannot_set_the_certificate():
    s = strategy_for(INFO)
    old = stored(s, csr())
    new = copy.deepcopy(old)
    new["status"] = {"certificate": base64.b64encode(pem_certificate()).decode()}
    # prepare_for_update restores the status; the validation alone refuses it
    assert fields(s.validate_update(new, old)) == [
        ("status.certificate", "Forbidden: updates may not set certificate content")]


def test_row():
    s = strategy_for(INFO)
    obj = stored(s, csr(expirationSeconds=3600))
    obj["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    assert CSR_TABLE.cells(obj)[2:] == [CLIENT, "alice", "60m", "Pending"]
    obj["status"] = {"conditions": [{"type": "Approved"}, {"type": "Failed"}], "certificate": "eA=="}
    assert CSR_TABLE.cells(obj)[-1] == "Approved,Failed,Issued"
    del obj["spec"]["expirationSeconds"]
    obj["status"] = {"conditions": [{"type": "Denied"}]}
    assert CSR_TABLE.cells(obj)[4:] == ["<none>", "Denied"]


async def test_create_through_the_handlers(status_api):
    code, body = await status_api("create", "certificatesigningrequests", body=csr("via-api", usages=[]),
                                  group="certificates.k8s.io", user=identity.user_pb("bob", ["devs"]))
    assert code == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith('CertificateSigningRequest.certificates.k8s.io "via-api" is invalid: ')
    assert body["details"]["causes"] == [{"reason": "FieldValueRequired", "message": "Required value",
                                          "field": "spec.usages"}]
    code, body = await status_api("create", "certificatesigningrequests", body=csr("via-api"),
                                  group="certificates.k8s.io", user=identity.user_pb("bob", ["devs"]))
    assert code == 201 and body["spec"]["username"] == "bob" and body["spec"]["groups"] == ["devs"]
    code, body = await status_api("update", "certificatesigningrequests", name="via-api", subresource="approval",
                                  body=approve(body), group="certificates.k8s.io")
    assert code == 200 and body["status"]["conditions"][0]["type"] == "Approved"
    code, _ = await status_api("update", "certificatesigningrequests", name="via-api", subresource="nope",
                               body=body, group="certificates.k8s.io")
    assert code == 404
