"""The part of uvicorn that services/apiserver/serving.py stands on beyond its public API: the protocol and
request-response cycle of uvicorn.protocols.http.httptools_impl, which TLSHttpToolsProtocol subclasses and
whose on_headers_complete it restates (to build a OneWriteCycle). requirements-runtime.txt pins uvicorn's
minor series; an upgrade that moves any of this fails here, in a test that names what moved."""
import asyncio
import inspect
import re

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from services.apiserver.serving import OneWriteCycle, TLSHttpToolsProtocol
from tests.unit.apiserver.test_serving import _Transport as RecordingTransport

# the methods TLSHttpToolsProtocol overrides or calls, with their parameters
PROTOCOL_METHODS = {
    "connection_made": ["self", "transport"],
    "connection_lost": ["self", "exc"],
    "data_received": ["self", "data"],
    "on_message_begin": ["self"],
    "on_headers_complete": ["self"],
    "on_message_complete": ["self"],
    "on_response_complete": ["self"],
    "_start_asgi_task": ["self", "cycle", "app"],
}
# what TLSHttpToolsProtocol.on_headers_complete reads of a connected protocol
PROTOCOL_ATTRIBUTES = ["parser", "scope", "url", "root_path", "cycle", "transport", "flow", "logger",
                       "access_logger", "access_log", "server_state", "expect_100_continue", "app", "pipeline",
                       "config", "loop"]
# what it passes to the cycle, every parameter of RequestResponseCycle (a new one is a behaviour to restate)
CYCLE_PARAMETERS = ["self", "scope", "transport", "flow", "logger", "access_logger", "access_log", "default_headers",
                    "message_event", "expect_100_continue", "keep_alive", "on_response"]
# what a cycle may call on its transport (_CycleTransport has these)
CYCLE_TRANSPORT_CALLS = {"write", "close", "is_closing"}


class _Transport(RecordingTransport):
    """A connection's transport, as the protocol asks it for its addresses."""

    def get_extra_info(self, name, default=None):
        return {"sockname": ("127.0.0.1", 443), "peername": ("127.0.0.1", 50000)}.get(name, default)


@pytest.mark.parametrize("name", PROTOCOL_METHODS)
def test_the_protocol_methods_serving_overrides_are_uvicorns(name):
    method = getattr(HttpToolsProtocol, name, None)
    assert method is not None, f"uvicorn's HttpToolsProtocol has no {name} any more"
    assert list(inspect.signature(method).parameters) == PROTOCOL_METHODS[name], f"HttpToolsProtocol.{name} changed"


@pytest.mark.parametrize("name", PROTOCOL_ATTRIBUTES)
async def test_a_connected_protocol_has_the_attributes_serving_reads(name):
    protocol = HttpToolsProtocol(config=_config(_app([])), server_state=ServerState(), app_state={},
                                 _loop=asyncio.get_running_loop())
    protocol.connection_made(_Transport())  # type: ignore[arg-type]
    protocol.on_message_begin()
    assert hasattr(protocol, name), f"uvicorn's HttpToolsProtocol has no attribute {name} any more"


def test_the_cycle_takes_what_serving_gives_it():
    assert list(inspect.signature(RequestResponseCycle.__init__).parameters) == CYCLE_PARAMETERS


def test_the_cycle_calls_only_what_the_held_transport_has():
    calls = set(re.findall(r"self\.transport\.(\w+)", inspect.getsource(RequestResponseCycle)))
    assert calls <= CYCLE_TRANSPORT_CALLS, f"RequestResponseCycle now calls transport.{calls - CYCLE_TRANSPORT_CALLS}"


def test_the_server_hooks_serving_uses():
    assert list(inspect.signature(uvicorn.Server.serve).parameters) == ["self", "sockets"]
    assert hasattr(uvicorn.Server.capture_signals, "__wrapped__"), "Server.capture_signals is no context manager"
    assert "ssl_context_factory" in inspect.signature(uvicorn.Config).parameters


def _config(app):
    return uvicorn.Config(app, loop="none", lifespan="off", ws="none", access_log=False, proxy_headers=False,
                          log_level="warning")


def _app(scopes):
    async def app(scope, receive, send):
        scopes.append(scope)
        while (await receive())["more_body"]:
            pass
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
    return app


async def _serve(protocol_class, request: bytes):
    """What protocol_class makes of the request bytes: the scopes, the last cycle's state, the bytes written."""
    scopes: list[dict] = []
    state = ServerState()
    protocol = protocol_class(config=_config(_app(scopes)), server_state=state, app_state={},
                              _loop=asyncio.get_running_loop())
    transport = _Transport()
    protocol.connection_made(transport)
    protocol.data_received(request)
    while state.tasks:
        await asyncio.gather(*state.tasks)
    for scope in scopes:
        scope.pop("extensions", None)  # serving's own
    volatile = {"transport", "flow", "message_event", "on_response"}
    cycle = {k: v for k, v in vars(protocol.cycle).items() if k not in volatile}
    return scopes, cycle, b"".join(transport.writes)


@pytest.mark.parametrize("request_bytes", [
    b"GET /api/v1/namespaces/a%2Fb/pods?limit=1&x=%20 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET http://x:6443/apis/apps/v1?watch=1#f HTTP/1.1\r\nHost: x\r\n\r\n",
    b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    b"GET /version HTTP/1.0\r\n\r\n",
    b"POST /api/v1/pods HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
    b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n",  # pipelined
], ids=["origin-form", "absolute-form", "head", "http-1.0", "100-continue", "pipelined"])
async def test_serving_makes_of_a_request_what_uvicorn_makes(request_bytes):
    """TLSHttpToolsProtocol.on_headers_complete restates uvicorn's: the same scope, the same cycle state
    and the same bytes on the wire (in fewer writes)."""
    want = await _serve(HttpToolsProtocol, request_bytes)
    got = await _serve(TLSHttpToolsProtocol, request_bytes)
    assert got == want


async def test_the_protocol_makes_one_write_cycles():
    protocol = TLSHttpToolsProtocol(config=_config(_app([])), server_state=ServerState(), app_state={},
                                    _loop=asyncio.get_running_loop())
    protocol.connection_made(_Transport())  # type: ignore[arg-type]
    protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert type(protocol.cycle) is OneWriteCycle
    await asyncio.gather(*protocol.tasks)
