"""kubectl in several versions for the end-to-end tests: 1.32 on the PATH, and 1.27 and 1.33 beside it
(kubectl.1.27, kubectl.1.33) where they are installed.

A test that takes the `kctl` fixture (tests/e2e/conftest.py makes it every e2e module's) runs once per
version; `tag(kctl)` names what each version creates, `refused()` runs a command that must fail,
`until_refused()` retries one until something that arrives by watch refuses it, and `namespace()` gives a
test module or a test a namespace of its own.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import Kubectl
from tests.waiting import wait_for

OTHER_VERSIONS = ("1.27", "1.33")
# A suffix per test run: cluster-scoped objects (nodes, PriorityClasses, ClusterRoles, StorageClasses...)
# outlive the namespaces of the tests that made them, so a name is never reused from another run.
RUN = uuid.uuid4().hex[:5]


def versions() -> list[str]:
    """The kubectl binaries to test with: the one on the PATH, then each other version found beside it."""
    found = shutil.which("kubectl")
    here = Path(os.path.realpath(found)).parent if found else None
    return ["kubectl", *(str(here / f"kubectl.{v}") for v in OTHER_VERSIONS
                         if here and (here / f"kubectl.{v}").exists())]


@pytest.fixture(params=versions(), ids=lambda p: Path(p).name)
def kctl(request: pytest.FixtureRequest, kubectl: Kubectl) -> Kubectl:
    """The session's kubectl, once per version."""
    return Kubectl(kubectl.stack, kubectl.cache, request.param)


def tag(kctl: Kubectl) -> str:
    """A DNS-label suffix per kubectl version and per run (kubectl-1-27-3fa9c), so that each version's
    objects, cluster-scoped ones too, are its own."""
    return f"{Path(kctl.binary).name.replace('.', '-')}-{RUN}"


def refused(kctl: Kubectl, *args: str, input: str | None = None) -> str:
    """The error kubectl prints for a command that must fail."""
    out = kctl.run(*args, input=input, check=False)
    assert out.returncode != 0, out.stdout
    return out.stderr


def until_refused(kctl: Kubectl, create: Sequence[str], undo: Sequence[str], input: str | None = None,
                  accept: Callable[[subprocess.CompletedProcess[str]], bool] = lambda proc: True,
                  what: str = "the policy to take effect") -> subprocess.CompletedProcess[str]:
    """Run create until what arrives by watch (a policy, its binding, a webhook) refuses it, running undo
    after each create that passed; accept tells whether a refusal is the one awaited."""
    def attempt() -> subprocess.CompletedProcess[str] | None:
        proc = kctl.run(*create, input=input, check=False)
        if proc.returncode == 0:
            kctl.run(*undo)
            return None
        return proc if accept(proc) else None
    return wait_for(attempt, what=what)


@contextmanager
def namespace(kubectl: Kubectl, prefix: str) -> Iterator[str]:
    """A new namespace named prefix-<random>, deleted (not waited for) when the block ends."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    kubectl.run("create", "namespace", name)
    try:
        yield name
    finally:
        kubectl.run("delete", "namespace", name, "--wait=false", check=False)


def deny_in_namespace(name: str, ns: str) -> str:
    """A manifest's second document: the ValidatingAdmissionPolicyBinding `name` of the policy `name`,
    denying, for the namespace ns only (so that tests side by side do not see each other's policies)."""
    return f"""---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {name}
spec:
  policyName: {name}
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: {ns}
"""
