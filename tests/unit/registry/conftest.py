from __future__ import annotations

from typing import Any

import orjson
import pytest

from apiary_pb import registry_pb2 as rpb
from services.apis.install import new_catalogue
from services.common import errors, identity
from services.registry.admission import AdmissionClient
from services.registry.auth import AuthClient
from services.apiserver.endpoints.handlers import Handlers
from services.registry.rest import new_handlers
from services.registry.storage_client import StorageClient

from .fakes import FakeAdmission, FakeAuth, FakeStorage

CATALOGUE = new_catalogue()

# each resource's group (the first served, core first: "events" is core/v1's), as the catalogue serves it
GROUPS: dict[str, str] = {}
for _info in CATALOGUE.resources:
    GROUPS.setdefault(_info.plural, _info.group)


@pytest.fixture
def storage() -> FakeStorage:
    return FakeStorage()


@pytest.fixture
def admission() -> FakeAdmission:
    return FakeAdmission()


@pytest.fixture
def auth() -> FakeAuth:
    return FakeAuth()


@pytest.fixture
def handlers(storage: FakeStorage, admission: FakeAdmission, auth: FakeAuth) -> Handlers:
    return new_handlers(CATALOGUE, StorageClient(storage), AdmissionClient(admission),  # type: ignore[arg-type]
                        AuthClient(auth))  # type: ignore[arg-type]


ADMIN = identity.user_pb("admin", ["system:masters"])


def request(verb: str, resource: str, namespace: str = "", name: str = "", body: Any = None,
            query: dict[str, str] | None = None, content_type: str = "application/json", table: bool = False,
            subresource: str = "", user: Any = None, group: str | None = None,
            version: str = "v1") -> rpb.APIRequest:
    raw = body if isinstance(body, bytes) else (orjson.dumps(body) if body is not None else b"")
    group = GROUPS.get(resource, "") if group is None else group
    return rpb.APIRequest(verb=verb, group=group, version=version, resource=resource,
                          namespace=namespace, name=name, body=raw, query=query or {}, content_type=content_type,
                          table=table, subresource=subresource,
                          user=user if user is not None else identity.user_pb("alice", ["devs"]))


class Client:
    """Drives Handlers.handle and decodes the JSON answer; with errors_as_status, an API error is answered as
    the proxy answers it (its code and kube's Status) instead of raised."""

    def __init__(self, handlers: Handlers, errors_as_status: bool = False) -> None:
        self.h = handlers
        self.errors_as_status = errors_as_status
        self.last_warnings: list[str] = []
        self.last_timing: dict[str, float] = {}

    async def __call__(self, *args: Any, **kwargs: Any) -> tuple[int, Any]:
        try:
            resp, timing = await self.h.handle(request(*args, **kwargs))
        except errors.APIError as e:
            if not self.errors_as_status:
                raise
            return e.code, e.status()
        self.last_warnings, self.last_timing = resp.warnings, timing
        return resp.code, orjson.loads(resp.body)


@pytest.fixture
def api(handlers: Handlers) -> Client:
    return Client(handlers)


@pytest.fixture
def status_api(handlers: Handlers) -> Client:
    """The registry's answers, errors as the Status body the proxy would send."""
    return Client(handlers, errors_as_status=True)


def cm(name: str = "c", ns: str = "default", data: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns, **meta},
            "data": data if data is not None else {"a": "1"}}
