"""The resource catalogue: what the registry serves, as discovery and storage see it."""
from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field

STANDARD_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class SubresourceInfo:
    name: str
    kind: str
    verbs: tuple[str, ...]
    # The response kind's group and version when they are not the parent's (serviceaccounts/token answers
    # an authentication.k8s.io/v1 TokenRequest).
    group: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class ResourceInfo:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    key_prefix: str  # etcd key prefix ending in "/"
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = STANDARD_VERBS
    categories: tuple[str, ...] = ()
    subresources: tuple[SubresourceInfo, ...] = ()
    # Create-only and never stored: the answer is computed by the auth service (TokenReview, the
    # access reviews), as kube's registry/authentication and registry/authorization REST objects do.
    virtual: bool = False
    _sub: dict[str, SubresourceInfo] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._sub.update({s.name: s for s in self.subresources})

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def group_resource(self) -> str:
        """configmaps, apiservices.apiregistration.k8s.io: how kube names a resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def subresource(self, name: str) -> SubresourceInfo | None:
        return self._sub.get(name)

    def key(self, namespace: str, name: str) -> str:
        if self.namespaced:
            return f"{self.key_prefix}{namespace}/{name}"
        return f"{self.key_prefix}{name}"

    def collection_prefix(self, namespace: str) -> str:
        """The key prefix of a list or watch; always ends in "/" so that "a" never matches "ab"."""
        if self.namespaced and namespace:
            return f"{self.key_prefix}{namespace}/"
        return self.key_prefix

    def storage_version_hash(self) -> str:
        digest = hashlib.sha256(f"{self.group}/{self.version}/{self.kind}".encode()).digest()
        return base64.b64encode(digest[:8]).decode()


_STATUS_VERBS = ("get", "patch", "update")

CORE_V1: tuple[ResourceInfo, ...] = (
    ResourceInfo(
        group="", version="v1", kind="ConfigMap", plural="configmaps", singular="configmap", namespaced=True,
        key_prefix="/registry/configmaps/", short_names=("cm",),
    ),
    ResourceInfo(
        group="", version="v1", kind="Event", plural="events", singular="event", namespaced=True,
        key_prefix="/registry/events/", short_names=("ev",),
    ),
    ResourceInfo(
        group="", version="v1", kind="Namespace", plural="namespaces", singular="namespace", namespaced=False,
        key_prefix="/registry/namespaces/", short_names=("ns",),
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        subresources=(
            SubresourceInfo("finalize", "Namespace", ("update",)),
            SubresourceInfo("status", "Namespace", _STATUS_VERBS),
        ),
    ),
    ResourceInfo(
        group="", version="v1", kind="Secret", plural="secrets", singular="secret", namespaced=True,
        key_prefix="/registry/secrets/",
    ),
    ResourceInfo(
        group="", version="v1", kind="Endpoints", plural="endpoints", singular="endpoints", namespaced=True,
        key_prefix="/registry/services/endpoints/", short_names=("ep",),
    ),
    ResourceInfo(
        group="", version="v1", kind="Service", plural="services", singular="service", namespaced=True,
        key_prefix="/registry/services/specs/", short_names=("svc",), categories=("all",),
        subresources=(SubresourceInfo("status", "Service", _STATUS_VERBS),),
    ),
    ResourceInfo(
        group="", version="v1", kind="ServiceAccount", plural="serviceaccounts", singular="serviceaccount",
        namespaced=True, key_prefix="/registry/serviceaccounts/", short_names=("sa",),
        subresources=(SubresourceInfo("token", "TokenRequest", ("create",), "authentication.k8s.io", "v1"),),
    ),
)

APIREGISTRATION_V1: tuple[ResourceInfo, ...] = (
    ResourceInfo(
        group="apiregistration.k8s.io", version="v1", kind="APIService", plural="apiservices",
        singular="apiservice", namespaced=False, key_prefix="/registry/apiregistration.k8s.io/apiservices/",
        categories=("api-extensions",),
        subresources=(SubresourceInfo("status", "APIService", _STATUS_VERBS),),
    ),
)

DISCOVERY_V1: tuple[ResourceInfo, ...] = (
    ResourceInfo(
        group="discovery.k8s.io", version="v1", kind="EndpointSlice", plural="endpointslices",
        singular="endpointslice", namespaced=True, key_prefix="/registry/endpointslices/",
    ),
)

_RBAC = "rbac.authorization.k8s.io"
RBAC_V1: tuple[ResourceInfo, ...] = (
    ResourceInfo(
        group=_RBAC, version="v1", kind="ClusterRoleBinding", plural="clusterrolebindings",
        singular="clusterrolebinding", namespaced=False, key_prefix="/registry/clusterrolebindings/",
    ),
    ResourceInfo(
        group=_RBAC, version="v1", kind="ClusterRole", plural="clusterroles", singular="clusterrole",
        namespaced=False, key_prefix="/registry/clusterroles/",
    ),
    ResourceInfo(
        group=_RBAC, version="v1", kind="RoleBinding", plural="rolebindings", singular="rolebinding",
        namespaced=True, key_prefix="/registry/rolebindings/",
    ),
    ResourceInfo(
        group=_RBAC, version="v1", kind="Role", plural="roles", singular="role", namespaced=True,
        key_prefix="/registry/roles/",
    ),
)


def _review(group: str, kind: str, plural: str, namespaced: bool = False) -> ResourceInfo:
    return ResourceInfo(group=group, version="v1", kind=kind, plural=plural, singular=plural[:-1],
                        namespaced=namespaced, key_prefix="", verbs=("create",), virtual=True)


AUTHENTICATION_V1: tuple[ResourceInfo, ...] = (
    _review("authentication.k8s.io", "SelfSubjectReview", "selfsubjectreviews"),
    _review("authentication.k8s.io", "TokenReview", "tokenreviews"),
)

AUTHORIZATION_V1: tuple[ResourceInfo, ...] = (
    _review("authorization.k8s.io", "LocalSubjectAccessReview", "localsubjectaccessreviews", namespaced=True),
    _review("authorization.k8s.io", "SelfSubjectAccessReview", "selfsubjectaccessreviews"),
    _review("authorization.k8s.io", "SelfSubjectRulesReview", "selfsubjectrulesreviews"),
    _review("authorization.k8s.io", "SubjectAccessReview", "subjectaccessreviews"),
)

# Priorities kube-aggregator gives the local APIServices it registers (apiVersionPriorities).
GROUP_PRIORITIES: dict[tuple[str, str], tuple[int, int]] = {
    ("", "v1"): (18000, 1),
    ("apiregistration.k8s.io", "v1"): (17400, 15),
    ("authentication.k8s.io", "v1"): (17700, 15),
    ("authorization.k8s.io", "v1"): (17600, 15),
    ("rbac.authorization.k8s.io", "v1"): (17000, 15),
    ("discovery.k8s.io", "v1"): (16200, 15),
}


class Catalogue:
    """Every served resource, looked up by group/version/plural."""

    def __init__(self, resources: tuple[ResourceInfo, ...]) -> None:
        self.resources = resources
        self._by_gvr = {(r.group, r.version, r.plural): r for r in resources}

    def lookup(self, group: str, version: str, plural: str) -> ResourceInfo | None:
        return self._by_gvr.get((group, version, plural))

    def group_versions(self) -> list[tuple[str, str]]:
        """(group, version) pairs in catalogue order, core first."""
        seen: list[tuple[str, str]] = []
        for r in self.resources:
            if (r.group, r.version) not in seen:
                seen.append((r.group, r.version))
        return seen

    def in_group_version(self, group: str, version: str) -> list[ResourceInfo]:
        return sorted((r for r in self.resources if r.group == group and r.version == version),
                      key=lambda r: r.plural)

    def namespaced(self) -> list[ResourceInfo]:
        """Namespaced resources that are stored (what a namespace's deletion must empty)."""
        return [r for r in self.resources if r.namespaced and not r.virtual]


DEFAULT_CATALOGUE = Catalogue(CORE_V1 + APIREGISTRATION_V1 + AUTHENTICATION_V1 + AUTHORIZATION_V1 + RBAC_V1
                              + DISCOVERY_V1)
