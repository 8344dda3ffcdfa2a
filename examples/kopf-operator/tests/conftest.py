"""The operator under test, run by kopf's KopfRunner for the session against the apiary plugin's cluster,
its validating webhook registered with the plugin's webhook helper."""
from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import yaml
from kopf.testing import KopfRunner

HERE = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def eventually(check: Callable[[], T], timeout: float = 30.0) -> T:
    """check()'s value once it returns one without raising (an operator acts asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _listening(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


@pytest.fixture(scope="session")
def operator(apiary_cluster, apiary_webhooks) -> Iterator[KopfRunner]:
    apiary_webhooks.install(yaml.safe_load((HERE / "webhooks" / "validating.yaml").read_text()))
    cert = apiary_webhooks.certificate
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KUBECONFIG", str(apiary_cluster.kubeconfig))
        env.setenv("GREETING_WEBHOOK_PORT", str(apiary_webhooks.port))
        env.setenv("GREETING_WEBHOOK_CERT", str(cert.cert_file))
        env.setenv("GREETING_WEBHOOK_KEY", str(cert.key_file))
        with KopfRunner(["run", "--standalone", "--all-namespaces", str(HERE / "greeting_operator.py")],
                        timeout=60) as runner:
            eventually(lambda: _listening(apiary_webhooks.port))
            yield runner
    assert runner.exit_code == 0, runner.output
