"""A corpus of hostile and malformed requests through the whole stack.

Each case asserts the HTTP code kube-apiserver gives and, where kube answers with one, a metav1.Status
body; at the end every service is still healthy and no service logged a traceback while the corpus
ran. Certificates that do not verify are covered with the HTTPS server's limits, not here.
"""
from __future__ import annotations

import base64
import json
import socket
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from services.common.decoding import MAX_DEPTH

pytestmark = pytest.mark.stack

NS = "hostile"
CM = f"/api/v1/namespaces/{NS}/configmaps"
TARGET = f"{CM}/target"
JSON = "application/json"
MERGE = "application/merge-patch+json"
SMP = "application/strategic-merge-patch+json"
JSONPATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
PROTOBUF = "application/vnd.kubernetes.protobuf"
SSR = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
LIMIT = 3 * 1024 * 1024
SERVICES = ("storage", "registry", "admission", "auth", "apf")


def yaml_bomb(levels: int = 9) -> bytes:
    """The document of the issue: nine levels of nine aliases, about 300 bytes, 9^9 nodes expanded."""
    names = [f"l{i}" for i in range(levels)]
    lines = [f"{names[0]}: &{names[0]} [x,x,x,x,x,x,x,x,x]"]
    lines += [f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]" for p, n in zip(names, names[1:])]
    return ("\n".join(lines) + "\n").encode()


def deep_json(depth: int) -> bytes:
    return b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep"},"x":' + b"[" * depth + b"]" * depth + b"}"


def cm(name: str = "x", **extra: object) -> bytes:
    body: dict[str, object] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    body.update(extra)
    return json.dumps(body).encode()


@dataclass
class Case:
    id: str
    method: str
    path: str
    code: int
    body: bytes | None = None
    ctype: str | None = JSON
    who: str = "admin"  # admin (system:masters) | alice (token, few rights) | anonymous
    headers: dict[str, str] = field(default_factory=dict)
    reason: str | None = None
    message: str | None = None  # a part of the Status message


CASES: list[Case] = []


def case(*args: object, **kwargs: object) -> None:
    CASES.append(Case(*args, **kwargs))  # type: ignore[arg-type]


# malformed JSON -----------------------------------------------------------------------------
for i, raw in enumerate([b"{", b"}", b"[", b'{"apiVersion":', b'{"a":1,}', b"{'a': 1}", b'{"a":1} trailing',
                         b"nul", b"\x00\x01\x02", b'{"a":"\\x"}', b'{"a":01}', b'{"a":NaN}', b'{"a":"unterminated}',
                         b"\xef\xbb\xbf{", b'{"metadata":{"name":"x"}', b'{"a":1}{"b":2}']):
    case(f"malformed-json-{i}", "POST", CM, 400, raw, reason="BadRequest")

# wrongly typed JSON -------------------------------------------------------------------------
for i, raw in enumerate([b"[]", b'"a string"', b"5", b"true", b"null",
                         cm("typed-1", data=5), cm("typed-2", data=["a"]), cm("typed-3", data={"a": 1}),
                         cm("typed-4", data={"a": None, "b": {"c": "d"}}), cm("typed-5", binaryData={"a": 5}),
                         b'{"apiVersion":"v1","kind":"ConfigMap","metadata":"x"}',
                         b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":5}}',
                         b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"t","labels":["a"]}}',
                         b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"t","annotations":{"a":1}}}',
                         b'{"apiVersion":5,"kind":"ConfigMap","metadata":{"name":"t"}}',
                         b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"t"},"immutable":"yes"}']):
    case(f"typed-json-{i}", "POST", CM, 400, raw, reason="BadRequest")
case("wrong-kind", "POST", CM, 400, cm().replace(b'"ConfigMap"', b'"Secret"'), reason="BadRequest")
case("wrong-api-version", "POST", CM, 400, cm().replace(b'"v1"', b'"v2"'), reason="BadRequest")
case("unknown-kind", "POST", CM, 400, cm().replace(b'"ConfigMap"', b'"Bogus"'), reason="BadRequest")

# sizes and depth ----------------------------------------------------------------------------
big = cm("big", data={"a": "x" * (LIMIT + 10)})
case("body-over-3MiB", "POST", CM, 413, big, reason="RequestEntityTooLarge")
case("body-over-3MiB-declared", "POST", CM, 413, big, headers={"Content-Length": str(len(big))},
     reason="RequestEntityTooLarge")
case("yaml-over-3MiB", "POST", CM, 413, b"a: " + b"x" * (LIMIT + 1), ctype="application/yaml",
     reason="RequestEntityTooLarge")
case("patch-over-3MiB", "PATCH", TARGET, 413, b'{"data":{"a":"' + b"x" * LIMIT + b'"}}', ctype=MERGE,
     reason="RequestEntityTooLarge")
for depth in (MAX_DEPTH + 1, 500, 1000, 1025, 5000, 100_000):
    case(f"deep-json-{depth}", "POST", CM, 400, deep_json(depth), reason="BadRequest", message="depth")
    case(f"deep-merge-patch-{depth}", "PATCH", TARGET, 400, b'{"x":' + b"[" * depth + b"]" * depth + b"}",
         ctype=MERGE, reason="BadRequest")
for depth in (MAX_DEPTH + 1, 999, 1001, 20_000):
    case(f"deep-yaml-flow-{depth}", "POST", CM, 400, b"x: " + b"[" * depth + b"]" * depth,
         ctype="application/yaml", reason="BadRequest")
case("deep-yaml-block", "POST", CM, 400, "".join(f"{' ' * i}k:\n" for i in range(300)).encode(),
     ctype="application/yaml", reason="BadRequest")
case("deep-json-ssr-alice", "POST", SSR, 400, b'{"x":' + b"[" * 1000 + b"]" * 1000 + b"}", who="alice",
     reason="BadRequest")
case("wide-json-accepted", "POST", CM, 201, cm("wide", data={f"k{i}": "v" for i in range(5000)}))

# YAML aliases -------------------------------------------------------------------------------
for levels in (5, 9, 12):
    case(f"yaml-bomb-{levels}", "POST", CM, 400, yaml_bomb(levels), ctype="application/yaml", reason="BadRequest",
         message="yaml: document contains excessive aliasing")
case("yaml-bomb-ssr-alice", "POST", SSR, 400, yaml_bomb(), ctype="application/yaml", who="alice",
     reason="BadRequest", message="yaml: document contains excessive aliasing")
case("yaml-bomb-apply", "PATCH", f"{TARGET}?fieldManager=m", 400, yaml_bomb(), ctype=APPLY, reason="BadRequest",
     message="excessive aliasing")
case("yaml-recursive-alias", "POST", CM, 400, b"a: &a [*a]\n", ctype="application/yaml", reason="BadRequest")
case("yaml-undefined-alias", "POST", CM, 400, b"a: *nope\n", ctype="application/yaml", reason="BadRequest")
case("yaml-moderate-aliases", "POST", CM, 201,
     b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: aliases, labels: &l {a: b}, annotations: *l}\n",
     ctype="application/yaml")
for i, raw in enumerate([b"a: [", b"a: b: c", b"\t- x", b"a: 1\n---\nb: 2\n", b"- [}", b"a: \x80\x81",
                         b"%YAML 9.9\n---\na: 1", b"!!python/object:os.system {}", b"a: !!binary '%%%'"]):
    case(f"malformed-yaml-{i}", "POST", CM, 400, raw, ctype="application/yaml", reason="BadRequest")

# names --------------------------------------------------------------------------------------
for i, name in enumerate(["UPPER", "a_b", "-a", "a-", "a.", ".", "..", "a/b", "a b", "a" * 254, "é",
                          "a\u0000b", "\u202eevil", "a%2Fb", "🙂", "a\nb", ""]):
    case(f"bad-name-{i}", "POST", CM, 422, cm(name), reason="Invalid")
for i, name in enumerate(["UPPER", "a_b", "a" * 64, "a.b", "ns\u0000"]):
    case(f"bad-namespace-name-{i}", "POST", "/api/v1/namespaces", 422,
         json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}).encode(), reason="Invalid")
case("generate-name-bad", "POST", CM, 422,
     json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "BAD_"}}).encode(),
     reason="Invalid")
case("name-mismatch-url", "PUT", f"{CM}/one", 400, cm("two"), reason="BadRequest")
case("namespace-mismatch", "POST", CM, 400,
     json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m", "namespace": "other"}}).encode(),
     reason="BadRequest")
case("get-missing", "GET", f"{CM}/does-not-exist", 404, reason="NotFound")
case("get-bad-name", "GET", f"{CM}/BAD_NAME", 404, reason="NotFound")
case("missing-namespace", "POST", "/api/v1/namespaces/no-such-ns/configmaps", 404, cm("y"), reason="NotFound")

# NUL and unicode in values ------------------------------------------------------------------
case("nul-in-data-accepted", "POST", CM, 201, cm("nul-value", data={"k": "a\u0000b"}))
case("unicode-in-data-accepted", "POST", CM, 201, cm("unicode-value", data={"k": "żółw 🐢 \u202e"}))
case("unicode-data-key", "POST", CM, 422, cm("unicode-key", data={"ключ": "v"}), reason="Invalid")
case("nul-data-key", "POST", CM, 422, cm("nul-key", data={"a\u0000": "v"}), reason="Invalid")
for i, labels in enumerate([{"a": "é"}, {"a\u0000": "b"}, {"a": "b" * 64}, {"-a": "b"}, {"a/b/c": "d"}]):
    case(f"bad-label-{i}", "POST", CM, 422, cm(f"label-{i}", metadata={"name": f"label-{i}", "labels": labels}),
         reason="Invalid")
case("bad-annotation-key", "POST", CM, 422,
     cm("annotation", metadata={"name": "annotation", "annotations": {"bad key": "v"}}), reason="Invalid")

# unknown and duplicate fields -----------------------------------------------------------------
case("unknown-field-strict", "POST", f"{CM}?fieldValidation=Strict", 400, cm("strict", bogus=1),
     reason="BadRequest", message='strict decoding error: unknown field "bogus"')
case("unknown-field-warn", "POST", CM, 201, cm("warn", bogus=1))
case("unknown-field-ignore", "POST", f"{CM}?fieldValidation=Ignore", 201, cm("ignore", bogus=1))
case("duplicate-field-strict", "POST", f"{CM}?fieldValidation=Strict", 400,
     b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","name":"b"}}', reason="BadRequest",
     message='strict decoding error: duplicate field "metadata.name"')
case("bad-field-validation", "POST", f"{CM}?fieldValidation=Loose", 422, cm("fv"), reason="Invalid")
case("bad-dry-run", "POST", f"{CM}?dryRun=Maybe", 422, cm("dr"), reason="Invalid")

# patches ----------------------------------------------------------------------------------
for i, raw in enumerate([b"{", b"[", b'{"data":}', b"\x00"]):
    case(f"merge-patch-malformed-{i}", "PATCH", TARGET, 400, raw, ctype=MERGE, reason="BadRequest")
    case(f"smp-malformed-{i}", "PATCH", TARGET, 400, raw, ctype=SMP, reason="BadRequest")
    case(f"json-patch-malformed-{i}", "PATCH", TARGET, 400, raw, ctype=JSONPATCH, reason="BadRequest")
case("merge-patch-typed", "PATCH", TARGET, 400, b'{"data":{"a":1}}', ctype=MERGE, reason="BadRequest")
case("merge-patch-non-object-result", "PATCH", TARGET, 400, b"5", ctype=MERGE)
case("json-patch-object", "PATCH", TARGET, 400, b'{"op":"add"}', ctype=JSONPATCH, reason="BadRequest")
case("json-patch-bad-op", "PATCH", TARGET, 422, b'[{"op":"bogus","path":"/data/a"}]', ctype=JSONPATCH)
case("json-patch-missing-path", "PATCH", TARGET, 422, b'[{"op":"remove","path":"/data/none"}]', ctype=JSONPATCH)
case("json-patch-bad-pointer", "PATCH", TARGET, 422, b'[{"op":"add","path":"data","value":1}]', ctype=JSONPATCH)
case("json-patch-test-fails", "PATCH", TARGET, 422, b'[{"op":"test","path":"/data/a","value":"no"}]',
     ctype=JSONPATCH)
case("json-patch-too-many-ops", "PATCH", TARGET, 413,
     json.dumps([{"op": "test", "path": "/kind", "value": "ConfigMap"}] * 10001).encode(), ctype=JSONPATCH,
     reason="RequestEntityTooLarge", message="The allowed maximum operations in a JSON patch is 10000, got 10001")
case("smp-set-element-order", "PATCH", TARGET, 400, b'{"$setElementOrder/data":5}', ctype=SMP,
     reason="BadRequest", message="invalid patch format of setElementOrder list")
case("smp-retain-keys", "PATCH", TARGET, 400, b'{"metadata":{"$retainKeys":5}}', ctype=SMP, reason="BadRequest",
     message="invalid patch format of retainKeys")
case("smp-delete-primitive", "PATCH", TARGET, 400, b'{"$deleteFromPrimitiveList/finalizers":"x"}', ctype=SMP,
     reason="BadRequest", message="invalid patch format of primitive list")
case("smp-list", "PATCH", TARGET, 400, b"[]", ctype=SMP, reason="BadRequest")
case("apply-without-field-manager", "PATCH", TARGET, 422, b"data: {a: b}\n", ctype=APPLY, reason="Invalid")
case("apply-malformed-yaml", "PATCH", f"{TARGET}?fieldManager=m", 400, b"data: [", ctype=APPLY,
     reason="BadRequest")
case("apply-not-an-object", "PATCH", f"{TARGET}?fieldManager=m", 400, b"- a\n- b\n", ctype=APPLY,
     reason="BadRequest")
case("apply-name-mismatch", "PATCH", f"{TARGET}?fieldManager=m", 400,
     b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n", ctype=APPLY, reason="BadRequest")
case("force-on-merge-patch", "PATCH", f"{TARGET}?force=true", 422, b"{}", ctype=MERGE, reason="Invalid")
case("patch-missing-object", "PATCH", f"{CM}/nope", 404, b"{}", ctype=MERGE, reason="NotFound")

# content types ----------------------------------------------------------------------------
for i, ctype in enumerate(["text/plain", "application/xml", "multipart/form-data; boundary=x",
                           "application/x-www-form-urlencoded", "image/png", "application/cbor", "*/*",
                           "application/json-seq"]):
    case(f"create-content-type-{i}", "POST", CM, 415, cm("ct"), ctype=ctype, reason="UnsupportedMediaType")
for i, ctype in enumerate([JSON, "text/plain", "application/yaml", "application/merge-patch+yaml"]):
    case(f"patch-content-type-{i}", "PATCH", TARGET, 415, b"{}", ctype=ctype, reason="UnsupportedMediaType")
case("accept-unsupported", "GET", TARGET, 406, ctype=None, headers={"Accept": "application/xml"},
     reason="NotAcceptable")

# protobuf -----------------------------------------------------------------------------------
for i, raw in enumerate([b"k8s\x00", b"k8s", b"garbage", b"k8s\x00\xff\xff\xff\xff\xff\xff", b"k8s\x00\x0a\x05abc",
                         b"k8s\x00" + bytes(range(256)), b"k8s\x00\x12\xff\xff\xff\xff\x0fxx", b"\x00" * 64]):
    case(f"protobuf-garbage-{i}", "POST", CM, 400, raw, ctype=PROTOBUF, reason="BadRequest")

# selectors, continue tokens, resource versions, query parameters ------------------------------
for i, sel in enumerate(["a in (", "===", "a=b=c", "!", "a in (b", "a notin b", "a,,b", "a=" + "x" * 64,
                         "a>b", "a!=b!=c"]):
    case(f"label-selector-{i}", "GET", f"{CM}?labelSelector={sel}", 400, ctype=None, reason="BadRequest")
for i, sel in enumerate(["spec.bogus=x", "metadata.name", "=x", "metadata.name=a,spec.x=b", "status.phase in (x)"]):
    case(f"field-selector-{i}", "GET", f"{CM}?fieldSelector={sel}", 400, ctype=None, reason="BadRequest")
for i, token in enumerate(["garbage", base64.b64encode(b"garbage").decode(), base64.b64encode(b'{"v":1}').decode(),
                           "%%%", base64.b64encode(b'{"v":"meta.k8s.io/v1","rv":-5,"start":"x"}').decode()]):
    case(f"continue-{i}", "GET", f"{CM}?limit=1&continue={token}", 400, ctype=None, reason="BadRequest")
for i, rv in enumerate(["abc", "-1", "1.5", "0x10", "99999999999999999999999"]):
    case(f"list-resource-version-{i}", "GET", f"{CM}?resourceVersion={rv}&resourceVersionMatch=NotOlderThan", 400,
         ctype=None)
    case(f"watch-resource-version-{i}", "GET", f"{CM}?watch=1&resourceVersion={rv}", 400, ctype=None,
         reason="BadRequest")
case("resource-version-match-bogus", "GET", f"{CM}?resourceVersion=1&resourceVersionMatch=Bogus", 422, ctype=None,
     reason="Invalid")
case("resource-version-match-without-rv", "GET", f"{CM}?resourceVersionMatch=Exact", 422, ctype=None,
     reason="Invalid")
for i, limit in enumerate(["9999999999999999999999999999999999999999", "abc", "1e3", "-"]):
    case(f"limit-{i}", "GET", f"{CM}?limit={limit}", 400, ctype=None, reason="BadRequest",
         message="strconv.ParseInt")
case("watch-timeout-syntax", "GET", f"{CM}?watch=1&timeoutSeconds=abc", 400, ctype=None, reason="BadRequest")
case("delete-grace-syntax", "DELETE", f"{CM}/nope?gracePeriodSeconds=soon", 400, ctype=None, reason="BadRequest")
case("delete-malformed-options", "DELETE", f"{CM}/nope", 400, b"{", reason="BadRequest")
case("delete-bad-propagation", "DELETE", TARGET, 422, b'{"propagationPolicy":"Sideways"}', reason="Invalid")

# routing -------------------------------------------------------------------------------------
case("unknown-resource", "GET", f"/api/v1/namespaces/{NS}/bogus", 404, ctype=None, reason="NotFound")
case("unknown-group", "GET", "/apis/bogus.example.com/v1/things", 404, ctype=None)
case("unknown-version", "GET", "/api/v2/namespaces", 404, ctype=None)
case("put-on-collection", "PUT", CM, 405, cm("x"), reason="MethodNotAllowed")
case("post-on-object", "POST", TARGET, 405, cm("target"), reason="MethodNotAllowed")

# identities -----------------------------------------------------------------------------------
for i, headers in enumerate([{"X-Remote-User": "admin", "X-Remote-Group": "system:masters"},
                             {"X-Remote-User": "system:admin"}, {"X-Remote-Group": "system:masters"},
                             {"X-Remote-Extra-Scopes": "all", "X-Remote-Group": "system:masters"}]):
    case(f"forged-x-remote-alice-{i}", "GET", "/api/v1/namespaces/kube-system/secrets", 403, ctype=None,
         who="alice", headers=headers, reason="Forbidden")
    case(f"forged-x-remote-anonymous-{i}", "GET", "/api/v1/namespaces/kube-system/secrets", 403, ctype=None,
         who="anonymous", headers=headers, reason="Forbidden")
for i, headers in enumerate([{"Impersonate-User": "admin"}, {"Impersonate-User": "system:admin"},
                             {"Impersonate-User": "x", "Impersonate-Group": "system:masters"},
                             {"Impersonate-Uid": "1234", "Impersonate-User": "alice"},
                             {"Impersonate-User": "alice", "Impersonate-Extra-scopes": "all"},
                             {"Impersonate-User": "system:serviceaccount:kube-system:default"}]):
    case(f"impersonate-without-rights-{i}", "GET", "/api/v1/namespaces/kube-system/secrets", 403, ctype=None,
         who="alice", headers=headers, reason="Forbidden")
case("bad-bearer-token", "GET", "/api/v1/namespaces", 401, ctype=None, who="anonymous",
     headers={"Authorization": "Bearer not-a-token"}, reason="Unauthorized")
case("bearer-without-token", "GET", "/api/v1/namespaces", 403, ctype=None, who="anonymous",
     headers={"Authorization": "Bearer"})
case("anonymous-create", "POST", CM, 403, cm("anon"), who="anonymous", reason="Forbidden")


@pytest.fixture(scope="module")
def hostile(admin, stack):
    """The namespace and patch target; the size of every service log beforehand, to read only what
    the corpus adds."""
    r = admin.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    assert r.status_code in (201, 409), r.text
    r = admin.post(CM, json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "target"},
                             "data": {"a": "b"}})
    assert r.status_code in (201, 409), r.text
    return {p: p.stat().st_size for p in Path(stack.logs).glob("*.log")}


@pytest.fixture(scope="module")
def clients(stack, admin, tokens):
    ctx = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
    alice = httpx.Client(base_url=stack.server, verify=ctx, timeout=30,
                         headers={"Authorization": f"Bearer {tokens['alice']}"})
    anonymous = httpx.Client(base_url=stack.server, verify=ctx, timeout=30)
    yield {"admin": admin, "alice": alice, "anonymous": anonymous}
    alice.close()
    anonymous.close()


def assert_status(r: httpx.Response, c: Case) -> None:
    assert r.status_code == c.code, f"{c.id}: {r.status_code} {r.text[:300]}"
    if r.status_code < 400:
        return
    body = r.json()
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure", body
    assert body["code"] == c.code, body
    assert body["message"], body
    if c.reason:
        assert body["reason"] == c.reason, body
    if c.message:
        assert c.message in body["message"], body


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_corpus(c: Case, hostile, clients):
    headers = dict(c.headers)
    if c.ctype:
        headers.setdefault("Content-Type", c.ctype)
    client = clients[c.who]
    r = client.request(c.method, c.path, content=c.body, headers=headers)
    assert_status(r, c)


def test_corpus_is_large_enough():
    assert len(CASES) >= 150


def test_chunked_body_over_limit(hostile, clients):
    def parts():
        for _ in range(LIMIT // 65536 + 2):
            yield b"x" * 65536
    r = clients["admin"].post(CM, content=parts(), headers={"Content-Type": JSON})
    assert r.request.headers.get("transfer-encoding") == "chunked"
    assert_status(r, Case("chunked-over-3MiB", "POST", CM, 413, reason="RequestEntityTooLarge"))


def test_negative_watch_timeout_ends_at_once(hostile, clients):
    """kube's watch timer with a negative timeoutSeconds has fired already: 200 and the stream ends."""
    t = time.monotonic()
    r = clients["admin"].get(f"{CM}?watch=1&timeoutSeconds=-5", timeout=20)
    assert r.status_code == 200 and time.monotonic() - t < 10


def test_watch_maybe_is_a_watch(hostile, clients):
    """runtime.Convert_Slice_string_To_bool: every value but "0" and "false" is true, so kube watches."""
    r = clients["admin"].get(f"{CM}?watch=maybe&timeoutSeconds=1", timeout=20)
    assert r.status_code == 200 and r.headers["content-type"].startswith(JSON)
    assert all(json.loads(line)["type"] in ("ADDED", "BOOKMARK") for line in r.text.splitlines() if line)


# raw HTTP: what a client library would not send ------------------------------------------------


def raw(stack, request: bytes, read_for: float = 5.0, admin: bool = False) -> bytes:
    """Send bytes over TLS (anonymous, or with the admin's client certificate), return all bytes until
    the server closes or read_for seconds pass."""
    pki = stack.state / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if admin:
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    host, port = stack.server.removeprefix("https://").rsplit(":", 1)
    out = b""
    with socket.create_connection((host, int(port)), timeout=read_for) as sock:
        with ctx.wrap_socket(sock, server_hostname=host) as tls:
            tls.sendall(request)
            deadline = time.monotonic() + read_for
            try:
                while time.monotonic() < deadline:
                    chunk = tls.recv(65536)
                    if not chunk:
                        break
                    out += chunk
            except (TimeoutError, ssl.SSLError, ConnectionError):
                pass
    return out


def codes(response: bytes) -> list[int]:
    return [int(line.split(b" ")[1]) for line in response.split(b"\r\n") if line.startswith(b"HTTP/1.")]


TRAVERSALS = ["/api/v1/namespaces/../../../etc/passwd", "/api/v1/namespaces/%2e%2e/configmaps", "/api/v1/../../version",
              "/api/v1/namespaces/kube-system/secrets/..%2f..%2f", "/..;/api", "/api/v1/namespaces/%00/configmaps",
              "/api/v1/namespaces/hostile/configmaps/..", "//api//v1//namespaces", "/apis/../api/v1/secrets"]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_path_traversal_anonymous(stack, hostile, path):
    """kube authorizes the path as it came, before routing: anonymous may not, whatever it names."""
    out = raw(stack, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    assert codes(out)[:1] == [403], out[:300]
    assert b'"kind":"Status"' in out and b'"reason":"Forbidden"' in out


@pytest.mark.parametrize("path", TRAVERSALS)
def test_path_traversal_admin(stack, hostile, path):
    """Dot segments are not resolved: no path reaches another resource than it names (a namespace
    called ".." or NUL is a name like any other, with nothing in it)."""
    out = raw(stack, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode(), admin=True)
    code = codes(out)[:1]
    assert code in ([404], [400]) or (code == [200] and b'"items":[' in out and b'"name"' not in out), out[:300]
    assert b'"kind":"Secret' not in out and b"gitVersion" not in out


def test_smuggling_content_length_with_transfer_encoding(stack, hostile):
    """Transfer-Encoding wins over Content-Length (RFC 9112 6.3; Go's net/http drops the Content-Length):
    the body ends at the chunked terminator, and the bytes after it are a request of their own,
    answered for the same (anonymous) user - nothing is smuggled past the authentication."""
    smuggled = b"GET /api/v1/namespaces/kube-system/secrets HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    body = b"0\r\n\r\n" + smuggled
    out = raw(stack, b"POST /api/v1/namespaces/hostile/configmaps HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n"
              % len(body) + body)
    got = codes(out)
    assert got and all(code in (400, 401, 403) for code in got), out[:500]
    assert b'"secrets"' not in out or b"Forbidden" in out


def test_http_1_0(stack, hostile):
    out = raw(stack, b"GET /version HTTP/1.0\r\n\r\n")
    assert codes(out) == [200], out[:300]
    assert b'"gitVersion"' in out
    out = raw(stack, b"GET /api/v1/namespaces/kube-system/secrets HTTP/1.0\r\n\r\n")
    assert codes(out) == [403], out[:300]
    assert b'"kind":"Status"' in out


def test_conflicting_content_lengths(stack, hostile):
    out = raw(stack, b"POST /api/v1/namespaces/hostile/configmaps HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 2\r\nContent-Length: 20\r\n\r\n{}")
    assert codes(out)[:1] == [400], out[:300]


# at the end: everyone still up, nothing crashed ------------------------------------------------


def test_zz_services_healthy_and_no_traceback(stack, hostile, admin):
    assert admin.get("/healthz").status_code == 200
    for name in SERVICES:
        r = httpx.get(f"http://127.0.0.1:{stack.health_port(name)}/healthz", timeout=5)
        assert r.status_code == 200, name
    for log, start in hostile.items():
        with open(log, "rb") as f:
            f.seek(start)
            added = f.read()
        assert b"Traceback" not in added, f"{log.name}:\n{added.decode(errors='replace')[-3000:]}"
