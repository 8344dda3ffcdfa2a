"""x-kubernetes-validations: CEL rules of CustomResourceDefinition schemas (apiextensions-apiserver's
pkg/apiserver/schema/cel and the CEL part of apis/apiextensions/validation).

- parser: CEL's grammar to a small AST, which cel-rust does not expose; read by the cost estimator.
- cost: the worst-case cost of a rule from the schema's bounds, and kube's limits.
- compilation: every rule of a schema compiled once (services/common/cel.py, the library the admission
  policies use), with the CRD validation's causes for a rule that does not compile or costs too much.
- validation: the rules evaluated against a custom object (self, oldSelf) with kube's causes.
"""
