"""Auditing, as kube-apiserver's (k8s.io/apiserver/pkg/audit): an audit.k8s.io/v1 Policy decides each
request's level, and one audit.k8s.io/v1 Event per stage goes to the backends (this package: log,
webhook, batch mode, truncation). The filters that begin and complete the events are in
services/apiserver/filters/audit.py.

Stages: RequestReceived once the request is authenticated, ResponseStarted when a long-running
request (a watch) has sent its headers, ResponseComplete when the response is done, Panic when
the handler failed unexpectedly. The policy is matched against the authenticated user (before
impersonation, whose result is the event's impersonatedUser), as in kube's handler chain.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from apiary_pb import envelope_pb2 as pb
from services.apiserver.configdecode import (
    Document,
    Field,
    StrictDecodingError,
    Struct,
    UnknownKind,
    decode,
    read_yaml,
)
from services.apiserver.fielderrors import ConfigError, FieldErrors, invalid_go, quote
from services.apiserver.requestinfo import RequestInfo
from services.apiserver.validation import is_dns1123_subdomain
from services.common.errors import APIError
from services.common.identity import user_dict

from . import Backend
from . import metrics as audit_metrics

log = logging.getLogger(__name__)

NONE, METADATA, REQUEST, REQUEST_RESPONSE = "None", "Metadata", "Request", "RequestResponse"
_LEVELS = (NONE, METADATA, REQUEST, REQUEST_RESPONSE)
_STAGES = ("RequestReceived", "ResponseStarted", "ResponseComplete", "Panic")


class PolicyError(ValueError):
    pass


@dataclass(frozen=True)
class GroupResources:
    group: str = ""
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()

    def matches(self, info: RequestInfo) -> bool:
        if self.group != info.api_group:
            return False
        if self.resource_names and info.name not in self.resource_names:
            return False
        if not self.resources:
            return True
        full = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
        for r in self.resources:
            if r in ("*", full):
                return True
            if r.startswith("*/") and info.subresource and r[2:] == info.subresource:
                return True
            if r.endswith("/*") and r[:-2] == info.resource:
                return True
        return False


@dataclass(frozen=True)
class Rule:
    level: str
    users: tuple[str, ...] = ()
    user_groups: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    resources: tuple[GroupResources, ...] = ()
    namespaces: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()
    omit_stages: frozenset[str] = frozenset()
    omit_managed_fields: bool | None = None

    def matches(self, user: pb.UserInfo | None, info: RequestInfo) -> bool:
        if self.users and (user is None or user.name not in self.users):
            return False
        if self.user_groups and (user is None or not set(self.user_groups) & set(user.groups)):
            return False
        if self.verbs and info.verb not in self.verbs:
            return False
        if self.namespaces or self.resources:
            if not info.is_resource_request:
                return False
            if self.namespaces and info.namespace not in self.namespaces:
                return False
            return not self.resources or any(gr.matches(info) for gr in self.resources)
        if self.non_resource_urls:
            if info.is_resource_request:
                return False
            return any(info.path == u or (u.endswith("*") and info.path.startswith(u[:-1]))
                       for u in self.non_resource_urls)
        return True


@dataclass(frozen=True)
class Decision:
    level: str
    omit_stages: frozenset[str] = frozenset()
    omit_managed_fields: bool = False


@dataclass
class Policy:
    rules: list[Rule] = field(default_factory=list)
    omit_stages: frozenset[str] = frozenset()
    omit_managed_fields: bool = False

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        try:
            doc = read_yaml(Path(path).read_bytes())
        except (OSError, ConfigError) as e:
            raise PolicyError(f"failed to read audit policy file {path}: {e}") from None
        return cls.parse(doc)

    @classmethod
    def parse(cls, doc: Any) -> Policy:
        """kube's LoadPolicyFromBytes: decoded strictly, or leniently with a warning when only unknown
        fields stand in the way; then ValidatePolicy."""
        try:
            try:
                policy = decode(doc, POLICY_KINDS)
            except StrictDecodingError as e:
                log.warning("Audit policy contains errors, falling back to lenient decoding: %s", e)
                policy = PolicyDocument.model_validate(doc, extra="ignore")
        except UnknownKind:
            raise PolicyError("audit policy: expected kind Policy of apiVersion audit.k8s.io/v1") from None
        except ConfigError as e:
            raise PolicyError(f"audit policy: failed decoding: {e}") from None
        if errs := _validate(policy):
            raise PolicyError(f"audit policy: {errs}")
        omit = frozenset(policy.omit_stages)
        rules = [Rule(r.level, tuple(r.users), tuple(r.user_groups), tuple(r.verbs),
                      tuple(GroupResources(g.group, tuple(g.resources), tuple(g.resource_names))
                            for g in r.resources),
                      tuple(r.namespaces), tuple(r.non_resource_urls), frozenset(r.omit_stages) | omit,
                      r.omit_managed_fields) for r in policy.rules]
        return cls(rules, omit, policy.omit_managed_fields)

    def decide(self, user: pb.UserInfo | None, info: RequestInfo) -> Decision:
        for r in self.rules:
            if r.matches(user, info):
                omf = self.omit_managed_fields if r.omit_managed_fields is None else r.omit_managed_fields
                return Decision(r.level, r.omit_stages, omf)
        return Decision(NONE, self.omit_stages, self.omit_managed_fields)


class PolicyGroupResources(Struct):
    group: str = ""
    resources: list[str] = []
    resource_names: list[str] = Field([], alias="resourceNames")


class PolicyRule(Struct):
    level: str = ""
    users: list[str] = []
    user_groups: list[str] = Field([], alias="userGroups")
    verbs: list[str] = []
    resources: list[PolicyGroupResources] = []
    namespaces: list[str] = []
    non_resource_urls: list[str] = Field([], alias="nonResourceURLs")
    omit_stages: list[str] = Field([], alias="omitStages")
    omit_managed_fields: bool | None = Field(None, alias="omitManagedFields")


class PolicyDocument(Document):
    """audit.k8s.io/v1 Policy as the file holds it."""

    metadata: dict[str, Any] = {}
    rules: list[PolicyRule] = []
    omit_stages: list[str] = Field([], alias="omitStages")
    omit_managed_fields: bool = Field(False, alias="omitManagedFields")


POLICY_KINDS = {(v, "Policy"): PolicyDocument for v in ("audit.k8s.io/v1", "audit.k8s.io/v1beta1")}


def _validate(policy: PolicyDocument) -> FieldErrors:
    """kube's ValidatePolicy."""
    errs = FieldErrors()
    _validate_stages(errs, policy.omit_stages, "omitStages")
    for i, r in enumerate(policy.rules):
        where = f"rules[{i}]"
        if not r.level:
            errs.required(f"{where}.level")
        elif r.level not in _LEVELS:
            errs.not_supported(f"{where}.level", r.level, list(_LEVELS))
        for j, url in enumerate(r.non_resource_urls):
            if url == "*":
                continue
            if not url.startswith("/"):
                errs.invalid(f"{where}.nonResourceURLs[{j}]", url,
                             "non-resource URL rules must begin with a '/' character")
            if "*" in url[:-1]:
                errs.invalid(f"{where}.nonResourceURLs[{j}]", url,
                             "non-resource URL wildcards '*' must be the final character of the rule")
        for g in r.resources:
            if g.group and (msgs := is_dns1123_subdomain(g.group)):
                errs.invalid(f"{where}.resources.group", g.group, ",".join(msgs))
            if g.resource_names and not g.resources:
                errs.append(invalid_go(f"{where}.resources.resourceNames", _go_strings(g.resource_names),
                                       "using resourceNames requires at least one resource"))
        _validate_stages(errs, r.omit_stages, f"{where}.omitStages")
        if r.non_resource_urls and (r.resources or r.namespaces):
            errs.append(invalid_go(f"{where}.nonResourceURLs", _go_strings(r.non_resource_urls),
                                   "rules cannot apply to both regular resources and non-resource URLs"))
    return errs


def _go_strings(values: list[str]) -> str:
    """Go's %#v of a []string."""
    return "[]string{" + ", ".join(map(quote, values)) + "}"


def _validate_stages(errs: FieldErrors, stages: list[str], where: str) -> None:
    for i, stage in enumerate(stages):
        if stage not in _STAGES:
            errs.not_supported(f"{where}[{i}]", stage, list(_STAGES))


_second, _second_text = -1, ""


def _timestamp() -> str:
    """RFC 3339 in UTC with microseconds (kube's MicroTime); the seconds are formatted once per second."""
    global _second, _second_text
    ns = time.time_ns()
    second, rest = divmod(ns, 1_000_000_000)
    if second != _second:
        _second, _second_text = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{_second_text}.{rest // 1000:06d}Z"


def _strip_managed_fields(obj: Any) -> Any:
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        if isinstance(meta, dict) and "managedFields" in meta:
            obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
        items = obj.get("items")
        if isinstance(items, list):
            obj = {**obj, "items": [_strip_managed_fields(i) for i in items]}
    return obj


_LEVEL_COUNTERS = {lv: audit_metrics.LEVELS.labels(lv) for lv in _LEVELS}


class Auditor:
    """The policy and the backend: makes one Event for each audited request."""

    def __init__(self, policy: Policy, backend: Backend) -> None:
        self.policy, self.backend = policy, backend
        # per UserInfo the authentication cache hands out again and again (the message is held, so its
        # id is not reused while it is here): the event's "user", and the policy's decisions for it
        self._users: dict[int, tuple[pb.UserInfo, dict[str, Any], dict[tuple[Any, ...], Decision]]] = {}

    def _user(self, user: pb.UserInfo) -> tuple[pb.UserInfo, dict[str, Any], dict[tuple[Any, ...], Decision]]:
        hit = self._users.get(id(user))
        if hit is not None and hit[0] is user:
            return hit
        if len(self._users) >= 1024:
            self._users.clear()
        hit = self._users[id(user)] = (user, user_dict(user), {})
        return hit

    def user_json(self, user: pb.UserInfo) -> dict[str, Any]:
        return self._user(user)[1]

    def decide(self, user: pb.UserInfo | None, info: RequestInfo) -> Decision:
        """The policy's decision, remembered per user and request attributes (what the rules match)."""
        if user is None:
            return self.policy.decide(user, info)
        decisions = self._user(user)[2]
        key = ((info.verb, info.api_group, info.resource, info.subresource, info.namespace, info.name)
               if info.is_resource_request else (info.verb, info.path))
        decision = decisions.get(key)
        if decision is None:
            if len(decisions) >= 256:
                decisions.clear()
            decision = decisions[key] = self.policy.decide(user, info)
        return decision

    async def start(self) -> None:
        await self.backend.start()

    async def stop(self) -> None:
        """Deliver what the backends hold (batch mode's buffer, webhook sends in flight)."""
        await self.backend.stop()

    def begin(self, audit_id: str, info: RequestInfo, user: pb.UserInfo | None, request_uri: str,
              source_ips: list[str], user_agent: str, received: str) -> Event | None:
        decision = self.decide(user, info)
        _LEVEL_COUNTERS[decision.level].inc()
        if decision.level == NONE:
            return None
        return Event(self, decision, audit_id, info, user, request_uri, source_ips, user_agent, received)


class Event:
    """One request's audit event, written once per stage the policy does not omit."""

    def __init__(self, auditor: Auditor, decision: Decision, audit_id: str, info: RequestInfo,
                 user: pb.UserInfo | None, request_uri: str, source_ips: list[str], user_agent: str,
                 received: str) -> None:
        self.auditor, self.decision = auditor, decision
        self.level = decision.level
        self.fields: dict[str, Any] = {
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": decision.level, "auditID": audit_id,
            "requestURI": request_uri, "verb": info.verb,
            "user": auditor.user_json(user) if user is not None else {},
            "sourceIPs": source_ips,
        }
        if user_agent:
            self.fields["userAgent"] = user_agent
        if info.is_resource_request:
            ref = {"resource": info.resource, "namespace": info.namespace, "name": info.name,
                   "apiGroup": info.api_group, "apiVersion": info.api_version, "subresource": info.subresource}
            self.fields["objectRef"] = {k: v for k, v in ref.items() if v}
        self.received = received
        self.annotations: dict[str, str] = {}
        self.request_object: Any = None
        self.response_object: Any = None

    @property
    def wants_request(self) -> bool:
        return self.level in (REQUEST, REQUEST_RESPONSE)

    @property
    def wants_response(self) -> bool:
        return self.level == REQUEST_RESPONSE

    def impersonated(self, user: pb.UserInfo) -> None:
        self.fields["impersonatedUser"] = user_dict(user)

    def authorized(self, allowed: bool, reason: str) -> None:
        self.annotations["authorization.k8s.io/decision"] = "allow" if allowed else "forbid"
        self.annotations["authorization.k8s.io/reason"] = reason

    def set_request(self, body: bytes) -> None:
        """The decoded request body (JSON), kept at level Request and above."""
        if self.wants_request and body:
            try:
                self.request_object = orjson.loads(body)
            except orjson.JSONDecodeError:
                self.request_object = None

    def set_response(self, body: bytes) -> None:
        if self.wants_response and body:
            try:
                self.response_object = orjson.loads(body)
            except orjson.JSONDecodeError:
                self.response_object = None

    def stage(self, stage: str, code: int = 0, error: APIError | None = None) -> bool:
        """Hand this stage's event to the backends; False when they could not store it."""
        if stage in self.decision.omit_stages:
            return True
        ev = dict(self.fields)
        ev["stage"] = stage
        if stage != "RequestReceived":
            status: dict[str, Any] = {"metadata": {}, "code": code}
            if error is not None:
                status.update({"status": "Failure", "message": error.message, "code": error.code})
                if error.reason:
                    status["reason"] = error.reason
            ev["responseStatus"] = status
        if self.request_object is not None:
            ev["requestObject"] = (_strip_managed_fields(self.request_object)
                                   if self.decision.omit_managed_fields else self.request_object)
        if stage in ("ResponseComplete", "Panic") and self.response_object is not None:
            ev["responseObject"] = (_strip_managed_fields(self.response_object)
                                    if self.decision.omit_managed_fields else self.response_object)
        ev["requestReceivedTimestamp"] = self.received
        ev["stageTimestamp"] = _timestamp()
        if self.annotations:
            ev["annotations"] = self.annotations
        audit_metrics.EVENT.inc()
        return self.auditor.backend.process([ev])


def now() -> str:
    """The time a request was received, as audit events carry it."""
    return _timestamp()
