"""The admission service's custom kinds: an established CRD's versions join the Catalogue (so matchPolicy
Equivalent finds the other version of a request's storage), a changed CRD replaces them, a deleted or not yet
established one leaves none."""
from __future__ import annotations

import copy
from typing import Any

from apiary_pb import admission_pb2 as adpb
from apiary_pb import envelope_pb2 as pb
from services.admission.attributes import Attributes, equivalent_resources
from services.admission.crds import CustomResourceKinds
from services.admission.typechecking import type_check
from services.apis.install import new_catalogue

SCHEMA = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
CRD: dict[str, Any] = {
    "metadata": {"name": "widgets.example.com", "generation": 1},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": SCHEMA},
                          {"name": "v2", "served": True, "storage": False, "schema": SCHEMA}]},
    "status": {"acceptedNames": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
               "conditions": [{"type": "Established", "status": "True"}]},
}


def kinds() -> CustomResourceKinds:
    return CustomResourceKinds(None, new_catalogue())  # type: ignore[arg-type]


def request(k: CustomResourceKinds, version: str) -> Attributes:
    req = adpb.AdmissionRequest(operation="CREATE", kind="Widget", attributes=pb.RequestAttributes(
        api_group="example.com", api_version=version, resource="widgets", namespace="ns"))
    return Attributes(req, k.catalogue)


def test_established_crd_joins_and_leaves_the_catalogue() -> None:
    k = kinds()
    pending = copy.deepcopy(CRD)
    pending["status"]["conditions"] = []
    k._on_event("ADDED", pending, None)
    assert k.catalogue.lookup("example.com", "v1", "widgets") is None
    k._on_event("MODIFIED", CRD, pending)
    v1 = k.catalogue.lookup("example.com", "v1", "widgets")
    v2 = k.catalogue.lookup("example.com", "v2", "widgets")
    assert v1 is not None and v2 is not None and v1.kind == "Widget"
    assert k.catalogue.lookup_kind("example.com", "v2", "Widget") is v2
    assert k.catalogue.equivalents(v2) == (v2, v1)
    k._on_event("DELETED", CRD, None)
    assert k.catalogue.lookup("example.com", "v1", "widgets") is None


def test_a_changed_crd_replaces_its_versions() -> None:
    k = kinds()
    k._on_event("ADDED", CRD, None)
    same = k.catalogue.lookup("example.com", "v1", "widgets")
    k._on_event("MODIFIED", copy.deepcopy(CRD), CRD)  # nothing that makes the definitions changed
    assert k.catalogue.lookup("example.com", "v1", "widgets") is same
    changed = copy.deepcopy(CRD)
    changed["metadata"]["generation"] = 2
    changed["spec"]["versions"][1]["served"] = False
    k._on_event("MODIFIED", changed, CRD)
    assert k.catalogue.lookup("example.com", "v2", "widgets") is None
    assert k.catalogue.lookup("example.com", "v1", "widgets") is not None
    k._on_event("DELETED", changed, None)  # (its published schema is process-wide)


def test_equivalent_resources_of_a_custom_request() -> None:
    k = kinds()
    assert equivalent_resources(request(k, "v2")) == ()
    k._on_event("ADDED", CRD, None)
    assert [(i.version, i.plural) for i in equivalent_resources(request(k, "v2"))] == [("v1", "widgets")]
    k._on_event("DELETED", CRD, None)


def test_type_checking_reads_the_custom_schema() -> None:
    """A policy over widgets is type-checked against the CRD's schema (kube's "undefined field")."""
    k = kinds()
    crd = copy.deepcopy(CRD)
    for ver in crd["spec"]["versions"]:
        ver["schema"] = {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
            "type": "object", "properties": {"size": {"type": "integer"}}}}}}
    k._on_event("ADDED", crd, None)
    policy = {"spec": {"matchConstraints": {"resourceRules": [
        {"apiGroups": ["example.com"], "apiVersions": ["v1"], "resources": ["widgets"]}]},
        "validations": [{"expression": "object.spec.size < 10"}, {"expression": "object.spec.colour == 'red'"}]}}
    warnings = type_check(policy, k.catalogue)
    assert [w["fieldRef"] for w in warnings] == ["spec.validations[1].expression"]
    assert warnings[0]["warning"].startswith("example.com/v1, Kind=Widget: ERROR: <input>:1:12: undefined field "
                                             "'colour'")
    k._on_event("DELETED", crd, None)
    assert type_check(policy, k.catalogue) == []
