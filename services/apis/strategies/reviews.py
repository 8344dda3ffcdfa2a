"""The create-only kinds the auth service answers: TokenReview, SelfSubjectReview, the access reviews and
TokenRequest. The registry decodes them (GVK, schema, fieldValidation); it never stores them."""
from __future__ import annotations

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy

DEFAULT_TOKEN_SECONDS = 60 * 60
MIN_TOKEN_SECONDS = 10 * 60
MAX_TOKEN_SECONDS = 1 << 32


class ReviewStrategy(Strategy):
    """Decoding only: the answer is the auth service's."""


class TokenRequestStrategy(ReviewStrategy):
    def canonicalize(self, obj: Obj) -> None:
        """SetDefaults_TokenRequestSpec: an hour unless the client asks otherwise."""
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            spec = obj["spec"] = {}
        if spec.get("expirationSeconds") is None:
            spec["expirationSeconds"] = DEFAULT_TOKEN_SECONDS

    def validate(self, obj: Obj) -> list[v.Cause]:
        """ValidateTokenRequest."""
        seconds = (obj.get("spec") or {}).get("expirationSeconds") or 0
        causes = []
        if seconds < MIN_TOKEN_SECONDS:
            causes.append(v.invalid("spec.expirationSeconds", seconds,
                                    "may not specify a duration less than 10 minutes"))
        if seconds > MAX_TOKEN_SECONDS:
            causes.append(v.invalid("spec.expirationSeconds", seconds,
                                    "may not specify a duration larger than 2^32 seconds"))
        return causes
