"""Stand-in for two of kube's bootstrap ClusterRoleBindings until RBAC lands.

- system:public-info-viewer (bound to system:authenticated and system:unauthenticated):
  GET /healthz, /livez, /readyz, /version, /version/; apiary also opens the
  per-check sub-paths /healthz/*, /livez/*, /readyz/* here (kube's role does not).
- system:discovery (bound to system:authenticated): GET /api, /api/*, /apis,
  /apis/*, /openapi, /openapi/*, /version, /version/.

Paths match as RBAC's nonResourceURLs do: exactly, or by prefix for a rule ending in "*".
It answers NoOpinion for everything else, so the modes after it decide.
"""
from __future__ import annotations

from apiary_pb import auth_pb2 as apb
from services.common.identity import AUTHENTICATED, UNAUTHENTICATED

from . import ALLOW, NO_OPINION

PUBLIC_INFO_VIEWER = ("/healthz", "/livez", "/readyz", "/version", "/version/",
                      "/healthz/*", "/livez/*", "/readyz/*")
DISCOVERY = ("/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version", "/version/")

# (binding and role name, subject groups, verbs, non-resource URL rules)
BINDINGS: tuple[tuple[str, tuple[str, ...], frozenset[str], tuple[str, ...]], ...] = (
    ("system:public-info-viewer", (AUTHENTICATED, UNAUTHENTICATED), frozenset({"get"}), PUBLIC_INFO_VIEWER),
    ("system:discovery", (AUTHENTICATED,), frozenset({"get"}), DISCOVERY),
)


def url_matches(rule: str, path: str) -> bool:
    if rule == "*" or rule == path:
        return True
    return rule.endswith("*") and path.startswith(rule[:-1])


class BootstrapPolicyAuthorizer:
    name = "BootstrapPolicy"

    async def authorize(self, attrs: apb.Attributes) -> tuple[str, str]:
        if attrs.resource_request:
            return NO_OPINION, ""
        verb = attrs.verb.lower()
        for name, subjects, verbs, urls in BINDINGS:
            if verb not in verbs or not any(url_matches(u, attrs.path) for u in urls):
                continue
            for group in subjects:
                if group in attrs.user.groups:
                    # The reason RBAC gives, so audit logs read the same once RBAC replaces this.
                    return ALLOW, (f'RBAC: allowed by ClusterRoleBinding "{name}" of ClusterRole "{name}" '
                                   f'to Group "{group}"')
        return NO_OPINION, ""
