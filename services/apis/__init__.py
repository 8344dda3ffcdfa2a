"""The built-in API groups: what kube keeps in pkg/apis (the kinds), pkg/registry/<group> (their strategies
and Table columns) and the control plane's install (the list of groups). No service: the registry, the proxy
and admission all build their Catalogue from it (install.py).

Each group module (core, rbac, apiregistration, authentication, ...) declares its GroupVersions: the group,
the version, kube-aggregator's priorities, and for every kind a ResourceInfo naming everything that is not
behaviour -- kind, plural, singular, short names, categories, scope, verbs, subresources, etcd key prefix,
Table columns, protobuf message -- and the Strategy class that holds the behaviour (strategies/: defaulting,
validation, update rules, selectable fields). The OpenAPI schema of a kind is found in Kubernetes' own
definitions (schemas.py) by its group, version and kind, never typed here.

How to add a kind: write its Strategy (strategies/<group>.py; the base class is enough for a plain kind),
then add a ResourceInfo to its group's GroupVersion in <group>.py (a new group: a new module with its
GROUP_VERSIONS, listed in install.py). Give it Table columns (printers.name_age or a full TableConvertor)
and, when kubectl sends it as protobuf, the message's full name (its .proto in proto/k8s). Nothing else
changes: discovery, OpenAPI paths and schemas, printing, storage keys and fieldValidation follow. A kind
served in several versions or groups over one storage: every definition names the same key prefix, and those
not served in the storage version name a conversion (services.apiserver.conversion.same_fields or renamed).
"""
