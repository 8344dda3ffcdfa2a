"""Reading a kubeconfig's current context: files relative to it, inline data written out, a token."""
from __future__ import annotations

import base64
from pathlib import Path

import pytest

from services.cluster import clientcmd

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {{server: "https://127.0.0.1:6443/", certificate-authority: pki/ca.crt}}
- name: b
  cluster: {{server: "https://127.0.0.1:7443", certificate-authority-data: {ca}}}
users:
- name: admin
  user: {{client-certificate-data: {cert}, client-key: /abs/admin.key}}
- name: bot
  user: {{token: secret}}
contexts:
- {{name: one, context: {{cluster: a, user: admin}}}}
- {{name: two, context: {{cluster: b, user: bot}}}}
current-context: one
"""


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def write(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.format(ca=b64("CA PEM"), cert=b64("CERT PEM")))
    return path


def test_the_current_context_with_paths_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    config = clientcmd.load(write(tmp_path), tmp_path / "files")
    assert config.server == "https://127.0.0.1:6443"
    assert config.ca_file == tmp_path / "pki" / "ca.crt"
    assert config.cert_file is not None and config.cert_file.read_text() == "CERT PEM"
    assert config.key_file == Path("/abs/admin.key")
    assert config.token is None


def test_another_context_with_inline_data_and_a_token(tmp_path: Path) -> None:
    config = clientcmd.load(write(tmp_path), tmp_path / "files", context="two")
    assert config.ca_file is not None and config.ca_file.read_text() == "CA PEM"
    assert (config.token, config.cert_file) == ("secret", None)


def test_an_unknown_context_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path)
    with pytest.raises(ValueError, match=f"{path}: no context named 'three'"):
        clientcmd.load(path, tmp_path / "files", context="three")
