"""ValidatingAdmissionPolicy: CEL validations of admissionregistration.k8s.io/v1 policies, applied through
their bindings (kube's admission/plugin/policy/validating).

Each binding's validationActions say what a failed validation does: Deny refuses the request (the
validation's reason: 422 Invalid unless said otherwise), Warn returns a warning, Audit records the
validation.policy.admission.k8s.io/validation_failure audit annotation. An expression that cannot be
evaluated (or params that cannot be found) follows the policy's failurePolicy: Fail treats it as a failed
validation, Ignore skips it."""
from __future__ import annotations

import logging
from typing import Any

import orjson

from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver.catalogue import Catalogue
from services.common.errors import APIError, forbidden

from .. import authz
from ..attributes import Attributes
from ..informers import InformerFactory, shared_informers
from ..plugin import ALL_OPERATIONS, Plugin, PluginConfig
from ..policy import (
    CompiledPolicy,
    EvalError,
    Expression,
    PolicySource,
    context,
    evaluate_variables,
    match_conditions,
    policy_span,
)
from ..typechecking import TypeChecker

log = logging.getLogger(__name__)

REASON_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}
VALIDATION_FAILURE = "validation.policy.admission.k8s.io/validation_failure"


class Validation:
    __slots__ = ("expression", "index", "message", "message_expression", "reason")

    def __init__(self, index: int, v: dict[str, Any]) -> None:
        self.index = index
        self.expression = Expression(v.get("expression") or "")
        self.message = v.get("message") or ""
        self.message_expression = Expression(v["messageExpression"]) if v.get("messageExpression") else None
        self.reason = v.get("reason") or ""

    def failure_message(self, ctx: Any) -> str:
        if self.message_expression is not None:
            try:
                text = self.message_expression.evaluate(ctx)
                if isinstance(text, str) and text.strip() and "\n" not in text:
                    return text.strip()
            except EvalError as e:
                log.info("messageExpression failed: %s", e)
        if self.message:
            return self.message
        return f"failed expression: {self.expression.text}"


def body_expressions(spec: dict[str, Any]) -> tuple[Any, ...]:
    validations = tuple(Validation(i, v or {}) for i, v in enumerate(spec.get("validations") or ()))
    audits = tuple(((a or {}).get("key", ""), Expression((a or {}).get("valueExpression") or ""))
                   for a in spec.get("auditAnnotations") or ())
    return validations + audits


class Decision:
    __slots__ = ("index", "message", "reason")

    def __init__(self, message: str, reason: str = "", index: int = 0) -> None:
        self.message, self.reason, self.index = message, reason, index


def evaluate(cp: CompiledPolicy, ctx: Any) -> tuple[list[Decision], dict[str, str]]:
    """The failed validations (an evaluation error as a failure when failurePolicy is Fail) and the audit
    annotations' values."""
    failed: list[Decision] = []
    audit: dict[str, str] = {}
    for item in cp.body:
        if isinstance(item, Validation):
            try:
                ok = item.expression.evaluate(ctx)
                if not isinstance(ok, bool):
                    raise EvalError(f"expression '{item.expression.text}' resulted in error: "
                                    f"expected bool, got {type(ok).__name__}")
            except EvalError as e:
                if cp.failure_policy == "Fail":
                    failed.append(Decision(str(e), "", item.index))
                continue
            if not ok:
                failed.append(Decision(item.failure_message(ctx), item.reason, item.index))
        else:
            key, expr = item
            try:
                value = expr.evaluate(ctx)
            except EvalError as e:
                if cp.failure_policy == "Fail":
                    failed.append(Decision(str(e)))
                continue
            if isinstance(value, str) and value:
                audit[f"{cp.name}/{key}"] = value[:10 * 1024]
    return failed, audit


class ValidatingAdmissionPolicy(Plugin):
    name = "ValidatingAdmissionPolicy"
    operations = ALL_OPERATIONS

    def __init__(self, informers: InformerFactory) -> None:
        self.informers = informers
        self.source = PolicySource(informers, "v1", "ValidatingAdmissionPolicy", body_expressions)
        self.checker = TypeChecker(informers.registry, "v1", "validatingadmissionpolicies")
        self.source.policies.add_handler(self.checker.on_event)

    def set_catalogue(self, catalogue: Catalogue) -> None:
        """The server's kinds: paramKind and type checking (kube's plug-in initializer gives a RESTMapper)."""
        self.source.catalogue = self.checker.catalogue = catalogue

    async def start(self) -> None:
        self.informers.start()

    async def stop(self) -> None:
        await self.checker.stop()
        await self.informers.stop()

    def ready(self) -> bool:
        return self.source.synced()

    def handles(self, operation: str) -> bool:
        return operation in self.operations and bool(self.source.bindings.store)  # no binding: nothing to run, the registry skips Validate

    async def validate(self, a: Attributes) -> None:
        denied: tuple[CompiledPolicy, str, Decision] | None = None
        audit_failures: list[dict[str, Any]] = []
        for cp, b, namespace, seen in self.source.matching(a):
            with policy_span(self.name, cp.name, b.name):
                actions = b.spec.get("validationActions") or []
                try:
                    all_params = await self.source.params(cp, b, a)
                except EvalError as e:
                    if cp.failure_policy != "Fail":
                        continue
                    failures = [(None, [Decision(str(e))])]
                else:
                    failures = []
                    for params in all_params:
                        failed, audit = await self._evaluate(cp, seen, namespace, params)
                        a.audit_annotations.update(audit)
                        if failed:
                            failures.append((params, failed))
                for _params, decisions in failures:
                    for d in decisions:
                        if "Deny" in actions and denied is None:
                            denied = (cp, b.name, d)
                        if "Warn" in actions:
                            a.warnings.append(f"Validation failed for ValidatingAdmissionPolicy '{cp.name}' "
                                              f"with binding '{b.name}': {d.message}")
                        if "Audit" in actions:
                            audit_failures.append({"message": d.message, "policy": cp.name, "binding": b.name,
                                                   "expressionIndex": d.index, "validationActions": actions})
        if audit_failures:
            a.audit_annotations[VALIDATION_FAILURE] = orjson.dumps(audit_failures).decode()
        if denied is not None:
            raise denial(a, *denied)


    @staticmethod
    async def _evaluate(cp: CompiledPolicy, a: Attributes, namespace: Any,
                        params: Any) -> tuple[list[Decision], dict[str, str]]:
        """One (policy, binding, params): its failed validations and audit annotations. Expressions that
        use the authorizer are evaluated again once the checks they made are answered."""
        checks = authz.Checks(a.user) if "authorizer" in cp.needs.variables else None

        def once() -> tuple[list[Decision], dict[str, str]]:
            ctx = context(a, namespace, params, cp.needs, checks)
            try:
                matched = match_conditions(cp, ctx)
            except EvalError as e:
                return [Decision(str(e))] if cp.failure_policy == "Fail" else [], {}
            if not matched:
                return [], {}
            evaluate_variables(cp, ctx)
            return evaluate(cp, ctx)
        return await authz.settle(checks, once)


def denial(a: Attributes, cp: CompiledPolicy, binding: str, d: Decision) -> APIError:
    """kube's admission.NewForbidden with the validation's reason (Invalid by default) and its code."""
    message = f"ValidatingAdmissionPolicy '{cp.name}' with binding '{binding}' denied request: {d.message}"
    err = forbidden(a.resource, a.group, a.name_for_errors(), message)
    err.reason = d.reason or "Invalid"
    err.code = REASON_CODES.get(err.reason, 422)
    assert err.details is not None
    err.details["causes"] = [{"message": message}]
    return err


def factory(config: PluginConfig, registry: rgrpc.RegistryStub | None) -> ValidatingAdmissionPolicy:
    return ValidatingAdmissionPolicy(shared_informers(registry))
