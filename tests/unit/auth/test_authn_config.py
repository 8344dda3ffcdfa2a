"""AuthenticationConfiguration validation (kube's messages), CEL, the legacy --oidc-* flags, the token webhook cache."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.apiserver.fielderrors import ConfigError
from services.auth import authnconfig
from services.common import cel
from services.auth.__main__ import build, parse_args
from apiary_pb import auth_pb2 as apb
from services.auth.authenticators import AuthenticationFailed
from services.auth.authenticators.anonymous import AnonymousAuthenticator, AnonymousConfig
from services.auth.authenticators.webhook import WebhookTokenAuthenticator
from services.common.duration import parse_duration
from services.auth.webhookclient import WebhookError
from tests.fakeclock import FakeClock

HEAD = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n"


def errors(body: str) -> str:
    with pytest.raises(ConfigError) as e:
        authnconfig.parse(authnconfig.decode((HEAD + body).encode(), "f"), frozenset({"https://sa.example.com"}))
    return str(e.value)


def jwt_entry(url: str = "https://example.com", mappings: str = "username: {claim: sub, prefix: ''}",
              more: str = "") -> str:
    return f"- issuer:\n    url: {url}\n    audiences: [a]\n  claimMappings:\n    {mappings}\n{more}"


def test_a_good_file_compiles_its_expressions() -> None:
    body = "jwt:\n" + jwt_entry(mappings="username: {expression: \"'x:' + claims.sub\"}",
                                more="  userValidationRules:\n  - expression: \"user.groups.size() < 10\"\n")
    (c,) = authnconfig.parse(authnconfig.decode((HEAD + body).encode(), "f"))
    assert c.username.program is not None and c.user_validation_rules[0].program is not None
    assert c.username.program.evaluate(cel.activation(claims={"sub": "a"})) == "x:a"


@pytest.mark.parametrize("body,message", [
    ("jwt:\n" + jwt_entry("http://example.com"),
     'jwt[0].issuer.url: Invalid value: "http://example.com": URL scheme must be https'),
    ("jwt:\n" + jwt_entry("https://sa.example.com"),
     'jwt[0].issuer.url: Invalid value: "https://sa.example.com": URL must not overlap with disallowed issuers: '
     '[https://sa.example.com]'),
    ("jwt:\n" + jwt_entry() + jwt_entry(), 'jwt[1].issuer.url: Duplicate value: "https://example.com"'),
    ("jwt:\n" + jwt_entry(mappings="username: {claim: sub, expression: claims.sub}"),
     'jwt[0].claimMappings.username: Invalid value: "": claim and expression can\'t both be set'),
    ("jwt:\n" + jwt_entry(mappings="username: {claim: sub}"),
     "jwt[0].claimMappings.username.prefix: Required value: prefix is required when claim is set. It can be set "
     "to an empty string to disable prefixing"),
    ("jwt:\n" + jwt_entry(mappings="username: {expression: 'claims.sub +'}"),
     'jwt[0].claimMappings.username.expression: Invalid value: "claims.sub +": compilation failed: '),
    ("jwt:\n" + jwt_entry(mappings="username: {expression: claims.email}"),
     "claims.email_verified must be used in claimMappings.username.expression"),
    ("jwt:\n" + jwt_entry(more="  claimValidationRules:\n  - {claim: a, expression: 'true'}\n"),
     'jwt[0].claimValidationRules[0]: Invalid value: "a": claim and expression can\'t both be set'),
    ("jwt:\n- issuer:\n    url: https://example.com\n  claimMappings:\n    username: {claim: sub, prefix: ''}\n",
     "jwt[0].issuer.audiences: Required value: at least one jwt[0].issuer.audiences is required"),
    ("jwt:\n- issuer:\n    url: https://example.com\n    audiences: [a, b]\n"
     "  claimMappings:\n    username: {claim: sub, prefix: ''}\n",
     'jwt[0].issuer.audienceMatchPolicy: Invalid value: "": audienceMatchPolicy must be MatchAny for multiple '
     'audiences'),
    ("jwt:\n" + jwt_entry(mappings="username: {claim: sub, prefix: ''}\n    extra:\n"
                                   "    - {key: kubernetes.io/x, valueExpression: claims.sub}"),
     'jwt[0].claimMappings.extra[0].key: Invalid value: "kubernetes.io/x": k8s.io, kubernetes.io and their '
     'subdomains are reserved for Kubernetes use'),
])
def test_validation_messages_are_kubes(body: str, message: str) -> None:
    assert message in errors(body)


def test_several_errors_are_one_aggregate() -> None:
    text = errors("jwt:\n" + jwt_entry("http://example.com", "username: {claim: sub}"))
    assert text.startswith("[") and text.endswith("]") and text.count("jwt[0]") == 2


def test_wrong_kind_is_refused() -> None:
    with pytest.raises(ConfigError, match='no kind "AuthorizationConfiguration"'):
        authnconfig.decode(b"apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\n", "f")


@pytest.mark.parametrize("expression,claims,result", [
    ("claims.sub", {"sub": "a"}, "a"),
    ("claims.email_verified", {"email_verified": True}, True),
    ("has(claims.email)", {"sub": "a"}, False),
    ("'oidc:' + claims.sub", {"sub": "a"}, "oidc:a"),
    ("claims.groups.map(g, 'g:' + g)", {"groups": ["x", "y"]}, ["g:x", "g:y"]),
    ("[claims.sub, 'b']", {"sub": "a"}, ["a", "b"]),
    ("claims.groups.exists(g, g == 'admin')", {"groups": ["admin"]}, True),
])
def test_cel_evaluates_kubes_documented_expressions(expression: str, claims: dict[str, Any], result: Any) -> None:
    assert cel.compile_expression(expression).evaluate(cel.activation(claims=claims)) == result


def test_cel_missing_field_is_an_error_not_false() -> None:
    with pytest.raises(cel.CELEvalError):
        cel.compile_expression("claims.missing == 'x'").evaluate(cel.activation(claims={"sub": "a"}))


def test_cel_programs_are_compiled_once() -> None:
    assert cel.compile_expression("claims.sub == 'z'") is cel.compile_expression("claims.sub == 'z'")


def test_go_durations() -> None:
    assert parse_duration("2m") == 120 and parse_duration("1m30s") == 90 and parse_duration("500ms") == 0.5
    assert parse_duration("0") == 0
    with pytest.raises(ValueError, match='time: unknown unit "x" in duration "2x"'):
        parse_duration("2x")


def test_legacy_oidc_flags_prefix_usernames_with_the_issuer() -> None:
    c = authnconfig.legacy_oidc_config("https://idp.example.com", "kube", "sub", None, "groups", "g:", {"hd": "x"},
                                       "", ["RS256"])
    assert c.username.prefix == "https://idp.example.com#" and c.groups.prefix == "g:"
    assert c.claim_validation_rules[0].claim == "hd" and c.algorithms == ("RS256",)
    assert authnconfig.legacy_oidc_config("https://i", "k", "email", None, "", "", {}, "", ["RS256"]).username.prefix == ""
    assert authnconfig.legacy_oidc_config("https://i", "k", "sub", "-", "", "", {}, "", ["RS256"]).username.prefix == ""


def test_oidc_flags_and_the_file_are_exclusive(tmp_path: Any) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(HEAD + "jwt: []\n")
    with pytest.raises(SystemExit, match="authentication-config file and oidc-\\* flags are mutually exclusive"):
        build(parse_args(["--insecure-internal", "--authentication-config", str(path),
                          "--oidc-issuer-url", "https://i", "--oidc-client-id", "k"]))
    with pytest.raises(SystemExit, match="oidc-issuer-url and oidc-client-id must be specified together"):
        build(parse_args(["--insecure-internal", "--oidc-issuer-url", "https://i"]))
    with pytest.raises(SystemExit, match="URL scheme must be https"):
        build(parse_args(["--insecure-internal", "--oidc-issuer-url", "http://i", "--oidc-client-id", "k"]))


class FakeClient:
    def __init__(self, answers: dict[str, dict[str, Any]], down: bool = False) -> None:
        self.answers, self.down, self.bodies = answers, down, []

    async def post(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        if self.down:
            raise WebhookError('Post "https://hook": connection refused')
        return {"status": self.answers.get(body["spec"]["token"], {"authenticated": False})}

    async def aclose(self) -> None:
        pass


def test_token_webhook_caches_positive_and_negative_answers() -> None:
    client = FakeClient({"good": {"authenticated": True, "user": {"username": "u", "groups": ["g"]}},
                         "err": {"authenticated": False, "error": "token revoked"}})
    hook = WebhookTokenAuthenticator(client, "v1", ["api"], cache_ttl=60)  # type: ignore[arg-type]

    async def run() -> None:
        for _ in range(2):
            found = await hook.authenticate_token("good", ["api"])
            assert found is not None and found[0].name == "u" and found[1] == ["api"]
            assert await hook.authenticate_token("bad", ["api"]) is None
        assert hook.calls == 2
        for _ in range(2):  # an answer carrying an error is not cached
            with pytest.raises(AuthenticationFailed, match="token revoked"):
                await hook.authenticate_token("err", ["api"])
        assert hook.calls == 4
        assert client.bodies[0]["apiVersion"] == "authentication.k8s.io/v1"
        assert client.bodies[0]["spec"] == {"token": "good", "audiences": ["api"]}

    asyncio.run(run())


def test_token_webhook_answers_expire_after_the_cache_ttl() -> None:
    client = FakeClient({"good": {"authenticated": True, "user": {"username": "u"}}})
    clock = FakeClock()
    hook = WebhookTokenAuthenticator(client, "v1", ["api"], cache_ttl=60, clock=clock)  # type: ignore[arg-type]

    async def run() -> None:
        for step in (0, 59):
            clock.advance(step)
            assert await hook.authenticate_token("good", ["api"]) is not None and hook.calls == 1
        clock.advance(1)
        assert await hook.authenticate_token("good", ["api"]) is not None and hook.calls == 2

    asyncio.run(run())


def test_token_webhook_down_is_a_failure_never_cached() -> None:
    hook = WebhookTokenAuthenticator(FakeClient({}, down=True), "v1", ["api"])  # type: ignore[arg-type]

    async def run() -> None:
        for _ in range(2):
            with pytest.raises(AuthenticationFailed, match="connection refused"):
                await hook.authenticate_token("t", ["api"])
        assert hook.calls == 2

    asyncio.run(run())


def test_token_webhook_checks_the_audiences_it_answers() -> None:
    client = FakeClient({"t": {"authenticated": True, "user": {"username": "u"}, "audiences": ["other"]}})
    hook = WebhookTokenAuthenticator(client, "v1", ["api"])  # type: ignore[arg-type]
    with pytest.raises(AuthenticationFailed, match='token audiences \\["other"\\] is invalid for the target '
                                                   'audiences \\["api"\\]'):
        asyncio.run(hook.authenticate_token("t", ["api"]))


def test_v1beta1_is_read_too() -> None:
    body = HEAD.replace("/v1\n", "/v1beta1\n") + "jwt:\n" + jwt_entry()
    assert len(authnconfig.parse(authnconfig.decode(body.encode(), "f"))) == 1


def test_anonymous_section_limits_paths() -> None:
    _, anon = authnconfig.parse_all(authnconfig.decode(
        (HEAD + "anonymous:\n  enabled: true\n  conditions:\n  - path: /livez\n").encode(), "f"))
    assert anon == AnonymousConfig(True, frozenset({"/livez"}))
    a = AnonymousAuthenticator(lambda: anon)
    assert asyncio.run(a.authenticate(apb.AuthenticateRequest(path="/livez"))).name == "system:anonymous"
    assert asyncio.run(a.authenticate(apb.AuthenticateRequest(path="/api"))) is None
    assert "anonymous.conditions: Invalid value: \"\": enabled should be set to true when conditions are defined" \
        in errors("anonymous:\n  enabled: false\n  conditions:\n  - path: /livez\n")


def test_anonymous_section_excludes_the_flag_and_cannot_change_on_reload(tmp_path: Any) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(HEAD + "anonymous:\n  enabled: false\n")
    with pytest.raises(SystemExit, match="--anonymous-auth flag cannot be set when anonymous field is configured"):
        build(parse_args(["--authentication-config", str(path), "--anonymous-auth=true"]))
    servicer = build(parse_args(["--authentication-config", str(path)]))
    assert servicer.jwt is not None
    assert not asyncio.run(servicer.jwt.reload((HEAD + "anonymous:\n  enabled: true\n").encode()))
    assert servicer.jwt.anonymous == AnonymousConfig(False)
    assert asyncio.run(servicer.jwt.reload((HEAD + "anonymous:\n  enabled: false\njwt: []\n").encode()))


def test_start_messages_are_kubes(tmp_path: Any) -> None:
    with pytest.raises(SystemExit, match='failed to load authentication configuration from file ".*missing.yaml": '
                                         'open .*missing.yaml: no such file or directory'):
        build(parse_args(["--authentication-config", str(tmp_path / "missing.yaml")]))
    path = tmp_path / "bad.yaml"
    path.write_text(HEAD + "jwt:\n" + jwt_entry("http://x.example.com"))
    with pytest.raises(SystemExit, match="^invalid authentication configuration: jwt\\[0\\].issuer.url: Invalid value"):
        build(parse_args(["--authentication-config", str(path)]))


def test_cel_undeclared_references_are_refused_at_compile_time():
    with pytest.raises(cel.CELCompileError, match="undeclared reference to 'user'"):
        cel.compile_expression("user.username == 'a'", ("claims",))
    # a comprehension's own variable is not a reference
    program = cel.compile_expression("claims.groups.all(g, g.startsWith('x'))", ("claims",))
    assert program.evaluate(cel.activation(claims={"groups": ["xa", "xb"]})) is True


def test_the_file_is_decoded_strictly() -> None:
    with pytest.raises(ConfigError, match='strict decoding error: unknown field "jwt\\[0\\].claimMappings.uid.prefix"'):
        authnconfig.decode((HEAD + "jwt:\n" + jwt_entry(mappings="uid: {claim: sub, prefix: x}")).encode(), "f")
