"""Reinvocation (k8s.io/apiserver/pkg/admission reinvocation.go and the mutating dispatchers' reinvoke
contexts): when a mutation changed the object after a mutating webhook or policy with reinvocationPolicy
IfNeeded ran, the mutating phase runs once more, and those webhooks and policies are called again.

One ReinvocationContext per request (Attributes.reinvocation); each reinvoking plugin keeps its own
PluginReinvocation in it, as kube's webhook and policy dispatchers keep theirs under their plugin's name:

- during a pass, a call that changed the object marks every earlier IfNeeded call of the same plugin for
  reinvocation and asks the chain for a second pass (should_reinvoke);
- in the second pass, a plugin first checks whether someone else (the other plugin, an in-tree one)
  changed the object since its own last output: then all its earlier IfNeeded calls are due too;
- in the second pass only the calls marked are made (never one that did not run in the first).
"""
from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]


class PluginReinvocation:
    """One plugin's part: which of its IfNeeded calls ran, which are due again, its last output."""

    __slots__ = ("last_output", "previously_invoked", "to_reinvoke")

    def __init__(self) -> None:
        self.previously_invoked: set[Any] = set()
        self.to_reinvoke: set[Any] = set()
        self.last_output: Obj | None = None

    def begin(self, rc: ReinvocationContext, obj: Obj | None) -> None:
        """At the start of the plugin's pass: in the reinvocation pass, a change made since its last output
        (by another plugin) makes its earlier IfNeeded calls due."""
        if rc.is_reinvoke and self.last_output is not None and obj != self.last_output:
            self.require_previously_invoked()

    def end(self, obj: Obj | None) -> None:
        """At the end of the plugin's pass: remember its output (only while some call may be reinvoked:
        with none, a later change could make nothing due)."""
        self.last_output = copy.deepcopy(obj) if self.previously_invoked and obj is not None else None

    def should_call(self, rc: ReinvocationContext, key: Any) -> bool:
        return not rc.is_reinvoke or key in self.to_reinvoke

    def called(self, rc: ReinvocationContext, key: Any, changed: bool, if_needed: bool) -> None:
        """After one call: a change makes the earlier IfNeeded calls due and asks for a second pass."""
        if changed:
            self.require_previously_invoked()
            rc.should_reinvoke = True
        if if_needed:
            self.previously_invoked.add(key)

    def require_previously_invoked(self) -> None:
        if self.previously_invoked:
            self.to_reinvoke |= self.previously_invoked
            self.previously_invoked = set()


class ReinvocationContext:
    """kube's admission.ReinvocationContext: whether this is the second pass, whether one is needed, and
    each reinvoking plugin's own state."""

    __slots__ = ("_plugins", "is_reinvoke", "should_reinvoke")

    def __init__(self) -> None:
        self.is_reinvoke = False
        self.should_reinvoke = False
        self._plugins: dict[str, PluginReinvocation] = {}

    def plugin(self, name: str) -> PluginReinvocation:
        p = self._plugins.get(name)
        if p is None:
            p = self._plugins[name] = PluginReinvocation()
        return p
