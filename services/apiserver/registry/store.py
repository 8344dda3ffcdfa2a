"""kube's registry/generic Store: create, guaranteed update, delete and delete collection of any kind, with
name generation, system fields and the strategy's rules, over a storage client (Storage).

Admission and the checks after the strategy's validation arrive as function arguments (scope.AdmitFunc,
scope.ValidateFunc), as kube's handlers pass rest.ValidateObjectFunc, and so does the field manager's record
of an Update (ManageFields): this module imports nothing from the endpoints nor from a service. Each write serializes its object once: the envelope that validation sees is the one
storage writes and the answer is rendered from.
"""
from __future__ import annotations

import copy
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Protocol

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.common import envelope, errors, tracing
from services.common.uids import new_uid

from ..resource import ResourceInfo
from .rest import now_rfc3339
from .scope import AdmitFunc, Obj, Scope, ValidateFunc, ensure_namespace, invalid

log = logging.getLogger(__name__)

GUARANTEED_UPDATE_ATTEMPTS = 16
GENERATE_NAME_ATTEMPTS = 8
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
MAX_GENERATED_NAME_LENGTH = 63 - 5
NAMESPACE_TERMINATING = ("The system is ensuring all content is removed from this namespace.  Upon completion, "
                         "this namespace will automatically be purged by the system.")
RESOURCE_VERSION_ON_CREATE = "resourceVersion should not be set on objects to be created"
# Storage marks a value encrypted by an older provider or key: kube rewrites it even unchanged.
STALE_ENCRYPTION = "apiary.storage/stale-encryption"


# The garbage collector's finalizers (metav1.FinalizerOrphanDependents, FinalizerDeleteDependents).
ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"


def _should_orphan(opts: Obj, finalizers: list[str], default_policy: str) -> bool:
    """kube's shouldOrphanDependents: the request's choice, else the object's finalizers, else the kind's."""
    if default_policy == "Unsupported":
        return False
    if opts.get("orphanDependents") is not None:
        return bool(opts["orphanDependents"])
    policy = opts.get("propagationPolicy")
    if policy:
        return policy == "Orphan"
    if ORPHAN_FINALIZER in finalizers:
        return True
    if FOREGROUND_FINALIZER in finalizers:
        return False
    return default_policy == "OrphanDependents"


def _should_delete_dependents(opts: Obj, finalizers: list[str], default_policy: str) -> bool:
    """kube's shouldDeleteDependents: Foreground asked for, or already the object's choice."""
    if default_policy == "Unsupported" or opts.get("orphanDependents") is not None:
        return False
    policy = opts.get("propagationPolicy")
    if policy:
        return policy == "Foreground"
    return FOREGROUND_FINALIZER in finalizers


def deletion_finalizers(opts: Obj, finalizers: list[str], default_policy: str) -> list[str]:
    """kube's deletionFinalizersForGarbageCollection: the object's finalizers with the garbage
    collector's own set as the delete asks (orphan or foregroundDeletion, at most one)."""
    orphan = _should_orphan(opts, finalizers, default_policy)
    foreground = _should_delete_dependents(opts, finalizers, default_policy)
    out = [f for f in finalizers if f not in (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)]
    if orphan:
        out.append(ORPHAN_FINALIZER)
    if foreground:
        out.append(FOREGROUND_FINALIZER)
    return out


# managedFields' operations (the field manager's): an Update records what it changed, an Apply was merged
APPLY, UPDATE = "Apply", "Update"
Timing = dict[str, float]


class Storage(Protocol):
    """What the Store needs of storage (kube's storage.Interface): the registry's storage client."""

    async def get(self, info: ResourceInfo, namespace: str, name: str, resource_version: str = "",
                  timing: Timing | None = None) -> pb.Object: ...

    async def create(self, info: ResourceInfo, obj: pb.Object, timing: Timing | None = None) -> pb.Object: ...

    async def update(self, info: ResourceInfo, obj: pb.Object, expected_resource_version: str,
                     timing: Timing | None = None) -> pb.Object: ...

    async def delete(self, info: ResourceInfo, namespace: str, name: str, uid: str = "",
                     resource_version: str = "", timing: Timing | None = None) -> pb.Object: ...

    async def list(self, info: ResourceInfo, req: spb.ListRequest,
                   timing: Timing | None = None) -> spb.ListResponse: ...


async def list_all(storage: Storage, info: ResourceInfo, prefix: str, label_selector: str = "",
                   field_selector: str = "") -> list[pb.Object]:
    """Every object under prefix, following continue tokens."""
    out: list[pb.Object] = []
    token = ""
    while True:
        resp = await storage.list(info, spb.ListRequest(prefix=prefix, limit=500, label_selector=label_selector,
                                                        field_selector=field_selector, **{"continue": token}))
        out.extend(resp.items)
        token = getattr(resp, "continue")
        if not token:
            return out


# The field manager's record of an Update: (scope, the object, the current object or None on create).
ManageFields = Callable[[Scope, Obj, Obj | None], None]
# A hook's finish(success): called once the write it came before succeeded or failed.
Finish = Callable[[bool], Awaitable[None]]
BeginCreate = Callable[[Obj, bool], Awaitable[Finish | None]]  # (object, dry run)
BeginUpdate = Callable[[Obj, Obj], Awaitable[Finish | None]]   # (object, current object)
AfterDelete = Callable[[Obj], Awaitable[None]]                 # (the deleted object)


def generate_name(base: str) -> str:
    """names.SimpleNameGenerator: base (cut to 58) + 5 random characters."""
    return base[:MAX_GENERATED_NAME_LENGTH] + "".join(random.choice(NAME_ALPHABET) for _ in range(5))


class Store:
    """One kind's Store. Its hooks are kube's: set by the kind's storage when it claims something besides the
    object itself (a Service's ClusterIP), None for most kinds."""

    def __init__(self, storage: Storage, manage_fields: ManageFields, begin_create: BeginCreate | None = None,
                 begin_update: BeginUpdate | None = None, after_delete: AfterDelete | None = None) -> None:
        self.storage = storage
        self.manage_fields = manage_fields
        # BeginCreate: after validation, before the write; may claim what the object needs and return a
        # finish(success), called once the write succeeded or failed
        self.begin_create = begin_create
        # BeginUpdate: before an update's write (not for a dry run), for what a change claims or gives back
        self.begin_update = begin_update
        # AfterDelete: once the object is gone from storage (releases what BeginCreate claimed)
        self.after_delete = after_delete

    # Envelopes ---------------------------------------------------------------------------

    @staticmethod
    def to_envelope(r: Scope, obj: Obj) -> pb.Object:
        """The object serialized for storage, with the selectable fields storage filters on."""
        env = envelope.to_envelope(obj)
        env.fields.update(r.strategy.selectable_fields(obj))
        return env

    # Reads -------------------------------------------------------------------------------

    async def get(self, r: Scope, name: str, resource_version: str = "") -> pb.Object:
        return await self.storage.get(r.info, r.namespace, name, resource_version, r.timing)

    # Create ------------------------------------------------------------------------------

    async def create(self, r: Scope, obj: Obj, validate: ValidateFunc, operation: str = UPDATE) -> pb.Object:
        """(after mutating admission) PrepareForCreate, name, system fields -> Validate -> validate -> write."""
        meta = obj.setdefault("metadata", {})
        claimed_version = meta.get("resourceVersion")
        for k in ("uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink",
                  "generation"):
            meta.pop(k, None)
        r.strategy.prepare_for_create_as(obj, r.req.user)
        generated = bool(meta.get("generateName")) and not meta.get("name")
        if generated:
            meta["name"] = generate_name(meta["generateName"])
        meta["uid"] = new_uid()
        meta["creationTimestamp"] = now_rfc3339()
        if r.strategy.spec_fields:
            meta["generation"] = 1
        self._manage_fields(r, obj, None, operation)
        with tracing.step("strategy validation"):
            causes = r.strategy.validate(obj)
        if causes:
            raise invalid(r, obj, causes)
        # BeginCreate: what the object claims (a Service's ClusterIP), given back if the write fails
        finish = None if self.begin_create is None else await self.begin_create(obj, r.dry_run)
        created = False
        try:
            env = self.to_envelope(r, obj)
            await validate(r, meta["name"], obj, None, env, None)
            if r.dry_run:
                # DryRunnableStorage: a name taken answers as the real create would
                try:
                    await self.storage.get(r.info, r.namespace, meta["name"], "", r.timing)
                except errors.NotFound:
                    return await r.info.through_storage(env)
                raise errors.already_exists(r.info.plural, r.info.group, meta["name"])
            if claimed_version:
                # kube's etcd3 store refuses it with a plain error (a 500 without a reason); bad input is a
                # 400 here, with kube's words
                raise errors.BadRequest(RESOURCE_VERSION_ON_CREATE)
            for attempt in range(GENERATE_NAME_ATTEMPTS):
                try:
                    env = await self.storage.create(r.info, env, r.timing)
                    created = True
                    return env
                except errors.AlreadyExists:
                    if not generated or attempt == GENERATE_NAME_ATTEMPTS - 1:
                        raise
                    env.metadata.name = generate_name(meta["generateName"])
                    env.fields["metadata.name"] = env.metadata.name
            raise AssertionError("unreachable")
        finally:
            if finish is not None:
                await finish(created)

    def _manage_fields(self, r: Scope, obj: Obj, old: Obj | None, operation: str) -> None:
        """An Update records what it changed; an Apply's fields were settled when it merged (patch)."""
        if operation == UPDATE:
            with tracing.step("field manager", {"operation": UPDATE} if tracing.ENABLED else None):
                self.manage_fields(r, obj, old)

    # Update --------------------------------------------------------------------------------

    async def update(self, r: Scope, transform: Callable[[Obj], Obj], admit: AdmitFunc, validate: ValidateFunc,
                     operation: str = UPDATE) -> tuple[int, pb.Object]:
        """GuaranteedUpdate: read, transform, admit, validate, CAS write; retry on a storage conflict unless
        the caller pinned the resourceVersion."""
        info, name = r.info, r.req.name
        for attempt in range(GUARANTEED_UPDATE_ATTEMPTS):
            current_env = await self.get(r, name)
            current = envelope.from_envelope(current_env)
            cur_meta = current["metadata"]
            new = transform(copy.deepcopy(current))
            meta = new.setdefault("metadata", {})
            pinned = meta.get("resourceVersion") or ""
            if pinned and pinned != cur_meta.get("resourceVersion"):
                raise errors.conflict(info.plural, info.group, name, errors.MODIFIED)
            uid = meta.get("uid") or ""
            if uid and uid != cur_meta.get("uid"):
                raise errors.conflict(info.plural, info.group, name,
                                      f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                                      f"{cur_meta.get('uid', '')}")
            new = await admit(r, name, new, current_env) or new
            meta = new.setdefault("metadata", {})
            self._before_update(r, new, current)
            self._manage_fields(r, new, current, operation)
            with tracing.step("strategy validation"):
                causes = r.strategy.validate_update(new, current)
            if causes:
                raise invalid(r, new, causes)
            # an unconditional update takes the current resourceVersion, as kube's Store.Update does
            meta["resourceVersion"] = cur_meta.get("resourceVersion", "")
            same = _same(new, current)
            # BeginUpdate: what the change claims or gives back (a Service turned from or into ExternalName)
            finish = None if same or r.dry_run or self.begin_update is None else \
                await self.begin_update(new, current)
            written = False
            try:
                env = current_env if same else self.to_envelope(r, new)
                await validate(r, name, new, current, env, current_env)
                if same and STALE_ENCRYPTION not in current_env.fields:
                    return 200, current_env
                if r.dry_run:
                    return 200, await r.info.through_storage(env)
                if self._should_delete(info, new):
                    deleted = await self.storage.delete(info, r.namespace, name, cur_meta.get("uid", ""),
                                                        cur_meta.get("resourceVersion", ""), r.timing)
                    if self.after_delete is not None:
                        await self.after_delete(current)
                    return 200, deleted
                env.metadata.resource_version = ""
                updated = await self.storage.update(info, env, cur_meta.get("resourceVersion", ""), r.timing)
                written = True
                return 200, updated
            except errors.Conflict:
                # retried also when pinned: a patch carries the resourceVersion it was applied to, and a
                # request that pinned an older one meets the check above on the next read
                if attempt == GUARANTEED_UPDATE_ATTEMPTS - 1:
                    raise
                log.debug("conflict updating %s %s; retrying", info.plural, name)
            finally:
                if finish is not None:
                    await finish(written)
        raise AssertionError("unreachable")

    @staticmethod
    def _before_update(r: Scope, new: Obj, old: Obj) -> None:
        """rest.BeforeUpdate: system fields come from the old object; the strategy prepares the rest."""
        meta, old_meta = new["metadata"], old["metadata"]
        ensure_namespace(r, new)
        for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        meta.pop("selfLink", None)
        r.strategy.prepare_for_update(new, old)
        # the one rule for every kind with a spec: generation moves when the spec does, never on status
        if r.strategy.spec_fields and r.strategy.spec_changed(new, old):
            meta["generation"] = int(old_meta.get("generation") or 0) + 1

    @staticmethod
    def _should_delete(info: ResourceInfo, obj: Obj) -> bool:
        """An object being deleted goes once its last finalizer is gone (namespaces: spec ones too)."""
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp") or meta.get("finalizers"):
            return False
        if info.plural == "namespaces" and not info.group:
            return not (obj.get("spec") or {}).get("finalizers")
        return True

    # Delete --------------------------------------------------------------------------------

    async def delete(self, r: Scope, name: str, opts: Obj, admit: AdmitFunc, validate: ValidateFunc) -> pb.Object:
        """Preconditions, admission, then either mark the object (finalizers pending) or delete it."""
        info = r.info
        pre = opts.get("preconditions") or {}
        for attempt in range(GUARANTEED_UPDATE_ATTEMPTS):
            current_env = await self.get(r, name)
            current = envelope.from_envelope(current_env)
            meta = current["metadata"]
            if pre.get("uid") and pre["uid"] != meta.get("uid"):
                raise errors.conflict(info.plural, info.group, name,
                                      f"Precondition failed: UID in precondition: {pre['uid']}, UID in object "
                                      f"meta: {meta.get('uid', '')}")
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
                raise errors.conflict(info.plural, info.group, name,
                                      f"Precondition failed: ResourceVersion in precondition: "
                                      f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                      f"{meta.get('resourceVersion', '')}")
            is_namespace = info.plural == "namespaces" and not info.group
            if is_namespace and meta.get("deletionTimestamp") and (current.get("spec") or {}).get("finalizers"):
                raise errors.conflict(info.plural, info.group, name, NAMESPACE_TERMINATING)
            await admit(r, name, None, current_env)
            await validate(r, name, None, current, None, current_env)
            rv = meta.get("resourceVersion", "")
            finalizers = list(meta.get("finalizers") or [])
            gc_finalizers = deletion_finalizers(opts, finalizers, r.strategy.default_garbage_collection_policy)
            finalizers_change = set(gc_finalizers) != set(finalizers)
            pending = bool(gc_finalizers) or (is_namespace and (current.get("spec") or {}).get("finalizers"))
            try:
                if pending:
                    if meta.get("deletionTimestamp") and not is_namespace and not finalizers_change:
                        return current_env
                    marked = copy.deepcopy(current)
                    mm = marked["metadata"]
                    if finalizers_change:
                        mm["finalizers"] = gc_finalizers
                    mm.setdefault("deletionTimestamp", now_rfc3339())
                    mm["deletionGracePeriodSeconds"] = 0
                    if is_namespace:
                        status = marked.get("status") or {}
                        status["phase"] = "Terminating"
                        marked["status"] = status
                    env = self.to_envelope(r, marked)
                    if r.dry_run:
                        return await r.info.through_storage(env)
                    env.metadata.resource_version = ""
                    return await self.storage.update(info, env, rv, r.timing)
                if r.dry_run:
                    return current_env
                deleted = await self.storage.delete(info, r.namespace, name, meta.get("uid", ""), rv, r.timing)
                if self.after_delete is not None:
                    await self.after_delete(current)  # release what it held
                return deleted
            except errors.Conflict:
                if attempt == GUARANTEED_UPDATE_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def delete_collection(self, r: Scope, opts: Obj, label_selector: str, field_selector: str,
                                admit: AdmitFunc, validate: ValidateFunc) -> list[pb.Object]:
        """Every object the selectors match, deleted one by one (one gone meanwhile is skipped)."""
        listed = await list_all(self.storage, r.info, r.info.collection_prefix(r.namespace), label_selector,
                                field_selector)
        deleted: list[pb.Object] = []
        for item in listed:
            sub = r.for_item(item.metadata.namespace)
            try:
                deleted.append(await self.delete(sub, item.metadata.name, opts, admit, validate))
            except errors.NotFound:
                continue
        return deleted


def _same(new: Obj, old: Obj) -> bool:
    """A no-op update is not written (kube skips the etcd write when the bytes are equal); managedFields
    count: an apply that only shares ownership is a change."""
    return new == old
