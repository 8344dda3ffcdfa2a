"""status.typeChecking of ValidatingAdmissionPolicies (kube's validatingadmissionpolicystatus controller).

cel-rust has no type checker, so this checks what a schema decides: each `object.a.b` / `oldObject.a.b`
field path against the definitions of the kinds the policy's resourceRules name (wildcards: not checked,
as kube). A field the schema does not have is kube's "undefined field" warning; the expression still runs
(and fails at evaluation, following failurePolicy)."""
from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import orjson

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver.catalogue import Catalogue
from services.common import grpcutil
from services.common.errors import APIError
from services.common.identity import APISERVER

log = logging.getLogger(__name__)
Obj = dict[str, Any]
_PATH = re.compile(r"(?<![\w.])(object|oldObject)((?:\.[A-Za-z_]\w*)+)")


def _kinds(catalogue: Catalogue) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(group, version, plural) -> (kind, definition name)."""
    from services.apis import schemas  # on first use: most admission servers never type-check

    out = {}
    for info in catalogue.kinds():
        try:
            out[(info.group, info.version, info.plural)] = (info.kind, schemas.definition_for(
                info.group, info.version, info.kind))
        except KeyError:
            continue
    return out


def checked_kinds(policy: Obj, catalogue: Catalogue) -> list[tuple[str, str]]:
    """(gvk text, definition) of each kind the resourceRules name exactly."""
    kinds = _kinds(catalogue)
    out = []
    for rule in ((policy.get("spec") or {}).get("matchConstraints") or {}).get("resourceRules") or []:
        for g in rule.get("apiGroups") or []:
            for v in rule.get("apiVersions") or []:
                for r in rule.get("resources") or []:
                    hit = kinds.get((g, v, r))
                    if hit and "*" not in (g, v, r):
                        out.append((f"{g}/{v}, Kind={hit[0]}", hit[1]))
    return out


def _undefined_field(expression: str, definition: str) -> str | None:
    from services.apis import schemas

    for m in _PATH.finditer(expression):
        schema = schemas.ALL[definition]
        pos = m.start(2)
        for field in m.group(2)[1:].split("."):
            schema = schemas.resolve(schema)
            props = schema.get("properties")
            if props is not None:
                if field not in props:
                    col = pos + 1
                    return (f"ERROR: <input>:1:{col}: undefined field '{field}'\n | {expression}\n"
                            f" | {'.' * (col - 1)}^")
                schema = props[field]
            elif isinstance(schema.get("additionalProperties"), dict):
                schema = schema["additionalProperties"]  # a map: any key
            else:
                break
            pos += len(field) + 1
    return None


def _expressions(spec: Obj) -> list[tuple[str, str]]:
    out = []
    for key, fields in (("validations", ("expression", "messageExpression")), ("matchConditions", ("expression",)),
                        ("variables", ("expression",)), ("auditAnnotations", ("valueExpression",))):
        for i, item in enumerate(spec.get(key) or []):
            for f in fields:
                if isinstance((item or {}).get(f), str):
                    out.append((f"spec.{key}[{i}].{f}", item[f]))
    return out


def type_check(policy: Obj, catalogue: Catalogue) -> list[Obj]:
    """status.typeChecking.expressionWarnings."""
    kinds = checked_kinds(policy, catalogue)
    warnings = []
    for ref, expression in _expressions(policy.get("spec") or {}):
        found = [f"{gvk}: {err}" for gvk, d in kinds if (err := _undefined_field(expression, d))]
        if found:
            warnings.append({"fieldRef": ref, "warning": "\n".join(found)})
    return warnings


class TypeChecker:
    """Writes status (observedGeneration, typeChecking) of each policy generation it has not checked yet."""

    def __init__(self, registry: rgrpc.RegistryStub | None, version: str, plural: str) -> None:
        self.registry = registry
        self.version, self.plural = version, plural
        self.catalogue = Catalogue()  # the server's kinds, given by set_catalogue
        self._tasks: set[asyncio.Task[None]] = set()

    def on_event(self, event: str, obj: Obj, old: Obj | None) -> None:
        if event == "DELETED" or self.registry is None:
            return
        gen = (obj.get("metadata") or {}).get("generation")
        if (obj.get("status") or {}).get("observedGeneration") == gen:
            return
        task = asyncio.get_running_loop().create_task(self._write(obj))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, obj: Obj) -> None:
        assert self.registry is not None
        body = dict(obj)
        body["status"] = {**(obj.get("status") or {}), "observedGeneration": obj["metadata"].get("generation"),
                          "typeChecking": {"expressionWarnings": type_check(obj, self.catalogue)}}
        if not body["status"]["typeChecking"]["expressionWarnings"]:
            body["status"]["typeChecking"] = {}
        req = rpb.APIRequest(verb="update", group="admissionregistration.k8s.io", version=self.version,
                             resource=self.plural, subresource="status", name=obj["metadata"]["name"],
                             body=orjson.dumps(body), content_type="application/json", user=APISERVER)
        try:
            resp = await grpcutil.call(self.registry.Handle(req, timeout=10), "registry")
            if resp.code >= 400 and resp.code != 409:  # a conflict: the newer version's event checks again
                log.info("status of %s %s: %s", self.plural, obj["metadata"]["name"], resp.body[:200])
        except APIError as e:
            log.info("status of %s %s: %s", self.plural, obj["metadata"]["name"], e.message)

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
