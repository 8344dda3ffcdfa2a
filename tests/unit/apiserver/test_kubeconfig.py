"""The kubeconfig loader: the current context's cluster and user, inline credentials kept in memory
(no file left behind), and kube's messages for a file that cannot be used."""
from __future__ import annotations

import base64
import tempfile
from pathlib import Path

import httpx
import pytest

from services.apiserver import kubeconfig
from services.apiserver.fielderrors import ConfigError
from tests.unit.apiserver.test_serving import _serve, echo_app, pki  # noqa: F401 - the fixture


def _b64_bytes(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _b64(path: str) -> str:
    return _b64_bytes(Path(path).read_bytes())


def _write(path: Path, cluster: str, user: str, current: str = "current-context: c\n") -> str:
    path.write_text(f"""apiVersion: v1
kind: Config
{current}clusters:
- name: other
  cluster: {{server: "https://wrong.invalid"}}
- name: k
  cluster:
{cluster}
users:
- name: u
  user:
{user}
contexts:
- name: c
  context: {{cluster: k, user: u}}
""")
    return str(path)


@pytest.fixture
def private_tmp(tmp_path, monkeypatch) -> Path:
    """tempfile's directory, to see what the loader leaves there."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


async def test_inline_credentials_reach_the_server_and_leave_no_file(pki, tmp_path,  # noqa: F811
                                                                     private_tmp):
    server, stop, task, url = await _serve(echo_app, pki, client_ca_file=pki["ca"])
    try:
        cert, key = pki["client"]
        path = _write(tmp_path / "inline.kubeconfig",
                      f"    server: {url.rstrip('/')}\n    certificate-authority-data: {_b64(pki['ca'])}",
                      f"    client-certificate-data: {_b64(cert)}\n    client-key-data: {_b64(key)}\n"
                      "    token: abc")
        cfg = kubeconfig.load(path)
        assert list(private_tmp.iterdir()) == []
        assert cfg.server == url.rstrip("/") and cfg.headers == {"Authorization": "Bearer abc"}
        async with httpx.AsyncClient(verify=cfg.ssl) as c:
            assert (await c.get(url)).json() == {"cn": "alice", "o": ["dev", "ops"], "ca": ["client"]}
    finally:
        stop.set()
        await task


def test_files_relative_to_the_kubeconfig_and_a_token_file(pki, tmp_path):  # noqa: F811
    (tmp_path / "token").write_text("from-file\n")
    cert, key = pki["client"]
    path = _write(tmp_path / "files.kubeconfig",
                  f"    server: https://x\n    certificate-authority: {Path(pki['ca']).name}",
                  f"    client-certificate: {cert}\n    client-key: {key}\n    tokenFile: token")
    cfg = kubeconfig.load(path)
    assert cfg.headers == {"Authorization": "Bearer from-file"}
    assert [c["subject"] for c in cfg.ssl.get_ca_certs()] == [((("commonName", "test-ca"),),)]


def test_without_a_current_context_the_first_context_is_used(tmp_path):
    cfg = kubeconfig.load(_write(tmp_path / "k", "    server: http://x\n    insecure-skip-tls-verify: true",
                                 "    token: t", current=""))
    assert cfg.server == "http://x"


@pytest.mark.parametrize("content,message", [
    (None, "stat {path}: no such file or directory"),
    ("[1, 2", "error loading {path}: "),
    ("- a\n", "error loading {path}: not a kubeconfig"),
    ("current-context: nope\n", "invalid configuration: context was not found for specified context: nope"),
    ("clusters: [{name: k, cluster: {}}]\n", "invalid configuration: no server found for cluster in {path}"),
])
def test_messages(tmp_path, content, message):
    path = tmp_path / "bad.kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as e:
        kubeconfig.load(str(path))
    assert str(e.value).startswith(message.format(path=path))


def test_bad_inline_key_is_a_config_error_and_leaves_no_file(pki, tmp_path, private_tmp):  # noqa: F811
    cert, _ = pki["client"]
    path = _write(tmp_path / "k", "    server: https://x",
                  f"    client-certificate-data: {_b64(cert)}\n    client-key-data: {_b64_bytes(b'junk')}")
    with pytest.raises(ConfigError, match="^unable to load client certificate"):
        kubeconfig.load(path)
    assert list(private_tmp.iterdir()) == []
