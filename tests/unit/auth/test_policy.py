"""Bootstrap reconciliation, aggregation to a fixpoint, and informer events reaching the index."""
from __future__ import annotations

import copy

import orjson

from apiary_pb import registry_pb2 as rpb
from services.auth.authorizers.rbac import Attributes, RBACIndex, Rule, covers
from services.auth.policy import (
    AggregationController, PolicyInformers, bootstrap_objects, desired_aggregation, reconcile_bootstrap,
)
from services.common.errors import already_exists, not_found
from services.common.selectors import label_selector_from_dict


class FakeRegistry:
    """Registry.Handle over a dict, enough for create/get/update/delete of RBAC objects."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.rv = 0

    async def _handle(self, req: rpb.APIRequest) -> rpb.APIResponse:
        self.calls.append((req.verb, req.resource, req.name))
        body = orjson.loads(req.body) if req.body else {}
        name = req.name or (body.get("metadata") or {}).get("name", "")
        key = (req.resource, req.namespace, name)
        if req.verb == "get":
            if key not in self.objects:
                raise not_found(req.resource, req.group, name)
            return rpb.APIResponse(code=200, body=orjson.dumps(self.objects[key]))
        if req.verb == "create" and key in self.objects:
            raise already_exists(req.resource, req.group, name)
        if req.verb in ("create", "update"):
            self.rv += 1
            body.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
            self.objects[key] = body
            return rpb.APIResponse(code=201, body=orjson.dumps(body))
        if req.verb == "delete":
            self.objects.pop(key, None)
            return rpb.APIResponse(code=200, body=b"{}")
        raise AssertionError(req.verb)

    def Handle(self, req, timeout=None):  # noqa: N802 - the stub's name
        return self._handle(req)


async def test_reconcile_creates_once() -> None:
    reg = FakeRegistry()
    await reconcile_bootstrap(reg)
    assert len(reg.objects) == len(bootstrap_objects())
    assert ("roles", "kube-system", "extension-apiserver-authentication-reader") in reg.objects
    before = copy.deepcopy(reg.objects)
    reg.calls.clear()
    await reconcile_bootstrap(reg)
    assert reg.objects == before
    assert {c[0] for c in reg.calls} == {"get"}


async def test_reconcile_unions_autoupdate_objects_only() -> None:
    reg = FakeRegistry()
    await reconcile_bootstrap(reg)
    role = reg.objects[("clusterroles", "", "system:basic-user")]
    role["rules"] = role["rules"][:1] + [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]
    binding = reg.objects[("clusterrolebindings", "", "system:public-info-viewer")]
    binding["subjects"] = binding["subjects"][:1] + [{"kind": "User", "name": "extra"}]
    locked = reg.objects[("clusterroles", "", "system:discovery")]
    locked["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] = "false"
    locked["rules"] = []
    await reconcile_bootstrap(reg)
    rules = [Rule.from_dict(r) for r in reg.objects[("clusterroles", "", "system:basic-user")]["rules"]]
    assert Rule(("get",), ("",), ("pods",)) in rules  # nothing removed
    expected = next(o for o in bootstrap_objects() if o["metadata"]["name"] == "system:basic-user")
    assert covers(rules, [Rule.from_dict(r) for r in expected["rules"]])[0]
    names = [s["name"] for s in reg.objects[("clusterrolebindings", "", "system:public-info-viewer")]["subjects"]]
    assert names == ["system:authenticated", "extra", "system:unauthenticated"]
    assert reg.objects[("clusterroles", "", "system:discovery")]["rules"] == []


def test_aggregation_fixpoint() -> None:
    roles = {o["metadata"]["name"]: o for o in bootstrap_objects() if o["kind"] == "ClusterRole"}
    agg = desired_aggregation(roles)
    view, edit, admin = ([Rule.from_dict(r) for r in agg[n]] for n in ("view", "edit", "admin"))
    assert view and covers(edit, view)[0] and covers(admin, edit)[0]
    assert not covers(view, edit)[0]
    assert any("rolebindings" in r.resources for r in admin) and not any("rolebindings" in r.resources for r in edit)


def test_label_selector_from_dict() -> None:
    sel = label_selector_from_dict({"matchLabels": {"a": "b"},
                                    "matchExpressions": [{"key": "x", "operator": "In", "values": ["1", "2"]},
                                                         {"key": "y", "operator": "DoesNotExist"}]})
    assert sel.matches({"a": "b", "x": "2"})
    assert not sel.matches({"a": "b", "x": "3"}) and not sel.matches({"a": "b", "x": "1", "y": ""})
    assert label_selector_from_dict({}).matches({"anything": "1"})
    assert label_selector_from_dict({"matchExpressions": [{"key": "k", "operator": "Exists"}]}).matches({"k": ""})


class FakeInformer:
    def __init__(self, store):
        import asyncio
        self.store = store
        self.synced = asyncio.Event()
        self.synced.set()
        self.handlers = []

    def add_handler(self, h):
        self.handlers.append(h)


async def test_aggregation_controller_writes_changed_roles() -> None:
    reg = FakeRegistry()
    await reconcile_bootstrap(reg)
    store = {k[2]: v for k, v in reg.objects.items() if k[0] == "clusterroles"}
    ctl = AggregationController(reg, FakeInformer(store))
    assert await ctl.sync()
    assert {c for c in reg.calls if c[0] == "update"} == {("update", "clusterroles", n) for n in ("admin", "edit", "view")}
    assert reg.objects[("clusterroles", "", "admin")]["rules"]
    reg.calls.clear()
    ctl.informer.store = {k[2]: v for k, v in reg.objects.items() if k[0] == "clusterroles"}
    assert await ctl.sync() and not reg.calls  # settled: nothing to write


def test_informer_events_reach_index_immediately() -> None:
    index = RBACIndex()
    pi = PolicyInformers(FakeRegistry(), index)
    crb = {"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "r"},
           "subjects": [{"kind": "User", "name": "u"}]}
    cr = {"metadata": {"name": "r"}, "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}
    a = Attributes("u", (), "get", True, "ns", "", "pods")
    for h in pi.informers["clusterroles"].handlers:
        h("ADDED", cr, None)
    for h in pi.informers["clusterrolebindings"].handlers:
        h("ADDED", crb, None)
    assert index.authorize(a)[0]
    narrowed = {**cr, "rules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}]}
    for h in pi.informers["clusterroles"].handlers:
        h("MODIFIED", narrowed, cr)
    assert not index.authorize(a)[0]
    for h in pi.informers["clusterroles"].handlers:
        h("MODIFIED", cr, narrowed)
    for h in pi.informers["clusterrolebindings"].handlers:
        h("DELETED", crb, None)
    assert not index.authorize(a)[0]
