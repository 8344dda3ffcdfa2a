"""authorization.k8s.io/v1: the access reviews, answered by the auth service and never stored."""
from __future__ import annotations

from services.apiserver.resource import GroupVersion

from .strategies.reviews import ReviewStrategy
from .kinds import review

GROUP = "authorization.k8s.io"
_PB = "k8s.io.api.authorization.v1."

V1 = GroupVersion(GROUP, "v1", 17600, 15, (
    review(GROUP, "v1", "LocalSubjectAccessReview", "localsubjectaccessreviews", ReviewStrategy,
           _PB + "LocalSubjectAccessReview", namespaced=True),
    review(GROUP, "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", ReviewStrategy,
           _PB + "SelfSubjectAccessReview"),
    review(GROUP, "v1", "SelfSubjectRulesReview", "selfsubjectrulesreviews", ReviewStrategy,
           _PB + "SelfSubjectRulesReview"),
    review(GROUP, "v1", "SubjectAccessReview", "subjectaccessreviews", ReviewStrategy,
           _PB + "SubjectAccessReview"),
))

GROUP_VERSIONS = (V1,)
