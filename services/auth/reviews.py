"""authentication.k8s.io and authorization.k8s.io reviews: the request object in, the object with its
status filled in out (kube's pkg/registry/authentication and pkg/registry/authorization REST storages)."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from apiary_pb import auth_pb2 as apb
from apiary_pb import envelope_pb2 as pb
from services.apiserver import fielderrors
from services.common.errors import BadRequest, NotFound, invalid
from services.common.identity import user_dict, user_pb

from .authenticators import AuthenticationFailed, Authenticator, add_authenticated_group
from .authenticators.serviceaccount import ServiceAccountAuthenticator
from .authenticators.webhook import WebhookTokenAuthenticator
from .authorizers import ALLOW, DENY
from .authorizers import Union as AuthorizerUnion
from .authorizers.rbac import Rule

AUTHN = "authentication.k8s.io"
AUTHZ = "authorization.k8s.io"

KINDS = {
    (AUTHN, "tokenreviews"): "TokenReview",
    (AUTHN, "selfsubjectreviews"): "SelfSubjectReview",
    (AUTHZ, "subjectaccessreviews"): "SubjectAccessReview",
    (AUTHZ, "localsubjectaccessreviews"): "LocalSubjectAccessReview",
    (AUTHZ, "selfsubjectaccessreviews"): "SelfSubjectAccessReview",
    (AUTHZ, "selfsubjectrulesreviews"): "SelfSubjectRulesReview",
}


class Reviewer:
    def __init__(self, authorizer: AuthorizerUnion, implicit: Sequence[Authenticator],
                 service_accounts: ServiceAccountAuthenticator | None, api_audiences: Sequence[str],
                 webhook: WebhookTokenAuthenticator | None = None) -> None:
        """implicit: the audience-agnostic token authenticators (token file, JWT issuers), valid only for the
        API's own audiences; webhook: the token webhook, which is told the audiences."""
        self.authorizer = authorizer
        self.implicit = list(implicit)
        self.webhook = webhook
        self.service_accounts = service_accounts
        self.api_audiences = tuple(api_audiences)

    async def review(self, req: apb.ReviewRequest) -> dict[str, Any]:
        kind = KINDS.get((req.group, req.resource))
        if kind is None:
            raise NotFound(f"the server could not find the requested resource ({req.resource}.{req.group})")
        obj = _decode(req.body, kind)
        obj["kind"], obj["apiVersion"] = kind, f"{req.group}/{req.version or 'v1'}"
        obj.setdefault("metadata", {})
        if "creationTimestamp" not in obj["metadata"]:
            obj["metadata"]["creationTimestamp"] = None
        if kind == "TokenReview":
            await self._token_review(obj)
        elif kind == "SelfSubjectReview":
            obj["status"] = {"userInfo": user_dict(req.user)}
        elif kind == "SelfSubjectRulesReview":
            self._rules_review(obj, req.user)
        else:
            await self._access_review(obj, kind, req)
        return obj

    # authentication.k8s.io -----------------------------------------------------

    async def _token_review(self, obj: dict[str, Any]) -> None:
        spec = _spec(obj)
        token = spec.get("token") or ""
        if not isinstance(token, str) or not token:
            raise BadRequest(f"token is required for TokenReview in {AUTHN}")
        audiences = spec.get("audiences") or list(self.api_audiences)
        if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
            raise invalid("TokenReview", AUTHN, "", [_cause("spec.audiences", audiences, "must be a list of strings")])
        user, auds, errors = await self.authenticate_token(token, audiences)
        status: dict[str, Any] = {"authenticated": user is not None, "user": {}}
        if user is not None:
            status["user"] = user_dict(user)
            status["audiences"] = auds
        if errors and user is None:
            status["error"] = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        obj["status"] = status

    async def authenticate_token(self, token: str, audiences: Sequence[str]) -> tuple[pb.UserInfo | None, list[str], list[str]]:
        """As the bearer-token authenticators would, for the given audiences: (user, audiences, errors)."""
        errors: list[str] = []
        # audience-agnostic tokens count only where the requested audiences include the API's own
        implicit = [a for a in audiences if a in self.api_audiences]
        for a in self.implicit if implicit else ():
            try:
                user = await a.authenticate(apb.AuthenticateRequest(token=token))
                if user is not None:
                    return add_authenticated_group(user), implicit, []
            except AuthenticationFailed as e:
                errors.append(str(e))
        if self.service_accounts is not None:
            try:
                found = await self.service_accounts.authenticate_token(token, audiences)
                if found is not None:
                    return add_authenticated_group(found[0]), found[1], []
            except AuthenticationFailed as e:
                errors.append(str(e))
        if self.webhook is not None:
            try:
                found = await self.webhook.authenticate_token(token, audiences)
                if found is not None:
                    return add_authenticated_group(found[0]), found[1], []
            except AuthenticationFailed as e:
                errors.append(str(e))
        return None, [], errors

    # authorization.k8s.io ------------------------------------------------------

    async def _access_review(self, obj: dict[str, Any], kind: str, req: apb.ReviewRequest) -> None:
        spec = _spec(obj)
        ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        causes: list[dict[str, str]] = []
        if ra is not None and not isinstance(ra, dict) or nra is not None and not isinstance(nra, dict):
            raise BadRequest(f"{kind}: resourceAttributes and nonResourceAttributes must be objects")
        if ra is not None and nra is not None:
            causes.append(_cause("spec.nonResourceAttributes", nra,
                                 "cannot be specified in combination with resourceAttributes"))
        if ra is None and nra is None:
            causes.append(_cause("spec.resourceAttributes", None,
                                 "exactly one of nonResourceAttributes or resourceAttributes must be specified"))
        if kind in ("SubjectAccessReview", "LocalSubjectAccessReview"):
            if not spec.get("user") and not spec.get("groups"):
                causes.append(_cause("spec.user", spec.get("user") or "", "at least one of user or group must be specified"))
            user = user_pb(str(spec.get("user") or ""), [str(g) for g in spec.get("groups") or []],
                           uid=str(spec.get("uid") or ""),
                           extra={str(k): [str(x) for x in v] for k, v in (spec.get("extra") or {}).items()})
        else:
            user = req.user
        if kind == "LocalSubjectAccessReview" and nra is not None:
            causes.append(_cause("spec.nonResourceAttributes", nra, "disallowed on this kind of request"))
        if causes:
            raise invalid(kind, AUTHZ, (obj.get("metadata") or {}).get("name") or "", causes)
        if kind == "LocalSubjectAccessReview":
            namespace = req.namespace
            if not namespace:
                raise BadRequest(f"namespace is required on this type: {namespace}")
            meta_ns = (obj.get("metadata") or {}).get("namespace")
            if (meta_ns and meta_ns != namespace) or (ra or {}).get("namespace", namespace) != namespace:
                raise BadRequest(f"spec.resourceAttributes.namespace must match namespace: {namespace}")
            obj["metadata"]["namespace"] = namespace
        if ra is not None:
            attrs = pb.RequestAttributes(user=user, verb=str(ra.get("verb") or ""), resource_request=True,
                                   namespace=str(ra.get("namespace") or ""), api_group=str(ra.get("group") or ""),
                                   api_version=str(ra.get("version") or ""), resource=str(ra.get("resource") or ""),
                                   subresource=str(ra.get("subresource") or ""), name=str(ra.get("name") or ""))
        else:
            attrs = pb.RequestAttributes(user=user, verb=str(nra.get("verb") or ""), resource_request=False,
                                   path=str(nra.get("path") or ""))
        d = await self.authorizer.authorize(attrs)
        status: dict[str, Any] = {"allowed": d.decision == ALLOW}
        if d.decision == DENY:
            status["denied"] = True
        if d.reason:
            status["reason"] = d.reason
        if d.error:
            status["evaluationError"] = d.error
        obj["status"] = status

    def _rules_review(self, obj: dict[str, Any], user: pb.UserInfo) -> None:
        spec = _spec(obj)
        namespace = spec.get("namespace") or ""
        if not isinstance(namespace, str) or not namespace:
            raise BadRequest("no namespace on request")
        rules: list[Rule] = []
        for a in self.authorizer.authorizers:
            resolver = getattr(a, "rules_for", None)
            if resolver is not None:
                rules.extend(resolver(user.name, tuple(user.groups), namespace))
        obj["status"] = rules_status(rules)


def rules_status(rules: Iterable[Rule]) -> dict[str, Any]:
    """SubjectRulesReviewStatus from policy rules, as kube's ConvertToResourceRules does."""
    resource_rules: list[dict[str, Any]] = []
    non_resource_rules: list[dict[str, Any]] = []
    for r in rules:
        if r.resources:
            rr: dict[str, Any] = {"verbs": list(r.verbs)}
            if r.api_groups:
                rr["apiGroups"] = list(r.api_groups)
            rr["resources"] = list(r.resources)
            if r.resource_names:
                rr["resourceNames"] = list(r.resource_names)
            resource_rules.append(rr)
        if r.non_resource_urls:
            non_resource_rules.append({"verbs": list(r.verbs), "nonResourceURLs": list(r.non_resource_urls)})
    return {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": False}


def _decode(body: bytes, kind: str) -> dict[str, Any]:
    try:
        obj = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError as e:
        raise BadRequest(f"the body of the request was in an unknown format: {e}") from None
    if not isinstance(obj, dict):
        raise BadRequest(f"the body of the request was in an unknown format: expected a {kind} object")
    if obj.get("metadata") is not None and not isinstance(obj["metadata"], dict):
        raise BadRequest("metadata: expected an object")
    return obj


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec")
    if spec is None:
        spec = obj["spec"] = {}
    if not isinstance(spec, dict):
        raise BadRequest("spec: expected an object")
    return spec


def _cause(field: str, value: Any, detail: str) -> fielderrors.Cause:
    """field.Invalid; a struct value as kube's %#v shows it, here as JSON."""
    if value is None or isinstance(value, str):
        return fielderrors.invalid(field, value, detail)
    return fielderrors.invalid_go(field, orjson.dumps(value).decode(), detail)
