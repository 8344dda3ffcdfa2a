"""apiextensions.k8s.io/v1 CustomResourceDefinition through the handlers: kube's defaults, status on create,
and validation of names, group, scope, versions and schemas with kube's field paths and messages."""
from __future__ import annotations

import copy

import pytest

from services.common import errors, identity

ADMIN = identity.user_pb("admin", ["system:masters"])
G = "apiextensions.k8s.io"

CRONTAB = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "crontabs.stable.example.com"},
    "spec": {"group": "stable.example.com", "scope": "Namespaced",
             "names": {"plural": "crontabs", "kind": "CronTab", "shortNames": ["ct"]},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "properties": {"spec": {"type": "object", "properties": {
                     "cronSpec": {"type": "string"}, "replicas": {"type": "integer"}}}}}}}]},
}


def crd(**spec):
    out = copy.deepcopy(CRONTAB)
    out["spec"].update(spec)
    return out


async def invalid(api, body) -> list[str]:
    with pytest.raises(errors.Invalid) as e:
        await api("create", "customresourcedefinitions", body=body, group=G, user=ADMIN)
    return [f"{c['field']}: {c['message']}" for c in e.value.details["causes"]]


async def test_create_defaults_and_status(api):
    code, got = await api("create", "customresourcedefinitions", body=crd(), group=G, user=ADMIN)
    assert code == 201
    names = got["spec"]["names"]
    assert (names["singular"], names["listKind"]) == ("crontab", "CronTabList")
    assert got["spec"]["conversion"] == {"strategy": "None"}
    assert got["status"] == {"acceptedNames": {"plural": "", "kind": ""}, "storedVersions": ["v1"]}
    assert got["metadata"]["generation"] == 1
    assert got["metadata"]["finalizers"] == ["customresourcecleanup.apiextensions.k8s.io"]
    _, table = await api("list", "customresourcedefinitions", group=G, user=ADMIN, table=True)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Created At"]
    assert table["rows"][0]["cells"] == ["crontabs.stable.example.com", got["metadata"]["creationTimestamp"]]


async def test_name_group_and_scope(api):
    body = crd(group="example", scope="Global")
    assert await invalid(api, body) == [
        'metadata.name: Invalid value: "crontabs.stable.example.com": must be spec.names.plural+"."+spec.group',
        'spec.group: Invalid value: "example": should be a domain with at least one dot',
        'spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced"']


async def test_names(api):
    body = crd(names={"plural": "CronTabs", "kind": "CronTab", "listKind": "CronTab", "shortNames": ["c_t"],
                      "categories": ["All"]})
    body["metadata"]["name"] = "CronTabs.stable.example.com"
    causes = await invalid(api, body)
    assert 'spec.names.listKind: Invalid value: "CronTab": kind and listKind may not be the same' in causes
    assert any(c.startswith('spec.names.plural: Invalid value: "CronTabs": a DNS-1035 label') for c in causes)
    assert any(c.startswith('spec.names.shortNames[0]: Invalid value: "c_t"') for c in causes)
    assert any(c.startswith('spec.names.categories[0]: Invalid value: "All"') for c in causes)


async def test_versions(api):
    v1 = copy.deepcopy(CRONTAB["spec"]["versions"][0])
    two = [v1, {**copy.deepcopy(v1), "name": "v2"}]
    causes = await invalid(api, crd(versions=two))
    assert causes == [('spec.versions: Invalid value: []apiextensions.CustomResourceDefinitionVersion{'
                      'apiextensions.CustomResourceDefinitionVersion{Name:"v1", Served:true, Storage:true}, '
                      'apiextensions.CustomResourceDefinitionVersion{Name:"v2", Served:true, Storage:true}}: '
                      'must have exactly one version marked as storage version')]
    none_served = [{**copy.deepcopy(v1), "served": False}]
    assert (await invalid(api, crd(versions=none_served)))[0].endswith("must have at least one version marked as served")
    no_schema = [{"name": "v1", "served": True, "storage": True}]
    assert await invalid(api, crd(versions=no_schema)) == [
        "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"]


async def test_schema_must_be_structural(api):
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {"a": {}}}}}
    versions = [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}]
    assert await invalid(api, crd(versions=versions)) == [
        ("spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[a].type: Required value: "
        "must not be empty for specified object fields")]


async def test_update_keeps_group_and_plural(api):
    await api("create", "customresourcedefinitions", body=crd(), group=G, user=ADMIN)
    _, got = await api("get", "customresourcedefinitions", "", "crontabs.stable.example.com", group=G, user=ADMIN)
    got["spec"]["group"] = "other.example.com"
    with pytest.raises(errors.Invalid) as e:
        await api("update", "customresourcedefinitions", "", "crontabs.stable.example.com", body=got, group=G,
                  user=ADMIN)
    assert 'spec.group: Invalid value: "other.example.com": field is immutable' in str(e.value.message)


async def test_printer_columns(api):
    body = crd()
    body["spec"]["versions"][0]["additionalPrinterColumns"] = [{"name": "X", "type": "object", "jsonPath": ".x"},
                                                               {"type": "string"}]
    assert await invalid(api, body) == [
        ('spec.versions[0].additionalPrinterColumns[0].type: Unsupported value: "object": supported values: '
        '"boolean", "date", "integer", "number", "string"'),
        "spec.versions[0].additionalPrinterColumns[1].name: Required value",
        "spec.versions[0].additionalPrinterColumns[1].jsonPath: Required value"]


async def test_scale_paths(api):
    body = crd()
    body["spec"]["versions"][0]["subresources"] = {"scale": {"specReplicasPath": ".status.replicas",
                                                             "labelSelectorPath": ".metadata.labels"}}
    assert await invalid(api, body) == [
        ('spec.versions[0].subresources.scale.specReplicasPath: Invalid value: ".status.replicas": should be a json '
        "path under .spec"),
        "spec.versions[0].subresources.scale.statusReplicasPath: Required value",
        ('spec.versions[0].subresources.scale.labelSelectorPath: Invalid value: ".metadata.labels": should be a json '
        "path under either .spec or .status")]


def webhook_conversion(cc, versions=("v1",)):
    return {"strategy": "Webhook", "webhook": {"clientConfig": cc, "conversionReviewVersions": list(versions)}}


async def test_conversion(api):
    assert await invalid(api, crd(conversion={"strategy": "Webhook"})) == [
        "spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook",
        "spec.conversion.conversionReviewVersions: Required value"]
    assert await invalid(api, crd(conversion={**webhook_conversion({"url": "https://h/c"}), "strategy": "None"})) == [
        "spec.conversion.webhookClientConfig: Forbidden: should not be set when strategy is not set to Webhook",
        "spec.conversion.conversionReviewVersions: Forbidden: should not be set when strategy is not set to Webhook"]
    assert await invalid(api, crd(conversion=webhook_conversion({"url": "http://h/c?x=1"}, ("v2",)))) == [
        'spec.conversion.webhookClientConfig.url: Invalid value: "http://h/c?x=1": '
        "'https' is the only allowed URL scheme",
        'spec.conversion.webhookClientConfig.url: Invalid value: "http://h/c?x=1": '
        "query parameters are not permitted in the URL",
        'spec.conversion.conversionReviewVersions: Invalid value: []string{"v2"}: must include at least one of '
        "v1, v1beta1"]
    both = webhook_conversion({"url": "https://h/c", "service": {"namespace": "ns", "name": "s"}})
    assert await invalid(api, crd(conversion=both)) == [
        "spec.conversion.webhookClientConfig: Required value: exactly one of url or service is required"]
    svc = webhook_conversion({"service": {"namespace": "ns", "name": "s", "path": "convert", "port": 70000},
                              "caBundle": "Zm9v"}, ("v1", "v1"))
    assert await invalid(api, crd(conversion=svc)) == [
        'spec.conversion.webhookClientConfig.service.port: Invalid value: 70000: port is not valid: must be '
        "between 1 and 65535, inclusive",
        'spec.conversion.webhookClientConfig.service.path: Invalid value: "convert": must start with a \'/\'',
        "spec.conversion.webhookClientConfig.caBundle: Invalid value: []byte{0x66, 0x6f, 0x6f}: data does not "
        "contain any valid RSA or ECDSA certificates",
        'spec.conversion.conversionReviewVersions[1]: Invalid value: "v1": duplicate version']
    ok = webhook_conversion({"service": {"namespace": "ns", "name": "s"}}, ("v2", "v1beta1"))
    code, got = await api("create", "customresourcedefinitions", body=crd(conversion=ok), group=G, user=ADMIN)
    assert code == 201 and got["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"] == 443
