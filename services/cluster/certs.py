"""Certificates, tokens and kubeconfig for a local stack, generated on first run.

Layout under the state directory (default .apiary/):
  pki/ca.{crt,key}                 cluster CA: serving cert, client certs (--client-ca-file)
  pki/apiserver.{crt,key}          the proxy's serving certificate (localhost, 127.0.0.1)
  pki/admin.{crt,key}              kubernetes-admin, O=system:masters (the admin kubeconfig)
  pki/internal-ca.{crt,key}        CA of the services' mutual TLS
  pki/<service>.{crt,key}          CN=apiary-<service>, server and client auth
  pki/front-proxy-ca.{crt,key}, pki/front-proxy-client.{crt,key}   for aggregated servers
  pki/sa.{key,pub}                 RSA key pair that signs and verifies ServiceAccount tokens
  tokens.csv                       static tokens: an admin token and a non-admin user
  kubeconfig                       admin kubeconfig (client certificate)
"""
from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

if TYPE_CHECKING:
    import argparse

    import httpx

SERVICES = ("proxy", "auth", "apf", "admission", "registry", "storage", "controllermanager")
VALIDITY = dt.timedelta(days=3650)


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _write(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
    key_path = path.with_suffix(".key")
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    os.chmod(key_path, 0o600)
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _load(path: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = serialization.load_pem_private_key(path.with_suffix(".key").read_bytes(), None)
    cert = x509.load_pem_x509_certificate(path.with_suffix(".crt").read_bytes())
    return key, cert  # type: ignore[return-value]


def make_ca(path: Path, cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    if path.with_suffix(".crt").exists():
        return _load(path)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn)).issuer_name(_name(cn))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write(path, key, cert)
    return key, cert


def make_cert(path: Path, ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate], cn: str,
              orgs: tuple[str, ...] = (), server: bool = False, client: bool = False,
              dns_names: tuple[str, ...] = ()) -> None:
    if path.with_suffix(".crt").exists():
        return
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, orgs)).issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False,
                                     crl_sign=False, content_commitment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.DNSName("apiary"), x509.DNSName(cn),
            x509.DNSName("kubernetes.default.svc"), *(x509.DNSName(n) for n in dns_names),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.IPAddress(ipaddress.ip_address("::1")),
        ]), critical=False)
    _write(path, key, b.sign(ca_key, hashes.SHA256()))


def ensure_pki(state: Path, dns_names: tuple[str, ...] = ()) -> Path:
    """The cluster's certificates under state/pki (made once); dns_names go into every server
    certificate besides the loopback names (a cluster's Service names, for the k8s manifests)."""
    pki = state / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    ca = make_ca(pki / "ca", "apiary-ca")
    make_cert(pki / "apiserver", ca, "kube-apiserver", server=True, dns_names=dns_names)
    make_cert(pki / "admin", ca, "kubernetes-admin", ("system:masters",), client=True)
    # the controller-manager's identity, as kube's (a client of the API like any other)
    make_cert(pki / "controller-manager", ca, "system:kube-controller-manager", client=True)
    internal = make_ca(pki / "internal-ca", "apiary-internal-ca")
    for svc in SERVICES:
        make_cert(pki / svc, internal, f"apiary-{svc}", server=True, client=True, dns_names=dns_names)
    fp = make_ca(pki / "front-proxy-ca", "front-proxy-ca")
    make_cert(pki / "front-proxy-client", fp, "front-proxy-client", client=True)
    make_sa_keys(pki)
    return pki


def make_sa_keys(pki: Path) -> None:
    """The ServiceAccount token key pair (kube's sa.key / sa.pub): RSA 2048, generated once."""
    key_path, pub_path = pki / "sa.key", pki / "sa.pub"
    if key_path.exists() and pub_path.exists():
        return
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    os.chmod(key_path, 0o600)
    pub_path.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo))


def ensure_tokens(state: Path) -> Path:
    """kube's static token CSV: token,user,uid,"groups"."""
    path = state / "tokens.csv"
    if not path.exists():
        path.write_text(
            f'{secrets.token_hex(16)},admin,admin-uid,"system:masters"\n'
            f"{secrets.token_hex(16)},alice,alice-uid\n"
        )
        os.chmod(path, 0o600)
    return path


def ensure_encryption_config(state: Path) -> Path:
    """Secure by default: secrets encrypted at rest with aescbc (a generated 32-byte key), identity
    second so values written before encryption was on still read."""
    path = state / "encryption-config.yaml"
    if not path.exists():
        key = base64.b64encode(secrets.token_bytes(32)).decode()
        path.write_text(
            "apiVersion: apiserver.config.k8s.io/v1\n"
            "kind: EncryptionConfiguration\n"
            "resources:\n"
            "- resources: [secrets]\n"
            "  providers:\n"
            "  - aescbc:\n"
            "      keys:\n"
            f"      - name: key1\n        secret: {key}\n"
            "  - identity: {}\n"
        )
        os.chmod(path, 0o600)
    return path


def read_tokens(state: Path) -> dict[str, str]:
    """user -> token, for tests and tools."""
    out = {}
    for line in (state / "tokens.csv").read_text().splitlines():
        parts = line.split(",")
        if len(parts) >= 2:
            out[parts[1]] = parts[0]
    return out


def write_kubeconfig(state: Path, server: str, embed: bool = False) -> Path:
    """The admin kubeconfig; embed puts the certificates in it (a kubeconfig that works anywhere,
    as the compose init service writes it) instead of naming their files."""
    pki = state / "pki"
    path = state / "kubeconfig"

    def ref(key: str, name: str) -> str:
        if embed:
            return f"{key}-data: {base64.b64encode((pki / name).read_bytes()).decode()}"
        return f"{key}: {pki / name}"

    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: apiary
  cluster:
    server: {server}
    {ref('certificate-authority', 'ca.crt')}
users:
- name: kubernetes-admin
  user:
    {ref('client-certificate', 'admin.crt')}
    {ref('client-key', 'admin.key')}
contexts:
- name: apiary
  context:
    cluster: apiary
    user: kubernetes-admin
current-context: apiary
"""
    )
    os.chmod(path, 0o600)
    return path


# --- the certificate Job of the k8s manifests ---------------------------------------------------

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """The names one Service is reached by inside a cluster."""
    return (service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local")


def service_dns_names(namespace: str) -> tuple[str, ...]:
    """Every name a Service of the manifests is reached by inside a cluster."""
    return tuple(name for svc in (*SERVICES, "etcd") for name in dns_names(svc, namespace))


def in_cluster_arguments(p: argparse.ArgumentParser, namespace: str) -> None:
    """The flags of a Job that talks to the API server with its ServiceAccount (--server defaults to in-cluster)."""
    p.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", namespace))
    p.add_argument("--server", default="", help="API server URL (default: in-cluster)")
    p.add_argument("--token-file", default=str(SA_DIR / "token"))
    p.add_argument("--certificate-authority", default=str(SA_DIR / "ca.crt"))


def in_cluster_client(args: argparse.Namespace) -> httpx.Client:
    """An httpx client for the API server named by in_cluster_arguments' flags, with the ServiceAccount's token."""
    import ssl

    import httpx

    server = args.server or (f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:"
                             f"{os.environ.get('KUBERNETES_SERVICE_PORT', '443')}")
    token = Path(args.token_file).read_text().strip()
    return httpx.Client(base_url=server, verify=ssl.create_default_context(cafile=args.certificate_authority),
                        headers={"Authorization": f"Bearer {token}"}, timeout=30)


def k8s_secrets(state: Path, namespace: str) -> dict[str, dict[str, str]]:
    """The Secrets the manifests mount: apiary-pki (certificates and keys) and apiary-config (the
    static tokens and the encryption configuration), as name -> {file: base64 content}."""
    pki = ensure_pki(state, service_dns_names(namespace))
    ensure_tokens(state)
    ensure_encryption_config(state)
    b64 = lambda p: base64.b64encode(p.read_bytes()).decode()  # noqa: E731
    return {
        "apiary-pki": {p.name: b64(p) for p in sorted(pki.iterdir()) if p.is_file()},
        "apiary-config": {n: b64(state / n) for n in ("tokens.csv", "encryption-config.yaml")},
    }


def create_secrets(secrets_: dict[str, dict[str, str]], namespace: str, c: httpx.Client) -> list[str]:
    """POST each Secret; one that exists is left as it is (the Job may run again without rotating
    anything). Returns what was created."""
    created = []
    for name, data in secrets_.items():
        r = c.post(f"/api/v1/namespaces/{namespace}/secrets", json={
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "apiary"}}, "data": data})
        if r.status_code == 409:
            continue
        r.raise_for_status()
        created.append(name)
    return created


def main(argv: list[str] | None = None) -> None:
    import argparse
    import tempfile

    p = argparse.ArgumentParser(prog="python -m services.cluster.certs",
                                description="apiary's certificates and secrets")
    sub = p.add_subparsers(dest="command", required=True)
    k = sub.add_parser("k8s-secrets", help="make the PKI and create the manifests' Secrets (the certificate Job)")
    in_cluster_arguments(k, "apiary")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        with in_cluster_client(args) as client:
            made = create_secrets(k8s_secrets(Path(tmp), args.namespace), args.namespace, client)
    print(f"created: {', '.join(made) or 'nothing (the secrets exist)'}")


if __name__ == "__main__":
    main()
