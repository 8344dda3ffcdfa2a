"""In-memory stand-ins for the Storage and Admission stubs (unit tests only)."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import jsonpatch
import orjson

from apiary_pb import admission_pb2 as apb
from apiary_pb import auth_pb2 as aupb
from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.common import envelope, errors, watchmux
from services.common.selectors import FieldSelector


class FakeCallStream:
    """A stand-in for a `Calls` stream (services/common/mux/) that runs each frame on a fake stub."""

    def __init__(self, stub: object, requests: dict[str, type], batches: AsyncIterator[pb.Frames]) -> None:
        self.stub, self.requests = stub, requests
        self.out: asyncio.Queue[pb.Frames] = asyncio.Queue()
        self._pump = asyncio.get_running_loop().create_task(self._read(batches))

    async def _read(self, batches: AsyncIterator[pb.Frames]) -> None:
        async for batch in batches:
            for frame in batch.frames:
                if frame.method:  # not flow control (credit, cancel), which this fake ignores
                    asyncio.get_running_loop().create_task(self._run(frame))

    async def _run(self, frame: pb.Frame) -> None:
        try:
            req = self.requests[frame.method].FromString(frame.payload)
            resp = await getattr(self.stub, frame.method)(req)
            if isinstance(resp, list):  # an answer in parts (mux.Streamed), one frame each
                await self.out.put(pb.Frames(frames=[
                    pb.Frame(id=frame.id, payload=p if isinstance(p, bytes) else p.SerializeToString(),
                             more=i < len(resp) - 1)
                    for i, p in enumerate(resp)]))
                return
            out = pb.Frame(id=frame.id, payload=resp.SerializeToString())
        except errors.APIError as e:
            out = pb.Frame(id=frame.id, error=e.to_pb())
        await self.out.put(pb.Frames(frames=[out]))

    def __aiter__(self) -> "FakeCallStream":
        return self

    async def __anext__(self) -> pb.Frames:
        return await self.out.get()


class FakeWatchStream:
    """A stand-in for a `Watches` stream: the real server side (watchmux.serve) over the fake's Watch."""

    def __init__(self, stub: "FakeStorage", controls: AsyncIterator[pb.WatchControl]) -> None:
        async def start(wid: int, raw: bytes, sink: watchmux.Sink) -> None:
            async for ev in stub.Watch(spb.WatchRequest.FromString(raw)):
                sink.send(wid, ev.SerializeToString())
                if ev.type == "ERROR":
                    return

        self._it = watchmux.serve(controls, start)

    def __aiter__(self) -> "FakeWatchStream":
        return self

    async def __anext__(self) -> pb.WatchBatch:
        return await self._it.__anext__()

    def cancel(self) -> None:
        asyncio.get_running_loop().create_task(self._it.aclose())


def _copy(o: pb.Object) -> pb.Object:
    out = pb.Object()
    out.CopyFrom(o)
    return out


def _labels_match(o: pb.Object, selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        k, _, v = term.partition("=")
        if o.metadata.labels.get(k) != v:
            return False
    return True


def _fields_match(o: pb.Object, selector: str) -> bool:
    return FieldSelector.parse(selector).matches(o.fields)


def _with_kind(o: pb.Object, req: spb.ListRequest) -> pb.Object:
    if not o.kind:
        o.kind, o.api_version = req.kind, req.api_version
    return o


class FakeStorage:
    def Watches(self, controls: AsyncIterator[pb.WatchControl]) -> FakeWatchStream:
        return FakeWatchStream(self, controls)

    def Calls(self, batches: AsyncIterator[pb.Frames]) -> FakeCallStream:
        return FakeCallStream(self, {"Create": spb.CreateRequest, "Get": spb.GetRequest, "List": spb.ListRequest,
                                     "Update": spb.UpdateRequest, "Delete": spb.DeleteRequest}, batches)

    def __init__(self) -> None:
        self.data: dict[str, pb.Object] = {}
        self.rev = 0
        self.watchers: list[tuple[str, asyncio.Queue[pb.WatchEvent]]] = []
        self.calls: list[str] = []
        self.fail_updates = 0  # make the next N updates fail with a Conflict

    def _emit(self, typ: str, key: str, obj: pb.Object) -> None:
        for prefix, q in self.watchers:
            if key == prefix or (prefix.endswith("/") and key.startswith(prefix)):
                q.put_nowait(pb.WatchEvent(type=typ, object=_copy(obj)))

    async def EtcdHealth(self, req: spb.EtcdHealthRequest, timeout: float | None = None) -> spb.EtcdHealthResponse:
        return spb.EtcdHealthResponse(servers=[spb.EtcdServerHealth(endpoint="127.0.0.1:2379", healthy=True)])

    async def Create(self, req: spb.CreateRequest, timeout: float | None = None) -> pb.Object:
        self.calls.append("create")
        if req.key in self.data:
            raise errors.AlreadyExists("exists")
        self.rev += 1
        obj = _copy(req.object)
        obj.metadata.resource_version = str(self.rev)
        self.data[req.key] = obj
        self._emit("ADDED", req.key, obj)
        return _copy(obj)

    async def Get(self, req: spb.GetRequest, timeout: float | None = None) -> pb.Object:
        self.calls.append("get")
        if req.key not in self.data:
            raise errors.NotFound("not found")
        return _copy(self.data[req.key])

    async def List(self, req: spb.ListRequest, timeout: float | None = None) -> spb.ListResponse:
        self.calls.append("list")
        keys = sorted(k for k in self.data if k.startswith(req.prefix))
        start = getattr(req, "continue")
        items = [self.data[k] for k in keys if (not start or k > start)
                 and _labels_match(self.data[k], req.label_selector)
                 and _fields_match(self.data[k], req.field_selector)]
        resp = spb.ListResponse(resource_version=str(self.rev))
        if req.limit and len(items) > req.limit:
            items = items[:req.limit]
            setattr(resp, "continue", [k for k, v in self.data.items() if v is items[-1]][0])
        if req.json:  # as the storage service: the items' JSON, kind filled in where unset
            js = [envelope.to_json(_with_kind(_copy(i), req)) for i in items]
            if req.chunked and len(js) > 1:  # as wire.ListParts: the metadata, then parts of one item
                first = spb.RawListResponse(resource_version=resp.resource_version)
                return [first, js[0]] + [b"," + j for j in js[1:]]  # type: ignore[return-value]
            resp.json_items = b",".join(js)
        else:
            resp.items.extend(_copy(i) for i in items)
        return resp

    async def Update(self, req: spb.UpdateRequest, timeout: float | None = None) -> pb.Object:
        self.calls.append("update")
        if self.fail_updates:
            self.fail_updates -= 1
            raise errors.Conflict("conflict")
        cur = self.data.get(req.key)
        if cur is None:
            raise errors.NotFound("not found")
        if req.expected_resource_version and req.expected_resource_version != cur.metadata.resource_version:
            raise errors.Conflict("conflict")
        self.rev += 1
        obj = _copy(req.object)
        obj.metadata.resource_version = str(self.rev)
        self.data[req.key] = obj
        self._emit("MODIFIED", req.key, obj)
        return _copy(obj)

    async def Delete(self, req: spb.DeleteRequest, timeout: float | None = None) -> pb.Object:
        self.calls.append("delete")
        cur = self.data.get(req.key)
        if cur is None:
            raise errors.NotFound("not found")
        if req.precondition_uid and req.precondition_uid != cur.metadata.uid:
            raise errors.Conflict("uid")
        if req.precondition_resource_version and req.precondition_resource_version != cur.metadata.resource_version:
            raise errors.Conflict("rv")
        del self.data[req.key]
        self.rev += 1
        out = _copy(cur)
        out.metadata.resource_version = str(self.rev)
        self._emit("DELETED", req.key, out)
        return out

    def Watch(self, req: spb.WatchRequest, timeout: float | None = None) -> AsyncIterator[pb.WatchEvent]:
        q: asyncio.Queue[pb.WatchEvent] = asyncio.Queue()
        entry = (req.prefix, q)
        self.watchers.append(entry)
        if req.resource_version == "1":
            q.put_nowait(pb.WatchEvent(type="ERROR", status=errors.Gone("too old resource version: 1").to_pb()))

        async def gen() -> AsyncIterator[pb.WatchEvent]:
            try:
                while True:
                    yield await q.get()
            finally:
                self.watchers.remove(entry)

        return gen()


class FakeAdmission:
    def __init__(self) -> None:
        self.requests: list[tuple[str, apb.AdmissionRequest]] = []
        self.mutate: Callable[[apb.AdmissionRequest], pb.Object | None] | None = None
        self.deny: errors.APIError | None = None

    async def Admit(self, req: apb.AdmissionRequest, timeout: float | None = None) -> apb.AdmissionResponse:
        self.requests.append(("admit", req))
        out = apb.AdmissionResponse()
        if self.mutate and (mutated := self.mutate(req)) is not None:
            # as the admission service answers: the change as a JSON Patch, not the object
            ops = jsonpatch.make_patch(envelope.from_envelope(req.object), envelope.from_envelope(mutated)).patch
            out.patch = orjson.dumps(ops)
        return out

    async def Validate(self, req: apb.AdmissionRequest, timeout: float | None = None) -> apb.AdmissionResponse:
        self.requests.append(("validate", req))
        if self.deny is not None:
            raise self.deny
        return apb.AdmissionResponse()

    def Calls(self, batches: AsyncIterator[pb.Frames]) -> FakeCallStream:
        return FakeCallStream(self, {"Admit": apb.AdmissionRequest, "Validate": apb.AdmissionRequest}, batches)




class FakeAuth:
    """Stand-in for the auth service's Review, RequestToken and CheckEscalation (unit tests only)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.deny: errors.APIError | None = None  # CheckEscalation raises this when set
        self.allowed = True

    async def CheckEscalation(self, req: aupb.EscalationRequest, timeout: float | None = None, metadata: object = None
                              ) -> aupb.EscalationResponse:
        self.calls.append(("CheckEscalation", req))
        if self.deny is not None:
            raise self.deny
        return aupb.EscalationResponse(allowed=self.allowed)

    async def Review(self, req: aupb.ReviewRequest, timeout: float | None = None, metadata: object = None
                     ) -> aupb.ReviewResponse:
        self.calls.append(("Review", req))
        obj = orjson.loads(req.body)
        obj["status"] = {"allowed": True, "reason": f"reviewed for {req.user.name}"}
        return aupb.ReviewResponse(body=orjson.dumps(obj))

    async def RequestToken(self, req: aupb.TokenRequestRequest, timeout: float | None = None, metadata: object = None
                           ) -> aupb.ReviewResponse:
        self.calls.append(("RequestToken", req))
        obj = orjson.loads(req.body)
        obj["status"] = {"token": f"token-for-{req.service_account.metadata.uid}",
                         "expirationTimestamp": "2030-01-01T00:00:00Z"}
        return aupb.ReviewResponse(body=orjson.dumps(obj))
