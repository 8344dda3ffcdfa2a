"""The shapes of ResourceInfo several groups share: reviews, subresource body kinds, /status, /scale and the
v1 workload kinds."""
from __future__ import annotations

from services.apiserver.printers import TableConvertor
from services.apiserver.registry.rest import Strategy
from services.apiserver.resource import STATUS_VERBS, ResourceInfo, SubresourceInfo


def review(group: str, version: str, kind: str, plural: str, strategy: type[Strategy], protobuf: str = "",
           namespaced: bool = False) -> ResourceInfo:
    """A create-only kind the auth service answers (TokenReview, the access reviews)."""
    return ResourceInfo(group=group, version=version, kind=kind, plural=plural, singular=plural[:-1],
                        namespaced=namespaced, key_prefix="", verbs=("create",), virtual=True,
                        strategy=strategy, protobuf=protobuf)


def body_kind(group: str, version: str, kind: str, strategy: type[Strategy]) -> ResourceInfo:
    """The kind a subresource's body carries when it is not the parent's (autoscaling/v1 Scale, core/v1
    Binding, policy/v1 Eviction): decoded and validated, never stored under its own name."""
    return ResourceInfo(group=group, version=version, kind=kind, plural=kind.lower(), singular=kind.lower(),
                        namespaced=True, key_prefix="", verbs=(), virtual=True, strategy=strategy)


# autoscaling/v1 Scale: what every /scale reads and writes (kube's ScaleREST)
SCALE = SubresourceInfo("scale", "Scale", STATUS_VERBS, "autoscaling", "v1")


def status(kind: str) -> SubresourceInfo:
    """A kind's /status: the same kind, read and written apart from its spec."""
    return SubresourceInfo("status", kind, STATUS_VERBS)


def workload(group: str, kind: str, strategy: type[Strategy], table: TableConvertor,
             short_names: tuple[str, ...] = (), scale: bool = False) -> ResourceInfo:
    """A v1 workload kind (apps, batch): namespaced, in the "all" category, with /status and, when it runs
    replicas, /scale; stored under /registry/<plural>/ and sent by typed clients as k8s.io.api.<group>.v1.<Kind>."""
    plural = kind.lower() + "s"
    return ResourceInfo(group=group, version="v1", kind=kind, plural=plural, singular=kind.lower(),
                        namespaced=True, key_prefix=f"/registry/{plural}/", short_names=short_names,
                        categories=("all",), subresources=((SCALE,) if scale else ()) + (status(kind),),
                        strategy=strategy, table=table, protobuf=f"k8s.io.api.{group}.v1.{kind}")
