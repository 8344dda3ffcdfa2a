"""Configuration files decoded into typed models as kube's scheme decodes them, with its messages."""
from __future__ import annotations

import pytest

from services.apiserver.configdecode import Document, Field, LenientStruct, Struct, UnknownKind, decode
from services.apiserver.fielderrors import ConfigError, field_path


class Entry(Struct):
    name: str = ""
    ttl: str = Field("", alias="authorizedTTL")
    enabled: bool = False


class Config(Document):
    entries: list[Entry] = []


class LooseEntry(LenientStruct):
    name: str = ""


class Loose(LenientStruct):
    entries: list[LooseEntry] = []


KINDS = {("example.io/v1", "Config"): Config}
HEAD = {"apiVersion": "example.io/v1", "kind": "Config"}


def test_field_paths_are_kubes() -> None:
    assert field_path(("authorizers", 1, "webhook", "timeout")) == "authorizers[1].webhook.timeout"
    assert field_path(("jwt", 0, "issuer", "url")) == "jwt[0].issuer.url"


def test_fields_by_their_json_names_and_null_is_zero() -> None:
    c = decode({**HEAD, "entries": [{"name": "a", "authorizedTTL": "5m", "enabled": None}]}, KINDS)
    assert c.entries == [Entry(name="a", ttl="5m")]


@pytest.mark.parametrize("doc,message", [
    ({**HEAD, "entries": [{"name": "a", "bogus": 1}], "other": 2},
     'strict decoding error: unknown field "entries[0].bogus", unknown field "other"'),
    ({**HEAD, "entries": [{"name": 3, "bogus": 1}]},
     "json: cannot unmarshal number into Go struct field entries[0].name of type string"),
    ({**HEAD, "entries": {"name": "a"}}, "json: cannot unmarshal object into Go struct field entries of type slice"),
    ({**HEAD, "entries": [{"enabled": "yes"}]},
     "json: cannot unmarshal string into Go struct field entries[0].enabled of type bool"),
    ([], "expected an object"),
])
def test_decoding_messages_are_kubes(doc: object, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        decode(doc, KINDS)
    assert str(e.value) == message


def test_an_unknown_kind_names_the_scheme() -> None:
    with pytest.raises(UnknownKind, match='^no kind "Other" is registered for version "example.io/v1" in scheme '
                                          '"pkg/apis/apiserver"$'):
        decode({"apiVersion": "example.io/v1", "kind": "Other"}, KINDS)


def test_lenient_structs_drop_unknown_fields() -> None:
    assert Loose.model_validate({"entries": [{"name": "a", "bogus": 1}], "apiVersion": "x"}).entries[0].name == "a"
