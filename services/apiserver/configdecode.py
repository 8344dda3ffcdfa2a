"""kube's configuration files decoded into typed models the way its scheme decodes them: YAML read as
JSON, the apiVersion and kind looked up among the versions kube accepts, then the fields into a Go-like
struct: an absent or null field is its zero value, a value of the wrong type is refused, and unknown
fields are refused where kube decodes strictly (Struct) and dropped where it does not (LenientStruct).

What a decoder cannot say (required values, ranges, cross-field rules, CEL) is each format's
validation, written against the models with services.apiserver.fielderrors.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .fielderrors import ConfigError, decoding_error, quote

__all__ = ["Document", "Field", "LenientStruct", "StrictDecodingError", "Struct", "UnknownKind", "decode",
           "read_yaml"]

M = TypeVar("M", bound=BaseModel)


class Struct(BaseModel):
    """A Go struct of a strictly decoded configuration: fields named by their json tags (aliases)."""

    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_zero(cls, data: Any) -> Any:
        """encoding/json leaves a field at its zero value when the document says null."""
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


class Document(Struct):
    """A strictly decoded top-level object: its TypeMeta are fields like the others."""

    api_version: str = Field("", alias="apiVersion")
    kind: str = ""


class LenientStruct(Struct):
    """A Go struct of a configuration kube decodes without strictness: unknown fields are dropped."""

    model_config = ConfigDict(extra="ignore")


def read_yaml(data: bytes | str) -> Any:
    """The document, or ConfigError with the YAML parser's message."""
    try:
        return yaml.safe_load(data)
    except yaml.YAMLError as e:
        raise ConfigError(str(e)) from None


class UnknownKind(ConfigError):
    """A document whose apiVersion and kind name no model of the format (the scheme's message)."""


class StrictDecodingError(ConfigError):
    """A document that decodes but for unknown fields (runtime.IsStrictDecodingError): kube reads some
    files leniently after this one."""


def decode(obj: Any, kinds: Mapping[tuple[str, str], type[M]], scheme: str = "pkg/apis/apiserver") -> M:
    """obj (a parsed document) as the model its (apiVersion, kind) names, or ConfigError with kube's
    decoder message."""
    if not isinstance(obj, dict):
        raise ConfigError("expected an object")
    api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
    model = kinds.get((api_version, kind))
    if model is None:
        raise UnknownKind(f"no kind {quote(kind)} is registered for version {quote(api_version)} "
                          f"in scheme {quote(scheme)}")
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        errors = e.errors()
        strict = all(error["type"] == "extra_forbidden" for error in errors)
        raise (StrictDecodingError if strict else ConfigError)(decoding_error(errors)) from None
