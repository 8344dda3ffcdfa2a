"""--authorization-config (AuthorizationConfiguration) and the legacy --authorization-webhook-* flags.

The chain is kube's: system:masters first, then the configured authorizers in order. The file is
watched like the authentication configuration: a changed file that validates replaces the chain
(webhooks whose settings did not change keep their caches), one that does not keeps the last good
chain, with a log line and kube's apiserver_authorization_config_controller_* metrics.
"""
from __future__ import annotations

import os
from typing import Any

from services.apiserver import kubeconfig as kubeconfigs
from services.apiserver.configdecode import Document, Field, Struct, UnknownKind, decode, read_yaml
from services.apiserver.fielderrors import ConfigError, FieldErrors
from services.apiserver.validation import is_dns1123_subdomain
from services.common import cel
from services.common.duration import parse_duration

from .authorizers import Authorizer
from .authorizers.modes import AlwaysAllow, AlwaysDeny, RBACAuthorizer
from .authorizers.privileged import PrivilegedGroupAuthorizer
from .authorizers.rbac import RBACIndex
from .authorizers.webhook import WebhookAuthorizer, WebhookSettings
from .configfile import ReloadedFile
from .webhookclient import WebhookClient

KNOWN_TYPES = ["AlwaysAllow", "AlwaysDeny", "Node", "RBAC", "Webhook"]


class WebhookMatchCondition(Struct):
    expression: str = ""


class WebhookConnectionInfo(Struct):
    type: str = ""
    kube_config_file: str | None = Field(None, alias="kubeConfigFile")


class WebhookConfiguration(Struct):
    authorized_ttl: str = Field("", alias="authorizedTTL")
    unauthorized_ttl: str = Field("", alias="unauthorizedTTL")
    timeout: str = ""
    subject_access_review_version: str = Field("", alias="subjectAccessReviewVersion")
    match_condition_subject_access_review_version: str = Field("", alias="matchConditionSubjectAccessReviewVersion")
    failure_policy: str = Field("", alias="failurePolicy")
    connection_info: WebhookConnectionInfo = Field(WebhookConnectionInfo(), alias="connectionInfo")
    match_conditions: list[WebhookMatchCondition] = Field([], alias="matchConditions")


class AuthorizerConfiguration(Struct):
    type: str = ""
    name: str = ""
    webhook: WebhookConfiguration | None = None


class AuthorizationConfiguration(Document):
    authorizers: list[AuthorizerConfiguration] = []


# kube decodes the file strictly (k8s.io/apiserver/pkg/apis/apiserver/load), in any of these versions.
KINDS = {(f"apiserver.config.k8s.io/{v}", "AuthorizationConfiguration"): AuthorizationConfiguration
         for v in ("v1", "v1beta1", "v1alpha1")}


def _duration(errs: FieldErrors, path: str, raw: str) -> float:
    if not raw:
        return 0.0
    try:
        return parse_duration(raw)
    except ValueError as e:
        errs.invalid(path, raw, str(e))
        return 0.0


def _webhook(errs: FieldErrors, path: str, name: str, w: WebhookConfiguration) -> tuple[WebhookSettings, str]:
    timeout = _duration(errs, f"{path}.timeout", w.timeout)
    if not w.timeout:
        errs.required(f"{path}.timeout")
    elif timeout > 30 or timeout < 0:
        errs.invalid(f"{path}.timeout", w.timeout, "must be > 0s and <= 30s")
    ttls = {}
    for key, raw in (("authorizedTTL", w.authorized_ttl), ("unauthorizedTTL", w.unauthorized_ttl)):
        ttls[key] = _duration(errs, f"{path}.{key}", raw)
        if not raw:
            errs.required(f"{path}.{key}")
        elif ttls[key] < 0:
            errs.invalid(f"{path}.{key}", raw, "must be > 0s")
    version = w.subject_access_review_version
    if not version:
        errs.required(f"{path}.subjectAccessReviewVersion")
    elif version not in ("v1", "v1beta1"):
        errs.not_supported(f"{path}.subjectAccessReviewVersion", version, ["v1", "v1beta1"])
    conditions = w.match_conditions
    mc_version = w.match_condition_subject_access_review_version
    if not mc_version:
        if conditions:
            errs.required(f"{path}.matchConditionSubjectAccessReviewVersion",
                          "required if match conditions are specified")
    elif mc_version != "v1":
        errs.not_supported(f"{path}.matchConditionSubjectAccessReviewVersion", mc_version, ["v1"])
    policy = w.failure_policy
    if not policy:
        errs.required(f"{path}.failurePolicy")
    elif policy not in ("NoOpinion", "Deny"):
        errs.not_supported(f"{path}.failurePolicy", policy, ["NoOpinion", "Deny"])
    ctype, kubeconfig = w.connection_info.type, w.connection_info.kube_config_file
    if not ctype:
        errs.required(f"{path}.connectionInfo.type")
    elif ctype == "InClusterConfig":
        if kubeconfig is not None:
            errs.invalid(f"{path}.connectionInfo.kubeConfigFile", kubeconfig,
                         "can only be set when type=KubeConfigFile")
        else:
            errs.invalid(f"{path}.connectionInfo.type", ctype,
                         "apiary serves no in-cluster webhooks: use KubeConfigFile")
    elif ctype == "KubeConfigFile":
        p = f"{path}.connectionInfo.kubeConfigFile"
        if not kubeconfig:
            errs.required(p)
        elif not os.path.isabs(kubeconfig):
            errs.invalid(p, kubeconfig, "must be an absolute path")
        elif not os.path.exists(kubeconfig):
            errs.invalid(p, kubeconfig, f"error loading file: stat {kubeconfig}: no such file or directory")
        elif not os.path.isfile(kubeconfig):
            errs.invalid(p, kubeconfig, "must be a regular file")
    else:
        errs.not_supported(f"{path}.connectionInfo.type", ctype, ["InClusterConfig", "KubeConfigFile"])
    if len(conditions) > 64:
        errs.too_many(f"{path}.matchConditions", len(conditions), 64)
        conditions = []
    programs: list[cel.Program] = []
    seen: set[str] = set()
    for i, c in enumerate(conditions):
        p = f"{path}.matchConditions[{i}].expression"
        expr = c.expression
        if not expr.strip():
            errs.required(p)
            continue
        if expr in seen:
            errs.duplicate(p, expr)
            continue
        seen.add(expr)
        try:
            programs.append(cel.compile_expression(expr, ("request",)))
        except cel.CELCompileError as e:
            errs.invalid(p, expr, f"compilation failed: {e}")
    settings = WebhookSettings(name, timeout, version or "v1", ttls["authorizedTTL"], ttls["unauthorizedTTL"],
                               policy or "NoOpinion", programs)
    return settings, kubeconfig or ""


def parse(data: bytes, path: str) -> list[tuple[str, str, WebhookSettings | None, str]]:
    """[(type, name, webhook settings, kubeconfig path)], validated with kube's messages."""
    try:
        config = decode(read_yaml(data), KINDS)
    except UnknownKind:
        raise
    except ConfigError as e:
        raise ConfigError(f"failed to decode authorization configuration file {path!r}: {e}") from None
    errs = FieldErrors()
    if not config.authorizers:
        errs.required("authorizers", "at least one authorization mode must be defined")
    out: list[tuple[str, str, WebhookSettings | None, str]] = []
    seen_types: set[str] = set()
    seen_names: set[str] = set()
    for i, a in enumerate(config.authorizers):
        p = f"authorizers[{i}]"
        atype, name = a.type, a.name
        if not atype:
            errs.required(f"{p}.type")
            continue
        if atype not in KNOWN_TYPES:
            errs.not_supported(f"{p}.type", atype, KNOWN_TYPES)
            continue
        if atype in seen_types and atype != "Webhook":
            errs.duplicate(f"{p}.type", atype)
            continue
        seen_types.add(atype)
        if not name:
            errs.required(f"{p}.name")
        elif name in seen_names:
            errs.duplicate(f"{p}.name", name)
        elif msgs := is_dns1123_subdomain(name):
            errs.invalid(f"{p}.name", name, f"authorizer name is invalid: {', '.join(msgs)}")
        seen_names.add(name)
        settings, kubeconfig = None, ""
        if atype == "Webhook":
            if a.webhook is None:
                errs.required(f"{p}.webhook", "required when type=Webhook")
                continue
            settings, kubeconfig = _webhook(errs, f"{p}.webhook", name, a.webhook)
        elif a.webhook is not None:
            errs.invalid(f"{p}.webhook", "non-null", "may only be specified when type=Webhook")
        out.append((atype, name, settings, kubeconfig))
    if errs:
        raise ConfigError(str(errs))
    return out


class AuthorizerChain:
    """Builds the authorizers a configuration names, reusing unchanged webhooks (and their caches)."""

    def __init__(self, index: RBACIndex) -> None:
        self.index = index
        self._webhooks: dict[Any, WebhookAuthorizer] = {}

    def build(self, entries: list[tuple[str, str, WebhookSettings | None, str]]) -> list[Authorizer]:
        out: list[Authorizer] = [PrivilegedGroupAuthorizer()]
        webhooks: dict[Any, WebhookAuthorizer] = {}
        for atype, name, settings, kubeconfig in entries:
            if atype == "RBAC":
                out.append(RBACAuthorizer(self.index))
            elif atype == "AlwaysAllow":
                out.append(AlwaysAllow())
            elif atype == "AlwaysDeny":
                out.append(AlwaysDeny())
            elif atype == "Webhook":
                assert settings is not None
                key = (repr(settings), [p.expression for p in settings.match_conditions].__repr__(), kubeconfig,
                       _mtime(kubeconfig))
                hook = self._webhooks.get(key)
                if hook is None:
                    hook = WebhookAuthorizer(settings, WebhookClient(kubeconfigs.load(kubeconfig), settings.timeout))
                webhooks[key] = hook
                out.append(hook)
        self._webhooks = webhooks
        return out


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


class AuthorizationConfigWatcher:
    def __init__(self, path: str, data: bytes, chain: AuthorizerChain, target: Any) -> None:
        """target: the authorizer Union whose .authorizers a reload replaces."""
        self.path, self.chain, self.target = path, chain, target
        self.file = ReloadedFile("authorization", path, data, self.reload)

    def start(self) -> None:
        self.file.start()

    async def stop(self) -> None:
        await self.file.stop()

    def reload(self, data: bytes) -> bool:
        try:
            authorizers = self.chain.build(parse(data, self.path))
        except ConfigError as e:
            return self.file.failed(data, e)
        self.target.authorizers = authorizers
        return self.file.loaded(data, ", ".join(a.name for a in authorizers))


def load(path: str, chain: AuthorizerChain) -> tuple[list[Authorizer], bytes]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"failed to read authorization configuration file {path!r}: {e.strerror}") from None
    return chain.build(parse(data, path)), data
