"""Match a request to the FlowSchema with the lowest precedence whose rules match (kube's semantics).

A rule matches when one of its subjects names the user and one of its resource
rules (for a resource request) or non-resource rules (otherwise) covers the request.
"""
from __future__ import annotations

from apiary_pb import envelope_pb2 as pb

from .config import Configuration, FlowSchema, NonResourceRule, PolicyRules, ResourceRule, Subject

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
# Distinct requests (user, groups and what they ask) whose FlowSchema is remembered; a burst of new ones
# beyond it starts the memory again.
CACHE_SIZE = 4096


def _has(values: tuple[str, ...], value: str) -> bool:
    return "*" in values or value in values


def subject_matches(s: Subject, d: pb.RequestAttributes) -> bool:
    if s.kind == "Group":
        return s.name == "*" or s.name in d.user.groups
    if s.kind == "User":
        return s.name == "*" or s.name == d.user.name
    if s.kind == "ServiceAccount":
        if not d.user.name.startswith(SERVICE_ACCOUNT_PREFIX):
            return False
        ns, _, name = d.user.name[len(SERVICE_ACCOUNT_PREFIX):].partition(":")
        return ns == s.namespace and (s.name == "*" or s.name == name)
    return False


def resource_rule_matches(r: ResourceRule, d: pb.RequestAttributes) -> bool:
    if not (_has(r.verbs, d.verb) and _has(r.api_groups, d.api_group)):
        return False
    resource = f"{d.resource}/{d.subresource}" if d.subresource else d.resource
    if not _has(r.resources, resource):
        return False
    if not d.namespace:
        return r.cluster_scope
    return _has(r.namespaces, d.namespace)


def non_resource_rule_matches(r: NonResourceRule, d: pb.RequestAttributes) -> bool:
    if not _has(r.verbs, d.verb):
        return False
    for u in r.urls:
        if u == "*" or u == d.path or (u.endswith("/*") and d.path.startswith(u[:-1])):
            return True
    return False


def rules_match(p: PolicyRules, d: pb.RequestAttributes) -> bool:
    if not any(subject_matches(s, d) for s in p.subjects):
        return False
    if d.resource_request:
        return any(resource_rule_matches(r, d) for r in p.resource_rules)
    return any(non_resource_rule_matches(r, d) for r in p.non_resource_rules)


class Classifier:
    def __init__(self, cfg: Configuration) -> None:
        # kube orders by precedence, then by name
        self.schemas = sorted(cfg.flow_schemas, key=lambda fs: (fs.precedence, fs.name))
        self.catch_all = next(fs for fs in self.schemas if fs.name == "catch-all")
        # the same client asks the same things again: its answer, for this configuration (a new one makes a
        # new Classifier), without walking every schema's rules each time
        self._cache: dict[tuple[object, ...], FlowSchema] = {}

    def classify(self, d: pb.RequestAttributes) -> FlowSchema:
        key = (d.user.name, tuple(d.user.groups), d.verb, d.resource_request, d.api_group, d.resource,
               d.subresource, d.namespace, "" if d.resource_request else d.path)
        fs = self._cache.get(key)
        if fs is None:
            if len(self._cache) >= CACHE_SIZE:
                self._cache.clear()
            fs = self._cache[key] = self._match(d)
        return fs

    def _match(self, d: pb.RequestAttributes) -> FlowSchema:
        for fs in self.schemas:
            if any(rules_match(p, d) for p in fs.rules):
                return fs
        # Only a user in neither system:authenticated nor system:unauthenticated gets here;
        # kube falls back to catch-all as well.
        return self.catch_all

    @staticmethod
    def flow_distinguisher(fs: FlowSchema, d: pb.RequestAttributes) -> str:
        if fs.distinguisher == "ByUser":
            return d.user.name
        if fs.distinguisher == "ByNamespace":
            return d.namespace
        return ""
