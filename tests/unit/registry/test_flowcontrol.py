"""flowcontrol.apiserver.k8s.io/v1 in the registry: v1's defaults, ValidateFlowSchema and
ValidatePriorityLevelConfiguration with kube's messages, the mandatory objects' fixed specs, /status and
the Table cells kubectl prints."""
from __future__ import annotations

from typing import Any

import pytest

from services.apis.flowcontrol_bootstrap import (
    MANDATORY_FLOW_SCHEMAS,
    MANDATORY_PRIORITY_LEVELS,
    SUGGESTED_FLOW_SCHEMAS,
    SUGGESTED_PRIORITY_LEVELS,
)
from services.apis.strategies.flowcontrol import required_entropy_bits
from services.common import errors

from .conftest import ADMIN

Obj = dict[str, Any]
V1 = "flowcontrol.apiserver.k8s.io/v1"
EVERYTHING = {"resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"],
                                 "clusterScope": True}]}


def fs(name: str, level: str = "workload-low", **spec: Any) -> Obj:
    return {"apiVersion": V1, "kind": "FlowSchema", "metadata": {"name": name},
            "spec": {"priorityLevelConfiguration": {"name": level}, **spec}}


def plc(name: str, **spec: Any) -> Obj:
    return {"apiVersion": V1, "kind": "PriorityLevelConfiguration", "metadata": {"name": name}, "spec": spec}


async def refused(api, *args: Any, **kwargs: Any) -> list[str]:
    with pytest.raises(errors.Invalid) as e:
        await api(*args, **kwargs, user=ADMIN)
    return [f"{c['field']}: {c['message']}" for c in (e.value.details or {})["causes"]]


async def create(api, resource: str, body: Obj) -> Obj:
    code, got = await api("create", resource, body=body, user=ADMIN)
    assert code == 201, got
    return got


async def test_priority_level_defaults(api):
    got = await create(api, "prioritylevelconfigurations", plc("q", type="Limited", limited={
        "limitResponse": {"type": "Queue", "queuing": {}}}))
    assert got["spec"]["limited"] == {"nominalConcurrencyShares": 30, "lendablePercent": 0, "limitResponse": {
        "type": "Queue", "queuing": {"queues": 64, "handSize": 8, "queueLengthLimit": 50}}}
    got = await create(api, "prioritylevelconfigurations", plc("zero", type="Limited", limited={
        "nominalConcurrencyShares": 0, "limitResponse": {"type": "Reject"}}))
    assert got["spec"]["limited"] == {"nominalConcurrencyShares": 0, "lendablePercent": 0,  # v1 keeps a zero
                                      "limitResponse": {"type": "Reject"}}


async def test_flow_schema_defaults_and_dangling_reference_is_accepted(api):
    got = await create(api, "flowschemas", fs("mine", "no-such-level", rules=[{
        "subjects": [{"kind": "User", "user": {"name": "alice"}}], **EVERYTHING}]))
    assert got["spec"]["matchingPrecedence"] == 1000 and "status" not in got


async def test_flow_schema_validation_messages(api):
    assert await refused(api, "create", "flowschemas", body=fs("hi", matchingPrecedence=10001)) == [
        "spec.matchingPrecedence: Invalid value: 10001: must not be greater than 10000"]
    assert await refused(api, "create", "flowschemas", body=fs("neg", matchingPrecedence=-1)) == [
        "spec.matchingPrecedence: Invalid value: -1: must be a positive value"]
    assert await refused(api, "create", "flowschemas", body=fs("one", matchingPrecedence=1)) == [
        "spec.matchingPrecedence: Invalid value: 1: only the schema named 'exempt' may have matchingPrecedence 1"]
    assert await refused(api, "create", "flowschemas", body=fs("d", distinguisherMethod={"type": "ByGroup"})) == [
        ('spec.distinguisherMethod.type: Unsupported value: flowcontrol.FlowDistinguisherMethod{Type:"ByGroup"}: '
        'supported values: "ByNamespace", "ByUser"')]
    assert await refused(api, "create", "flowschemas", body=fs("r", rules=[{
        "subjects": [{"kind": "ServiceAccount", "serviceAccount": {"name": "bot"}, "user": {"name": "x"}},
                     {"kind": "Robot"}],
        "resourceRules": [{"verbs": ["*", "get"], "apiGroups": [], "resources": ["pods", "*"],
                           "namespaces": ["Bad_NS"]}],
        "nonResourceRules": [{"verbs": ["fly"], "nonResourceURLs": ["healthz", "/a/*/b"]}]}])) == [
        ("spec.rules[0].subjects[0].serviceAccount.namespace: Required value: must specify namespace for service "
        "account"),
        "spec.rules[0].subjects[0].user: Forbidden: user is forbidden when subject kind is not 'User'",
        ('spec.rules[0].subjects[1].kind: Unsupported value: "Robot": supported values: "Group", "ServiceAccount", '
        '"User"'),
        ("spec.rules[0].resourceRules[0].verbs: Invalid value: []string{\"*\", \"get\"}: if '*' is present, must not "
        "specify other verbs"),
        "spec.rules[0].resourceRules[0].apiGroups: Required value: resource rules must supply at least one api group",
        ("spec.rules[0].resourceRules[0].resources: Invalid value: []string{\"pods\", \"*\"}: if '*' is present, "
        "must not specify other resources"),
        ("spec.rules[0].resourceRules[0].namespaces[0]: Invalid value: \"Bad_NS\": each member of this list must be "
        "'*' or a DNS-1123 label; a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
        "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
        "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
        ('spec.rules[0].nonResourceRules[0].verbs: Unsupported value: []string{"fly"}: supported values: "create", '
        '"delete", "deletecollection", "get", "list", "patch", "proxy", "update", "watch"'),
        'spec.rules[0].nonResourceRules[0].nonResourceURLs[0]: Invalid value: "healthz": must start with slash',
        ('spec.rules[0].nonResourceRules[0].nonResourceURLs[1]: Invalid value: "/a/*/b": wildcard can only do suffix '
        'matching')]
    assert await refused(api, "create", "flowschemas", body=fs("norules", "", rules=[{"subjects": []}])) == [
        "spec.priorityLevelConfiguration.name: Required value: must reference a priority level",
        "spec.rules[0].subjects: Required value: subjects must contain at least one value",
        "spec.rules[0]: Required value: at least one of resourceRules and nonResourceRules has to be non-empty"]


async def test_priority_level_validation_messages(api):
    assert await refused(api, "create", "prioritylevelconfigurations", body=plc("r", type="Limited", limited={
        "nominalConcurrencyShares": -1, "lendablePercent": 101,
        "limitResponse": {"type": "Reject", "queuing": {"queues": 4}}})) == [
        "spec.limited.nominalConcurrencyShares: Invalid value: -1: must be a non-negative integer",
        "spec.limited.limitResponse.queuing: Forbidden: must be nil if limited.limitResponse.type is not Limited",
        "spec.limited.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive"]
    assert await refused(api, "create", "prioritylevelconfigurations", body=plc("q", type="Limited", limited={
        "limitResponse": {"type": "Queue"}})) == [
        ("spec.limited.limitResponse.queuing: Required value: must not be empty if limited.limitResponse.type is "
        "Limited")]
    assert await refused(api, "create", "prioritylevelconfigurations", body=plc("h", type="Limited", limited={
        "limitResponse": {"type": "Queue", "queuing": {"queues": 4, "handSize": 5}}})) == [
        "spec.limited.limitResponse.queuing.handSize: Invalid value: 5: should not be greater than queues (4)"]
    assert required_entropy_bits(128, 20) == 140
    assert await refused(api, "create", "prioritylevelconfigurations", body=plc("e", type="Limited", limited={
        "limitResponse": {"type": "Queue", "queuing": {"queues": 128, "handSize": 20}}})) == [
        ("spec.limited.limitResponse.queuing.handSize: Invalid value: 20: required entropy bits of deckSize 128 and "
        "handSize 20 should not be greater than 60")]
    assert await refused(api, "create", "prioritylevelconfigurations", body=plc("x", type="Exempt")) == [
        "spec.type: Invalid value: \"Exempt\": type must be 'Exempt' if and only if name is 'exempt'"]
    assert await refused(api, "create", "prioritylevelconfigurations", body=plc("t", type="Sometimes")) == [
        'spec.type: Unsupported value: "Sometimes": supported values: "Exempt", "Limited"']


async def test_bootstrap_objects_are_valid_and_mandatory_specs_fixed(api):
    for obj in MANDATORY_PRIORITY_LEVELS + SUGGESTED_PRIORITY_LEVELS:
        got = await create(api, "prioritylevelconfigurations", obj)
        assert got["spec"] == obj["spec"]  # kube's objects are already defaulted
    for obj in MANDATORY_FLOW_SCHEMAS + SUGGESTED_FLOW_SCHEMAS:
        got = await create(api, "flowschemas", obj)
        assert got["spec"] == obj["spec"]
    _code, exempt = await api("get", "prioritylevelconfigurations", "", "exempt", user=ADMIN)
    exempt["spec"]["exempt"] = {"nominalConcurrencyShares": 10, "lendablePercent": 20}  # the administrator's part
    code, exempt = await api("update", "prioritylevelconfigurations", "", "exempt", body=exempt, user=ADMIN)
    assert code == 200 and exempt["spec"]["exempt"] == {"nominalConcurrencyShares": 10, "lendablePercent": 20}
    exempt["spec"]["exempt"]["lendablePercent"] = 101
    assert await refused(api, "update", "prioritylevelconfigurations", "", "exempt", body=exempt) == [
        "spec.exempt.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive"]
    _code, catch_all = await api("get", "prioritylevelconfigurations", "", "catch-all", user=ADMIN)
    catch_all["spec"]["limited"]["nominalConcurrencyShares"] = 50
    assert await refused(api, "update", "prioritylevelconfigurations", "", "catch-all", body=catch_all) == [
        ("spec: Invalid value: flowcontrol.PriorityLevelConfigurationSpec{...}: spec of 'catch-all' must equal the "
        "fixed value")]


async def test_status_subresource_and_table(api):
    got = await create(api, "flowschemas", fs("mine", "missing", distinguisherMethod={"type": "ByUser"}, rules=[{
        "subjects": [{"kind": "Group", "group": {"name": "devs"}}], **EVERYTHING}], status={"conditions": [
            {"type": "Dangling", "status": "True"}]}))
    assert "status" not in got  # cleared on create
    got["status"] = {"conditions": [{"type": "Dangling", "status": "True", "reason": "NotFound"}]}
    got["spec"]["matchingPrecedence"] = 7
    code, updated = await api("update", "flowschemas", "", "mine", body=got, subresource="status", user=ADMIN)
    assert code == 200 and updated["spec"]["matchingPrecedence"] == 1000 and updated["status"] == got["status"]
    got = updated
    got["status"] = {"conditions": [{"type": "Dangling"}, {"type": "Dangling"}, {"status": "True"}]}
    assert await refused(api, "update", "flowschemas", "", "mine", body=got, subresource="status") == [
        'status.conditions[1].type: Duplicate value: "Dangling"',
        "status.conditions[2].type: Required value: must not be empty"]
    code, table = await api("list", "flowschemas", table=True, user=ADMIN)
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "PriorityLevel", "MatchingPrecedence", "DistinguisherMethod", "Age", "MissingPL"]
    assert table["rows"][0]["cells"][:4] + table["rows"][0]["cells"][5:] == ["mine", "missing", 1000, "ByUser", "True"]
    await create(api, "prioritylevelconfigurations", MANDATORY_PRIORITY_LEVELS[0])
    await create(api, "prioritylevelconfigurations", plc("q", type="Limited", limited={
        "nominalConcurrencyShares": 3, "limitResponse": {"type": "Queue", "queuing": {"queues": 16}}}))
    code, table = await api("list", "prioritylevelconfigurations", table=True, user=ADMIN)
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "Type", "NominalConcurrencyShares", "Queues", "HandSize", "QueueLengthLimit", "Age"]
    assert [r["cells"][:6] for r in table["rows"]] == [["exempt", "Exempt", "<none>", "<none>", "<none>", "<none>"],
                                                      ["q", "Limited", 3, 16, 8, 50]]
