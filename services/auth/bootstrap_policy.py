"""The roles and bindings kube-apiserver creates at start (plugin/pkg/auth/authorizer/rbac/bootstrappolicy).

Only the parts that name apiary's API surface or that clients rely on; objects
carry kube's labels and the autoupdate annotation so reconciliation on start
can recognise them.
"""
from __future__ import annotations

from typing import Any

RBAC = "rbac.authorization.k8s.io"
BOOTSTRAP_LABELS = {"kubernetes.io/bootstrapping": "rbac-defaults"}
AUTOUPDATE = {"rbac.authorization.kubernetes.io/autoupdate": "true"}
READ = ["get", "list", "watch"]
WRITE = ["create", "delete", "deletecollection", "patch", "update"]


def _rule(verbs: list[str], groups: list[str], resources: list[str], names: list[str] | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {"verbs": verbs, "apiGroups": groups, "resources": resources}
    if names:
        r["resourceNames"] = names
    return r


def _urls(verbs: list[str], urls: list[str]) -> dict[str, Any]:
    return {"verbs": verbs, "nonResourceURLs": urls}


def cluster_role(name: str, rules: list[dict[str, Any]], labels: dict[str, str] | None = None,
                 aggregate_from: str | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": f"{RBAC}/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {**BOOTSTRAP_LABELS, **(labels or {})}, "annotations": dict(AUTOUPDATE)},
        "rules": rules,
    }
    if aggregate_from:
        obj["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {aggregate_from: "true"}}]}
    return obj


def cluster_role_binding(name: str, role: str, groups: list[str] = (), users: list[str] = (),  # type: ignore[assignment]
                         service_accounts: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    subjects = [{"apiGroup": RBAC, "kind": "Group", "name": g} for g in groups]
    subjects += [{"apiGroup": RBAC, "kind": "User", "name": u} for u in users]
    subjects += [{"kind": "ServiceAccount", "name": sa.split("/")[1], "namespace": sa.split("/")[0]}
                 for sa in service_accounts]
    return {
        "apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": dict(BOOTSTRAP_LABELS), "annotations": dict(AUTOUPDATE)},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    }


NETWORKING = "networking.k8s.io"
# eventsRule(): what every component that records events holds
EVENTS_RULE = _rule(["create", "update", "patch"], ["", "events.k8s.io"], ["events"])

AGG_ADMIN = "rbac.authorization.k8s.io/aggregate-to-admin"
AGG_EDIT = "rbac.authorization.k8s.io/aggregate-to-edit"
AGG_VIEW = "rbac.authorization.k8s.io/aggregate-to-view"

CORE_VIEW = ["configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods",
             "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services",
             "services/status"]

CONTROLLER_MANAGER = "system:kube-controller-manager"
COORDINATION = "coordination.k8s.io"
CERTIFICATES = "certificates.k8s.io"
# kube's built-in signers (the csrsigning controller's), and the legacy one v1 refuses new requests for
KUBE_SIGNERS = ["kubernetes.io/legacy-unknown", "kubernetes.io/kube-apiserver-client",
                "kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving"]
FLOWCONTROL = "flowcontrol.apiserver.k8s.io"


def _events() -> dict[str, Any]:
    """kube's eventsRule: what every controller may do with events."""
    return _rule(["create", "patch", "update"], ["", "events.k8s.io"], ["events"])


# kube's controller roles (controller_policy.go), bound to each controller's ServiceAccount in kube-system.
# apiary's controller-manager runs them all with its own credentials (kube's
# --use-service-account-credentials=false), so their bindings name its user as well.
CONTROLLER_ROLES: dict[str, list[dict[str, Any]]] = {
    "generic-garbage-collector": [_rule(["delete", "get", "list", "patch", "update", "watch"], ["*"], ["*"]),
                                  _events()],
    "namespace-controller": [_rule(["delete", "deletecollection", "get", "list"], ["*"], ["*"]),
                             _rule(["update"], [""], ["namespaces/finalize", "namespaces/status"]),
                             _events()],
    # quota counts anything it is asked to, so it lists and watches everything
    "resourcequota-controller": [_rule(["list", "watch"], ["*"], ["*"]),
                                 _rule(["update"], [""], ["resourcequotas/status"]), _events()],
    "service-account-controller": [_rule(["create"], [""], ["serviceaccounts"]), _events()],
    "root-ca-cert-publisher": [_rule(["create", "update"], [""], ["configmaps"]), _events()],
    # csrapproving, csrsigning and csrcleaner
    "certificate-controller": [
        _rule(["delete", "get", "list", "watch"], [CERTIFICATES], ["certificatesigningrequests"]),
        _rule(["update"], [CERTIFICATES], ["certificatesigningrequests/approval",
                                           "certificatesigningrequests/status"]),
        _rule(["approve"], [CERTIFICATES], ["signers"], ["kubernetes.io/kube-apiserver-client-kubelet"]),
        _rule(["sign"], [CERTIFICATES], ["signers"], KUBE_SIGNERS),
        _rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]), _events()],
    # apiary's own: what kube-apiserver writes for the `kubernetes` Service, done here once per cluster
    "kubernetes-service-controller": [
        _rule(["create", "get", "update"], [""], ["endpoints", "services"]),
        _rule(["create", "delete", "get", "list", "update"], ["discovery.k8s.io"], ["endpointslices"]),
        _rule(["delete"], [COORDINATION], ["leases"]), _events()],
    # apiary's own: what kube-apiserver's APF config producer and consumer write, done here once per cluster
    "priority-and-fairness-config": [
        _rule(["create", "delete", "get", "update"], [FLOWCONTROL], ["flowschemas", "prioritylevelconfigurations"]),
        _rule(["update"], [FLOWCONTROL], ["flowschemas/status"]), _events()],
}

CLUSTER_ROLES: list[dict[str, Any]] = [
    cluster_role("cluster-admin", [_rule(["*"], ["*"], ["*"]), _urls(["*"], ["*"])]),
    cluster_role("system:discovery", [_urls(["get"], ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez",
                                                      "/openapi", "/openapi/*", "/readyz", "/version", "/version/"])]),
    cluster_role("system:basic-user", [
        _rule(["create"], ["authentication.k8s.io"], ["selfsubjectreviews"]),
        _rule(["create"], ["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
    ]),
    cluster_role("system:public-info-viewer", [_urls(["get"], ["/healthz", "/livez", "/readyz", "/version",
                                                               "/version/"])]),
    # kube's ServiceAccountIssuerDiscovery roles: the issuer's public documents, for relying parties
    cluster_role("system:service-account-issuer-discovery", [_urls(["get"], [
        "/.well-known/openid-configuration", "/.well-known/openid-configuration/", "/openid/v1/jwks",
        "/openid/v1/jwks/"])]),
    cluster_role("system:auth-delegator", [
        _rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
        _rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
    ]),
    cluster_role("admin", [], aggregate_from=AGG_ADMIN),
    cluster_role("edit", [], labels={AGG_ADMIN: "true"}, aggregate_from=AGG_EDIT),
    cluster_role("view", [], labels={AGG_EDIT: "true"}, aggregate_from=AGG_VIEW),
    cluster_role("system:aggregate-to-admin", [
        _rule(["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"], [RBAC],
              ["rolebindings", "roles"]),
        _rule(["create"], ["authorization.k8s.io"], ["localsubjectaccessreviews"]),
    ], labels={AGG_ADMIN: "true"}),
    cluster_role("system:aggregate-to-edit", [
        _rule(["impersonate"], [""], ["serviceaccounts"]),
        _rule(WRITE, [""], ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"]),
        _rule(["create"], [""], ["pods/eviction"]),
        _rule(WRITE, [""], ["configmaps", "endpoints", "events", "persistentvolumeclaims", "replicationcontrollers",
                            "replicationcontrollers/scale", "secrets", "serviceaccounts", "services",
                            "services/proxy"]),
        _rule(["create"], [""], ["serviceaccounts/token"]),
        _rule(WRITE, ["apps"], ["daemonsets", "deployments", "deployments/rollback", "deployments/scale",
                                "replicasets", "replicasets/scale", "statefulsets", "statefulsets/scale"]),
        _rule(WRITE, ["autoscaling"], ["horizontalpodautoscalers"]),
        _rule(WRITE, ["batch"], ["cronjobs", "jobs"]),
        _rule(READ, [""], ["secrets"]),
        _rule(WRITE, ["policy"], ["poddisruptionbudgets"]),
        _rule(WRITE, [NETWORKING], ["networkpolicies", "ingresses"]),
    ], labels={AGG_EDIT: "true"}),
    cluster_role("system:aggregate-to-view", [
        _rule(READ, [""], CORE_VIEW),
        _rule(READ, [""], ["bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status",
                           "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"]),
        _rule(READ, [""], ["namespaces"]),
        _rule(READ, ["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"]),
        _rule(READ, [NETWORKING], ["networkpolicies", "ingresses", "ingresses/status"]),
        _rule(READ, ["apps"], ["controllerrevisions", "daemonsets", "daemonsets/status", "deployments",
                               "deployments/scale", "deployments/status", "replicasets", "replicasets/scale",
                               "replicasets/status", "statefulsets", "statefulsets/scale", "statefulsets/status"]),
        _rule(READ, ["autoscaling"], ["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
        _rule(READ, ["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
    ], labels={AGG_VIEW: "true"}),
    # the system roles kube binds nowhere by default, for the components that read nodes and storage classes
    cluster_role("system:heapster", [_rule(READ, [""], ["events", "pods", "nodes", "namespaces"]),
                                     _rule(READ, ["extensions"], ["deployments"])]),
    cluster_role("system:node-problem-detector", [_rule(["get"], [""], ["nodes"]),
                                                  _rule(["patch"], [""], ["nodes/status"]), EVENTS_RULE]),
    cluster_role("system:node-proxier", [_rule(["list", "watch"], [""], ["services", "endpoints"]),
                                         _rule(["get"], [""], ["nodes"]), EVENTS_RULE]),
    cluster_role("system:kubelet-api-admin", [
        _rule(READ, [""], ["nodes"]),
        _rule(["proxy"], [""], ["nodes"]),
        _rule(["*"], [""], ["nodes/proxy", "nodes/metrics", "nodes/spec", "nodes/stats", "nodes/log"]),
    ]),
    cluster_role("system:persistent-volume-provisioner", [
        _rule(["get", "list", "watch", "create", "delete"], [""], ["persistentvolumes"]),
        _rule(["get", "list", "watch", "update"], [""], ["persistentvolumeclaims"]),
        _rule(READ, ["storage.k8s.io"], ["storageclasses"]),
        _rule(["watch"], [""], ["events"]),
        EVENTS_RULE,
    ]),
    # CSRs: a node's bootstrap credentials, what the csrapproving controller checks, and an approver per signer
    cluster_role("system:node-bootstrapper", [_rule(["create", "get", "list", "watch"], [CERTIFICATES],
                                                    ["certificatesigningrequests"])]),
    cluster_role("system:certificates.k8s.io:certificatesigningrequests:nodeclient",
                 [_rule(["create"], [CERTIFICATES], ["certificatesigningrequests/nodeclient"])]),
    cluster_role("system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
                 [_rule(["create"], [CERTIFICATES], ["certificatesigningrequests/selfnodeclient"])]),
    *(cluster_role(f"system:certificates.k8s.io:{signer.split('/')[1]}-approver",
                   [_rule(["approve"], [CERTIFICATES], ["signers"], [signer])]) for signer in KUBE_SIGNERS),
    cluster_role("system:volume-scheduler", [
        _rule(READ + ["update"], [""], ["persistentvolumes"]),
        _rule(READ, ["storage.k8s.io"], ["storageclasses"]),
        _rule(READ + ["update"], [""], ["persistentvolumeclaims"]),
    ]),
]

CLUSTER_ROLES += [
    cluster_role(CONTROLLER_MANAGER, [
        _events(),
        # leader election
        _rule(["create"], [COORDINATION], ["leases"]),
        _rule(["get", "update"], [COORDINATION], ["leases"], ["kube-controller-manager"]),
        _rule(["create"], [""], ["endpoints"]),
        _rule(["get", "update"], [""], ["endpoints"], ["kube-controller-manager"]),
        _rule(["create"], [""], ["secrets", "serviceaccounts"]),
        _rule(["delete"], [""], ["secrets"]),
        _rule(["get"], [""], ["configmaps", "namespaces", "secrets", "serviceaccounts"]),
        _rule(["update"], [""], ["secrets", "serviceaccounts"]),
        _rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
        _rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
        # every shared informer
        _rule(["list", "watch"], ["*"], ["*"]),
        _rule(["create"], [""], ["serviceaccounts/token"]),
    ]),
    *(cluster_role(f"system:controller:{name}", rules) for name, rules in CONTROLLER_ROLES.items()),
]

CLUSTER_ROLE_BINDINGS: list[dict[str, Any]] = [
    cluster_role_binding("cluster-admin", "cluster-admin", groups=["system:masters"]),
    cluster_role_binding("system:discovery", "system:discovery", groups=["system:authenticated"]),
    cluster_role_binding("system:basic-user", "system:basic-user", groups=["system:authenticated"]),
    cluster_role_binding("system:public-info-viewer", "system:public-info-viewer",
                         groups=["system:authenticated", "system:unauthenticated"]),
    cluster_role_binding("system:service-account-issuer-discovery", "system:service-account-issuer-discovery",
                         groups=["system:serviceaccounts"]),
    cluster_role_binding(CONTROLLER_MANAGER, CONTROLLER_MANAGER, users=[CONTROLLER_MANAGER]),
    *(cluster_role_binding(f"system:controller:{name}", f"system:controller:{name}", users=[CONTROLLER_MANAGER],
                           service_accounts=[f"kube-system/{name}"]) for name in CONTROLLER_ROLES),
]

ROLES: list[dict[str, Any]] = [
    {
        "apiVersion": f"{RBAC}/v1", "kind": "Role",
        "metadata": {"name": "extension-apiserver-authentication-reader", "namespace": "kube-system",
                     "labels": dict(BOOTSTRAP_LABELS), "annotations": dict(AUTOUPDATE)},
        "rules": [_rule(READ, [""], ["configmaps"], ["extension-apiserver-authentication"])],
    },
]
