"""OpenAPI v3 schemas of the served kinds, named as kube-apiserver names them.

The same schemas drive three things: the OpenAPI documents (kubectl explain and
client-side validation), unknown-field detection (fieldValidation), and the
type checks of decoding (kube's "cannot unmarshal" errors).
"""
from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

META = "io.k8s.apimachinery.pkg.apis.meta.v1."
CORE = "io.k8s.api.core.v1."
AGG = "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1."
RBAC = "io.k8s.api.rbac.v1."
AUTHN = "io.k8s.api.authentication.v1."
AUTHZ = "io.k8s.api.authorization.v1."
DISCOVERY = "io.k8s.api.discovery.v1."
REF_PREFIX = "#/components/schemas/"


def _s(desc: str, fmt: str = "") -> Schema:
    out: Schema = {"type": "string", "description": desc}
    if fmt:
        out["format"] = fmt
    return out


def _i(desc: str, fmt: str = "int32") -> Schema:
    return {"type": "integer", "format": fmt, "description": desc}


def _b(desc: str) -> Schema:
    return {"type": "boolean", "description": desc}


def _ref(name: str, desc: str = "") -> Schema:
    out: Schema = {"allOf": [{"$ref": REF_PREFIX + name}], "default": {}}
    if desc:
        out["description"] = desc
    return out


def _map(desc: str, fmt: str = "") -> Schema:
    item: Schema = {"type": "string", "default": ""}
    if fmt:
        item["format"] = fmt
    return {"type": "object", "additionalProperties": item, "description": desc}


def _list(item: Schema, desc: str, **ext: Any) -> Schema:
    return {"type": "array", "items": item, "description": desc, **ext}


def _gvk(group: str, version: str, kind: str) -> list[dict[str, str]]:
    return [{"group": group, "kind": kind, "version": version}]


_API_VERSION = _s("APIVersion defines the versioned schema of this representation of an object. Servers should "
                  "convert recognized schemas to the latest internal value, and may reject unrecognized values. "
                  "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/"
                  "api-conventions.md#resources")
_KIND = _s("Kind is a string value representing the REST resource this object represents. Servers may infer "
           "this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
           "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds")
_OBJECT_META = _ref(META + "ObjectMeta", "Standard object's metadata. More info: https://git.k8s.io/community/"
                    "contributors/devel/sig-architecture/api-conventions.md#metadata")
_LIST_META = _ref(META + "ListMeta", "Standard list metadata. More info: https://git.k8s.io/community/contributors"
                  "/devel/sig-architecture/api-conventions.md#types-kinds")


def _object(desc: str, props: dict[str, Schema], gvk: tuple[str, str, str] | None = None,
            required: list[str] | None = None) -> Schema:
    out: Schema = {"description": desc, "type": "object", "properties": props}
    if required:
        out["required"] = required
    if gvk:
        out["x-kubernetes-group-version-kind"] = _gvk(*gvk)
    return out


def _kind(desc: str, props: dict[str, Schema], gvk: tuple[str, str, str]) -> Schema:
    return _object(desc, {"apiVersion": _API_VERSION, "kind": _KIND, "metadata": _OBJECT_META, **props}, gvk)


def _list_kind(item_schema: str, kind: str, gvk: tuple[str, str, str]) -> Schema:
    return _object(f"{kind}List is a list of {kind} objects.", {
        "apiVersion": _API_VERSION,
        "items": _list(_ref(item_schema), f"Items is the list of {kind} objects."),
        "kind": _KIND,
        "metadata": _LIST_META,
    }, gvk, required=["items"])


def _condition(desc: str) -> Schema:
    return _object(desc, {
        "lastTransitionTime": _ref(META + "Time", "Last time the condition transitioned from one status to "
                                   "another."),
        "message": _s("Human-readable message indicating details about last transition."),
        "reason": _s("Unique, one-word, CamelCase reason for the condition's last transition."),
        "status": _s("Status is the status of the condition. Can be True, False, Unknown."),
        "type": _s("Type is the type of the condition."),
    }, required=["type", "status"])


_META_SCHEMAS: dict[str, Schema] = {
    META + "Time": {"type": "string", "format": "date-time",
                    "description": "Time is a wrapper around time.Time which supports correct marshaling to YAML "
                                   "and JSON.  Wrappers are provided for many of the factory methods that the time "
                                   "package offers."},
    META + "MicroTime": {"type": "string", "format": "date-time",
                         "description": "MicroTime is version of Time with microsecond level precision."},
    META + "FieldsV1": {"type": "object", "description": "FieldsV1 stores a set of fields in a data structure "
                        "like a Trie, in JSON format."},
    META + "OwnerReference": _object(
        "OwnerReference contains enough information to let you identify an owning object. An owning object must "
        "be in the same namespace as the dependent, or be cluster-scoped, so there is no namespace field.", {
            "apiVersion": _s("API version of the referent.", ),
            "blockOwnerDeletion": _b("If true, AND if the owner has the \"foregroundDeletion\" finalizer, then the "
                                     "owner cannot be deleted from the key-value store until this reference is "
                                     "removed."),
            "controller": _b("If true, this reference points to the managing controller."),
            "kind": _s("Kind of the referent."),
            "name": _s("Name of the referent."),
            "uid": _s("UID of the referent."),
        }, required=["apiVersion", "kind", "name", "uid"]) | {"x-kubernetes-map-type": "atomic"},
    META + "ManagedFieldsEntry": _object(
        "ManagedFieldsEntry is a workflow-id, a FieldSet and the group version of the resource that the "
        "fieldset applies to.", {
            "apiVersion": _s("APIVersion defines the version of this resource that this field set applies to."),
            "fieldsType": _s("FieldsType is the discriminator for the different fields format and version. "
                             "There is currently only one possible value: \"FieldsV1\""),
            "fieldsV1": _ref(META + "FieldsV1", "FieldsV1 holds the first JSON version format as described in "
                             "the \"FieldsV1\" type."),
            "manager": _s("Manager is an identifier of the workflow managing these fields."),
            "operation": _s("Operation is the type of operation which lead to this ManagedFieldsEntry being "
                            "created. The only valid values for this field are 'Apply' and 'Update'."),
            "subresource": _s("Subresource is the name of the subresource used to update that object, or empty "
                              "string if the object was updated through the main resource."),
            "time": _ref(META + "Time", "Time is the timestamp of when the ManagedFields entry was added."),
        }),
    META + "ObjectMeta": _object(
        "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must "
        "create.", {
            "annotations": _map("Annotations is an unstructured key value map stored with a resource that may be "
                                "set by external tools to store and retrieve arbitrary metadata."),
            "creationTimestamp": _ref(META + "Time", "CreationTimestamp is a timestamp representing the server "
                                      "time when this object was created."),
            "deletionGracePeriodSeconds": _i("Number of seconds allowed for this object to gracefully terminate "
                                             "before it will be removed from the system.", "int64"),
            "deletionTimestamp": _ref(META + "Time", "DeletionTimestamp is RFC 3339 date and time at which this "
                                      "resource will be deleted."),
            "finalizers": _list({"type": "string", "default": ""}, "Must be empty before the object is deleted "
                                "from the registry.", **{"x-kubernetes-list-type": "set",
                                                        "x-kubernetes-patch-strategy": "merge"}),
            "generateName": _s("GenerateName is an optional prefix, used by the server, to generate a unique name "
                               "ONLY IF the Name field has not been provided."),
            "generation": _i("A sequence number representing a specific generation of the desired state.",
                             "int64"),
            "labels": _map("Map of string keys and values that can be used to organize and categorize (scope and "
                           "select) objects."),
            "managedFields": _list(_ref(META + "ManagedFieldsEntry"), "ManagedFields maps workflow-id and version "
                                   "to the set of fields that are managed by that workflow.",
                                   **{"x-kubernetes-list-type": "atomic"}),
            "name": _s("Name must be unique within a namespace. Is required when creating resources, although "
                       "some resources may allow a client to request the generation of an appropriate name "
                       "automatically."),
            "namespace": _s("Namespace defines the space within which each name must be unique."),
            "ownerReferences": _list(_ref(META + "OwnerReference"), "List of objects depended by this object.",
                                     **{"x-kubernetes-list-map-keys": ["uid"], "x-kubernetes-list-type": "map",
                                        "x-kubernetes-patch-merge-key": "uid",
                                        "x-kubernetes-patch-strategy": "merge"}),
            "resourceVersion": _s("An opaque value that represents the internal version of this object that can "
                                  "be used by clients to determine when objects have changed."),
            "selfLink": _s("Deprecated: selfLink is a legacy read-only field that is no longer populated by the "
                           "system."),
            "uid": _s("UID is the unique in time and space value for this object."),
        }),
    META + "ListMeta": _object(
        "ListMeta describes metadata that synthetic resources must have, including lists and various status "
        "objects.", {
            "continue": _s("continue may be set if the user set a limit on the number of items returned."),
            "remainingItemCount": _i("remainingItemCount is the number of subsequent items in the list which are "
                                     "not included in this list response.", "int64"),
            "resourceVersion": _s("String that identifies the server's internal version of this object."),
            "selfLink": _s("Deprecated: selfLink is a legacy read-only field that is no longer populated by the "
                           "system."),
        }),
    META + "StatusCause": _object("StatusCause provides more information about an api.Status failure.", {
        "field": _s("The field of the resource that has caused this error, as named by its JSON serialization."),
        "message": _s("A human-readable description of the cause of the error."),
        "reason": _s("A machine-readable description of the cause of the error."),
    }),
    META + "StatusDetails": _object("StatusDetails is a set of additional properties that MAY be set by the "
                                    "server to provide additional information about a response.", {
        "causes": _list(_ref(META + "StatusCause"), "The Causes array includes more details associated with the "
                        "StatusReason failure.", **{"x-kubernetes-list-type": "atomic"}),
        "group": _s("The group attribute of the resource associated with the status StatusReason."),
        "kind": _s("The kind attribute of the resource associated with the status StatusReason."),
        "name": _s("The name attribute of the resource associated with the status StatusReason."),
        "retryAfterSeconds": _i("If specified, the time in seconds before the operation should be retried."),
        "uid": _s("UID of the resource."),
    }),
    META + "Status": _object("Status is a return value for calls that don't return other objects.", {
        "apiVersion": _API_VERSION,
        "code": _i("Suggested HTTP return code for this status, 0 if not set."),
        "details": _ref(META + "StatusDetails", "Extended data associated with the reason."),
        "kind": _KIND,
        "message": _s("A human-readable description of the status of this operation."),
        "metadata": _LIST_META,
        "reason": _s("A machine-readable description of why this operation is in the \"Failure\" status."),
        "status": _s("Status of the operation. One of: \"Success\" or \"Failure\"."),
    }, ("", "v1", "Status")),
    META + "Preconditions": _object("Preconditions must be fulfilled before an operation (update, delete, etc.) "
                                    "is carried out.", {
        "resourceVersion": _s("Specifies the target ResourceVersion"),
        "uid": _s("Specifies the target UID."),
    }),
    META + "DeleteOptions": _object("DeleteOptions may be provided when deleting an API object.", {
        "apiVersion": _API_VERSION,
        "dryRun": _list({"type": "string", "default": ""}, "When present, indicates that modifications should "
                        "not be persisted.", **{"x-kubernetes-list-type": "atomic"}),
        "gracePeriodSeconds": _i("The duration in seconds before the object should be deleted.", "int64"),
        "ignoreStoreReadErrorWithClusterBreakingPotential": _b("if set to true, it will trigger an unsafe "
                                                               "deletion of the resource in case the normal "
                                                               "deletion flow fails with a corrupt object error."),
        "kind": _KIND,
        "orphanDependents": _b("Deprecated: please use the PropagationPolicy, this field will be deprecated in "
                               "1.7."),
        "preconditions": _ref(META + "Preconditions", "Must be fulfilled before a deletion is carried out."),
        "propagationPolicy": _s("Whether and how garbage collection will be performed. Acceptable values are: "
                                "'Orphan', 'Background', 'Foreground'."),
    }),
    META + "WatchEvent": _object("Event represents a single event to a watched resource.", {
        "object": {"type": "object", "description": "Object is: * If Type is Added or Modified: the new state of "
                   "the object. * If Type is Deleted: the state of the object immediately before deletion. * If "
                   "Type is Error: *Status is recommended; other types may make sense depending on context."},
        "type": _s("", ),
    }, required=["type", "object"]),
    META + "LabelSelectorRequirement": _object(
        "A label selector requirement is a selector that contains values, a key, and an operator that relates the "
        "key and values.", {
            "key": _s("key is the label key that the selector applies to."),
            "operator": _s("operator represents a key's relationship to a set of values. Valid operators are In, "
                           "NotIn, Exists and DoesNotExist."),
            "values": _list({"type": "string", "default": ""}, "values is an array of string values.",
                            **{"x-kubernetes-list-type": "atomic"}),
        }, required=["key", "operator"]),
    META + "LabelSelector": _object(
        "A label selector is a label query over a set of resources.", {
            "matchExpressions": _list(_ref(META + "LabelSelectorRequirement"), "matchExpressions is a list of "
                                      "label selector requirements. The requirements are ANDed.",
                                      **{"x-kubernetes-list-type": "atomic"}),
            "matchLabels": _map("matchLabels is a map of {key,value} pairs."),
        }) | {"x-kubernetes-map-type": "atomic"},
    META + "FieldSelectorRequirement": _object(
        "FieldSelectorRequirement is a selector that contains values, a key, and an operator that relates the "
        "key and values.", {
            "key": _s("key is the field selector key that the requirement applies to."),
            "operator": _s("operator represents a key's relationship to a set of values. Valid operators are In, "
                           "NotIn, Exists, DoesNotExist."),
            "values": _list({"type": "string", "default": ""}, "values is an array of string values.",
                            **{"x-kubernetes-list-type": "atomic"}),
        }, required=["key", "operator"]),
    META + "Patch": {"type": "object", "description": "Patch is provided to give a concrete name and type to "
                     "the Kubernetes PATCH request body."},
}

_CORE_SCHEMAS: dict[str, Schema] = {
    CORE + "ConfigMap": _kind("ConfigMap holds configuration data for pods to consume.", {
        "binaryData": _map("BinaryData contains the binary data. Each key must consist of alphanumeric "
                           "characters, '-', '_' or '.'. BinaryData can contain byte sequences that are not in the "
                           "UTF-8 range.", "byte"),
        "data": _map("Data contains the configuration data. Each key must consist of alphanumeric characters, "
                     "'-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field."),
        "immutable": _b("Immutable, if set to true, ensures that data stored in the ConfigMap cannot be updated "
                        "(only object metadata can be modified). If not set to true, the field can be modified at "
                        "any time. Defaulted to nil."),
    }, ("", "v1", "ConfigMap")),
    CORE + "Secret": _kind("Secret holds secret data of a certain type. The total bytes of the values in the "
                           "Data field must be less than MaxSecretSize bytes.", {
        "data": _map("Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' "
                     "or '.'. The serialized form of the secret data is a base64 encoded string.", "byte"),
        "immutable": _b("Immutable, if set to true, ensures that data stored in the Secret cannot be updated "
                        "(only object metadata can be modified)."),
        "stringData": _map("stringData allows specifying non-binary secret data in string form. It is provided "
                           "as a write-only input field for convenience. All keys and values are merged into the "
                           "data field on write, overwriting any existing values. The stringData field is never "
                           "output when reading from the API."),
        "type": _s("Used to facilitate programmatic handling of secret data. More info: "
                   "https://kubernetes.io/docs/concepts/configuration/secret/#secret-types"),
    }, ("", "v1", "Secret")),
    CORE + "NamespaceSpec": _object("NamespaceSpec describes the attributes on a Namespace.", {
        "finalizers": _list({"type": "string", "default": ""}, "Finalizers is an opaque list of values that must "
                            "be empty to permanently remove object from storage.",
                            **{"x-kubernetes-list-type": "atomic"}),
    }),
    CORE + "NamespaceCondition": _condition("NamespaceCondition contains details about state of namespace."),
    CORE + "NamespaceStatus": _object("NamespaceStatus is information about the current status of a Namespace.", {
        "conditions": _list(_ref(CORE + "NamespaceCondition"), "Represents the latest available observations of "
                            "a namespace's current state.",
                            **{"x-kubernetes-list-map-keys": ["type"], "x-kubernetes-list-type": "map",
                               "x-kubernetes-patch-merge-key": "type", "x-kubernetes-patch-strategy": "merge"}),
        "phase": _s("Phase is the current lifecycle phase of the namespace.", ) | {"enum": ["Active",
                                                                                             "Terminating"]},
    }),
    CORE + "Namespace": _kind("Namespace provides a scope for Names. Use of multiple namespaces is optional.", {
        "spec": _ref(CORE + "NamespaceSpec", "Spec defines the behavior of the Namespace."),
        "status": _ref(CORE + "NamespaceStatus", "Status describes the current status of a Namespace."),
    }, ("", "v1", "Namespace")),
    CORE + "ObjectReference": _object("ObjectReference contains enough information to let you inspect or modify "
                                      "the referred object.", {
        "apiVersion": _s("API version of the referent."),
        "fieldPath": _s("If referring to a piece of an object instead of an entire object, this string should "
                        "contain a valid JSON/Go field access statement."),
        "kind": _s("Kind of the referent."),
        "name": _s("Name of the referent."),
        "namespace": _s("Namespace of the referent."),
        "resourceVersion": _s("Specific resourceVersion to which this reference is made, if any."),
        "uid": _s("UID of the referent."),
    }) | {"x-kubernetes-map-type": "atomic"},
    CORE + "LocalObjectReference": _object("LocalObjectReference contains enough information to let you locate "
                                           "the referenced object inside the same namespace.", {
        "name": _s("Name of the referent."),
    }) | {"x-kubernetes-map-type": "atomic"},
    CORE + "ServiceAccount": _kind("ServiceAccount binds together: * a name, understood by users, and perhaps by "
                                   "peripheral systems, for an identity * a principal that can be authenticated "
                                   "and authorized * a set of secrets", {
        "automountServiceAccountToken": _b("AutomountServiceAccountToken indicates whether pods running as this "
                                           "service account should have an API token automatically mounted."),
        "imagePullSecrets": _list(_ref(CORE + "LocalObjectReference"), "ImagePullSecrets is a list of references "
                                  "to secrets in the same namespace to use for pulling any images in pods that "
                                  "reference this ServiceAccount.", **{"x-kubernetes-list-type": "atomic"}),
        "secrets": _list(_ref(CORE + "ObjectReference"), "Secrets is a list of the secrets in the same namespace "
                         "that pods running using this ServiceAccount are allowed to use.",
                         **{"x-kubernetes-list-map-keys": ["name"], "x-kubernetes-list-type": "map",
                            "x-kubernetes-patch-merge-key": "name", "x-kubernetes-patch-strategy": "merge"}),
    }, ("", "v1", "ServiceAccount")),
}
_CORE_SCHEMAS.update({
    CORE + "EventSource": _object("EventSource contains information for an event.", {
        "component": _s("Component from which the event is generated."),
        "host": _s("Node name on which the event is generated."),
    }),
    CORE + "EventSeries": _object("EventSeries contain information on series of events, i.e. thing that was/is "
                                  "happening continuously for some time.", {
        "count": _i("Number of occurrences in this series up to the last heartbeat time"),
        "lastObservedTime": _ref(META + "MicroTime", "Time of the last occurrence observed"),
    }),
    CORE + "Event": _kind("Event is a report of an event somewhere in the cluster.  Events have a limited "
                          "retention time and triggers and messages may evolve with time.  Event consumers should "
                          "not rely on the timing of an event with a given Reason reflecting a consistent "
                          "underlying trigger, or the continued existence of events with that Reason.  Events "
                          "should be treated as informative, best-effort, supplemental data.", {
        "action": _s("What action was taken/failed regarding to the Regarding object."),
        "count": _i("The number of times this event has occurred."),
        "eventTime": _ref(META + "MicroTime", "Time when this Event was first observed."),
        "firstTimestamp": _ref(META + "Time", "The time at which the event was first recorded. (Time of server "
                               "receipt is in TypeMeta.)"),
        "involvedObject": _ref(CORE + "ObjectReference", "The object that this event is about."),
        "lastTimestamp": _ref(META + "Time", "The time at which the most recent occurrence of this event was "
                              "recorded."),
        "message": _s("A human-readable description of the status of this operation."),
        "reason": _s("This should be a short, machine understandable string that gives the reason for the "
                     "transition into the object's current status."),
        "related": _ref(CORE + "ObjectReference", "Optional secondary object for more complex actions."),
        "reportingComponent": _s("Name of the controller that emitted this Event, e.g. `kubernetes.io/kubelet`.")
        | {"default": ""},
        "reportingInstance": _s("ID of the controller instance, e.g. `kubelet-xyzf`.") | {"default": ""},
        "series": _ref(CORE + "EventSeries", "Data about the Event series this event represents or nil if it's a "
                       "singleton Event."),
        "source": _ref(CORE + "EventSource", "The component reporting this event. Should be a short machine "
                       "understandable string."),
        "type": _s("Type of this event (Normal, Warning), new types could be added in the future"),
    }, ("", "v1", "Event")) | {"required": ["metadata", "involvedObject"]},
})
for _k in ("ConfigMap", "Event", "Secret", "Namespace", "ServiceAccount"):
    _CORE_SCHEMAS[CORE + _k + "List"] = _list_kind(CORE + _k, _k, ("", "v1", _k + "List"))
for _f in ("related", "series", "eventTime", "firstTimestamp", "lastTimestamp"):  # pointers/zero times: no default
    _CORE_SCHEMAS[CORE + "Event"]["properties"][_f].pop("default")
_CORE_SCHEMAS[CORE + "EventList"]["description"] = "EventList is a list of events."
_CORE_SCHEMAS[CORE + "EventList"]["properties"]["items"]["description"] = "List of events"

_AGG_GVK = ("apiregistration.k8s.io", "v1")
_AGG_SCHEMAS: dict[str, Schema] = {
    AGG + "ServiceReference": _object("ServiceReference holds a reference to Service.legacy.k8s.io", {
        "name": _s("Name is the name of the service"),
        "namespace": _s("Namespace is the namespace of the service"),
        "port": _i("If specified, the port on the service that hosting webhook. Default to 443 for backward "
                   "compatibility. `port` should be a valid port number (1-65535, inclusive)."),
    }),
    AGG + "APIServiceSpec": _object("APIServiceSpec contains information for locating and communicating with a "
                                    "server. Only https is supported, though you are able to disable certificate "
                                    "verification.", {
        "caBundle": _s("CABundle is a PEM encoded CA bundle which will be used to validate an API server's "
                       "serving certificate. If unspecified, system trust roots on the apiserver are used.",
                       "byte") | {"x-kubernetes-list-type": "atomic"},
        "group": _s("Group is the API group name this server hosts"),
        "groupPriorityMinimum": _i("GroupPriorityMinimum is the priority this group should have at least. "
                                   "Higher priority means that the group is preferred by clients over lower "
                                   "priority ones."),
        "insecureSkipTLSVerify": _b("InsecureSkipTLSVerify disables TLS certificate verification when "
                                    "communicating with this server. This is strongly discouraged."),
        "service": _ref(AGG + "ServiceReference", "Service is a reference to the service for this API server. "
                        "It must communicate on port 443. If the Service is nil, that means the handling for "
                        "the API groupversion is handled locally on this server."),
        "version": _s("Version is the API version this server hosts.  For example, \"v1\""),
        "versionPriority": _i("VersionPriority controls the ordering of this API version inside of its group."),
    }, required=["groupPriorityMinimum", "versionPriority"]),
    AGG + "APIServiceCondition": _condition("APIServiceCondition describes the state of an APIService at a "
                                            "particular point"),
    AGG + "APIServiceStatus": _object("APIServiceStatus contains derived information about an API server", {
        "conditions": _list(_ref(AGG + "APIServiceCondition"), "Current service state of apiService.",
                            **{"x-kubernetes-list-map-keys": ["type"], "x-kubernetes-list-type": "map",
                               "x-kubernetes-patch-merge-key": "type", "x-kubernetes-patch-strategy": "merge"}),
    }),
    AGG + "APIService": _kind("APIService represents a server for a particular GroupVersion. Name must be "
                              "\"version.group\".", {
        "spec": _ref(AGG + "APIServiceSpec", "Spec contains information for locating and communicating with a "
                     "server"),
        "status": _ref(AGG + "APIServiceStatus", "Status contains derived information about an API server"),
    }, (*_AGG_GVK, "APIService")),
    AGG + "APIServiceList": _list_kind(AGG + "APIService", "APIService", (*_AGG_GVK, "APIServiceList")),
}

_ATOMIC = {"x-kubernetes-list-type": "atomic"}


def _strings(desc: str) -> Schema:
    return _list({"type": "string", "default": ""}, desc, **_ATOMIC)


_EXTRA: Schema = {"type": "object", "description": "Any additional information provided by the authenticator.",
                  "additionalProperties": {"type": "array", "items": {"type": "string", "default": ""}}}

_RBAC_GV = ("rbac.authorization.k8s.io", "v1")
_RBAC_SCHEMAS: dict[str, Schema] = {
    RBAC + "PolicyRule": _object(
        "PolicyRule holds information that describes a policy rule, but does not contain information about who "
        "the rule applies to or which namespace the rule applies to.", {
            "apiGroups": _strings("APIGroups is the name of the APIGroup that contains the resources. If multiple "
                                  "API groups are specified, any action requested against one of the enumerated "
                                  "resources in any API group will be allowed. \"\" represents the core API "
                                  "group and \"*\" represents all API groups."),
            "nonResourceURLs": _strings("NonResourceURLs is a set of partial urls that a user should have access "
                                        "to.  *s are allowed, but only as the full, final step in the path. Rules "
                                        "can either apply to API resources (such as \"pods\" or \"secrets\") or "
                                        "non-resource URL paths (such as \"/api\"),  but not both."),
            "resourceNames": _strings("ResourceNames is an optional white list of names that the rule applies to. "
                                      "An empty set means that everything is allowed."),
            "resources": _strings("Resources is a list of resources this rule applies to. '*' represents all "
                                  "resources."),
            "verbs": _strings("Verbs is a list of Verbs that apply to ALL the ResourceKinds contained in this "
                              "rule. '*' represents all verbs."),
        }, required=["verbs"]),
    RBAC + "AggregationRule": _object(
        "AggregationRule describes how to locate ClusterRoles to aggregate into the ClusterRole", {
            "clusterRoleSelectors": _list(_ref(META + "LabelSelector"), "ClusterRoleSelectors holds a list of "
                                          "selectors which will be used to find ClusterRoles and create the rules. "
                                          "If any of the selectors match, then the ClusterRole's permissions will "
                                          "be added", **_ATOMIC),
        }),
    RBAC + "Role": _kind("Role is a namespaced, logical grouping of PolicyRules that can be referenced as a unit "
                         "by a RoleBinding.", {
        "rules": _list(_ref(RBAC + "PolicyRule"), "Rules holds all the PolicyRules for this Role", **_ATOMIC),
    }, (*_RBAC_GV, "Role")),
    RBAC + "ClusterRole": _kind("ClusterRole is a cluster level, logical grouping of PolicyRules that can be "
                                "referenced as a unit by a RoleBinding or ClusterRoleBinding.", {
        "aggregationRule": _ref(RBAC + "AggregationRule", "AggregationRule is an optional field that describes "
                                "how to build the Rules for this ClusterRole. If AggregationRule is set, then the "
                                "Rules are controller managed and direct changes to Rules will be stomped by the "
                                "controller."),
        "rules": _list(_ref(RBAC + "PolicyRule"), "Rules holds all the PolicyRules for this ClusterRole",
                       **_ATOMIC),
    }, (*_RBAC_GV, "ClusterRole")),
    RBAC + "RoleRef": _object("RoleRef contains information that points to the role being used", {
        "apiGroup": _s("APIGroup is the group for the resource being referenced"),
        "kind": _s("Kind is the type of resource being referenced"),
        "name": _s("Name is the name of resource being referenced"),
    }, required=["apiGroup", "kind", "name"]) | {"x-kubernetes-map-type": "atomic"},
    RBAC + "Subject": _object(
        "Subject contains a reference to the object or user identities a role binding applies to.  This can "
        "either hold a direct API object reference, or a value for non-objects such as user and group names.", {
            "apiGroup": _s("APIGroup holds the API group of the referenced subject. Defaults to \"\" for "
                           "ServiceAccount subjects. Defaults to \"rbac.authorization.k8s.io\" for User and Group "
                           "subjects."),
            "kind": _s("Kind of object being referenced. Values defined by this API group are \"User\", "
                       "\"Group\", and \"ServiceAccount\"."),
            "name": _s("Name of the object being referenced."),
            "namespace": _s("Namespace of the referenced object.  If the object kind is non-namespace, such as "
                            "\"User\" or \"Group\", and this value is not empty the Authorizer should report an "
                            "error."),
        }, required=["kind", "name"]) | {"x-kubernetes-map-type": "atomic"},
    RBAC + "RoleBinding": _kind("RoleBinding references a role, but does not contain it.  It can reference a "
                                "Role in the same namespace or a ClusterRole in the global namespace.", {
        "roleRef": _ref(RBAC + "RoleRef", "RoleRef can reference a Role in the current namespace or a ClusterRole "
                        "in the global namespace. This field is immutable."),
        "subjects": _list(_ref(RBAC + "Subject"), "Subjects holds references to the objects the role applies to.",
                          **_ATOMIC),
    }, (*_RBAC_GV, "RoleBinding")) | {"required": ["roleRef"]},
    RBAC + "ClusterRoleBinding": _kind("ClusterRoleBinding references a ClusterRole, but not contain it.  It can "
                                       "reference a ClusterRole in the global namespace, and adds who "
                                       "information via Subject.", {
        "roleRef": _ref(RBAC + "RoleRef", "RoleRef can only reference a ClusterRole in the global namespace. This "
                        "field is immutable."),
        "subjects": _list(_ref(RBAC + "Subject"), "Subjects holds references to the objects the role applies to.",
                          **_ATOMIC),
    }, (*_RBAC_GV, "ClusterRoleBinding")) | {"required": ["roleRef"]},
}
for _k in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"):
    _RBAC_SCHEMAS[RBAC + _k + "List"] = _list_kind(RBAC + _k, _k, (*_RBAC_GV, _k + "List"))

_AUTHN_GV = ("authentication.k8s.io", "v1")
_AUTHN_SCHEMAS: dict[str, Schema] = {
    AUTHN + "UserInfo": _object("UserInfo holds the information about the user needed to implement the user.Info "
                                "interface.", {
        "extra": _EXTRA,
        "groups": _strings("The names of groups this user is a part of."),
        "uid": _s("A unique value that identifies this user across time."),
        "username": _s("The name that uniquely identifies this user among all active users."),
    }),
    AUTHN + "BoundObjectReference": _object("BoundObjectReference is a reference to an object that a token is "
                                            "bound to.", {
        "apiVersion": _s("API version of the referent."),
        "kind": _s("Kind of the referent. Valid kinds are 'Pod' and 'Secret'."),
        "name": _s("Name of the referent."),
        "uid": _s("UID of the referent."),
    }),
    AUTHN + "TokenRequestSpec": _object("TokenRequestSpec contains client provided parameters of a token "
                                        "request.", {
        "audiences": _strings("Audiences are the intendend audiences of the token."),
        "boundObjectRef": _ref(AUTHN + "BoundObjectReference", "BoundObjectRef is a reference to an object that "
                               "the token will be bound to."),
        "expirationSeconds": _i("ExpirationSeconds is the requested duration of validity of the request.",
                                "int64"),
    }, required=["audiences"]),
    AUTHN + "TokenRequestStatus": _object("TokenRequestStatus is the result of a token request.", {
        "expirationTimestamp": _ref(META + "Time", "ExpirationTimestamp is the time of expiration of the "
                                    "returned token."),
        "token": _s("Token is the opaque bearer token."),
    }, required=["token", "expirationTimestamp"]),
    AUTHN + "TokenRequest": _kind("TokenRequest requests a token for a given service account.", {
        "spec": _ref(AUTHN + "TokenRequestSpec", "Spec holds information about the request being evaluated"),
        "status": _ref(AUTHN + "TokenRequestStatus", "Status is filled in by the server and indicates whether "
                       "the token can be authenticated."),
    }, (*_AUTHN_GV, "TokenRequest")) | {"required": ["spec"]},
    AUTHN + "TokenReviewSpec": _object("TokenReviewSpec is a description of the token authentication request.", {
        "audiences": _strings("Audiences is a list of the identifiers that the resource server presented with "
                              "the token identifies as."),
        "token": _s("Token is the opaque bearer token."),
    }),
    AUTHN + "TokenReviewStatus": _object("TokenReviewStatus is the result of the token authentication request.", {
        "audiences": _strings("Audiences are audience identifiers chosen by the authenticator that are "
                              "compatible with both the TokenReview and token."),
        "authenticated": _b("Authenticated indicates that the token was associated with a known user."),
        "error": _s("Error indicates that the token couldn't be checked"),
        "user": _ref(AUTHN + "UserInfo", "User is the UserInfo associated with the provided token."),
    }),
    AUTHN + "TokenReview": _kind("TokenReview attempts to authenticate a token to a known user.", {
        "spec": _ref(AUTHN + "TokenReviewSpec", "Spec holds information about the request being evaluated"),
        "status": _ref(AUTHN + "TokenReviewStatus", "Status is filled in by the server and indicates whether the "
                       "request can be authenticated."),
    }, (*_AUTHN_GV, "TokenReview")) | {"required": ["spec"]},
    AUTHN + "SelfSubjectReviewStatus": _object("SelfSubjectReviewStatus is filled by the kube-apiserver and sent "
                                               "back to a user.", {
        "userInfo": _ref(AUTHN + "UserInfo", "User attributes of the user making this request."),
    }),
    AUTHN + "SelfSubjectReview": _kind("SelfSubjectReview contains the user information that the kube-apiserver "
                                       "has about the user making this request.", {
        "status": _ref(AUTHN + "SelfSubjectReviewStatus", "Status is filled in by the server with the user "
                       "attributes."),
    }, (*_AUTHN_GV, "SelfSubjectReview")),
}

_AUTHZ_GV = ("authorization.k8s.io", "v1")
_AUTHZ_SCHEMAS: dict[str, Schema] = {
    AUTHZ + "FieldSelectorAttributes": _object("FieldSelectorAttributes indicates a field limited access.", {
        "rawSelector": _s("rawSelector is the serialization of a field selector that would be included in a query "
                          "parameter."),
        "requirements": _list(_ref(META + "FieldSelectorRequirement"), "requirements is the parsed "
                              "interpretation of a field selector.", **_ATOMIC),
    }),
    AUTHZ + "LabelSelectorAttributes": _object("LabelSelectorAttributes indicates a label limited access.", {
        "rawSelector": _s("rawSelector is the serialization of a field selector that would be included in a query "
                          "parameter."),
        "requirements": _list(_ref(META + "LabelSelectorRequirement"), "requirements is the parsed "
                              "interpretation of a label selector.", **_ATOMIC),
    }),
    AUTHZ + "ResourceAttributes": _object("ResourceAttributes includes the authorization attributes available for "
                                          "resource requests to the Authorizer interface", {
        "fieldSelector": _ref(AUTHZ + "FieldSelectorAttributes", "fieldSelector describes the limitation on "
                              "access based on field."),
        "group": _s("Group is the API Group of the Resource.  \"*\" means all."),
        "labelSelector": _ref(AUTHZ + "LabelSelectorAttributes", "labelSelector describes the limitation on "
                              "access based on labels."),
        "name": _s("Name is the name of the resource being requested for a \"get\" or deleted for a "
                   "\"delete\". \"\" (empty) means all."),
        "namespace": _s("Namespace is the namespace of the action being requested."),
        "resource": _s("Resource is one of the existing resource types.  \"*\" means all."),
        "subresource": _s("Subresource is one of the existing resource types.  \"\" means none."),
        "verb": _s("Verb is a kubernetes resource API verb, like: get, list, watch, create, update, delete, proxy. "
                   "\"*\" means all."),
        "version": _s("Version is the API Version of the Resource.  \"*\" means all."),
    }),
    AUTHZ + "NonResourceAttributes": _object("NonResourceAttributes includes the authorization attributes "
                                             "available for non-resource requests to the Authorizer interface", {
        "path": _s("Path is the URL path of the request"),
        "verb": _s("Verb is the standard HTTP verb"),
    }),
    AUTHZ + "SubjectAccessReviewSpec": _object("SubjectAccessReviewSpec is a description of the access request.  "
                                               "Exactly one of ResourceAuthorizationAttributes and "
                                               "NonResourceAuthorizationAttributes must be set", {
        "extra": _EXTRA,
        "groups": _strings("Groups is the groups you're testing for."),
        "nonResourceAttributes": _ref(AUTHZ + "NonResourceAttributes", "NonResourceAttributes describes "
                                      "information for a non-resource access request"),
        "resourceAttributes": _ref(AUTHZ + "ResourceAttributes", "ResourceAuthorizationAttributes describes "
                                   "information for a resource access request"),
        "uid": _s("UID information about the requesting user."),
        "user": _s("User is the user you're testing for."),
    }),
    AUTHZ + "SubjectAccessReviewStatus": _object("SubjectAccessReviewStatus", {
        "allowed": _b("Allowed is required. True if the action would be allowed, false otherwise."),
        "denied": _b("Denied is optional. True if the action would be denied, otherwise false."),
        "evaluationError": _s("EvaluationError is an indication that some error occurred during the "
                              "authorization check."),
        "reason": _s("Reason is optional.  It indicates why a request was allowed or denied."),
    }, required=["allowed"]),
    AUTHZ + "SubjectAccessReview": _kind("SubjectAccessReview checks whether or not a user or group can perform "
                                         "an action.", {
        "spec": _ref(AUTHZ + "SubjectAccessReviewSpec", "Spec holds information about the request being "
                     "evaluated"),
        "status": _ref(AUTHZ + "SubjectAccessReviewStatus", "Status is filled in by the server and indicates "
                       "whether the request is allowed or not"),
    }, (*_AUTHZ_GV, "SubjectAccessReview")) | {"required": ["spec"]},
    AUTHZ + "LocalSubjectAccessReview": _kind("LocalSubjectAccessReview checks whether or not a user or group can "
                                              "perform an action in a given namespace.", {
        "spec": _ref(AUTHZ + "SubjectAccessReviewSpec", "Spec holds information about the request being "
                     "evaluated.  spec.namespace must be equal to the namespace you made the request against."),
        "status": _ref(AUTHZ + "SubjectAccessReviewStatus", "Status is filled in by the server and indicates "
                       "whether the request is allowed or not"),
    }, (*_AUTHZ_GV, "LocalSubjectAccessReview")) | {"required": ["spec"]},
    AUTHZ + "SelfSubjectAccessReviewSpec": _object("SelfSubjectAccessReviewSpec is a description of the access "
                                                   "request.", {
        "nonResourceAttributes": _ref(AUTHZ + "NonResourceAttributes", "NonResourceAttributes describes "
                                      "information for a non-resource access request"),
        "resourceAttributes": _ref(AUTHZ + "ResourceAttributes", "ResourceAuthorizationAttributes describes "
                                   "information for a resource access request"),
    }),
    AUTHZ + "SelfSubjectAccessReview": _kind("SelfSubjectAccessReview checks whether or the current user can "
                                             "perform an action.", {
        "spec": _ref(AUTHZ + "SelfSubjectAccessReviewSpec", "Spec holds information about the request being "
                     "evaluated.  user and groups must be empty"),
        "status": _ref(AUTHZ + "SubjectAccessReviewStatus", "Status is filled in by the server and indicates "
                       "whether the request is allowed or not"),
    }, (*_AUTHZ_GV, "SelfSubjectAccessReview")) | {"required": ["spec"]},
    AUTHZ + "SelfSubjectRulesReviewSpec": _object("SelfSubjectRulesReviewSpec defines the specification for "
                                                  "SelfSubjectRulesReview.", {
        "namespace": _s("Namespace to evaluate rules for. Required."),
    }),
    AUTHZ + "ResourceRule": _object("ResourceRule is the list of actions the subject is allowed to perform on "
                                    "resources.", {
        "apiGroups": _strings("APIGroups is the name of the APIGroup that contains the resources."),
        "resourceNames": _strings("ResourceNames is an optional white list of names that the rule applies to."),
        "resources": _strings("Resources is a list of resources this rule applies to."),
        "verbs": _strings("Verb is a list of kubernetes resource API verbs, like: get, list, watch, create, "
                          "update, delete, proxy.  \"*\" means all."),
    }, required=["verbs"]),
    AUTHZ + "NonResourceRule": _object("NonResourceRule holds information that describes a rule for the "
                                       "non-resource", {
        "nonResourceURLs": _strings("NonResourceURLs is a set of partial urls that a user should have access "
                                    "to."),
        "verbs": _strings("Verb is a list of kubernetes non-resource API verbs, like: get, post, put, delete, "
                          "patch, head, options.  \"*\" means all."),
    }, required=["verbs"]),
    AUTHZ + "SubjectRulesReviewStatus": _object("SubjectRulesReviewStatus contains the result of a rules check.", {
        "evaluationError": _s("EvaluationError can appear in combination with Rules."),
        "incomplete": _b("Incomplete is true when the rules returned by this call are incomplete."),
        "nonResourceRules": _list(_ref(AUTHZ + "NonResourceRule"), "NonResourceRules is the list of actions the "
                                  "subject is allowed to perform on non-resources.", **_ATOMIC),
        "resourceRules": _list(_ref(AUTHZ + "ResourceRule"), "ResourceRules is the list of actions the subject "
                               "is allowed to perform on resources.", **_ATOMIC),
    }, required=["resourceRules", "nonResourceRules", "incomplete"]),
    AUTHZ + "SelfSubjectRulesReview": _kind("SelfSubjectRulesReview enumerates the set of actions the current "
                                            "user can perform within a namespace.", {
        "spec": _ref(AUTHZ + "SelfSubjectRulesReviewSpec", "Spec holds information about the request being "
                     "evaluated."),
        "status": _ref(AUTHZ + "SubjectRulesReviewStatus", "Status is filled in by the server and indicates the "
                       "set of actions a user can perform."),
    }, (*_AUTHZ_GV, "SelfSubjectRulesReview")) | {"required": ["spec"]},
}

# Service, Endpoints, EndpointSlice: only their top-level fields until the schemas are generated from
# kube's OpenAPI definitions; the strategies validate what is inside.
_OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_OPEN_LIST = {"type": "array", "items": _OPEN}
_NET_SCHEMAS: dict[str, Schema] = {
    CORE + "Service": _kind("Service is a named abstraction of software service (for example, mysql) "
                            "consisting of local port (for example 3306) that the proxy listens on, and the "
                            "selector that determines which pods will answer requests sent through the proxy.",
                            {"spec": _OPEN | {"description": "Spec defines the behavior of a service."},
                             "status": _OPEN | {"description": "Most recently observed status of the service."}},
                            ("", "v1", "Service")),
    CORE + "Endpoints": _kind("Endpoints is a collection of endpoints that implement the actual service.",
                              {"subsets": _OPEN_LIST | {"description": "The set of all endpoints is the union "
                                                        "of all subsets."}}, ("", "v1", "Endpoints")),
    DISCOVERY + "EndpointSlice": _kind("EndpointSlice represents a set of service endpoints.", {
        "addressType": _s("addressType specifies the type of address carried by this EndpointSlice."),
        "endpoints": _OPEN_LIST | {"description": "endpoints is a list of unique endpoints in this slice."},
        "ports": _OPEN_LIST | {"description": "ports specifies the list of network ports exposed by each "
                               "endpoint in this slice."},
    }, ("discovery.k8s.io", "v1", "EndpointSlice")),
}
_NET_SCHEMAS[CORE + "ServiceList"] = _list_kind(CORE + "Service", "Service", ("", "v1", "ServiceList"))
_NET_SCHEMAS[CORE + "EndpointsList"] = _list_kind(CORE + "Endpoints", "Endpoints", ("", "v1", "EndpointsList"))
_NET_SCHEMAS[DISCOVERY + "EndpointSliceList"] = _list_kind(DISCOVERY + "EndpointSlice", "EndpointSlice",
                                                           ("discovery.k8s.io", "v1", "EndpointSliceList"))

ALL: dict[str, Schema] = {**_META_SCHEMAS, **_CORE_SCHEMAS, **_AGG_SCHEMAS, **_RBAC_SCHEMAS, **_AUTHN_SCHEMAS,
                          **_AUTHZ_SCHEMAS, **_NET_SCHEMAS}

KIND_SCHEMA: dict[tuple[str, str], str] = {
    ("", "ConfigMap"): CORE + "ConfigMap",
    ("", "Secret"): CORE + "Secret",
    ("", "Namespace"): CORE + "Namespace",
    ("", "ServiceAccount"): CORE + "ServiceAccount",
    ("", "Event"): CORE + "Event",
    ("", "Service"): CORE + "Service",
    ("", "Endpoints"): CORE + "Endpoints",
    ("discovery.k8s.io", "EndpointSlice"): DISCOVERY + "EndpointSlice",
    ("apiregistration.k8s.io", "APIService"): AGG + "APIService",
    **{("rbac.authorization.k8s.io", k): RBAC + k for k in ("Role", "ClusterRole", "RoleBinding",
                                                            "ClusterRoleBinding")},
    **{("authentication.k8s.io", k): AUTHN + k for k in ("TokenRequest", "TokenReview", "SelfSubjectReview")},
    **{("authorization.k8s.io", k): AUTHZ + k for k in ("SubjectAccessReview", "LocalSubjectAccessReview",
                                                        "SelfSubjectAccessReview", "SelfSubjectRulesReview")},
}


def resolve(schema: Schema) -> Schema:
    """Follow $ref (bare or wrapped in allOf, as kube's v3 documents wrap them)."""
    while True:
        if "$ref" in schema:
            schema = ALL[schema["$ref"][len(REF_PREFIX):]]
        elif "allOf" in schema and len(schema["allOf"]) == 1 and "properties" not in schema:
            schema = schema["allOf"][0]
        else:
            return schema


def refs_of(names: list[str]) -> dict[str, Schema]:
    """The named schemas and everything they reference, for one OpenAPI document."""
    out: dict[str, Schema] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out[name] = ALL[name]
        todo.extend(_refs(ALL[name]))
    return dict(sorted(out.items()))


def _refs(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                found.append(v[len(REF_PREFIX):])
            else:
                found.extend(_refs(v))
    elif isinstance(node, list):
        for v in node:
            found.extend(_refs(v))
    return found


_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "bool", int: "number", float: "number"}
_GO_TYPES = {"string": "string", "boolean": "bool", "integer": "int64", "number": "float64", "array": "[]",
             "object": "map"}


def check(obj: dict[str, Any], schema_name: str, kind: str) -> tuple[list[str], str | None]:
    """Walk obj against the schema: (unknown field paths, first type error or None).

    Type errors follow encoding/json: `json: cannot unmarshal number into Go struct field
    ConfigMap.data of type string`.
    """
    unknown: list[str] = []
    type_error: list[str] = []

    def walk(value: Any, schema: Schema, path: str) -> None:
        schema = resolve(schema)
        if value is None:
            return
        want = schema.get("type")
        got = _JSON_TYPES.get(type(value), "value")
        ok = {
            None: True, "object": isinstance(value, dict), "array": isinstance(value, list),
            "string": isinstance(value, str), "boolean": isinstance(value, bool),
            "integer": isinstance(value, int) and not isinstance(value, bool)
            or isinstance(value, float) and value.is_integer(),
            "number": isinstance(value, (int, float)) and not isinstance(value, bool),
        }[want]
        if not ok:
            if not type_error:
                go = _GO_TYPES.get(want or "", "value")
                if want == "integer":
                    go = schema.get("format", "int64")
                type_error.append(f"json: cannot unmarshal {got} into Go struct field {kind}.{path} of type {go}")
            return
        if isinstance(value, dict):
            props = schema.get("properties")
            if props is not None:
                for k, v in value.items():
                    sub = f"{path}.{k}" if path else k
                    if k in props:
                        walk(v, props[k], sub)
                    else:
                        unknown.append(sub)
            elif "additionalProperties" in schema:
                for k, v in value.items():
                    walk(v, schema["additionalProperties"], path)
        elif isinstance(value, list) and "items" in schema:
            for i, v in enumerate(value):
                walk(v, schema["items"], f"{path}[{i}]")

    walk(obj, ALL[schema_name], "")
    return unknown, (type_error[0] if type_error else None)
