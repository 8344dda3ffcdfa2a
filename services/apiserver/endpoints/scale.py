"""kube's ScaleREST: a kind's /scale subresource (autoscaling/v1 Scale), read from and written into the
parent's spec.replicas through the kind's strategy (to_scale, scale_into). Installed by the handlers for
every kind whose definition lists the subresource."""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import orjson

from apiary_pb import envelope_pb2 as pb
from services.common import envelope, errors
from services.common.errors import BadRequest

from .. import fieldmanager
from .. import patch as patches
from ..registry.rest import Strategy
from ..registry.scope import Obj
from ..registry.store import Store
from .request import Decoder, Request, Response


class Parent(Protocol):
    """What a subresource reads and writes of its parent kind (the handlers)."""

    decoder: Decoder

    def rest(self, r: Request) -> Store: ...

    async def update_object(self, r: Request, transform: Callable[[Obj], Obj],
                            operation: str = fieldmanager.UPDATE) -> tuple[int, pb.Object]: ...


class ScaleREST:
    def __init__(self, parent: Parent, scale: Strategy) -> None:
        self.parent, self.scale = parent, scale
        self.verbs = {"get": self.get, "update": self.update, "patch": self.patch}

    async def get(self, r: Request) -> Response:
        env = await self.parent.rest(r).get(r, r.req.name, r.query.get("resourceVersion", ""))
        return Response(200, orjson.dumps(r.strategy.to_scale(envelope.from_envelope(env))))

    async def _write(self, r: Request, scale_of: Callable[[Obj], Obj]) -> Response:
        """The parent's update with spec.replicas from the Scale that scale_of(current Scale) gives; a
        resourceVersion in it is a precondition, as kube's scaleUpdatedObjectInfo makes it."""
        scale_request = r.as_body_kind(self.scale)

        def transform(current: Obj) -> Obj:
            scale = scale_of(r.strategy.to_scale(current))
            causes = scale_request.strategy.validate(scale)
            if causes:
                raise errors.invalid("Scale", "autoscaling", r.req.name, causes)
            rv = (scale.get("metadata") or {}).get("resourceVersion")
            if rv:
                current["metadata"]["resourceVersion"] = rv
            r.strategy.scale_into(current, (scale.get("spec") or {}).get("replicas") or 0)
            return current

        code, env = await self.parent.update_object(r, transform)
        return Response(code, orjson.dumps(r.strategy.to_scale(envelope.from_envelope(env))))

    async def update(self, r: Request) -> Response:
        scale = await self.parent.decoder.decode(r.as_body_kind(self.scale), r.req.body)
        body_name = scale["metadata"].get("name") or ""
        if body_name != r.req.name:
            raise BadRequest(f"the name of the object ({body_name}) does not match the name on the URL "
                             f"({r.req.name})")
        return await self._write(r, lambda current: scale)

    async def patch(self, r: Request) -> Response:
        ptype = patches.patch_type(r.req.content_type)
        if ptype == patches.APPLY_PATCH:
            raise errors.UnsupportedMediaType(f"the body of the request was in an unknown format - accepted media "
                                              f"types include: {', '.join(patches.PATCH_TYPES[:3])}")
        doc = patches.decode_patch(r.req.body, ptype)
        scale_request = r.as_body_kind(self.scale)

        def patched(current: Obj) -> Obj:
            if ptype == patches.JSON_PATCH:
                new = patches.apply_json_patch(current, doc)
            elif ptype == patches.MERGE_PATCH:
                new = patches.apply_merge_patch(current, doc)
            else:
                new = patches.apply_strategic_merge_patch(current, doc, {}, frozenset())
            if not isinstance(new, dict):
                raise BadRequest("the patched object is not a JSON object")
            return self.parent.decoder.check_object(scale_request, new)

        return await self._write(r, patched)
