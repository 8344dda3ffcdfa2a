"""RBAC rule matching: every wildcard form, the subject index, and rule coverage."""
from __future__ import annotations

import pytest

from services.auth.authorizers.rbac import Attributes, RBACIndex, Rule, covers, rule_allows


def res(verb="get", group="", resource="configmaps", sub="", name="", ns="demo"):
    return Attributes(user="u", verb=verb, api_group=group, resource=resource, subresource=sub, name=name,
                      namespace=ns)


def url(path, verb="get"):
    return Attributes(user="u", verb=verb, resource_request=False, path=path)


@pytest.mark.parametrize("rule,attrs,allowed", [
    (Rule(("get",), ("",), ("configmaps",)), res(), True),
    (Rule(("get",), ("",), ("configmaps",)), res(verb="list"), False),
    (Rule(("*",), ("",), ("configmaps",)), res(verb="delete"), True),
    (Rule(("get",), ("*",), ("configmaps",)), res(group="apps"), True),
    (Rule(("get",), ("apps",), ("configmaps",)), res(group=""), False),
    (Rule(("get",), ("",), ("*",)), res(resource="secrets"), True),
    (Rule(("get",), ("",), ("*",)), res(resource="pods", sub="log"), True),
    (Rule(("get",), ("apps",), ("deployments/scale",)), res(group="apps", resource="deployments", sub="scale"), True),
    (Rule(("get",), ("apps",), ("deployments",)), res(group="apps", resource="deployments", sub="scale"), False),
    (Rule(("get",), ("apps",), ("deployments/scale",)), res(group="apps", resource="deployments"), False),
    (Rule(("get",), ("*",), ("*/scale",)), res(group="apps", resource="deployments", sub="scale"), True),
    (Rule(("get",), ("*",), ("*/scale",)), res(group="apps", resource="deployments", sub="status"), False),
    (Rule(("get",), ("*",), ("*/scale",)), res(group="apps", resource="deployments"), False),
    (Rule(("get",), ("",), ("configmaps",), ("a",)), res(name="a"), True),
    (Rule(("get",), ("",), ("configmaps",), ("a",)), res(name="b"), False),
    (Rule(("list",), ("",), ("configmaps",), ("a",)), res(verb="list"), False),
    (Rule(("get",), non_resource_urls=("/healthz",)), url("/healthz"), True),
    (Rule(("get",), non_resource_urls=("/healthz",)), url("/healthz/etcd"), False),
    (Rule(("get",), non_resource_urls=("/healthz*",)), url("/healthz/etcd"), True),
    (Rule(("get",), non_resource_urls=("/apis/*",)), url("/apis/apps/v1"), True),
    (Rule(("get",), non_resource_urls=("/apis/*",)), url("/apis"), False),
    (Rule(("get",), non_resource_urls=("*",)), url("/anything"), True),
    (Rule(("get",), non_resource_urls=("/version",)), url("/version", verb="post"), False),
    (Rule(("get",), ("",), ("configmaps",)), url("/api"), False),
    (Rule(("get",), non_resource_urls=("*",)), res(), False),
])
def test_rule_matching(rule, attrs, allowed):
    assert rule_allows(rule, attrs) is allowed


def make_index() -> RBACIndex:
    idx = RBACIndex()
    idx.set_cluster_role("view", [{"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["configmaps"]}])
    idx.set_cluster_role("discovery", [{"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*"]}])
    idx.set_role("demo", "editor", [{"verbs": ["*"], "apiGroups": [""], "resources": ["configmaps"]}])
    idx.set_binding("demo", "alice-edit", {"kind": "Role", "name": "editor"},
                    [{"kind": "User", "name": "alice"}])
    idx.set_binding("", "viewers", {"kind": "ClusterRole", "name": "view"}, [{"kind": "Group", "name": "readers"}])
    idx.set_binding("", "disc", {"kind": "ClusterRole", "name": "discovery"},
                    [{"kind": "Group", "name": "system:authenticated"}])
    idx.set_binding("other", "sa-view", {"kind": "ClusterRole", "name": "view"},
                    [{"kind": "ServiceAccount", "name": "bot"}])
    return idx


def test_index_decisions():
    idx = make_index()
    ok, reason = idx.authorize(Attributes("alice", (), "delete", True, "demo", "", "configmaps"))
    assert ok and 'RoleBinding "alice-edit/demo"' in reason
    assert not idx.authorize(Attributes("alice", (), "delete", True, "other", "", "configmaps"))[0]
    assert idx.authorize(Attributes("bob", ("readers",), "list", True, "any", "", "configmaps"))[0]
    assert idx.authorize(Attributes("bob", ("readers",), "list", True, "", "", "configmaps"))[0]
    assert not idx.authorize(Attributes("bob", ("readers",), "create", True, "any", "", "configmaps"))[0]
    assert idx.authorize(Attributes("x", ("system:authenticated",), "get", False, path="/api/v1"))[0]
    # a service account subject without namespace takes the binding's namespace
    sa = "system:serviceaccount:other:bot"
    assert idx.authorize(Attributes(sa, (), "get", True, "other", "", "configmaps"))[0]
    assert not idx.authorize(Attributes(sa, (), "get", True, "demo", "", "configmaps"))[0]
    # RoleBindings never grant non-resource URLs or cluster-scoped access
    idx.set_role("demo", "urls", [{"verbs": ["get"], "nonResourceURLs": ["*"]}])
    idx.set_binding("demo", "u", {"kind": "Role", "name": "urls"}, [{"kind": "User", "name": "alice"}])
    assert not idx.authorize(Attributes("alice", (), "get", False, path="/metrics"))[0]


def test_revocation_removes_access():
    idx = make_index()
    a = Attributes("alice", (), "get", True, "demo", "", "configmaps")
    assert idx.authorize(a)[0]
    idx.delete_binding("demo", "alice-edit")
    assert not idx.authorize(a)[0]
    assert "u:alice" not in idx.by_subject


def test_coverage():
    owner = [Rule(("get", "list"), ("",), ("configmaps", "secrets")), Rule(("*",), ("apps",), ("*",))]
    assert covers(owner, [Rule(("get",), ("",), ("configmaps",))])[0]
    assert covers(owner, [Rule(("delete",), ("apps",), ("deployments/scale",))])[0]
    ok, missing = covers(owner, [Rule(("get", "delete"), ("",), ("secrets",))])
    assert not ok and missing == [Rule(("delete",), ("",), ("secrets",))]
    # resourceNames: a narrower owner does not cover an unrestricted request
    narrow = [Rule(("get",), ("",), ("secrets",), ("a",))]
    assert covers(narrow, [Rule(("get",), ("",), ("secrets",), ("a",))])[0]
    assert not covers(narrow, [Rule(("get",), ("",), ("secrets",))])[0]
    assert covers([Rule(("get",), non_resource_urls=("/api/*",))], [Rule(("get",), non_resource_urls=("/api/v1",))])[0]
    assert not covers([Rule(("get",), non_resource_urls=("/api",))], [Rule(("get",), non_resource_urls=("/api/*",))])[0]
