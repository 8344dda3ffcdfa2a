"""CRD conversion webhooks (apiextensions-apiserver's webhookConverter): objects sent in one ConversionReview
(apiextensions.k8s.io/v1, or v1beta1 when that is the first the CRD names) and the answer checked as kube checks it
— the uid, result.status Success, as many objects as were sent, each in the desired apiVersion and of the same
kind, with the same name, namespace and uid — before the converted bodies are taken. Metadata stays the
original's but for labels and annotations, which the webhook may change (validated as kube validates them).

Any failure is kube's: a Status with code 500 and no reason, "conversion webhook for <group>/<version>,
Kind=<kind> failed: ..." (the version the objects were converted from).

WebhookConversion is the Conversion (services/apiserver/conversion.py) of every served version of such a CRD:
it only converts asynchronously, so the registry converts through it wherever a stored object meets a request
(reads, writes, watches, dry-run).
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson
from prometheus_client import Counter, Histogram

from apiary_pb import envelope_pb2 as pb
from services.apiserver import validation as v
from services.apiserver.conversion import Conversion
from services.apiserver.fielderrors import error_text
from services.common import envelope, errors

from .client import WebhookClient, WebhookError

Obj = dict[str, Any]
REVIEW_VERSIONS = ("v1", "v1beta1")
GROUP = "apiextensions.k8s.io"
# what kube's conversion webhook client waits for (its ?timeout=30s)
TIMEOUT = 30.0


# kube's conversion webhook metrics (apiextensions-apiserver/pkg/apiserver/conversion/metrics.go)
DURATION = Histogram("apiserver_crd_conversion_webhook_duration_seconds", "CRD webhook conversion duration in seconds",
                     ["crd_name", "from_version", "to_version", "succeeded"],
                     buckets=tuple(0.001 * 2 ** i for i in range(15)))
REQUESTS = Counter("apiserver_conversion_webhook_request_total",
                   "Counter for conversion webhook requests with success/failure and failure error type",
                   ["result", "failure_type"])
LATENCY = Histogram("apiserver_conversion_webhook_duration_seconds", "Conversion webhook request latency",
                    ["result", "failure_type"],
                    buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 45, 60))
CALL_FAILURE = "conversion_webhook_call_failure"
MALFORMED_RESPONSE = "conversion_webhook_malformed_response_failure"
PARTIAL_RESPONSE = "conversion_webhook_partial_response_failure"
INVALID_OBJECT = "conversion_webhook_invalid_converted_object_failure"


class ConversionFailed(errors.APIError):
    """kube returns a plain error here: a 500 without a reason. failure_type: the metrics' label."""

    def __init__(self, message: str, failure_type: str) -> None:
        super().__init__(message, code=500, reason="")
        self.failure_type = failure_type


def conversion_failed(message: str, failure_type: str = INVALID_OBJECT) -> ConversionFailed:
    return ConversionFailed(message, failure_type)


class ReviewError(Exception):
    """The webhook's answer is not one kube takes (the message says why, in kube's words)."""


class MetadataError(ReviewError):
    """A converted object's labels or annotations are not ones kube takes."""


def _gvk(api_version: str, kind: str) -> str:
    """Go's schema.GroupVersionKind.String()."""
    group, _, version = api_version.rpartition("/")
    return f"{group}/{version}, Kind={kind}"


def converted_objects(review: Any, version: str, uid: str) -> list[Any]:
    """getConvertedObjectsFromResponse: the review checked, its convertedObjects."""
    api_version = f"{GROUP}/{version}"
    if version == "v1":
        got = review if isinstance(review, dict) else {}
        if got.get("apiVersion") != api_version or got.get("kind") != "ConversionReview":
            raise ReviewError(f"expected webhook response of {_gvk(api_version, 'ConversionReview')}, got "
                              f"{_gvk(str(got.get('apiVersion') or ''), str(got.get('kind') or ''))}")
    response = review.get("response") if isinstance(review, dict) else None
    if not isinstance(response, dict):
        raise ReviewError("no response provided")
    if version == "v1" and response.get("uid") != uid:
        raise ReviewError(f'expected response.uid="{uid}", got "{response.get("uid") or ""}"')
    result = response.get("result") if isinstance(response.get("result"), dict) else {}
    if result.get("status") != "Success":
        if result.get("message"):
            raise ReviewError(str(result["message"]))
        raise ReviewError(f"response.result.status was '{result.get('status') or ''}', not 'Success'")
    objects = response.get("convertedObjects")
    return objects if isinstance(objects, list) else []


def validate_converted(original: Obj, converted: Obj) -> None:
    """validateConvertedObject: the kind, name, namespace and uid are the original's."""
    om, cm = original.get("metadata") or {}, converted.get("metadata") if isinstance(converted.get("metadata"),
                                                                                     dict) else {}
    for what, a, b in (("kind", original.get("kind"), converted.get("kind")),
                       ("name", om.get("name"), cm.get("name")),
                       ("namespace", om.get("namespace"), cm.get("namespace")),
                       ("UID", om.get("uid"), cm.get("uid"))):
        if (a or "") != (b or ""):
            raise ReviewError(f"must have the same {what}: {a or ''} != {b or ''}")


def restored_labels(original: Obj, converted: Obj) -> dict[str, dict[str, str] | None]:
    """restoreObjectMeta: the labels and annotations the converted object keeps (None: none), checked."""
    meta = converted.get("metadata")
    if meta is None:
        raise MetadataError("missing metadata in converted object")
    if not isinstance(meta, dict):
        raise MetadataError(f"invalid metadata of type {type(meta).__name__} in converted object")
    om = original.get("metadata") or {}
    out: dict[str, dict[str, str] | None] = {}
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is None:
            out[key] = None
            continue
        if not isinstance(value, dict):
            raise MetadataError(f"invalid metadata.{key} of type {type(value).__name__} in converted object")
        for k, x in value.items():
            if not isinstance(x, str):
                raise MetadataError(f"metadata.{key}[{k}] must be a string, but is {type(x).__name__} in "
                                  "converted object")
        if value != (om.get(key) or {}):
            causes = v.validate_labels(value, "metadata.labels") if key == "labels" else \
                v.validate_annotations(value, "metadata.annotation")
            if causes:
                text = [error_text(c) for c in causes]
                raise MetadataError(text[0] if len(text) == 1 else "[" + ", ".join(text) + "]")
        out[key] = value
    return out


class WebhookConverter:
    """One CRD's conversion webhook, prepared once per CRD (its clientConfig and review version)."""

    def __init__(self, client: WebhookClient, crd: Obj) -> None:
        webhook = ((crd.get("spec") or {}).get("conversion") or {}).get("webhook") or {}
        self.client = client
        self.name = (crd.get("metadata") or {}).get("name") or ""
        self.client_config: Obj = webhook.get("clientConfig") or {}
        self.review_version = next((x for x in webhook.get("conversionReviewVersions") or []
                                    if x in REVIEW_VERSIONS), None)

    async def convert(self, envs: list[pb.Object], api_version: str, batch: bool) -> list[pb.Object]:
        """envs in api_version: those in another sent in one ConversionReview (batch: a list's items, whose
        failures name the index as kube's list conversion does). Raises kube's 500 on any failure."""
        todo = [i for i, e in enumerate(envs) if e.api_version != api_version]
        if not todo:
            return envs
        first = envs[todo[0]]
        gvk = _gvk(first.api_version, first.kind)
        if self.review_version is None:
            raise conversion_failed("no supported conversion review versions")
        t0 = time.perf_counter()
        failure = ""
        try:
            return await self._convert(envs, todo, api_version, gvk, batch)
        except ConversionFailed as e:
            failure = e.failure_type
            raise
        finally:
            elapsed = time.perf_counter() - t0
            labels = ("failure", failure) if failure else ("success", "")
            REQUESTS.labels(*labels).inc()
            LATENCY.labels(*labels).observe(elapsed)
            DURATION.labels(self.name, first.api_version.rpartition("/")[2], api_version.rpartition("/")[2],
                            "false" if failure else "true").observe(elapsed)

    async def _convert(self, envs: list[pb.Object], todo: list[int], api_version: str, gvk: str,
                       batch: bool) -> list[pb.Object]:
        originals = [orjson.loads(envelope.to_json(envs[i])) for i in todo]
        uid = str(uuid.uuid4())
        review = {"apiVersion": f"{GROUP}/{self.review_version}", "kind": "ConversionReview",
                  "request": {"uid": uid, "desiredAPIVersion": api_version, "objects": originals}}
        try:
            answer = await self._post(orjson.dumps(review))
        except (WebhookError, ReviewError) as e:
            raise conversion_failed(f"conversion webhook for {gvk} failed: {e}", CALL_FAILURE) from None
        try:
            objects = converted_objects(answer, self.review_version or "", uid)
        except ReviewError as e:
            raise conversion_failed(f"conversion webhook for {gvk} failed: {e}", MALFORMED_RESPONSE) from None
        if len(objects) != len(todo):
            raise conversion_failed(f"conversion webhook for {gvk} returned {len(objects)} objects, expected "
                                    f"{len(todo)}", PARTIAL_RESPONSE)
        out = list(envs)
        for n, (i, original, converted) in enumerate(zip(todo, originals, objects)):
            out[i] = self._converted(envs[i], original, converted, api_version, gvk, n if batch else None)
        return out

    async def _post(self, body: bytes) -> Any:
        resp = await self.client.post(self.client_config, body, TIMEOUT, "conversion webhook",
                                      {"custom-resource-definition": self.name})
        if not resp.ok:
            try:
                status = resp.json()
            except ValueError:
                status = None
            if isinstance(status, dict) and status.get("kind") == "Status" and status.get("message"):
                raise ReviewError(str(status["message"]))
            raise ReviewError(f"the server responded with the status code {resp.status} but did not return more "
                              "information")
        if not resp.content:
            raise ReviewError(f"0-length response with status code: {resp.status} and content type: "
                              f"{resp.headers.get('Content-Type', '')}")
        try:
            return resp.json()
        except ValueError as e:
            raise ReviewError(str(e)) from None

    def _converted(self, env: pb.Object, original: Obj, converted: Any, api_version: str, gvk: str,
                   index: int | None) -> pb.Object:
        """One converted object checked and made an envelope with the original's metadata (the webhook's labels
        and annotations)."""
        where = f"conversion webhook for {gvk} returned"
        if not isinstance(converted, dict):
            at = f"invalid converted object at index {index}" if index is not None else "invalid object at index 0"
            raise conversion_failed(f"{where} {at}: json: cannot unmarshal {type(converted).__name__} into Go "
                                    "value of type map[string]interface {}")
        # kube counts a list's index before checking the object it took: its messages name the next one
        at = f"invalid converted object at index {index + 1}" if index is not None else "invalid object at index 0"
        got_version = str(converted.get("apiVersion") or "")
        if got_version != api_version:
            raise conversion_failed(f"{where} {at}: invalid groupVersion (expected {api_version}, received "
                                    f"{got_version})")
        if converted.get("kind") != original.get("kind"):
            raise conversion_failed(f"{where} {at}: invalid kind (expected {original.get('kind')}, received "
                                    f"{converted.get('kind') or ''})")
        try:
            validate_converted(original, converted)
            kept = restored_labels(original, converted)
        except MetadataError as e:
            at = f"invalid metadata in object at index {index + 1}" if index is not None else "invalid metadata"
            raise conversion_failed(f"{where} {at}: {e}") from None
        except ReviewError as e:
            raise conversion_failed(f"{where} {at if index is not None else 'invalid object'}: {e}") from None
        out = pb.Object()
        out.CopyFrom(env)
        out.api_version = api_version
        out.body = orjson.dumps({k: x for k, x in converted.items() if k not in ("apiVersion", "kind", "metadata")})
        for key, target in (("labels", out.metadata.labels), ("annotations", out.metadata.annotations)):
            target.clear()
            target.update(kept[key] or {})
        return out


@dataclass(frozen=True)
class WebhookConversion(Conversion):
    """A CRD version whose objects convert through the CRD's webhook: only asynchronously (the sync forms of
    Conversion refuse, so nothing converts such an object by mistake without the webhook)."""
    converter: WebhookConverter | None = field(default=None, repr=False, compare=False)
    remote: ClassVar[bool] = True

    def _webhook(self) -> WebhookConverter:
        if self.converter is None:
            raise errors.InternalError(f"{self.storage_kind}: no conversion webhook")
        return self.converter

    def can_read(self, api_version: str) -> bool:
        return True

    async def to_storage_envelopes(self, envs: list[pb.Object]) -> list[pb.Object]:
        return await self._webhook().convert(envs, self.storage_api_version, batch=False)

    async def from_storage_envelopes(self, envs: list[pb.Object], api_version: str, kind: str,
                                     batch: bool = False) -> list[pb.Object]:
        for e in envs:
            if not e.kind:
                e.kind = kind
        return await self._webhook().convert(envs, api_version, batch)

    def _sync(self, *_: Any) -> Any:
        raise errors.InternalError(f"{self.storage_kind} converts through its webhook, asynchronously only")

    storage_object = served_object = to_storage_envelope = from_storage_envelope = _sync
