"""Label and field selectors: kube's syntax, its matching rules, and round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apiary_pb import envelope_pb2 as pb
from services.common.errors import BadRequest
from services.common.selectors import (
    FieldRequirement,
    FieldSelector,
    LabelSelector,
    Requirement,
    SelectionPredicate,
    escape_field_value,
    object_fields,
)

LABELS = {"app": "web", "tier": "front", "n": "5", "example.com/role": "x", "empty": ""}


@pytest.mark.parametrize(
    "text,expected",
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app = web", True),
        ("app!=web", False),
        ("app!=db", True),
        ("missing!=x", True),
        ("app", True),
        ("!app", False),
        ("!missing", True),
        ("app in (web,db)", True),
        ("app in (db)", False),
        ("app notin (db)", True),
        ("missing notin (db)", True),
        ("missing in (db)", False),
        ("app=web,tier=front", True),
        ("app=web,tier=back", False),
        ("n>4", True),
        ("n<4", False),
        ("app>4", False),
        ("missing>1", False),
        ("example.com/role=x", True),
        ("empty=", True),
        ("empty", True),
        ("empty in (,a)", True),
        (" app=web , !missing ", True),
    ],
)
def test_label_selector_matches_like_kube(text, expected):
    assert LabelSelector.parse(text).matches(LABELS) is expected


@pytest.mark.parametrize(
    "text",
    [
        "=web",
        "app=web,",
        ",app",
        "app in (web",
        "app in ()",
        "app in web",
        "app web",
        "!",
        "app>x",
        "Bad_Prefix/x=y",
        "app=-bad-",
        "a" * 64 + "=x",
        "app=(",
        "app=web)",
    ],
)
def test_label_selector_rejects(text):
    with pytest.raises(BadRequest):
        LabelSelector.parse(text)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("", True),
        ("metadata.name=a", True),
        ("metadata.name==a", True),
        ("metadata.name!=a", False),
        ("status.phase=Running", True),
        ("status.phase=Running,metadata.namespace=ns", True),
        ("status.phase=Running,metadata.namespace!=ns", False),
        ("spec.nodeName=", True),
        ("spec.nodeName!=", False),
        (r"spec.weird=a\,b\=c\\d", True),
    ],
)
def test_field_selector_matches_like_kube(text, expected):
    fields = {
        "metadata.name": "a",
        "metadata.namespace": "ns",
        "status.phase": "Running",
        "spec.weird": "a,b=c\\d",
    }
    assert FieldSelector.parse(text).matches(fields) is expected


@pytest.mark.parametrize("text", ["nooperator", "=x", r"a=b\x", "a=b=c", "a=b,c"])
def test_field_selector_rejects(text):
    with pytest.raises(BadRequest):
        FieldSelector.parse(text)


def test_field_selector_exact():
    sel = FieldSelector.parse("metadata.name=a,status.phase!=x")
    assert sel.exact("metadata.name") == "a"
    assert sel.exact("status.phase") is None


def test_predicate_uses_metadata_when_fields_are_missing():
    o = pb.Object()
    o.metadata.name, o.metadata.namespace = "a", "ns"
    o.metadata.labels["app"] = "web"
    assert dict(object_fields(o)) == {"metadata.name": "a", "metadata.namespace": "ns"}
    assert SelectionPredicate.parse("app=web", "metadata.name=a,metadata.namespace=ns").matches(o)
    assert not SelectionPredicate.parse("app=db", "").matches(o)
    o.fields["status.phase"] = "Running"
    assert SelectionPredicate.parse("", "status.phase=Running").matches(o)
    assert SelectionPredicate.parse("", "").empty


# Property tests: a selector printed and parsed again is the same selector. -----------------------

_name = st.from_regex(r"\A[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?\Z")
_prefix = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,5}[a-z0-9])?(\.[a-z0-9]{1,5}){0,2}\Z")
_key = st.one_of(_name, st.builds(lambda p, n: f"{p}/{n}", _prefix, _name))
_value = st.one_of(st.just(""), _name)
_requirement = st.one_of(
    st.builds(lambda k, op, v: Requirement(k, op, (v,)), _key, st.sampled_from(["=", "==", "!="]), _value),
    st.builds(lambda k, op: Requirement(k, op), _key, st.sampled_from(["exists", "!"])),
    st.builds(
        lambda k, op, vs: Requirement(k, op, tuple(sorted(set(vs)))),
        _key,
        st.sampled_from(["in", "notin"]),
        st.lists(_name, min_size=1, max_size=4),
    ),
    st.builds(
        lambda k, op, n: Requirement(k, op, (str(n),)),
        _key,
        st.sampled_from(["gt", "lt"]),
        st.integers(-1000, 1000),
    ),
)


@given(st.lists(_requirement, max_size=5))
def test_label_selector_round_trip(reqs):
    sel = LabelSelector(tuple(reqs))
    assert LabelSelector.parse(str(sel)).requirements == sel.requirements


@given(st.lists(_requirement, max_size=5), st.dictionaries(_key, _value, max_size=5))
def test_label_selector_is_a_conjunction(reqs, labels):
    sel = LabelSelector.parse(str(LabelSelector(tuple(reqs))))
    assert sel.matches(labels) == all(r.matches(labels) for r in reqs)


_field_value = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


@given(
    st.lists(
        st.builds(
            FieldRequirement,
            st.from_regex(r"\A[a-z]{1,6}(\.[a-zA-Z]{1,6}){0,2}\Z"),
            st.sampled_from(["=", "!="]),
            _field_value,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_field_selector_round_trip(reqs):
    text = ",".join(f"{r.field}{r.op}{escape_field_value(r.value)}" for r in reqs)
    assert FieldSelector.parse(text).requirements == tuple(reqs)
