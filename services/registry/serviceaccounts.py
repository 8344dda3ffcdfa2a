"""serviceaccounts/token (kube's pkg/registry/core/serviceaccount/storage TokenREST): the TokenRequest
decoded here and answered by the auth service (reviews.Reviews), registered for the ServiceAccounts by
services/registry/rest.py."""
from __future__ import annotations

from services.apis.authentication import TOKEN_REQUEST
from services.apis.strategies.reviews import TokenRequestStrategy
from services.apiserver.endpoints.handlers import Handlers
from services.apiserver.endpoints.request import Request, Response

from .reviews import Reviews
from .storage_client import StorageClient

TOKEN_REQUEST_STRATEGY = TokenRequestStrategy(TOKEN_REQUEST)


class TokenREST:
    def __init__(self, handlers: Handlers[StorageClient], reviews: Reviews) -> None:
        self.h, self.reviews = handlers, reviews
        self.verbs = {"create": self.create}

    async def create(self, r: Request) -> Response:
        obj = await self.h.decoder.decode(r.as_body_kind(TOKEN_REQUEST_STRATEGY), r.req.body)
        return Response(201, await self.reviews.token_request(r, obj))
