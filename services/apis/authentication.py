"""authentication.k8s.io/v1: TokenReview and SelfSubjectReview (answered by the auth service, never
stored), and TokenRequest, the kind of serviceaccounts/token."""
from __future__ import annotations

from services.apiserver.resource import GroupVersion, ResourceInfo

from .strategies.reviews import ReviewStrategy, TokenRequestStrategy
from .kinds import review

GROUP = "authentication.k8s.io"
_PB = "k8s.io.api.authentication.v1."

TOKEN_REQUEST = ResourceInfo(group=GROUP, version="v1", kind="TokenRequest", plural="tokenrequests",
                             singular="tokenrequest", namespaced=True, key_prefix="", verbs=("create",),
                             virtual=True, strategy=TokenRequestStrategy, protobuf=_PB + "TokenRequest")

V1 = GroupVersion(GROUP, "v1", 17700, 15, (
    review(GROUP, "v1", "SelfSubjectReview", "selfsubjectreviews", ReviewStrategy, _PB + "SelfSubjectReview"),
    review(GROUP, "v1", "TokenReview", "tokenreviews", ReviewStrategy, _PB + "TokenReview"),
), kinds=(TOKEN_REQUEST,))

GROUP_VERSIONS = (V1,)
