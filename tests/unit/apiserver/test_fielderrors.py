"""Field errors: Go's %q and field.Error's text, as kube prints them."""
import pytest

from services.apiserver.fielderrors import FieldErrors, invalid, not_supported, quote, quote_list, show


@pytest.mark.parametrize("s,want", [
    ("", '""'),
    ("plain", '"plain"'),
    ('say "hi"\\', r'"say \"hi\"\\"'),
    ("tab\tnl\ncr\r\a\b\f\v", r'"tab\tnl\ncr\r\a\b\f\v"'),
    ("\x00\x1f\x7f", r'"\x00\x1f\x7f"'),
    ("café ✓", '"café ✓"'),           # printable runes are kept, not \u-escaped as JSON does
    ("nb\u00a0sp\u200b", r'"nb\u00a0sp\u200b"'),  # spaces other than ' ' and format runes are escaped
    ("\U000e0001", r'"\U000e0001"'),
])
def test_quote_is_strconv_quote(s, want):
    assert quote(s) == want


def test_values_and_lists():
    assert show(True) == "true" and show(None) == "null" and show(3) == "3" and show("x") == '"x"'
    assert quote_list(["a", "b c"]) == '["a" "b c"]'
    assert (not_supported("spec.mode", "X", ["A", "B"])["message"]
            == 'Unsupported value: "X": supported values: "A", "B"')
    assert invalid("f", 1, "")["message"] == "Invalid value: 1"


def test_field_errors_aggregate_as_kube_prints_them():
    errs = FieldErrors()
    errs.required("jwt[0].issuer.url")
    assert str(errs) == "jwt[0].issuer.url: Required value"
    errs.invalid("jwt[0].issuer.url", "http://x", "URL scheme must be https")
    errs.too_many("jwt", 2, 1)
    assert str(errs) == ('[jwt[0].issuer.url: Required value, jwt[0].issuer.url: Invalid value: "http://x": '
                         "URL scheme must be https, jwt: Too many: 2: must have at most 1 items]")
