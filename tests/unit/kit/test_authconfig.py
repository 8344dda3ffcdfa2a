"""Trust from flags or kube-system/extension-apiserver-authentication, and its reload."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from services.apiserver.httpclient import Response
from services.kit.authconfig import Reloader, Trust, resolve
from services.kit.options import parser

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def args(*extra: str) -> Any:
    return parser("t", "", "/t").parse_args(["--tls-cert-file", "c", "--tls-private-key-file", "k", *extra])


def data(allowed: list[str]) -> dict[str, str]:
    return {"client-ca-file": CA, "requestheader-client-ca-file": CA,
            "requestheader-allowed-names": orjson.dumps(allowed).decode(),
            "requestheader-username-headers": '["X-User"]', "requestheader-group-headers": '["X-Group"]',
            "requestheader-extra-headers-prefix": '["X-Extra-"]'}


def test_the_configmap_fills_what_the_flags_leave_out(tmp_path: Path) -> None:
    trust = resolve(args(), data(["front-proxy-client"]))
    assert Path(trust.client_ca_file).read_text() == CA and Path(trust.requestheader_ca_file).read_text() == CA
    rh = trust.requestheader
    assert rh is not None and rh.username_headers == (b"x-user",) and rh.allows("front-proxy-client")
    assert not rh.allows("someone")
    (tmp_path / "ca.crt").write_text(CA)
    flagged = resolve(args("--requestheader-client-ca-file", str(tmp_path / "ca.crt"),
                           "--requestheader-allowed-names", "proxy-a,proxy-b"), data(["front-proxy-client"]))
    assert flagged.requestheader_ca_file == str(tmp_path / "ca.crt")
    assert flagged.requestheader is not None and flagged.requestheader.allows("proxy-b")
    assert flagged.requestheader.username_headers == (b"x-user",)  # not given by flags: from the ConfigMap
    assert resolve(args(), {}) == Trust("", "", None)


async def test_a_changed_configmap_is_applied_once() -> None:
    current = {"data": data(["front-proxy-client"])}

    class Apiary:
        async def get(self, url: str, **_: Any) -> Response:
            return Response(200, orjson.dumps({"kind": "ConfigMap", "data": current["data"]}))

    applied: list[Trust] = []
    reloader = Reloader(Apiary(), args(), data(["front-proxy-client"]), applied.append)  # type: ignore[arg-type]
    assert await reloader.check() is False and not applied
    current["data"] = data(["front-proxy-client", "new-proxy"])
    assert await reloader.check() is True
    assert applied[0].requestheader is not None and applied[0].requestheader.allows("new-proxy")
    assert await reloader.check() is False and len(applied) == 1
