"""The CertificateSigningRequest plug-ins (kube's plugin/pkg/admission/certificates): who may approve, who may
sign, and what the kube-apiserver-client signer refuses to be asked.

- CertificateApproval (UPDATE of certificatesigningrequests/approval): the user needs the `approve` verb on the
  `signers` resource of certificates.k8s.io named after the request's signerName, or after its domain with a
  wildcard path ("kubernetes.io/*"); else 403 "user not permitted to approve requests with signerName ...".
- CertificateSigning (UPDATE of certificatesigningrequests/status changing the certificate or the conditions): the
  `sign` verb on the stored request's signer, asked the same way.
- CertificateSubjectRestriction (CREATE of certificatesigningrequests): a request for the
  kubernetes.io/kube-apiserver-client signer may not name the system:masters group (the subject's Organization).

The checks are SubjectAccessReviews of the request's user, asked of the auth service (authz.authorize).
ClusterTrustBundleAttest concerns ClusterTrustBundles, a kind apiary does not serve.
"""
from __future__ import annotations

import base64
from typing import Any

from cryptography.x509.oid import NameOID

from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apis.strategies.certificates import parse_csr
from services.common.errors import forbidden

from .. import authz
from ..attributes import CREATE, UPDATE, Attributes
from ..plugin import Plugin, PluginConfig

GROUP = "certificates.k8s.io"
CSRS = (GROUP, "certificatesigningrequests")
KUBE_APISERVER_CLIENT = "kubernetes.io/kube-apiserver-client"
SYSTEM_MASTERS = "system:masters"


async def authorized_for_signer(user: pb.UserInfo, verb: str, signer_name: str) -> bool:
    """IsAuthorizedForSignerName: `verb` on signers/<signerName>, else on signers/<domain>/*."""
    for name in (signer_name, signer_name.split("/", 1)[0] + "/*"):
        decision = await authz.authorize(pb.RequestAttributes(
            user=user, verb=verb, resource_request=True, api_group=GROUP, api_version="*", resource="signers",
            name=name))
        if decision["allowed"]:
            return True
    return False


def _signer(obj: dict[str, Any] | None) -> str:
    return ((obj or {}).get("spec") or {}).get("signerName") or ""


class CertificateApproval(Plugin):
    name = "CertificateApproval"
    operations = frozenset({UPDATE})
    resources = frozenset({CSRS})

    async def validate(self, a: Attributes) -> None:
        if a.subresource != "approval" or a.object is None:
            return
        # the new object's signer: the name cannot change, and an attempt is refused by validation
        signer = _signer(a.object)
        if not await authorized_for_signer(a.user, "approve", signer):
            raise forbidden(a.resource, a.group, a.name_for_errors(),
                            f'user not permitted to approve requests with signerName "{signer}"')


class CertificateSigning(Plugin):
    name = "CertificateSigning"
    operations = frozenset({UPDATE})
    resources = frozenset({CSRS})

    async def validate(self, a: Attributes) -> None:
        if a.subresource != "status" or a.object is None or a.old_object is None:
            return
        new, old = a.object.get("status") or {}, a.old_object.get("status") or {}
        if new.get("certificate") == old.get("certificate") and new.get("conditions") == old.get("conditions"):
            return
        # the stored object's signer, in case the update tries to change it
        signer = _signer(a.old_object)
        if not await authorized_for_signer(a.user, "sign", signer):
            raise forbidden(a.resource, a.group, a.name_for_errors(),
                            f'user not permitted to sign requests with signerName "{signer}"')


class CertificateSubjectRestriction(Plugin):
    name = "CertificateSubjectRestriction"
    operations = frozenset({CREATE})
    resources = frozenset({CSRS})
    subresources = False

    async def validate(self, a: Attributes) -> None:
        if a.subresource or a.object is None or _signer(a.object) != KUBE_APISERVER_CLIENT:
            return
        request = (a.object.get("spec") or {}).get("request") or ""
        try:
            csr = parse_csr(base64.b64decode(request))
        except ValueError as e:
            raise forbidden(a.resource, a.group, a.name_for_errors(), f"failed to parse CSR: {e}") from None
        orgs = [attr.value for attr in csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
        if SYSTEM_MASTERS in orgs:
            raise forbidden(a.resource, a.group, a.name_for_errors(),
                            f"use of {KUBE_APISERVER_CLIENT} signer with {SYSTEM_MASTERS} group is not allowed")


def approval_factory(config: PluginConfig, registry: rgrpc.RegistryStub | None) -> CertificateApproval:
    return CertificateApproval()


def signing_factory(config: PluginConfig, registry: rgrpc.RegistryStub | None) -> CertificateSigning:
    return CertificateSigning()


def subject_restriction_factory(config: PluginConfig,
                                registry: rgrpc.RegistryStub | None) -> CertificateSubjectRestriction:
    return CertificateSubjectRestriction()
