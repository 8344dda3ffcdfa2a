"""kube's csrapproving controller (pkg/controller/certificates/approver): a kubelet's client certificate request
is approved when its requester may create certificatesigningrequests/selfnodeclient (the node renewing its own
certificate: the requester is the subject's CN) or certificatesigningrequests/nodeclient (a bootstrap
credential asking for a node), as a SubjectAccessReview of the requester answers. Other requests are left to
people and other approvers."""
from __future__ import annotations

import logging
from typing import Any

from services.common.errors import NotFound

from .certificates import (
    CSRS,
    KUBE_APISERVER_CLIENT_KUBELET,
    CSRController,
    Obj,
    common_name,
    condition_types,
    kubelet_client_error,
    request_of,
)
from .client import Client

log = logging.getLogger(__name__)

SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
# (subresource the requester must be allowed to create, whether the requester must be the node itself, message)
RECOGNIZERS = (
    ("selfnodeclient", True, "Auto approving self kubelet client certificate after SubjectAccessReview."),
    ("nodeclient", False, "Auto approving kubelet client certificate after SubjectAccessReview."),
)


class CSRApprovingController(CSRController):
    def __init__(self, client: Client) -> None:
        super().__init__(client, "csrapproving", self.handle)

    async def handle(self, csr: Obj) -> None:
        status = csr.get("status") or {}
        if status.get("certificate") or condition_types(csr) & {"Approved", "Denied"}:
            return
        spec = csr.get("spec") or {}
        if spec.get("signerName") != KUBE_APISERVER_CLIENT_KUBELET:
            return
        try:
            req = request_of(csr)
        except ValueError as e:
            raise ValueError(f"unable to parse csr {csr['metadata']['name']!r}: {e}") from None
        if kubelet_client_error(req, set(spec.get("usages") or [])) is not None:
            return
        tried = []
        for subresource, self_only, message in RECOGNIZERS:
            if self_only and spec.get("username") != common_name(req):
                continue
            tried.append(subresource)
            if await self.allowed(spec, subresource):
                csr = {**csr, "status": {**status, "conditions": [*(status.get("conditions") or []), {
                    "type": "Approved", "status": "True", "reason": "AutoApproved", "message": message}]}}
                try:
                    await self.client.update(CSRS, csr, "approval")
                except NotFound:
                    return
                log.info("csrapproving: approved %s", csr["metadata"]["name"])
                return
        log.info("csrapproving: recognized csr %s as %s but subject access review was not approved",
                 csr["metadata"]["name"], tried)

    async def allowed(self, spec: Obj, subresource: str) -> bool:
        """A SubjectAccessReview of the requester: create certificatesigningrequests/<subresource>."""
        review: dict[str, Any] = {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": spec.get("username") or "", "uid": spec.get("uid") or "",
                     "groups": spec.get("groups") or [], "extra": spec.get("extra") or {},
                     "resourceAttributes": {"group": "certificates.k8s.io", "version": "*",
                                            "resource": "certificatesigningrequests",
                                            "subresource": subresource, "verb": "create"}}}
        answer = await self.client.request("POST", SUBJECT_ACCESS_REVIEWS, review)
        return bool((answer.get("status") or {}).get("allowed"))
