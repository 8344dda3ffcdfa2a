"""node.k8s.io/v1: RuntimeClass."""
from __future__ import annotations

from services.apiserver.printers import AGE, NAME, TableConvertor, age, column
from services.apiserver.resource import GroupVersion, ResourceInfo

from .strategies.node import RuntimeClassStrategy

# kube's Handler column takes its description from ObjectMeta's docs, which have no "handler": empty
RUNTIME_CLASS_TABLE = TableConvertor((NAME, column("Handler", "string", ""), AGE),
                                     lambda o: [(o.get("metadata") or {}).get("name", ""), o.get("handler") or "",
                                                age(o)])

V1 = GroupVersion("node.k8s.io", "v1", 16300, 15, (
    ResourceInfo(
        group="node.k8s.io", version="v1", kind="RuntimeClass", plural="runtimeclasses", singular="runtimeclass",
        namespaced=False, key_prefix="/registry/runtimeclasses/", strategy=RuntimeClassStrategy,
        table=RUNTIME_CLASS_TABLE,
    ),
))

GROUP_VERSIONS = (V1,)
