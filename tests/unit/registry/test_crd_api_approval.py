"""CRDs of the protected groups (*.k8s.io, *.kubernetes.io): the api-approved.kubernetes.io annotation is required
on create with kube's field path and message, an update leaving its state as it was is not refused, and the
KubernetesAPIApprovalPolicyConformant condition carries kube's reasons and messages."""
from __future__ import annotations

import copy

import pytest

from services.apis.strategies.apiapproval import condition, state

from .test_crd_controller import conditions, env, eventually  # noqa: F401 - the fixture
from .test_crd_validation import ADMIN, CRONTAB, G, invalid

SEE = "see https://github.com/kubernetes/enhancements/pull/1111"
FIELD = "metadata.annotations[api-approved.kubernetes.io]"
INVALID = ('protected groups must have approval annotation "api-approved.kubernetes.io" with either a URL or a '
           f'reason starting with "unapproved", {SEE}')


def protected_crd(annotation: str | None, group: str = "stable.k8s.io") -> dict:
    body = copy.deepcopy(CRONTAB)
    body["spec"]["group"] = group
    body["metadata"]["name"] = f"crontabs.{group}"
    if annotation is not None:
        body["metadata"]["annotations"] = {"api-approved.kubernetes.io": annotation}
    return body


@pytest.mark.parametrize(("annotation", "expected"), [
    (None, ("Missing", f'protected groups must have approval annotation "api-approved.kubernetes.io", {SEE}')),
    ("unapproved, experimental", ("Bypassed", 'not approved: "unapproved, experimental"')),
    ("https://github.com/kubernetes/kubernetes/pull/78458",
     ("Approved", "approved in https://github.com/kubernetes/kubernetes/pull/78458")),
    ("yes", ("Invalid", INVALID)),
    ("github.com/kubernetes/pull/1", ("Invalid", INVALID)),
])
def test_states(annotation, expected):
    assert state({"api-approved.kubernetes.io": annotation} if annotation else {}) == expected


def test_condition_only_for_protected_groups():
    assert condition(protected_crd(None, "stable.example.com")) is None
    assert condition(protected_crd(None, "x.kubernetes.io"))[:2] == ("False", "MissingAnnotation")
    assert condition(protected_crd("unapproved"))[:2] == ("False", "UnapprovedAnnotation")
    assert condition(protected_crd("https://x.test/1"))[:2] == ("True", "ApprovedAnnotation")
    assert condition(protected_crd("nope"))[:2] == ("False", "InvalidAnnotation")


async def test_create_needs_the_annotation(api):
    assert await invalid(api, protected_crd(None)) == [
        f'{FIELD}: Required value: protected groups must have approval annotation "api-approved.kubernetes.io", {SEE}']
    assert await invalid(api, protected_crd("maybe")) == [f'{FIELD}: Invalid value: "maybe": {INVALID}']
    code, _ = await api("create", "customresourcedefinitions", body=protected_crd("unapproved, testing"), group=G,
                        user=ADMIN)
    assert code == 201


async def test_condition_follows_the_annotation(env):  # noqa: F811
    api, _ = env
    await api("create", "customresourcedefinitions", body=protected_crd("unapproved, testing"), group=G, user=ADMIN)

    async def cond(want: tuple[str, str]) -> bool:
        _, got = await api("get", "customresourcedefinitions", "", "crontabs.stable.k8s.io", group=G, user=ADMIN)
        return conditions(got).get("KubernetesAPIApprovalPolicyConformant") == want
    await eventually(lambda: cond(("False", "UnapprovedAnnotation")))
    _, got = await api("get", "customresourcedefinitions", "", "crontabs.stable.k8s.io", group=G, user=ADMIN)
    got["metadata"]["annotations"]["api-approved.kubernetes.io"] = "https://github.com/kubernetes/enhancements/pull/1"
    await api("update", "customresourcedefinitions", "", "crontabs.stable.k8s.io", body=got, group=G, user=ADMIN)
    await eventually(lambda: cond(("True", "ApprovedAnnotation")))
    _, got = await api("get", "customresourcedefinitions", "", "crontabs.stable.k8s.io", group=G, user=ADMIN)
    message = next(c["message"] for c in got["status"]["conditions"]
                   if c["type"] == "KubernetesAPIApprovalPolicyConformant")
    assert message == "approved in https://github.com/kubernetes/enhancements/pull/1"
