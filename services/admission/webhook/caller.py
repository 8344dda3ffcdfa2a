"""Calling an admission webhook: the AdmissionReview sent (admission.k8s.io/v1, or v1beta1 when that is the only
version the webhook names) through the library's webhook client (services/apiserver/webhook/client.py) and its
answer read with kube's checks. Failures to call are CallError (failurePolicy decides); rejections are the
webhook's Status.
"""
from __future__ import annotations

from typing import Any

import orjson

from services.apiserver.webhook.client import Clients, WebhookClient, WebhookError
from services.common.serviceresolver import ServiceResolver

Obj = dict[str, Any]
REVIEW_VERSIONS = ("v1", "v1beta1")


class CallError(Exception):
    """kube's ErrCallingWebhook: the webhook could not be called or answered garbage."""

    def __init__(self, webhook: str, reason: str, code: int = 0) -> None:
        super().__init__(f'failed calling webhook "{webhook}": {reason}')
        self.webhook = webhook
        self.reason = reason
        self.code = code


def review_version(hook: Obj) -> str | None:
    """The first of the webhook's admissionReviewVersions that apiary speaks."""
    return next((v for v in hook.get("admissionReviewVersions") or [] if v in REVIEW_VERSIONS), None)


class WebhookCaller:
    def __init__(self, resolver: ServiceResolver | None, clients: Clients | None = None) -> None:
        self.client = WebhookClient(resolver, clients)

    @property
    def clients(self) -> Clients:
        return self.client.clients

    async def call(self, hook: Obj, request: Obj) -> Obj:
        """POST the AdmissionReview with `request`; the review's response, checked. Raises CallError."""
        name = hook.get("name") or ""
        version = review_version(hook)
        if version is None:
            raise CallError(name, "webhook does not accept v1 or v1beta1 AdmissionReview")
        api_version = f"admission.k8s.io/{version}"
        body = orjson.dumps({"kind": "AdmissionReview", "apiVersion": api_version, "request": request})
        timeout = float(hook.get("timeoutSeconds") or 10)
        try:
            resp = await self.client.post(hook.get("clientConfig") or {}, body, timeout, "admission webhook",
                                          {"webhook": name})
        except WebhookError as e:
            raise CallError(name, f"failed to call webhook: {e.reason}" if e.sent else e.reason) from None
        status, content = resp.status, resp.content
        if status < 200 or status >= 300:
            text = content.decode("utf-8", "replace").strip()
            raise CallError(name, f"failed to call webhook: the server responded with the status code "
                                  f"{status} but did not return more information"
                                  + (f" ({text[:200]})" if text else ""), status)
        try:
            review = orjson.loads(content)
        except orjson.JSONDecodeError as e:
            raise CallError(name, f"received invalid webhook response: {e}") from None
        if not isinstance(review, dict) or review.get("kind") != "AdmissionReview" \
                or review.get("apiVersion") != api_version:
            got = review.get("apiVersion") if isinstance(review, dict) else None
            kind = review.get("kind") if isinstance(review, dict) else None
            raise CallError(name, f"received invalid webhook response: expected webhook response of "
                                  f"{api_version}, Kind=AdmissionReview, got {got}, Kind={kind}")
        response = review.get("response")
        if not isinstance(response, dict):
            raise CallError(name, "received invalid webhook response: webhook response was absent")
        if version == "v1" and response.get("uid") != request["uid"]:
            raise CallError(name, f"received invalid webhook response: expected response.uid="
                                  f"\"{request['uid']}\", got \"{response.get('uid', '')}\"")
        return response
