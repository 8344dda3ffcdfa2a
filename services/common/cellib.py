"""kube's CEL libraries for values cel-rust has no type for: Quantity (library/quantity.go), IP and CIDR
(library/ip.go, cidr.go) and URL (library/urls.go), as Python functions registered in cel.KUBE_LIBRARY.

cel-rust takes only plain values from Python functions, so each kube type is a one-key map tagged with its
type (`{"k8s.quantity": "1073741824"}`) holding a canonical form: equal values are equal maps, so `==`
compares them as kube does (quantity("1Gi") == quantity("1024Mi")). A member call `x.f(a)` reaches f with
x first, so cidr.ip() and ip(string) are one function that looks at its argument. What stays missing:
`string(ip)` / `string(cidr)` (cel-rust's string() knows no such map), type checking, and the libraries
listed in docs/benchmarks.md.
"""
from __future__ import annotations

import ipaddress
import urllib.parse
from decimal import Decimal
from typing import Any

from . import quantity as kquantity

QUANTITY, IP, CIDR, URL = "k8s.quantity", "k8s.ip", "k8s.cidr", "k8s.url"
_INT64 = 2**63


def _tag(x: Any, kind: str) -> Any:
    return x.get(kind) if isinstance(x, dict) and len(x) == 1 else None


def _need(x: Any, kind: str, fn: str) -> Any:
    v = _tag(x, kind)
    if v is None:
        raise ValueError(f"no such overload: {fn}")
    return v


# Quantity -----------------------------------------------------------------------------------------------

def _q(d: Decimal) -> dict[str, str]:
    return {QUANTITY: format(d.normalize(), "f") if d else "0"}


def _qval(x: Any, fn: str) -> Decimal:
    return Decimal(_need(x, QUANTITY, fn))


def quantity(s: str) -> dict[str, str]:
    if not isinstance(s, str):
        raise ValueError("no such overload: quantity")
    return _q(kquantity.parse(s))


def is_quantity(s: str) -> bool:
    try:
        quantity(s)
    except ValueError:
        return False
    return True


def _operand(y: Any, fn: str) -> Decimal:
    if isinstance(y, int) and not isinstance(y, bool):
        return Decimal(y)
    return _qval(y, fn)


def _sign(x: Any) -> int:
    d = _qval(x, "sign")
    return (d > 0) - (d < 0)


def _is_integer(x: Any) -> bool:
    d = _qval(x, "isInteger")
    return d == d.to_integral_value()


def _as_integer(x: Any) -> int:
    d = _qval(x, "asInteger")
    if d != d.to_integral_value() or not -_INT64 <= d < _INT64:
        raise ValueError("cannot convert value to integer")
    return int(d)


def _compare(x: Any, y: Any) -> int:
    a, b = _qval(x, "compareTo"), _qval(y, "compareTo")
    return (a > b) - (a < b)


# IP and CIDR ----------------------------------------------------------------------------------------------

def _parse_ip(s: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """kube's ip(): no zones, no IPv4-mapped IPv6."""
    try:
        addr = ipaddress.ip_address(s)
    except ValueError as e:
        raise ValueError(f"IP Address {s!r} parse error during conversion from string: {e}") from None
    if isinstance(addr, ipaddress.IPv6Address) and (addr.ipv4_mapped is not None or addr.scope_id):
        raise ValueError(f"IP Address {s!r} parse error during conversion from string: IPv4-mapped IPv6 "
                         "addresses and zones are not allowed")
    return addr


def _ipval(x: Any, fn: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if isinstance(x, str):
        return _parse_ip(x)
    return ipaddress.ip_address(_need(x, IP, fn))


def ip(x: Any) -> dict[str, str]:
    """ip(string) -> IP, and cidr.ip(): the CIDR's address."""
    c = _tag(x, CIDR)
    if c is not None:
        return {IP: c.split("/")[0]}
    if not isinstance(x, str):
        raise ValueError("no such overload: ip")
    return {IP: str(_parse_ip(x))}


def is_ip(s: str) -> bool:
    try:
        _parse_ip(s)
    except ValueError:
        return False
    return True


def _parse_cidr(s: str) -> tuple[Any, int]:
    try:
        addr_s, _, prefix_s = s.partition("/")
        if not prefix_s.isdigit():
            raise ValueError("no prefix length")
        addr = _parse_ip(addr_s)
        net = ipaddress.ip_network(f"{addr}/{prefix_s}", strict=False)
    except ValueError as e:
        raise ValueError(f"network address {s!r} parse error during conversion from string: {e}") from None
    return addr, net.prefixlen


def cidr(s: str) -> dict[str, str]:
    addr, prefix = _parse_cidr(s)
    return {CIDR: f"{addr}/{prefix}"}


def is_cidr(s: str) -> bool:
    try:
        _parse_cidr(s)
    except ValueError:
        return False
    return True


def _network(x: Any, fn: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    value = cidr(x)[CIDR] if isinstance(x, str) else _need(x, CIDR, fn)
    return ipaddress.ip_network(value, strict=False)


def _contains_ip(c: Any, x: Any) -> bool:
    net, addr = _network(c, "containsIP"), _ipval(x, "containsIP")
    return addr.version == net.version and addr in net


def _contains_cidr(c: Any, x: Any) -> bool:
    net, other = _network(c, "containsCIDR"), _network(x, "containsCIDR")
    return other.version == net.version and other.subnet_of(net)  # type: ignore[arg-type]


def _masked(c: Any) -> dict[str, str]:
    return {CIDR: str(_network(c, "masked"))}


def _link_local_multicast(a: Any) -> bool:
    if a.version == 4:
        return a in ipaddress.ip_network("224.0.0.0/24")
    return a.packed[0] == 0xFF and a.packed[1] & 0x0F == 0x02


def _global_unicast(a: Any) -> bool:
    """Go's net.IP.IsGlobalUnicast: not unspecified, loopback, multicast, link-local or broadcast."""
    if a.version == 4 and a == ipaddress.IPv4Address("255.255.255.255"):
        return False
    return not (a.is_unspecified or a.is_loopback or a.is_multicast or a.is_link_local)


def _ip_predicate(name: str, test: Any) -> Any:
    return lambda x: test(_ipval(x, name))


# URL -------------------------------------------------------------------------------------------------

def _parse_url(s: str) -> urllib.parse.SplitResult:
    """Go's url.ParseRequestURI: an absolute URL or an absolute path, no fragment."""
    if not isinstance(s, str) or not s or any(ch in s for ch in " \t\r\n") or "#" in s:
        raise ValueError(f"URL parse error during conversion from string: parse {s!r}: invalid URI for request")
    u = urllib.parse.urlsplit(s)
    if not u.scheme and not s.startswith("/"):
        raise ValueError(f"URL parse error during conversion from string: parse {s!r}: invalid URI for request")
    if u.scheme and not u.netloc and not u.path.startswith("/") and u.path:
        raise ValueError(f"URL parse error during conversion from string: parse {s!r}: invalid URI for request")
    try:
        u.port  # noqa: B018 - raises for a port that is no number
    except ValueError as e:
        raise ValueError(f"URL parse error during conversion from string: parse {s!r}: {e}") from None
    return u


def url(s: str) -> dict[str, str]:
    _parse_url(s)
    return {URL: s}


def is_url(s: str) -> bool:
    try:
        _parse_url(s)
    except ValueError:
        return False
    return True


def _u(x: Any, fn: str) -> urllib.parse.SplitResult:
    return urllib.parse.urlsplit(_need(x, URL, fn))


def _hostname(x: Any) -> str:
    host = _u(x, "getHostname").netloc.rpartition("@")[2]
    if host.startswith("["):
        return host[1:host.find("]")]
    return host.rsplit(":", 1)[0] if ":" in host else host


def _port(x: Any) -> str:
    host = _u(x, "getPort").netloc.rpartition("@")[2]
    if host.startswith("["):
        rest = host[host.find("]") + 1:]
        return rest[1:] if rest.startswith(":") else ""
    return host.rsplit(":", 1)[1] if ":" in host else ""


def _query(x: Any) -> dict[str, list[str]]:
    return {k: v for k, v in urllib.parse.parse_qs(_u(x, "getQuery").query, keep_blank_values=True).items()}


LIBRARY: dict[str, Any] = {
    # quantity
    "quantity": quantity,
    "isQuantity": is_quantity,
    "sign": _sign,
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "asApproximateFloat": lambda x: float(_qval(x, "asApproximateFloat")),
    "compareTo": _compare,
    "isGreaterThan": lambda x, y: _compare(x, y) > 0,
    "isLessThan": lambda x, y: _compare(x, y) < 0,
    "add": lambda x, y: _q(_qval(x, "add") + _operand(y, "add")),
    "sub": lambda x, y: _q(_qval(x, "sub") - _operand(y, "sub")),
    # ip and cidr
    "ip": ip,
    "isIP": is_ip,
    "cidr": cidr,
    "isCIDR": is_cidr,
    "family": lambda x: _ipval(x, "family").version,
    "isUnspecified": _ip_predicate("isUnspecified", lambda a: a.is_unspecified),
    "isLoopback": _ip_predicate("isLoopback", lambda a: a.is_loopback),
    "isLinkLocalMulticast": _ip_predicate("isLinkLocalMulticast", _link_local_multicast),
    "isLinkLocalUnicast": _ip_predicate("isLinkLocalUnicast", lambda a: a.is_link_local),
    "isGlobalUnicast": _ip_predicate("isGlobalUnicast", _global_unicast),
    "containsIP": _contains_ip,
    "containsCIDR": _contains_cidr,
    "masked": _masked,
    "prefixLength": lambda c: _network(c, "prefixLength").prefixlen,
    # url
    "url": url,
    "isURL": is_url,
    "getScheme": lambda x: _u(x, "getScheme").scheme,
    "getHost": lambda x: _u(x, "getHost").netloc.rpartition("@")[2],
    "getHostname": _hostname,
    "getPort": _port,
    "getEscapedPath": lambda x: _u(x, "getEscapedPath").path,
    "getQuery": _query,
}
