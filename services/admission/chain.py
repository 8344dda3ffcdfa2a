"""The admission chain: every enabled plugin, mutating phase then validating phase, with kube's metrics."""
from __future__ import annotations

import time

from prometheus_client import Histogram

from .attributes import Attributes
from .plugin import MutatingPlugin, Plugin, ValidatingPlugin

_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 2.5)
STEP_DURATION = Histogram(
    "apiserver_admission_step_admission_duration_seconds",
    "Admission sub-step latency histogram in seconds, broken out for each operation and API resource and "
    "step type (validate or admit).", ["type", "operation", "rejected"], buckets=_BUCKETS)
PLUGIN_DURATION = Histogram(
    "apiserver_admission_controller_admission_duration_seconds",
    "Admission controller latency histogram in seconds, identified by name and broken out for each operation "
    "and API resource and type (validate or admit).", ["name", "type", "operation", "rejected"],
    buckets=_BUCKETS)


class Chain:
    def __init__(self, plugins: list[Plugin]) -> None:
        self.plugins = plugins
        self.mutating = [p for p in plugins if isinstance(p, MutatingPlugin)]
        self.validating = [p for p in plugins if isinstance(p, ValidatingPlugin)]

    def has_validators(self, a: Attributes) -> bool:
        return any(p.handles(a.operation) for p in self.validating)

    async def admit(self, a: Attributes) -> None:
        """The mutating phase: plugins may change a.object (through set_object) or reject. When a change
        came after a webhook or policy that asked to see it (reinvocationPolicy IfNeeded), the phase runs
        once more, as kube's reinvoker does: every plugin again, the webhooks and policies only for
        those calls (reinvocation.py)."""
        await self._run("admit", self.mutating, a)
        rc = a.reinvocation
        if rc.should_reinvoke:
            rc.is_reinvoke = True
            await self._run("admit", self.mutating, a)

    async def validate(self, a: Attributes) -> None:
        """The validating phase: plugins may only reject."""
        await self._run("validate", self.validating, a)

    async def _run(self, step: str, plugins: list[MutatingPlugin] | list[ValidatingPlugin],
                   a: Attributes) -> None:
        op = a.operation
        start = time.perf_counter()
        rejected = "false"
        try:
            for p in plugins:
                if not p.handles(op):
                    continue
                t0 = time.perf_counter()
                outcome = "true"
                try:
                    await (p.admit(a) if step == "admit" else p.validate(a))
                    outcome = "false"
                finally:
                    PLUGIN_DURATION.labels(p.name, step, op, outcome).observe(time.perf_counter() - t0)
        except Exception:  # a denial (APIError) or a broken plugin: either way the request is rejected
            rejected = "true"
            raise
        finally:
            STEP_DURATION.labels(step, op, rejected).observe(time.perf_counter() - start)

    async def start(self) -> None:
        for p in self.plugins:
            await p.start()

    async def stop(self) -> None:
        for p in self.plugins:
            await p.stop()

    def not_ready(self) -> list[str]:
        return [p.name for p in self.plugins if not p.ready()]
