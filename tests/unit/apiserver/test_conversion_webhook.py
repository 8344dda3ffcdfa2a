"""CRD conversion webhooks (services/apiserver/webhook/converter.py): what a ConversionReview carries and how the
webhook's answer is checked, with kube's messages. The HTTP call is answered in-process here (the review checks
are the subject); tests/e2e/test_crd_conversion_webhook.py calls a real HTTPS webhook."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from apiary_pb import envelope_pb2 as pb
from services.apiserver.httpclient import Response
from services.apiserver.webhook.client import WebhookError
from services.apiserver.webhook.converter import REQUESTS, WebhookConversion, WebhookConverter
from services.common import envelope, errors

Obj = dict[str, Any]
CRD = {"metadata": {"name": "crontabs.stable.example.com"},
       "spec": {"conversion": {"strategy": "Webhook", "webhook": {
           "clientConfig": {"url": "https://127.0.0.1:1/convert"}, "conversionReviewVersions": ["v9", "v1"]}}}}


class Answering:
    """A WebhookClient whose webhook is `answer(review) -> (status, body)`; the reviews sent are kept."""

    def __init__(self, answer: Callable[[Obj], Any]) -> None:
        self.answer = answer
        self.sent: list[Obj] = []

    async def post(self, cc: Obj, body: bytes, timeout: float, span: str = "webhook",
                   attributes: Any = None) -> Response:
        review = orjson.loads(body)
        self.sent.append(review)
        got = self.answer(review)
        if isinstance(got, Exception):
            raise got
        status, answer = got
        return Response(status, answer if isinstance(answer, bytes) else orjson.dumps(answer),
                        headers={"Content-Type": "application/json"})


def renaming(review: Obj, **change: Any) -> tuple[int, Obj]:
    """A correct webhook: spec.cronSpec (v1) <-> spec.schedule (v2), then `change` applied to every object."""
    req = review["request"]
    out = []
    for obj in req["objects"]:
        spec = dict(obj.get("spec") or {})
        if req["desiredAPIVersion"].endswith("/v2") and "cronSpec" in spec:
            spec["schedule"] = spec.pop("cronSpec")
        elif "schedule" in spec:
            spec["cronSpec"] = spec.pop("schedule")
        converted = {**obj, "apiVersion": req["desiredAPIVersion"], "spec": spec}
        for k, v in change.items():
            if k == "metadata":
                converted["metadata"] = {**obj["metadata"], **v}
            else:
                converted[k] = v
        out.append(converted)
    return 200, {"apiVersion": review["apiVersion"], "kind": "ConversionReview",
                 "response": {"uid": req["uid"], "result": {"status": "Success"}, "convertedObjects": out}}


def crontab(name: str, version: str = "v1", **meta: Any) -> pb.Object:
    return envelope.to_envelope({
        "apiVersion": f"stable.example.com/{version}", "kind": "CronTab",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "7",
                     "finalizers": ["keep"], **meta},
        "spec": {"cronSpec": "* * * * */5"} if version == "v1" else {"schedule": "* * * * */5"}})


def converter(answer: Callable[[Obj], Any]) -> tuple[WebhookConverter, Answering]:
    client = Answering(answer)
    return WebhookConverter(client, CRD), client  # type: ignore[arg-type]


async def failure(answer: Callable[[Obj], Any], envs: list[pb.Object] | None = None, batch: bool = False) -> str:
    conv, _ = converter(answer)
    with pytest.raises(errors.APIError) as e:
        await conv.convert(envs or [crontab("a")], "stable.example.com/v2", batch)
    assert (e.value.code, e.value.status().get("reason")) == (500, None)
    return e.value.message


async def test_a_list_converts_in_one_review_and_keeps_metadata() -> None:
    conv, client = converter(lambda r: renaming(r, metadata={"labels": {"by": "webhook"}, "finalizers": ["x"]}))
    envs = [crontab("a"), crontab("b", "v2"), crontab("c")]
    out = await conv.convert(envs, "stable.example.com/v2", batch=True)
    assert len(client.sent) == 1
    review = client.sent[0]
    assert review["apiVersion"] == "apiextensions.k8s.io/v1" and review["kind"] == "ConversionReview"
    assert review["request"]["desiredAPIVersion"] == "stable.example.com/v2"
    assert [o["metadata"]["name"] for o in review["request"]["objects"]] == ["a", "c"]
    objs = [orjson.loads(envelope.to_json(e)) for e in out]
    assert [o["apiVersion"] for o in objs] == ["stable.example.com/v2"] * 3
    assert [o["spec"] for o in objs] == [{"schedule": "* * * * */5"}] * 3
    # labels come from the webhook; the rest of metadata stays the original's
    assert objs[0]["metadata"]["labels"] == {"by": "webhook"} and objs[0]["metadata"]["finalizers"] == ["keep"]
    assert out[1] is envs[1]
    assert await conv.convert([crontab("d", "v2")], "stable.example.com/v2", batch=False) and len(client.sent) == 1


async def test_the_webhook_unreachable() -> None:
    calls = REQUESTS.labels("failure", "conversion_webhook_call_failure")
    before = calls._value.get()
    message = await failure(lambda r: WebhookError('Post "https://127.0.0.1:1/convert?timeout=30s": dial tcp '
                                                   '127.0.0.1:1: connect: connection refused', sent=True))
    assert message == ('conversion webhook for stable.example.com/v1, Kind=CronTab failed: Post '
                       '"https://127.0.0.1:1/convert?timeout=30s": dial tcp 127.0.0.1:1: connect: connection refused')
    assert calls._value.get() == before + 1


@pytest.mark.parametrize("answer, message", [
    (lambda r: (200, {**renaming(r)[1], "apiVersion": "apiextensions.k8s.io/v1beta1"}),
     ("failed: expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got "
      "apiextensions.k8s.io/v1beta1, Kind=ConversionReview")),
    (lambda r: (200, {**renaming(r)[1], "response": {**renaming(r)[1]["response"], "uid": "other"}}),
     'failed: expected response.uid="{uid}", got "other"'),
    (lambda r: (200, {**renaming(r)[1], "response": {"uid": r["request"]["uid"],
                                                     "result": {"status": "Failure", "message": "no v2 for you"}}}),
     "failed: no v2 for you"),
    (lambda r: (200, {**renaming(r)[1], "response": {"uid": r["request"]["uid"], "result": {}}}),
     "failed: response.result.status was '', not 'Success'"),
    (lambda r: (200, {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"}),
     "failed: no response provided"),
    (lambda r: (500, b"oops"), ("failed: the server responded with the status code 500 but did not return more "
                                "information")),
    (lambda r: (200, b""), "failed: 0-length response with status code: 200 and content type: application/json"),
    (lambda r: (200, {**renaming(r)[1], "response": {**renaming(r)[1]["response"], "convertedObjects": []}}),
     "returned 0 objects, expected 1"),
    (lambda r: renaming(r, apiVersion="stable.example.com/v3"),
     ("returned invalid object at index 0: invalid groupVersion (expected stable.example.com/v2, received "
      "stable.example.com/v3)")),
    (lambda r: renaming(r, kind="Other"),
     "returned invalid object at index 0: invalid kind (expected CronTab, received Other)"),
    (lambda r: renaming(r, metadata={"name": "b"}), "returned invalid object: must have the same name: a != b"),
    (lambda r: renaming(r, metadata={"uid": "x"}), "returned invalid object: must have the same UID: uid-a != x"),
    (lambda r: renaming(r, metadata={"labels": {"a": 1}}),
     "returned invalid metadata: metadata.labels[a] must be a string, but is int in converted object"),
    (lambda r: renaming(r, metadata={"labels": {"a": "-bad-"}}),
     'returned invalid metadata: metadata.labels: Invalid value: "-bad-": a valid label must be an empty string'),
])
async def test_answers_kube_refuses(answer: Callable[[Obj], Any], message: str) -> None:
    conv, client = converter(answer)
    with pytest.raises(errors.APIError) as e:
        await conv.convert([crontab("a")], "stable.example.com/v2", False)
    want = "conversion webhook for stable.example.com/v1, Kind=CronTab " + \
        message.replace("{uid}", client.sent[0]["request"]["uid"])
    assert e.value.message.startswith(want), e.value.message
    assert e.value.code == 500


async def test_a_list_names_the_index_as_kube_does() -> None:
    def second_wrong(review: Obj) -> tuple[int, Obj]:
        status, answer = renaming(review)
        answer["response"]["convertedObjects"][1]["apiVersion"] = "stable.example.com/v1"
        return status, answer
    message = await failure(second_wrong, [crontab("a"), crontab("b")], batch=True)
    assert message == ("conversion webhook for stable.example.com/v1, Kind=CronTab returned invalid converted "
                       "object at index 2: invalid groupVersion (expected stable.example.com/v2, received "
                       "stable.example.com/v1)")


async def test_v1beta1_reviews_skip_the_uid_check() -> None:
    crd = {**CRD, "spec": {"conversion": {"strategy": "Webhook", "webhook": {
        "clientConfig": {"url": "https://h/c"}, "conversionReviewVersions": ["v1beta1", "v1"]}}}}

    def answer(review: Obj) -> tuple[int, Obj]:
        status, body = renaming(review)
        body["response"]["uid"] = "whatever"
        return status, body
    client = Answering(answer)
    conv = WebhookConverter(client, crd)  # type: ignore[arg-type]
    out = await conv.convert([crontab("a")], "stable.example.com/v2", False)
    assert client.sent[0]["apiVersion"] == "apiextensions.k8s.io/v1beta1"
    assert orjson.loads(out[0].body) == {"spec": {"schedule": "* * * * */5"}}


async def test_webhook_conversion_is_async_only() -> None:
    conv, _ = converter(renaming)
    conversion = WebhookConversion("stable.example.com/v1", "CronTab", converter=conv)
    stored = (await conversion.to_storage_envelopes([crontab("a", "v2")]))[0]
    assert stored.api_version == "stable.example.com/v1" and orjson.loads(stored.body)["spec"] == \
        {"cronSpec": "* * * * */5"}
    with pytest.raises(errors.InternalError):
        conversion.to_storage_envelope(crontab("a", "v2"))
