"""A second pizza server (python -m services.pizza) as a process beside a Stack, for tests that talk
to one straight, with flags of their own: its own etcd prefix on the stack's etcd, delegated
authentication and authorization against the stack's apiary, the stack's serving certificate and
the front-proxy CA. It is not registered with apiary: the stack's own pizza server (services.cluster.aggregated.PIZZA,
registered by Stack.register as every aggregated server is) is the one behind the proxy."""
from __future__ import annotations

import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from services.cluster.stack import ROOT, Stack


@dataclass
class PizzaServer:
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path
    log: BinaryIO
    prefix: str

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def command(stack: Stack, port: int, prefix: str, extra: list[str] | None = None,
            tls: tuple[Path, Path] | None = None, ca_flags: bool = True) -> list[str]:
    """tls: the serving certificate and key (default: the stack's apiserver certificate); without
    ca_flags the server reads its CAs from kube-system/extension-apiserver-authentication."""
    pki = stack.state / "pki"
    cert, key = tls or (pki / "apiserver.crt", pki / "apiserver.key")
    return [sys.executable, "-m", "services.pizza", "--secure-port", str(port), "--bind-address", "127.0.0.1",
            "--tls-cert-file", str(cert), "--tls-private-key-file", str(key),
            "--etcd-servers", stack.etcd_url, "--etcd-prefix", prefix, "--kubeconfig", str(stack.kubeconfig),
            *(["--requestheader-client-ca-file", str(pki / "front-proxy-ca.crt"),
                "--requestheader-allowed-names", "front-proxy-client", "--client-ca-file", str(pki / "ca.crt")]
              if ca_flags else []),
            *(extra or [])]


def start(stack: Stack, port: int, log_path: Path, extra: list[str] | None = None, timeout: float = 30.0,
          prefix: str = "", tls: tuple[Path, Path] | None = None, ca_flags: bool = True) -> PizzaServer:
    """Start it and wait until /readyz answers 200 (its informers synced, etcd reachable)."""
    prefix = prefix or f"/pizza-{uuid.uuid4().hex[:8]}"
    log = open(log_path, "ab")  # noqa: SIM115 - held open by the process, closed by PizzaServer.stop
    proc = subprocess.Popen(command(stack, port, prefix, extra, tls, ca_flags), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    server = PizzaServer(proc, f"https://127.0.0.1:{port}", log_path, log, prefix)
    ctx = ssl._create_unverified_context()  # a probe, as kubelet's: the certificate may be any CA's
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            server.log.close()
            raise RuntimeError(f"the pizza server exited ({proc.returncode}):\n{log_path.read_text()}")
        try:
            with urllib.request.urlopen(f"{server.url}/readyz", timeout=2, context=ctx) as r:
                if r.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"the pizza server is not ready after {timeout} s:\n{log_path.read_text()}")
        time.sleep(0.2)
