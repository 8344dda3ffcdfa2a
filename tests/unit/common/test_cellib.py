"""kube's CEL libraries apiary adds to cel-rust (services/common/cellib.py): quantity, ip, cidr, url, lists;
expected values as kube's library tests give them."""
from __future__ import annotations

from typing import Any

import pytest

from services.common import cel


def ev(expression: str, **values: Any) -> Any:
    return cel.compile_expression(expression).evaluate(cel.activation(values, cel.KUBE_LIBRARY))


@pytest.mark.parametrize("expression,want", [
    ("quantity('1Gi') == quantity('1024Mi')", True),
    ("quantity('1Gi').isGreaterThan(quantity('1G'))", True),
    ("quantity('1G').isLessThan(quantity('1Gi'))", True),
    ("quantity('500m').isInteger()", False),
    ("quantity('2k').asInteger()", 2000),
    ("quantity('1.5').asApproximateFloat()", 1.5),
    ("quantity('1').add(2).compareTo(quantity('3'))", 0),
    ("quantity('200M').add(quantity('300M')) == quantity('500M')", True),
    ("quantity('1').sub(quantity('2')).sign()", -1),
    ("quantity('0').sign()", 0),
    ("isQuantity('20Mi')", True),
    ("isQuantity('abc')", False),
    ("ip('10.0.0.1').family()", 4),
    ("ip('fd00::1').family()", 6),
    ("ip('::1').isLoopback()", True),
    ("ip('0.0.0.0').isUnspecified()", True),
    ("ip('224.0.0.1').isLinkLocalMulticast()", True),
    ("ip('ff02::1').isLinkLocalMulticast()", True),
    ("ip('169.254.1.1').isLinkLocalUnicast()", True),
    ("ip('fe80::1').isLinkLocalUnicast()", True),
    ("ip('8.8.8.8').isGlobalUnicast()", True),
    ("ip('10.0.0.1').isGlobalUnicast()", True),  # Go's IsGlobalUnicast includes private addresses
    ("ip('255.255.255.255').isGlobalUnicast()", False),
    ("isIP('1.2.3')", False),
    ("isIP('::ffff:1.2.3.4')", False),
    ("cidr('10.0.0.0/8').containsIP('10.1.2.3')", True),
    ("cidr('10.0.0.0/8').containsIP(ip('11.1.2.3'))", False),
    ("cidr('10.0.0.0/8').containsIP('::1')", False),
    ("cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16')", True),
    ("cidr('10.1.0.0/16').containsCIDR(cidr('10.0.0.0/8'))", False),
    ("cidr('10.1.2.3/8').masked() == cidr('10.0.0.0/8')", True),
    ("cidr('10.1.2.3/8').ip() == ip('10.1.2.3')", True),
    ("cidr('fd00::/8').prefixLength()", 8),
    ("isCIDR('1.2.3.4')", False),
    ("isCIDR('1.2.3.4/33')", False),
    ("url('https://user@example.com:8443/a%20b?x=1&x=2&y').getQuery()", {"x": ["1", "2"], "y": [""]}),
    ("url('https://user@example.com:8443/a').getHost()", "example.com:8443"),
    ("url('https://[::1]:80/p').getHostname()", "::1"),
    ("url('https://[::1]:80/p').getPort()", "80"),
    ("url('https://example.com/p').getPort()", ""),
    ("url('/abs/path').getScheme()", ""),
    ("url('https://example.com/a%20b').getEscapedPath()", "/a%20b"),
    ("isURL('https://example.com')", True),
    ("isURL('relative/path')", False),
    ("isURL('https://example.com/#frag')", False),
    ("[1, 2, 3].sum()", 6),
    ("[3, 1].isSorted()", False),
    ("['a', 'b'].isSorted()", True),
    ("[1, 5, 2].max()", 5),
    ("[1, 5, 2].min()", 1),
])
def test_kube_libraries(expression: str, want: Any) -> None:
    assert ev(expression) == want


@pytest.mark.parametrize("expression,message", [
    ("quantity('abc')", "quantities must match the regular expression"),
    ("quantity('1.5').asInteger()", "cannot convert value to integer"),
    ("ip('::ffff:1.2.3.4')", "IPv4-mapped IPv6 addresses and zones are not allowed"),
    ("cidr('10.0.0.0')", "parse error during conversion from string"),
    ("url('no url')", "invalid URI for request"),
    ("'x'.getHost()", "no such overload: getHost"),
])
def test_errors_are_evaluation_errors(expression: str, message: str) -> None:
    with pytest.raises(cel.CELEvalError, match=message):
        ev(expression)


def test_on_objects_a_policy_reads() -> None:
    pod = {"spec": {"containers": [{"resources": {"limits": {"memory": "600Mi"}}},
                                   {"resources": {"limits": {"memory": "1Gi"}}}]}}
    assert ev("object.spec.containers.all(c, quantity(c.resources.limits.memory)"
              ".isLessThan(quantity('2Gi')))", object=pod) is True
    assert ev("object.spec.containers.exists(c, quantity(c.resources.limits.memory)"
              ".compareTo(quantity('1024Mi')) == 0)", object=pod) is True
