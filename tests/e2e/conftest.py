"""Fixtures of the end-to-end tests: `kctl`, the session's kubectl once per version (tests/kubectls.py)."""
from tests.kubectls import kctl

__all__ = ["kctl"]
