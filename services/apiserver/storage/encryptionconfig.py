"""EncryptionConfiguration (apiserver.config.k8s.io/v1): its types, decoded leniently as kube's
encryptionconfig package decodes the file, and ValidateEncryptionConfiguration's checks and messages."""
from __future__ import annotations

import base64
import binascii
from urllib.parse import urlparse

from services.apiserver.configdecode import Field, LenientStruct
from services.apiserver.fielderrors import FieldErrors, invalid_go, quote
from services.common.duration import parse_duration

AES_KEY_SIZES, SECRETBOX_KEY_SIZES = [16, 24, 32], [32]


class Key(LenientStruct):
    name: str = ""
    secret: str = ""


class KeysConfiguration(LenientStruct):
    """aescbc, aesgcm and secretbox: keys, the first one writing."""

    keys: list[Key] = []


class IdentityConfiguration(LenientStruct):
    pass


class KMSConfiguration(LenientStruct):
    api_version: str = Field("v1", alias="apiVersion")  # kube's default
    name: str = ""
    cachesize: int = 1000
    endpoint: str = ""
    timeout: str = "3s"


class ProviderConfiguration(LenientStruct):
    aesgcm: KeysConfiguration | None = None
    aescbc: KeysConfiguration | None = None
    secretbox: KeysConfiguration | None = None
    identity: IdentityConfiguration | None = None
    kms: KMSConfiguration | None = None


class ResourceConfiguration(LenientStruct):
    resources: list[str] = []
    providers: list[ProviderConfiguration] = []


class EncryptionConfiguration(LenientStruct):
    resources: list[ResourceConfiguration] = []


KINDS = {(f"apiserver.config.k8s.io/{v}", "EncryptionConfiguration"): EncryptionConfiguration
         for v in ("v1", "v1beta1")}


def validate(c: EncryptionConfiguration) -> FieldErrors:
    """kube's ValidateEncryptionConfiguration, for the providers apiary serves (KMS v2 only)."""
    errs = FieldErrors()
    if not c.resources:
        errs.required("resources", "at least one resources is required")
        return errs
    kms_names: set[str] = set()
    for i, conf in enumerate(c.resources):
        r, p = f"resources[{i}].resources", f"resources[{i}].providers"
        if not conf.resources:
            errs.required(r, f"at least one {r} is required")
        if not conf.providers:
            errs.required(p, f"at least one {p} is required")
        for j, provider in enumerate(conf.providers):
            path = f"{p}[{j}]"
            given = [name for name in ProviderConfiguration.model_fields if getattr(provider, name) is not None]
            if len(given) != 1:
                errs.append(invalid_go(path, f"ProviderConfiguration{{{', '.join(given)}}}", (
                    "provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, "
                    "Identity" if not given else
                    "more than one provider specified in a single element, should split into different list "
                    "elements")))
            elif provider.kms is not None:
                _validate_kms(errs, provider.kms, f"{path}.kms", kms_names)
            elif given[0] != "identity":
                keys: KeysConfiguration = getattr(provider, given[0])
                sizes = SECRETBOX_KEY_SIZES if given[0] == "secretbox" else AES_KEY_SIZES
                _validate_keys(errs, keys.keys, f"{path}.{given[0]}.keys", sizes)
    return errs


def _validate_keys(errs: FieldErrors, keys: list[Key], path: str, sizes: list[int]) -> None:
    if not keys:
        errs.required(path, "at least one keys is required")
    for i, key in enumerate(keys):
        if not key.name:
            errs.required(f"{path}[{i}].name", "name is a mandatory field for a key")
        if not key.secret:
            errs.required(f"{path}[{i}].secret", "secret is a mandatory field for a key")
            continue
        try:
            secret = base64.b64decode(key.secret, validate=True)
        except (binascii.Error, ValueError):
            errs.invalid(f"{path}[{i}].secret", "REDACTED", "secrets must be base64 encoded")
            continue
        if len(secret) not in sizes:
            expected = " ".join(map(str, sizes))
            errs.invalid(f"{path}[{i}].secret", "REDACTED",
                         f"secret is not of the expected length, got {len(secret)}, expected one of [{expected}]")


def _validate_kms(errs: FieldErrors, c: KMSConfiguration, path: str, names: set[str]) -> None:
    if not c.name:
        errs.required(f"{path}.name", "name is a mandatory field for a provider")
    elif ":" in c.name:
        errs.invalid(f"{path}.name", c.name, f"invalid KMS provider name {c.name}, must not contain ':'")
    elif c.name in names:
        errs.invalid(f"{path}.name", c.name, f"duplicate KMS provider name {c.name}, names must be unique")
    names.add(c.name)
    try:
        if parse_duration(c.timeout) <= 0:
            errs.invalid(f"{path}.timeout", c.timeout, "timeout should be a positive value")
    except ValueError as e:
        errs.invalid(f"{path}.timeout", c.timeout, str(e))
    if not c.endpoint:
        errs.invalid(f"{path}.endpoint", "", "endpoint is a mandatory field for a kms")
    elif (scheme := urlparse(c.endpoint).scheme) != "unix":
        errs.invalid(f"{path}.endpoint", c.endpoint,
                     f"unsupported scheme {quote(scheme)} for KMS provider, only unix is supported")
    if c.api_version != "v2":
        errs.invalid(f"{path}.apiVersion", c.api_version, "KMSv1 is deprecated and will only receive security "
                                                          "updates going forward. Use KMSv2 instead")
