"""The admission chain: every enabled plugin, mutating phase then validating phase, with kube's metrics."""
from __future__ import annotations

import functools
import time
from typing import Any

from prometheus_client import Histogram

from services.common import tracing

from .attributes import Attributes
from .plugin import ALL_OPERATIONS, MutatingPlugin, Plugin, ValidatingPlugin

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


@functools.cache
def _step_series(step: str, operation: str, rejected: str) -> Any:
    """A series of each histogram, looked up once (labels() takes a lock and builds a key every call)."""
    return STEP_DURATION.labels(step, operation, rejected)


@functools.cache
def _plugin_series(name: str, step: str, operation: str, rejected: str) -> Any:
    return PLUGIN_DURATION.labels(name, step, operation, rejected)


# The phases' spans, by step (each plug-in of the phase an "admission plugin" event on it, its webhook calls children).
PHASE_SPANS = {"admit": "mutating admission", "validate": "validating admission"}

# What a kind of request is, for the chain: (step, operation, group, resource, whether a subresource).
RequestKind = tuple[str, str, str, str, bool]


def concerns(p: Any, step: str, group: str, resource: str, subresource: bool) -> bool:
    """Whether a plug-in's `step` ("admit" or "validate") concerns requests for this resource, from what its
    class declares (plugin.Plugin: resources, validated_resources, subresources); a plug-in that declares
    nothing (an entry point plug-in on the protocol alone) concerns every resource."""
    if subresource and not getattr(p, "subresources", True):
        return False
    wanted = getattr(p, "validated_resources", None) if step == "validate" else None
    if wanted is None:
        wanted = getattr(p, "resources", None)
    return wanted is None or (group, resource) in wanted


class Chain:
    def __init__(self, plugins: list[Plugin]) -> None:
        self.plugins = plugins
        self.mutating = [p for p in plugins if isinstance(p, MutatingPlugin)]
        self.validating = [p for p in plugins if isinstance(p, ValidatingPlugin)]
        # The plug-ins each kind of request concerns, worked out on its first request (the resources the
        # registry serves bound it).
        self._concerned: dict[RequestKind, tuple[Any, ...]] = {}

    def concerned(self, step: str, a: Attributes) -> tuple[Any, ...]:
        """The plug-ins of `step` whose declared operations and resources cover the request, in order;
        each still decides by its state whether it handles the operation now (Plugin.handles)."""
        op, group, resource, sub = a.operation, a.group, a.resource, bool(a.subresource)
        key = (step, op, group, resource, sub)
        found = self._concerned.get(key)
        if found is None:
            plugins = self.mutating if step == "admit" else self.validating
            found = self._concerned[key] = tuple(
                p for p in plugins
                if op in getattr(p, "operations", ALL_OPERATIONS) and concerns(p, step, group, resource, sub))
        return found

    def has_validators(self, a: Attributes) -> bool:
        op = a.operation
        return any(p.handles(op) for p in self.concerned("validate", a))

    async def admit(self, a: Attributes) -> None:
        """The mutating phase: plugins may change a.object (through set_object) or reject. When a change
        came after a webhook or policy that asked to see it (reinvocationPolicy IfNeeded), the phase runs
        once more, as kube's reinvoker does: every plugin again, the webhooks and policies only for
        those calls (reinvocation.py)."""
        plugins = self.concerned("admit", a)
        await self._run("admit", plugins, a)
        if a.should_reinvoke:
            a.reinvocation.is_reinvoke = True
            await self._run("admit", plugins, a)

    async def validate(self, a: Attributes) -> None:
        """The validating phase: plugins may only reject."""
        await self._run("validate", self.concerned("validate", a), a)

    async def _run(self, step: str, plugins: tuple[Any, ...], a: Attributes) -> None:
        if tracing.recording():
            with tracing.span(PHASE_SPANS[step], {"operation": a.operation, "resource": a.resource,
                                                  "reinvocation": a.reinvocation.is_reinvoke}):
                await self._run_plugins(step, plugins, a)
        else:
            await self._run_plugins(step, plugins, a)

    async def _run_plugins(self, step: str, plugins: tuple[Any, ...], a: Attributes) -> None:
        op = a.operation
        traced = tracing.recording()
        start = time.perf_counter()
        rejected = "false"
        try:
            for p in plugins:
                if not p.handles(op):
                    continue
                t0 = time.perf_counter()
                outcome = "true"
                try:
                    if traced:
                        with tracing.step("admission plugin", {"plugin": p.name, "step": step}):
                            await (p.admit(a) if step == "admit" else p.validate(a))
                    else:
                        await (p.admit(a) if step == "admit" else p.validate(a))
                    outcome = "false"
                finally:
                    _plugin_series(p.name, step, op, outcome).observe(time.perf_counter() - t0)
        except Exception:  # a denial (APIError) or a broken plugin: either way the request is rejected
            rejected = "true"
            raise
        finally:
            _step_series(step, op, rejected).observe(time.perf_counter() - start)

    async def start(self) -> None:
        for p in self.plugins:
            await p.start()

    async def stop(self) -> None:
        for p in self.plugins:
            await p.stop()

    def not_ready(self) -> list[str]:
        return [p.name for p in self.plugins if not p.ready()]
