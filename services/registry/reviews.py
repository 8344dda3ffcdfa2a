"""The create-only kinds answered by the auth service, never stored (kube's tokenreview, the
authorization review storages and serviceaccount's TokenREST): TokenReview, SelfSubjectReview, the
access reviews, and TokenRequest. The handler decodes the body; these take the object as decoded."""
from __future__ import annotations

from services.apis.authentication import TOKEN_REQUEST
from services.apis.strategies.reviews import TokenRequestStrategy
from services.apiserver import validation as v
from services.apiserver.registry.scope import Obj, Scope, ensure_namespace
from services.apiserver.registry.store import Store
from services.common import errors

from .auth import AuthClient

TOKEN_REQUEST_STRATEGY = TokenRequestStrategy(TOKEN_REQUEST)


class Reviews:
    def __init__(self, auth: AuthClient | None, store: Store) -> None:
        self._client = auth
        self.store = store

    def auth(self) -> AuthClient:
        if self._client is None:
            raise errors.ServiceUnavailable("the auth service is not configured")
        return self._client

    async def review(self, r: Scope, obj: Obj) -> bytes:
        """The review with its status, as the auth service answers it; kube runs no admission for them."""
        ensure_namespace(r, obj)
        return await self.auth().review(r.info, r.namespace, obj, r.req.user, r.timing)

    async def token_request(self, r: Scope, obj: Obj) -> bytes:
        """serviceaccounts/<name>/token (obj: the TokenRequest): the ServiceAccount must exist; the auth
        service signs the token."""
        meta = obj["metadata"]
        name, namespace = r.req.name, r.req.namespace
        for key, want, what in (("name", name, "name"), ("namespace", namespace, "namespace")):
            if meta.get(key) and meta[key] != want:
                raise errors.invalid(TOKEN_REQUEST.kind, TOKEN_REQUEST.group, name, [
                    v.invalid(f"metadata.{key}", meta[key], f"must match the service account {what} if specified")])
        sa = await self.store.get(r, name)
        causes = TOKEN_REQUEST_STRATEGY.validate(obj)
        if causes:
            raise errors.invalid(TOKEN_REQUEST.kind, TOKEN_REQUEST.group, "", causes)
        meta["name"], meta["namespace"] = name, namespace
        return await self.auth().request_token(namespace, name, obj, sa, r.req.user, r.timing)
