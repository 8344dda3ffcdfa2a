"""CertificateSigningRequests through kubectl: a new user's key and request, `kubectl certificate approve`, the
controller-manager's signature, and the signed certificate authenticating that user; kube's columns, 422s with
field paths, who may approve, and the kubelet client requests the csrapproving controller approves itself."""
from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from services.cluster.certs import read_tokens

pytestmark = pytest.mark.stack

CLIENT = "kubernetes.io/kube-apiserver-client"
KUBELET_CLIENT = "kubernetes.io/kube-apiserver-client-kubelet"


def key_and_request(cn: str, orgs: tuple[str, ...] = ()) -> tuple[bytes, bytes]:
    """A fresh key and a CSR for CN=cn, O=orgs, both PEM (what `openssl req -new` makes)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    csr = x509.CertificateSigningRequestBuilder().subject_name(name).sign(key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, csr.public_bytes(serialization.Encoding.PEM)


def csr_manifest(name: str, request: bytes, signer: str = CLIENT, usages: tuple[str, ...] = ("client auth",),
                 expiration: int | None = 86400) -> str:
    spec: dict[str, object] = {"request": base64.b64encode(request).decode(), "signerName": signer,
                               "usages": list(usages)}
    if expiration is not None:
        spec["expirationSeconds"] = expiration
    return json.dumps({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                       "metadata": {"name": name}, "spec": spec})


def wait_for(check: Callable[[], object], what: str, timeout: float = 30.0) -> object:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.2)
    return value


def get_csr(kubectl, name: str) -> dict:
    return json.loads(kubectl.run("get", "csr", name, "-o", "json").stdout)


@pytest.fixture
def csr_names(kubectl) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for n in names:
        kubectl.run("delete", "csr", n, "--ignore-not-found", check=False)


def test_client_certificate_flow(kubectl, csr_names, tmp_path: Path):
    key_pem, request = key_and_request("dave", ("devs",))
    csr_names.append("dave")
    kubectl.run("create", "-f", "-", input=csr_manifest("dave", request))
    csr = get_csr(kubectl, "dave")
    # the requester is whoever created it, whatever the request said
    assert csr["spec"]["username"] == "kubernetes-admin"
    assert "system:masters" in csr["spec"]["groups"]
    table = kubectl.run("get", "csr", "dave").stdout.splitlines()
    assert table[0].split() == ["NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"]
    assert table[1].split()[2:] == [CLIENT, "kubernetes-admin", "24h", "Pending"]

    out = kubectl.run("certificate", "approve", "dave").stdout
    assert "approved" in out
    issued = wait_for(lambda: get_csr(kubectl, "dave")["status"].get("certificate"), "the signature")
    row = kubectl.run("get", "csr", "dave", "--no-headers").stdout.split()
    assert row[-1] == "Approved,Issued"
    approved = get_csr(kubectl, "dave")["status"]["conditions"][0]
    assert approved["type"] == "Approved" and approved["status"] == "True"
    assert approved["lastUpdateTime"] and approved["lastTransitionTime"]

    described = kubectl.run("describe", "csr", "dave").stdout
    for line in ("Requesting User:     kubernetes-admin", "Signer:              " + CLIENT,
                 "Requested Duration:  24h", "Status:              Approved,Issued", "Common Name:    dave",
                 "Organization:   devs"):
        assert line in described, described

    cert = x509.load_pem_x509_certificate(base64.b64decode(issued))
    assert cert.subject.rfc4514_string() == "CN=dave,O=devs"
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert lifetime.total_seconds() == 86400
    ca = x509.load_pem_x509_certificate((kubectl.stack.state / "pki" / "ca.crt").read_bytes())
    assert cert.issuer == ca.subject

    # the certificate authenticates dave: a kubeconfig with it, as a user would write one
    (tmp_path / "dave.crt").write_bytes(base64.b64decode(issued))
    (tmp_path / "dave.key").write_bytes(key_pem)
    config = json.loads(kubectl.run("config", "view", "--raw", "-o", "json").stdout)
    config["users"] = [{"name": "dave", "user": {"client-certificate": str(tmp_path / "dave.crt"),
                                                 "client-key": str(tmp_path / "dave.key")}}]
    config["contexts"][0]["context"]["user"] = "dave"
    (tmp_path / "dave.kubeconfig").write_text(json.dumps(config))
    dave = type(kubectl)(kubectl.stack, kubectl.cache, kubectl.binary, tmp_path / "dave.kubeconfig")
    whoami = json.loads(dave.run("auth", "whoami", "-o", "json").stdout)
    assert whoami["status"]["userInfo"]["username"] == "dave"
    assert whoami["status"]["userInfo"]["groups"] == ["devs", "system:authenticated"]
    # authenticated, not authorized: dave holds no role
    denied = dave.run("get", "configmaps", check=False)
    assert denied.returncode != 0 and 'User "dave" cannot list resource "configmaps"' in denied.stderr


def test_deny(kubectl, csr_names):
    _, request = key_and_request("erin")
    csr_names.append("erin")
    kubectl.run("create", "-f", "-", input=csr_manifest("erin", request, expiration=None))
    assert kubectl.run("get", "csr", "erin", "--no-headers").stdout.split()[4] == "<none>"
    kubectl.run("certificate", "deny", "erin")
    row = kubectl.run("get", "csr", "erin", "--no-headers").stdout.split()
    assert row[-1] == "Denied"
    time.sleep(1)  # had it been approved, the signer would have issued by now
    assert not get_csr(kubectl, "erin")["status"].get("certificate")
    # Approved and Denied are exclusive, and a condition is never removed
    patch = json.dumps({"status": {"conditions": [{"type": "Approved", "status": "True"}]}})
    r = kubectl.run("patch", "csr", "erin", "--subresource=approval", "--type=merge", "-p", patch, check=False)
    assert r.returncode != 0
    assert 'status.conditions: Forbidden: updates may not remove a condition of type "Denied"' in r.stderr


def test_create_refuses_bad_requests(kubectl):
    _, request = key_and_request("frank")
    bad = json.loads(csr_manifest("bad", b"not a certificate request", signer="example", usages=()))
    bad["spec"]["expirationSeconds"] = 60
    r = kubectl.run("create", "-f", "-", input=json.dumps(bad), check=False)
    assert r.returncode != 0
    for text in ("spec.request: Invalid value: []byte{0x6e, 0x6f, 0x74", "PEM block type must be CERTIFICATE REQUEST",
                 "spec.usages: Required value",
                 "spec.signerName: Invalid value: \"example\": must be a fully qualified domain and path of the form "
                 "'example.com/signer-name'",
                 "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 600 seconds "
                 "(10 minutes)"):
        assert text in r.stderr, r.stderr
    r = kubectl.run("create", "-f", "-", input=csr_manifest("bad", request, usages=("client auth", "bogus")),
                    check=False)
    assert 'spec.usages[1]: Unsupported value: "bogus"' in r.stderr
    no_signer = json.loads(csr_manifest("bad", request))
    del no_signer["spec"]["signerName"]
    r = kubectl.run("create", "-f", "-", input=json.dumps(no_signer), check=False)
    assert "spec.signerName: Required value" in r.stderr
    # kube's CertificateSubjectRestriction: no system:masters certificates from this signer
    _, masters = key_and_request("mallory", ("system:masters",))
    r = kubectl.run("create", "-f", "-", input=csr_manifest("mallory", masters), check=False)
    assert r.returncode != 0
    assert "use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed" in r.stderr


def test_approval_needs_the_approve_verb_on_the_signer(kubectl, csr_names):
    _, request = key_and_request("gina")
    csr_names.append("gina")
    kubectl.run("create", "-f", "-", input=csr_manifest("gina", request))
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "csr-approver"},
            "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
                       "verbs": ["get", "list"]},
                      {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval"],
                       "verbs": ["update"]}]}
    kubectl.run("apply", "-f", "-", input=json.dumps(role))
    kubectl.run("create", "clusterrolebinding", "csr-approver-alice", "--clusterrole=csr-approver", "--user=alice",
                check=False)
    alice = kubectl.with_token(read_tokens(kubectl.stack.state)["alice"], "alice")
    try:
        r = wait_for(lambda: (r := alice.run("certificate", "approve", "gina", check=False)).stderr and r,
                     "a refusal")
        assert 'user not permitted to approve requests with signerName "kubernetes.io/kube-apiserver-client"' \
            in r.stderr, r.stderr
        # the approver ClusterRole kube ships for this signer grants it
        kubectl.run("create", "clusterrolebinding", "csr-signer-alice",
                    "--clusterrole=system:certificates.k8s.io:kube-apiserver-client-approver", "--user=alice")
        wait_for(lambda: alice.run("certificate", "approve", "gina", check=False).returncode == 0, "the approval")
        wait_for(lambda: get_csr(kubectl, "gina")["status"].get("certificate"), "the signature")
    finally:
        kubectl.run("delete", "clusterrolebinding", "csr-approver-alice", "csr-signer-alice", "--ignore-not-found")
        kubectl.run("delete", "clusterrole", "csr-approver", "--ignore-not-found")


def test_kubelet_client_request_is_auto_approved(kubectl, csr_names):
    """The csrapproving controller approves a node client request whose requester may create
    certificatesigningrequests/nodeclient (the admin may), and csrsigning signs it."""
    _, request = key_and_request("system:node:worker-1", ("system:nodes",))
    csr_names.append("node-worker-1")
    kubectl.run("create", "-f", "-", input=csr_manifest("node-worker-1", request, signer=KUBELET_CLIENT,
                                                        usages=("digital signature", "client auth"), expiration=None))
    wait_for(lambda: get_csr(kubectl, "node-worker-1")["status"].get("certificate"), "the approval and signature")
    approved = get_csr(kubectl, "node-worker-1")["status"]["conditions"][0]
    assert approved["reason"] == "AutoApproved"
    assert approved["message"] == "Auto approving kubelet client certificate after SubjectAccessReview."
    # a kubelet request the signer refuses: approved by hand, then Failed
    _, bad = key_and_request("not-a-node", ("system:nodes",))
    csr_names.append("not-a-node")
    kubectl.run("create", "-f", "-", input=csr_manifest("not-a-node", bad, signer=KUBELET_CLIENT,
                                                        usages=("digital signature", "client auth")))
    kubectl.run("certificate", "approve", "not-a-node")
    failed = wait_for(lambda: [c for c in get_csr(kubectl, "not-a-node")["status"].get("conditions", [])
                               if c["type"] == "Failed"], "the signer's refusal")
    assert failed[0]["reason"] == "SignerValidationFailure"
    assert failed[0]["message"] == "subject common name does not begin with system:node:"
    assert kubectl.run("get", "csr", "not-a-node", "--no-headers").stdout.split()[-1] == "Approved,Failed"


def test_explain_apply_and_delete(kubectl, csr_names):
    out = kubectl.run("explain", "csr.spec.signerName").stdout
    assert "CertificateSigningRequest" in out and "signerName" in out
    assert "csr" in kubectl.run("api-resources", "--api-group=certificates.k8s.io").stdout.split()
    _, request = key_and_request("hank")
    csr_names.append("hank")
    kubectl.run("apply", "--server-side", "-f", "-", input=csr_manifest("hank", request))
    csr = json.loads(kubectl.run("get", "csr", "hank", "-o", "json", "--show-managed-fields").stdout)
    assert csr["spec"]["signerName"] == CLIENT
    assert [m["manager"] for m in csr["metadata"]["managedFields"]] == ["kubectl"]
    # the spec is immutable: an update keeps the stored one
    kubectl.run("label", "csr", "hank", "team=a")
    changed = json.loads(csr_manifest("hank", request, expiration=7200))
    r = kubectl.run("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(changed))
    assert r.returncode == 0
    assert get_csr(kubectl, "hank")["spec"]["expirationSeconds"] == 86400
    names = kubectl.run("get", "csr", "--field-selector", f"spec.signerName={CLIENT}", "-o", "name").stdout
    assert "certificatesigningrequest.certificates.k8s.io/hank" in names.split()
    kubectl.run("delete", "csr", "hank")
    assert kubectl.run("get", "csr", "hank", check=False).returncode != 0


def test_python_client_approval(kubectl, csr_names):
    """The official Python client: create, approve through replace_certificate_signing_request_approval, read the
    certificate the signer wrote."""
    from kubernetes import client, config

    _, request = key_and_request("ivy")
    csr_names.append("ivy")
    api_client = config.new_client_from_config(config_file=str(kubectl.stack.kubeconfig))
    try:
        api = client.CertificatesV1Api(api_client)
        created = api.create_certificate_signing_request(client.V1CertificateSigningRequest(
            metadata=client.V1ObjectMeta(name="ivy"),
            spec=client.V1CertificateSigningRequestSpec(request=base64.b64encode(request).decode(),
                                                        signer_name=CLIENT, usages=["client auth"],
                                                        expiration_seconds=3600)))
        assert created.spec.username == "kubernetes-admin" and created.status.conditions is None
        created.status = client.V1CertificateSigningRequestStatus(conditions=[
            client.V1CertificateSigningRequestCondition(type="Approved", status="True", reason="ByPython",
                                                        message="approved from Python")])
        approved = api.replace_certificate_signing_request_approval("ivy", created)
        assert approved.status.conditions[0].reason == "ByPython"
        pem = wait_for(lambda: api.read_certificate_signing_request("ivy").status.certificate, "the signature")
        cert = x509.load_pem_x509_certificate(base64.b64decode(pem))
        assert cert.subject.rfc4514_string() == "CN=ivy"
        assert (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds() == 3600 + 300
    finally:
        api_client.close()
