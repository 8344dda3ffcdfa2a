"""RBAC objects in the auth service: informers feeding the RBACIndex, bootstrap policy reconciliation at
start, and the ClusterRole aggregation controller.

All writes go through the registry as system:apiserver, like kube-apiserver's
poststarthook/rbac/bootstrap-roles and the clusterrole-aggregation controller.
"""
from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Iterable
from functools import partial
from typing import Any

import orjson

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import grpcutil
from services.common.background import cancel_and_wait
from services.common.backoff import Backoff
from services.common.errors import AlreadyExists, APIError, Conflict, NotFound
from services.common.identity import APISERVER
from services.common.informer import Informer

from . import bootstrap_policy
from .authorizers.rbac import RBACIndex, Rule, aggregate, covers

log = logging.getLogger(__name__)

RBAC = "rbac.authorization.k8s.io"
KINDS = {"roles": "Role", "clusterroles": "ClusterRole", "rolebindings": "RoleBinding",
         "clusterrolebindings": "ClusterRoleBinding"}
RESOURCES = {v: k for k, v in KINDS.items()}
AUTOUPDATE = "rbac.authorization.kubernetes.io/autoupdate"
# Bootstrap objects reconciled at once.
RECONCILE_WORKERS = 8


async def handle(registry: rgrpc.RegistryStub, verb: str, resource: str, *, name: str = "", namespace: str = "",
                 body: dict[str, Any] | None = None, group: str = RBAC, version: str = "v1",
                 timeout: float = 10) -> dict[str, Any]:
    """One Registry.Handle call as system:apiserver; the answer decoded, errors as APIError."""
    req = rpb.APIRequest(verb=verb, group=group, version=version, resource=resource, name=name,
                         namespace=namespace, user=APISERVER,
                         body=orjson.dumps(body) if body is not None else b"",
                         content_type="application/json" if body is not None else "")
    resp = await grpcutil.call(registry.Handle(req, timeout=timeout), "registry")
    return orjson.loads(resp.body) if resp.body else {}


class PolicyInformers:
    """One informer per RBAC resource; every event is applied to the index before the next one is read,
    so a decision made after an event has been delivered already reflects it."""

    def __init__(self, registry: rgrpc.RegistryStub, index: RBACIndex) -> None:
        self.index = index
        self.informers = {res: Informer(registry, RBAC, "v1", res) for res in KINDS}
        for res, inf in self.informers.items():
            inf.add_handler(partial(self._on_event, KINDS[res]))

    def _on_event(self, kind: str, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        self.index.apply(kind, obj, deleted=event == "DELETED")

    def start(self) -> None:
        for inf in self.informers.values():
            inf.start()

    async def stop(self) -> None:
        for inf in self.informers.values():
            await inf.stop()

    def synced(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers.values())


# Bootstrap policy -------------------------------------------------------------------


def bootstrap_objects() -> list[dict[str, Any]]:
    return [*bootstrap_policy.CLUSTER_ROLES, *bootstrap_policy.CLUSTER_ROLE_BINDINGS, *bootstrap_policy.ROLES]


def _merge_meta(existing: dict[str, Any], expected: dict[str, Any]) -> bool:
    """Add the expected labels and annotations (kube's reconcile merges them in)."""
    changed = False
    meta = existing.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        want = (expected.get("metadata") or {}).get(key) or {}
        have = meta.setdefault(key, {})
        for k, v in want.items():
            if have.get(k) != v:
                have[k] = v
                changed = True
    return changed


def reconcile_role(existing: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any] | None:
    """The updated Role/ClusterRole, or None when nothing is missing. Union only: nothing is removed.

    Rules of an aggregated role belong to the aggregation controller; only its selectors are reconciled.
    """
    out = copy.deepcopy(existing)
    changed = _merge_meta(out, expected)
    want_agg = expected.get("aggregationRule")
    if want_agg:
        have = out.setdefault("aggregationRule", {}).setdefault("clusterRoleSelectors", [])
        for sel in want_agg.get("clusterRoleSelectors") or []:
            if sel not in have:
                have.append(sel)
                changed = True
    else:
        rules = out.get("rules") or []
        owned = [Rule.from_dict(r) for r in rules]
        for r in expected.get("rules") or []:
            if not covers(owned, [Rule.from_dict(r)])[0]:
                rules.append(r)
                owned.append(Rule.from_dict(r))
                changed = True
        out["rules"] = rules
    return out if changed else None


def _subject_key(s: dict[str, Any]) -> tuple[str, str, str]:
    return s.get("kind", ""), s.get("name", ""), s.get("namespace", "")


def reconcile_binding(existing: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any] | None:
    out = copy.deepcopy(existing)
    changed = _merge_meta(out, expected)
    subjects = out.get("subjects") or []
    have = {_subject_key(s) for s in subjects}
    for s in expected.get("subjects") or []:
        if _subject_key(s) not in have:
            subjects.append(s)
            have.add(_subject_key(s))
            changed = True
    out["subjects"] = subjects
    return out if changed else None


async def reconcile_one(registry: rgrpc.RegistryStub, expected: dict[str, Any]) -> str:
    """Create a missing bootstrap object, or add what an autoupdate one lacks. Returns what was done."""
    kind = expected["kind"]
    resource = RESOURCES[kind]
    meta = expected["metadata"]
    name, ns = meta["name"], meta.get("namespace", "")
    try:
        existing = await handle(registry, "get", resource, name=name, namespace=ns)
    except NotFound:
        try:
            await handle(registry, "create", resource, namespace=ns, body=expected)
            return "created"
        except AlreadyExists:
            existing = await handle(registry, "get", resource, name=name, namespace=ns)
    if ((existing.get("metadata") or {}).get("annotations") or {}).get(AUTOUPDATE) != "true":
        return "skipped"
    if kind.endswith("Binding"):
        if existing.get("roleRef") != expected.get("roleRef"):
            # roleRef is immutable: kube's reconcile recreates the binding
            await handle(registry, "delete", resource, name=name, namespace=ns)
            await handle(registry, "create", resource, namespace=ns, body=expected)
            return "recreated"
        updated = reconcile_binding(existing, expected)
    else:
        updated = reconcile_role(existing, expected)
    if updated is None:
        return "unchanged"
    await handle(registry, "update", resource, name=name, namespace=ns, body=updated)
    return "updated"


async def reconcile_bootstrap(registry: rgrpc.RegistryStub, objects: Iterable[dict[str, Any]] | None = None) -> None:
    """Reconcile every bootstrap object, retrying each until the registry answers; RECONCILE_WORKERS
    at a time (one after the other, a restarted auth waited for ~35 round trips before it was ready)."""
    workers = asyncio.Semaphore(RECONCILE_WORKERS)

    async def reconcile(obj: dict[str, Any]) -> None:
        backoff = Backoff()
        async with workers:
            while True:
                try:
                    done = await reconcile_one(registry, obj)
                    if done != "unchanged":
                        log.info("bootstrap %s %s: %s", obj["kind"], obj["metadata"]["name"], done)
                    return
                except APIError as e:
                    delay = backoff.delay()
                    log.info("bootstrap %s %s: %s; retrying in %.2fs", obj["kind"], obj["metadata"]["name"],
                             e.message, delay)
                    await asyncio.sleep(delay)

    await asyncio.gather(*(reconcile(obj) for obj in list(objects if objects is not None else bootstrap_objects())))


# ClusterRole aggregation ------------------------------------------------------------


def _rules_key(rules: list[dict[str, Any]] | None) -> list[Rule]:
    return [Rule.from_dict(r) for r in rules or []]


def desired_aggregation(cluster_roles: dict[str, dict[str, Any]], max_rounds: int = 10) -> dict[str, list[dict[str, Any]]]:
    """The rules every aggregated ClusterRole should hold, iterated to a fixpoint so that roles aggregating
    aggregated roles (admin ⊇ edit ⊇ view) settle in one pass."""
    roles = {n: dict(o) for n, o in cluster_roles.items()}
    result: dict[str, list[dict[str, Any]]] = {}
    for _ in range(max_rounds):
        result = aggregate(roles)
        changed = False
        for name, rules in result.items():
            if _rules_key(roles[name].get("rules")) != _rules_key(rules):
                roles[name] = {**roles[name], "rules": rules}
                changed = True
        if not changed:
            break
    return result


class AggregationController:
    """Recomputes aggregated ClusterRoles whenever any ClusterRole changes, writing changed rules back."""

    def __init__(self, registry: rgrpc.RegistryStub, informer: Informer) -> None:
        self.registry = registry
        self.informer = informer
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        informer.add_handler(lambda *_: self._wake.set())

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="clusterrole-aggregation")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def sync(self) -> bool:
        """One pass; True when every write went through (False: retry after the next event)."""
        store = {(o.get("metadata") or {}).get("name", ""): o for o in self.informer.store.values()}
        ok = True
        for name, rules in desired_aggregation(store).items():
            current = store[name]
            if _rules_key(current.get("rules")) == _rules_key(rules):
                continue
            updated = {**current, "rules": rules}
            try:
                await handle(self.registry, "update", "clusterroles", name=name, body=updated)
                log.info("aggregated ClusterRole %s: %d rules", name, len(rules))
            except (Conflict, NotFound):
                ok = False  # the informer brings the newer version, which wakes us again
            except APIError as e:
                log.warning("aggregating ClusterRole %s: %s", name, e.message)
                ok = False
        return ok

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(0.05)  # let a burst of events (a relist) land first
            self._wake.clear()
            if not self.informer.synced.is_set():
                continue
            try:
                if not await self.sync():
                    await asyncio.sleep(0.2)
                    self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the controller must outlive one bad pass
                log.exception("clusterrole aggregation failed")
                await asyncio.sleep(1)
                self._wake.set()


def load_bootstrap_policy(index: RBACIndex) -> RBACIndex:
    """Fill an index with the bootstrap policy as it stands once reconciled and aggregated
    (unit tests and benchmarks, which run without a registry)."""
    objs = bootstrap_objects()
    roles = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ClusterRole"}
    for name, rules in desired_aggregation(roles).items():
        roles[name] = {**roles[name], "rules": rules}
    for o in objs:
        index.apply(o["kind"], roles[o["metadata"]["name"]] if o["kind"] == "ClusterRole" else o)
    return index
