"""The priority-and-fairness-config controller: what each kube-apiserver does for API Priority and Fairness
configuration, done once per cluster by the leading controller-manager.

- The config producer (kube's pkg/registry/flowcontrol/ensurer): the mandatory FlowSchemas and
  PriorityLevelConfigurations are created when missing and put back when changed (but for the exempt
  level's `exempt` member, which is the administrator's); the suggested ones are
  created when missing and kept at kube's spec only while their `apf.kubernetes.io/autoupdate-spec`
  annotation is "true" (or, without one, while the object was never changed: generation 1); an object
  carrying the annotation "true" that is no longer part of the configuration is deleted.
- The config consumer's status writes (kube's apf_controller): every FlowSchema gets a Dangling condition,
  True with reason NotFound when its priority level does not exist, False with reason Found otherwise.
"""
from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

from services.apis.flowcontrol_bootstrap import (
    AUTOUPDATE_ANNOTATION,
    CONFIGURABLE,
    MANDATORY_FLOW_SCHEMAS,
    MANDATORY_PRIORITY_LEVELS,
    SUGGESTED_FLOW_SCHEMAS,
    SUGGESTED_PRIORITY_LEVELS,
)
from services.apiserver.registry.rest import now_rfc3339
from services.common.background import cancel_and_wait
from services.common.errors import AlreadyExists, Conflict, NotFound

from .client import Client, Resource
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

Obj = dict[str, Any]
GROUP = "flowcontrol.apiserver.k8s.io"
FLOW_SCHEMAS = Resource(GROUP, "v1", "flowschemas", "FlowSchema", False, frozenset())
PRIORITY_LEVELS = Resource(GROUP, "v1", "prioritylevelconfigurations", "PriorityLevelConfiguration", False,
                           frozenset())
ENSURE = "ensure"
# kube's producer reconciles the configuration every minute besides at start
RESYNC_SECONDS = 60.0


def _semantic(value: Any) -> Any:
    """A spec with its empty and false members left out, as apiequality.Semantic sees nil and zero alike."""
    if isinstance(value, dict):
        return {k: _semantic(v) for k, v in value.items() if v not in (None, False, [], {}, "")}
    if isinstance(value, list):
        return [_semantic(v) for v in value]
    return value


def should_update_spec(obj: Obj) -> bool:
    """kube's shouldUpdateSpec: the annotation when it is a boolean, else whether the spec is untouched."""
    meta = obj.get("metadata") or {}
    value = str((meta.get("annotations") or {}).get(AUTOUPDATE_ANNOTATION, "")).lower()
    if value in ("true", "1", "t"):
        return True
    if value in ("false", "0", "f"):
        return False
    return meta.get("generation") == 1


def revised(current: Obj | None, wanted: Obj, mandatory: bool) -> Obj | None:
    """The object to write for one bootstrap object (`current` as the cluster holds it), or None."""
    if current is None:
        out = copy.deepcopy(wanted)
        out["metadata"]["annotations"] = {AUTOUPDATE_ANNOTATION: "true"}
        return out
    if not mandatory and not should_update_spec(current):
        return None
    spec = copy.deepcopy(wanted["spec"])
    member = CONFIGURABLE.get((wanted["kind"], wanted["metadata"]["name"])) if mandatory else None
    if member and (current.get("spec") or {}).get(member) is not None:
        spec[member] = copy.deepcopy(current["spec"][member])  # the administrator's to set
    annotations = (current.get("metadata") or {}).get("annotations") or {}
    if annotations.get(AUTOUPDATE_ANNOTATION) == "true" and _semantic(current.get("spec")) == _semantic(spec):
        return None
    out = copy.deepcopy(current)
    out["spec"] = spec
    out["metadata"]["annotations"] = {**annotations, AUTOUPDATE_ANNOTATION: "true"}
    return out


def dangling_condition(fs: Obj, levels: set[str]) -> Obj:
    """The Dangling condition kube's APF config controller gives a FlowSchema (no time yet)."""
    level = ((fs.get("spec") or {}).get("priorityLevelConfiguration") or {}).get("name", "")
    if level in levels:
        return {"type": "Dangling", "status": "False", "reason": "Found",
                "message": f'This FlowSchema references the PriorityLevelConfiguration object named "{level}" '
                           "and it exists"}
    return {"type": "Dangling", "status": "True", "reason": "NotFound",
            "message": f'This FlowSchema references the PriorityLevelConfiguration object named "{level}" but '
                       "there is no such object"}


def _same_condition(have: Obj | None, want: Obj) -> bool:
    return have is not None and all(have.get(k) == want[k] for k in ("status", "reason", "message"))


class PriorityAndFairnessConfigController:
    """Keeps kube's bootstrap configuration and every FlowSchema's Dangling condition."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.flow_schemas = client.informer(FLOW_SCHEMAS)
        self.priority_levels = client.informer(PRIORITY_LEVELS)
        self.flow_schemas.add_handler(self._on_flow_schema)
        self.priority_levels.add_handler(self._on_priority_level)
        self.queue = WorkQueue("priority_and_fairness_config", self._sync)
        self._resync: asyncio.Task[None] | None = None
        self._bootstrap = {
            FLOW_SCHEMAS: {o["metadata"]["name"]: (o, True) for o in MANDATORY_FLOW_SCHEMAS}
            | {o["metadata"]["name"]: (o, False) for o in SUGGESTED_FLOW_SCHEMAS},
            PRIORITY_LEVELS: {o["metadata"]["name"]: (o, True) for o in MANDATORY_PRIORITY_LEVELS}
            | {o["metadata"]["name"]: (o, False) for o in SUGGESTED_PRIORITY_LEVELS},
        }

    async def start(self) -> None:
        self.flow_schemas.start()
        self.priority_levels.start()
        await self.flow_schemas.synced.wait()
        await self.priority_levels.synced.wait()
        self.queue.start()
        self._resync = asyncio.create_task(self._resync_every_minute(), name="priority-and-fairness-config-resync")

    async def stop(self) -> None:
        await cancel_and_wait(self._resync)
        self._resync = None
        await self.queue.stop()
        await self.priority_levels.stop()
        await self.flow_schemas.stop()

    # events ------------------------------------------------------------------------------------

    def _on_flow_schema(self, typ: str, obj: Obj, _old: Obj | None) -> None:
        self._maybe_ensure(FLOW_SCHEMAS, obj)
        if typ != "DELETED":
            self.queue.add(("status", obj["metadata"]["name"]))

    def _on_priority_level(self, typ: str, obj: Obj, old: Obj | None) -> None:
        self._maybe_ensure(PRIORITY_LEVELS, obj)
        if typ in ("ADDED", "DELETED"):
            name = obj["metadata"]["name"]
            for fs in self.flow_schemas.store.values():
                if ((fs.get("spec") or {}).get("priorityLevelConfiguration") or {}).get("name") == name:
                    self.queue.add(("status", fs["metadata"]["name"]))

    def _maybe_ensure(self, res: Resource, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("name") in self._bootstrap[res] or (meta.get("annotations") or {}).get(AUTOUPDATE_ANNOTATION):
            self.queue.add(ENSURE)

    # work --------------------------------------------------------------------------------------

    async def _resync_every_minute(self) -> None:
        while True:
            self.queue.add(ENSURE)
            await asyncio.sleep(RESYNC_SECONDS)

    async def _sync(self, key: Any) -> None:
        if key == ENSURE:
            await self._ensure()
        else:
            await self._sync_status(key[1])

    async def _ensure(self) -> None:
        # priority levels first, so that the bootstrap FlowSchemas never dangle
        for res in (PRIORITY_LEVELS, FLOW_SCHEMAS):
            store = self.flow_schemas.store if res is FLOW_SCHEMAS else self.priority_levels.store
            for name, (wanted, mandatory) in self._bootstrap[res].items():
                current = store.get(name)
                out = revised(current, wanted, mandatory)
                if out is None:
                    continue
                try:
                    if current is None:
                        await self.client.create(res, "", out)
                        log.info("created %s %s", res.resource, name)
                    else:
                        await self.client.update(res, out)
                        log.info("restored the spec of %s %s", res.resource, name)
                except (AlreadyExists, Conflict, NotFound):
                    self.queue.add_after(ENSURE, 0.5)  # the informer is behind; look again when it caught up
            for obj in list(store.values()):
                meta = obj.get("metadata") or {}
                if meta.get("name") not in self._bootstrap[res] and \
                        (meta.get("annotations") or {}).get(AUTOUPDATE_ANNOTATION) == "true":
                    try:
                        await self.client.delete(res, "", meta["name"], uid=meta.get("uid", ""))
                        log.info("deleted %s %s: no longer part of the bootstrap configuration", res.resource,
                                 meta["name"])
                    except (NotFound, Conflict):
                        pass

    async def _sync_status(self, name: str) -> None:
        fs = self.flow_schemas.store.get(name)
        if fs is None:
            return
        want = dangling_condition(fs, set(self.priority_levels.store.keys()))
        conditions = list((fs.get("status") or {}).get("conditions") or [])
        have = next((c for c in conditions if c.get("type") == "Dangling"), None)
        if _same_condition(have, want):
            return
        want["lastTransitionTime"] = now_rfc3339()
        out = copy.deepcopy(fs)
        out["status"] = {**(fs.get("status") or {}),
                         "conditions": [c for c in conditions if c.get("type") != "Dangling"] + [want]}
        try:
            await self.client.update(FLOW_SCHEMAS, out, "status")
        except Conflict:
            self.queue.add_after(("status", name), 0.5)
        except NotFound:
            pass
