"""Strategy of apiextensions.k8s.io/v1 CustomResourceDefinition (apiextensions-apiserver's
registry/customresourcedefinition and apis/apiextensions/validation), and the strategy every custom resource
gets from its definition (registry/customresource): schema validation, pruning and defaulting."""
from __future__ import annotations

import copy
import functools
from typing import Any, ClassVar

from services.apiserver import structural
from services.apiserver import validation as v
from services.apiserver.cel import compilation as celcompilation
from services.apiserver.cel.validation import Validator
from services.apiserver.fielderrors import too_many
from services.apiserver.registry.rest import Obj, Strategy, SubresourceStrategy
from services.apiserver.webhook.validation import ca_bundle_error, validate_ca_bundle, validate_client_config
from services.common import errors

from . import apiapproval, selectablefields

SCOPES = ("Cluster", "Namespaced")
CONVERSION_STRATEGIES = ("None", "Webhook")
# The ConversionReview versions apiary sends (kube's acceptedConversionReviewVersions, in its sorted order).
REVIEW_VERSIONS = ("v1", "v1beta1")
MAX_REVIEW_VERSIONS = 100
# Held by every CRD until its objects are gone (the registry's CRD controller removes it then).
CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"


def is_established(crd: Obj) -> bool:
    return condition_true(crd, "Established")


def condition_true(crd: Obj, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])


def storage_version(spec: Obj) -> str:
    return next((ver.get("name") or "" for ver in spec.get("versions") or [] if ver.get("storage")), "")


def generic_meta(causes: list[v.Cause]) -> list[v.Cause]:
    """apimachinery's ValidateObjectMeta, which apiextensions uses, from the core one: finalizer names only need to
    be qualified names (the CRD's own customresourcecleanup.apiextensions.k8s.io has no "/")."""
    return [c for c in causes if not c["message"].endswith("nor is it fully qualified")]


def _go_versions(versions: list[Any]) -> str:
    """spec.versions as kube's field.Invalid prints it (Go's %#v, abridged to the fields that matter here)."""
    items = ", ".join(
        f'apiextensions.CustomResourceDefinitionVersion{{Name:{v.quote(str(x.get("name") or ""))}, '
        f'Served:{"true" if x.get("served") else "false"}, Storage:{"true" if x.get("storage") else "false"}}}'
        for x in versions if isinstance(x, dict))
    return f"[]apiextensions.CustomResourceDefinitionVersion{{{items}}}"


def validate_names(names: Obj, path: str) -> list[v.Cause]:
    """ValidateCustomResourceDefinitionNames."""
    causes: list[v.Cause] = []
    for key in ("plural", "singular"):
        value = names.get(key) or ""
        if value and (errs := v.is_dns1035_label(value)):
            causes.append(v.invalid(f"{path}.{key}", value, ",".join(errs)))
    for key in ("kind", "listKind"):
        value = names.get(key) or ""
        if value and (errs := v.is_dns1035_label(value.lower())):
            causes.append(v.invalid(f"{path}.{key}", value,
                                    "may have mixed case, but should otherwise match: " + ",".join(errs)))
    for i, short in enumerate(names.get("shortNames") or []):
        if errs := v.is_dns1035_label(short):
            causes.append(v.invalid(f"{path}.shortNames[{i}]", short, ",".join(errs)))
    kind = names.get("kind") or ""
    if kind and kind == names.get("listKind"):
        causes.append(v.invalid(f"{path}.listKind", kind, "kind and listKind may not be the same"))
    for i, category in enumerate(names.get("categories") or []):
        if errs := v.is_dns1035_label(category):
            causes.append(v.invalid(f"{path}.categories[{i}]", category, ",".join(errs)))
    return causes


def validate_spec(spec: Obj) -> list[v.Cause]:
    """ValidateCustomResourceDefinitionSpec: group, scope, versions, names, schemas."""
    causes: list[v.Cause] = []
    group = spec.get("group") or ""
    if not group:
        causes.append(v.required("spec.group"))
    elif errs := v.is_dns1123_subdomain(group):
        causes.append(v.invalid("spec.group", group, ",".join(errs)))
    elif len(group.split(".")) < 2:
        causes.append(v.invalid("spec.group", group, "should be a domain with at least one dot"))
    scope = spec.get("scope") or ""
    if not scope:
        causes.append(v.required("spec.scope"))
    elif scope not in SCOPES:
        causes.append(v.not_supported("spec.scope", scope, SCOPES))
    versions = spec.get("versions") or []
    seen: set[str] = set()
    unique, served, storage, structural_ok = True, False, 0, True
    if not versions:
        causes.append(v.invalid_go("spec.versions", "[]apiextensions.CustomResourceDefinitionVersion(nil)",
                                   "must have exactly one version marked as storage version"))
    for i, ver in enumerate(versions):
        name = ver.get("name") or ""
        unique = unique and name not in seen
        seen.add(name)
        served = served or bool(ver.get("served"))
        storage += 1 if ver.get("storage") else 0
        if errs := v.is_dns1035_label(name):
            causes.append(v.invalid(f"spec.versions[{i}].name", name, ",".join(errs)))
        causes += _validate_printer_columns(ver.get("additionalPrinterColumns") or [],
                                            f"spec.versions[{i}].additionalPrinterColumns")
        scale = (ver.get("subresources") or {}).get("scale")
        if isinstance(scale, dict):
            causes += _validate_scale(scale, f"spec.versions[{i}].subresources.scale")
        schema = (ver.get("schema") or {}).get("openAPIV3Schema")
        path = f"spec.versions[{i}].schema.openAPIV3Schema"
        if schema is None:
            causes.append(v.required(path, "schemas are required"))
        elif not (schema_errors := structural.structural_errors(schema, path)):
            causes += selectablefields.validate(ver.get("selectableFields") or [], schema,
                                                f"spec.versions[{i}].selectableFields")
        else:
            structural_ok = False
            causes += schema_errors
    causes += _validate_rules(versions, structural_ok)
    if versions:
        if not served:
            causes.append(v.invalid_go("spec.versions", _go_versions(versions),
                                       "must have at least one version marked as served"))
        if storage != 1:
            causes.append(v.invalid_go("spec.versions", _go_versions(versions),
                                       "must have exactly one version marked as storage version"))
        if not unique:
            causes.append(v.invalid_go("spec.versions", _go_versions(versions), "must contain unique version names"))
    names = spec.get("names") or {}
    for key in ("plural", "singular", "kind", "listKind"):
        if not names.get(key):
            causes.append(v.required(f"spec.names.{key}"))
    causes += validate_names(names, "spec.names")
    return causes


def validate_conversion(conversion: Obj, require_recognized_version: bool = True,
                        allow_invalid_ca_bundle: bool = False) -> list[v.Cause]:
    """validateCustomResourceConversion, on the v1 object with the field names kube reports (those of its internal
    type: spec.conversion.webhookClientConfig, spec.conversion.conversionReviewVersions)."""
    path = "spec.conversion"
    causes: list[v.Cause] = []
    strategy = conversion.get("strategy") or ""
    webhook = conversion.get("webhook") or {}
    cc, review_versions = webhook.get("clientConfig"), webhook.get("conversionReviewVersions") or []
    if not strategy:
        causes.append(v.required(f"{path}.strategy"))
    elif strategy not in CONVERSION_STRATEGIES:
        causes.append(v.not_supported(f"{path}.strategy", strategy, CONVERSION_STRATEGIES))
    if strategy != "Webhook":
        if cc is not None:
            causes.append(v.forbidden(f"{path}.webhookClientConfig", "should not be set when strategy is not set "
                                      "to Webhook"))
        if review_versions:
            causes.append(v.forbidden(f"{path}.conversionReviewVersions", "should not be set when strategy is not "
                                      "set to Webhook"))
        return causes
    if cc is None:
        causes.append(v.required(f"{path}.webhookClientConfig", "required when strategy is set to Webhook"))
    else:
        causes += validate_client_config(cc, f"{path}.webhookClientConfig")
        if isinstance(cc, dict) and cc.get("caBundle") and not allow_invalid_ca_bundle:
            causes += validate_ca_bundle(cc, f"{path}.webhookClientConfig.caBundle")
    causes += _validate_review_versions(review_versions, require_recognized_version,
                                        f"{path}.conversionReviewVersions")
    return causes


def _validate_review_versions(versions: list[Any], require_recognized: bool, path: str) -> list[v.Cause]:
    """validateConversionReviewVersions: at least one, unique DNS-1035 labels, one of them one apiary speaks."""
    if not versions:
        return [v.required(path)]
    causes: list[v.Cause] = []
    if len(versions) > MAX_REVIEW_VERSIONS:
        causes.append(too_many(path, len(versions), MAX_REVIEW_VERSIONS))
    seen: set[str] = set()
    for i, ver in enumerate(versions):
        ver = str(ver)
        if ver in seen:
            causes.append(v.invalid(f"{path}[{i}]", ver, "duplicate version"))
            continue
        seen.add(ver)
        causes += [v.invalid(f"{path}[{i}]", ver, e) for e in v.is_dns1035_label(ver)]
    if require_recognized and not seen & set(REVIEW_VERSIONS):
        causes.append(v.invalid_go(path, "[]string{" + ", ".join(v.quote(str(x)) for x in versions) + "}",
                                   f"must include at least one of {', '.join(REVIEW_VERSIONS)}"))
    return causes


def _recognized_or_empty(conversion: Obj) -> bool:
    """hasValidConversionReviewVersionOrEmpty."""
    versions = (conversion.get("webhook") or {}).get("conversionReviewVersions") or []
    return not versions or bool(set(versions) & set(REVIEW_VERSIONS))


def _allow_invalid_ca_bundle(old: Obj) -> bool:
    """allowInvalidCABundle: an update may keep a bad caBundle when the CRD is not established yet or already had
    one."""
    if not is_established(old):
        return True
    cc = (((old.get("spec") or {}).get("conversion") or {}).get("webhook") or {}).get("clientConfig") or {}
    return bool(cc.get("caBundle")) and ca_bundle_error(cc) is not None


def _validate_rules(versions: list[Any], structural_ok: bool) -> list[v.Cause]:
    """The x-kubernetes-validations of every schema, once the schemas are structural. kube's v1 conversion
    lifts a schema every version shares to spec.validation, so the causes are reported there in that case."""
    schemas = [(ver.get("schema") or {}).get("openAPIV3Schema") for ver in versions if isinstance(ver, dict)]
    if not structural_ok or not schemas or any(not isinstance(s, dict) for s in schemas):
        return []
    if all(s == schemas[0] for s in schemas):
        return celcompilation.validate_rules(schemas[0], "spec.validation.openAPIV3Schema")
    causes: list[v.Cause] = []
    for i, schema in enumerate(schemas):
        causes += celcompilation.validate_rules(schema, f"spec.versions[{i}].schema.openAPIV3Schema")
    return causes


def _validate_scale(scale: Obj, path: str) -> list[v.Cause]:
    """ValidateCustomResourceDefinitionSubresources' scale paths."""
    causes: list[v.Cause] = []
    for key, under, what in (("specReplicasPath", (".spec.",), ".spec"),
                             ("statusReplicasPath", (".status.",), ".status"),
                             ("labelSelectorPath", (".spec.", ".status."), "either .spec or .status")):
        value = scale.get(key)
        if not value:
            if key != "labelSelectorPath":
                causes.append(v.required(f"{path}.{key}"))
        elif not value.startswith(under):
            causes.append(v.invalid(f"{path}.{key}", value, f"should be a json path under {what}"))
    return causes


PRINTER_COLUMN_TYPES = ("boolean", "date", "integer", "number", "string")
PRINTER_COLUMN_FORMATS = ("byte", "date", "date-time", "double", "float", "int32", "int64", "name", "password")


def _validate_printer_columns(columns: list[Obj], path: str) -> list[v.Cause]:
    """ValidateCustomResourceColumnDefinition."""
    causes: list[v.Cause] = []
    for i, col in enumerate(columns):
        at = f"{path}[{i}]"
        if not col.get("name"):
            causes.append(v.required(f"{at}.name"))
        if not col.get("type"):
            causes.append(v.required(f"{at}.type", f"must be one of {', '.join(PRINTER_COLUMN_TYPES)}"))
        elif col["type"] not in PRINTER_COLUMN_TYPES:
            causes.append(v.not_supported(f"{at}.type", col["type"], PRINTER_COLUMN_TYPES))
        if col.get("format") and col["format"] not in PRINTER_COLUMN_FORMATS:
            causes.append(v.not_supported(f"{at}.format", col["format"], PRINTER_COLUMN_FORMATS))
        if (col.get("priority") or 0) < 0:
            causes.append(v.invalid(f"{at}.priority", col["priority"], "must be greater than or equal to 0"))
        if not col.get("jsonPath"):
            causes.append(v.required(f"{at}.jsonPath"))
    return causes


class CustomResourceDefinitionStrategy(Strategy):
    status_fields = ("status",)
    spec_fields = ("spec",)

    def canonicalize(self, obj: Obj) -> None:
        """The v1 defaults: singular and listKind from kind, conversion None, a service port of 443."""
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        names = spec.get("names")
        if isinstance(names, dict) and names.get("kind"):
            names.setdefault("singular", names["kind"].lower())
            names.setdefault("listKind", names["kind"] + "List")
        conversion = spec.setdefault("conversion", {"strategy": "None"})
        service = ((conversion.get("webhook") or {}).get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            service.setdefault("port", 443)

    def prepare_for_create(self, obj: Obj) -> None:
        spec = obj.get("spec") or {}
        stored = storage_version(spec)
        obj["status"] = {"acceptedNames": {"plural": "", "kind": ""}, "storedVersions": [stored] if stored else []}
        meta = obj.setdefault("metadata", {})
        if CLEANUP_FINALIZER not in (meta.get("finalizers") or []):
            meta["finalizers"] = [*(meta.get("finalizers") or []), CLEANUP_FINALIZER]

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        super().prepare_for_update(obj, old)
        _keep_stored_version(obj)

    def validate_name(self, obj: Obj, name: str) -> list[str]:
        errs = v.is_dns1123_subdomain(name)
        spec = obj.get("spec") or {}
        if name != f"{(spec.get('names') or {}).get('plural') or ''}.{spec.get('group') or ''}":
            errs.append('must be spec.names.plural+"."+spec.group')
        return errs

    def _validate(self, obj: Obj) -> list[v.Cause]:
        causes = generic_meta(super().validate(obj))
        causes += validate_spec(obj.get("spec") or {})
        causes += validate_names((obj.get("status") or {}).get("acceptedNames") or {}, "status.acceptedNames")
        return causes

    def validate(self, obj: Obj) -> list[v.Cause]:
        return (self._validate(obj) + validate_conversion((obj.get("spec") or {}).get("conversion") or {})
                + apiapproval.validate(obj, None))

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        spec, old_spec = obj.get("spec") or {}, old.get("spec") or {}
        causes = self._validate(obj) + apiapproval.validate(obj, old) + \
            v.validate_object_meta_update(obj.get("metadata") or {}, old.get("metadata") or {})
        causes += validate_conversion(spec.get("conversion") or {},
                                      _recognized_or_empty(old_spec.get("conversion") or {}),
                                      _allow_invalid_ca_bundle(old))
        names, old_names = spec.get("names") or {}, old_spec.get("names") or {}
        if is_established(old):
            if spec.get("scope") != old_spec.get("scope"):
                causes.append(v.immutable("spec.scope", spec.get("scope") or ""))
            if names.get("kind") != old_names.get("kind"):
                causes.append(v.immutable("spec.names.kind", names.get("kind") or ""))
        if spec.get("group") != old_spec.get("group"):
            causes.append(v.immutable("spec.group", spec.get("group") or ""))
        if names.get("plural") != old_names.get("plural"):
            causes.append(v.immutable("spec.names.plural", names.get("plural") or ""))
        served = {ver.get("name") for ver in spec.get("versions") or []}
        for i, stored in enumerate((obj.get("status") or {}).get("storedVersions") or []):
            if stored not in served:
                causes.append(v.invalid(f"status.storedVersions[{i}]", stored, "must appear in spec.versions"))
        return causes

    def for_subresource(self, subresource: str) -> Strategy:
        if subresource == "status":
            return CustomResourceDefinitionStatusStrategy(self, ("status",))
        return self


class CustomResourceDefinitionStatusStrategy(SubresourceStrategy):
    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        return v.validate_object_meta_update(obj.get("metadata") or {}, old.get("metadata") or {}) + \
            validate_names((obj.get("status") or {}).get("acceptedNames") or {}, "status.acceptedNames")


def _keep_stored_version(crd: Obj) -> None:
    """The storage version joins status.storedVersions (kube's PrepareForUpdate)."""
    stored = storage_version(crd.get("spec") or {})
    status = crd.setdefault("status", {})
    versions = status.setdefault("storedVersions", [])
    if stored and stored not in versions:
        versions.append(stored)


class CustomResourceStrategy(Strategy):
    """A custom resource's rules, read from one served version of its definition: the schema prunes, defaults
    and validates; with a status subresource, the main resource keeps status and /status keeps the rest.
    Subclassed per definition (custom_resource_strategy) since a strategy is built from its ResourceInfo."""

    schema: ClassVar[dict[str, Any]] = {}
    # the version's x-kubernetes-validations, compiled when the definition is built (None: no rules)
    rules: ClassVar[Validator | None] = None
    status_enabled: ClassVar[bool] = False
    scale_paths: ClassVar[dict[str, str]] = {}
    # any change but metadata (and status, with the subresource) moves metadata.generation
    spec_fields = ("spec",)
    strategic_merge_patch = False

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        if self.status_enabled:
            self.status_fields = ("status",)

    def canonicalize(self, obj: Obj) -> None:
        structural.prune(obj, self.schema)
        structural.apply_defaults(obj, self.schema)

    def spec_changed(self, obj: Obj, old: Obj) -> bool:
        skip = {"apiVersion", "kind", "metadata"} | set(self.status_fields)
        return any(obj.get(k) != old.get(k) for k in (set(obj) | set(old)) - skip)

    def prepare_for_create(self, obj: Obj) -> None:
        if self.status_enabled:
            obj.pop("status", None)

    def validate(self, obj: Obj) -> list[v.Cause]:
        return self._validate_schema(obj, None)

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        return self._validate_schema(obj, old) + v.validate_object_meta_update(obj.get("metadata") or {},
                                                                              old.get("metadata") or {})

    def _validate_schema(self, obj: Obj, old: Obj | None) -> list[v.Cause]:
        """Metadata, the schema, then the CEL rules (with oldSelf on update) unless the object's types are
        wrong (kube's hasBlockingErr)."""
        causes = generic_meta(Strategy.validate(self, obj)) + structural.validate(obj, self.schema)
        if self.rules is None:
            return causes
        if any(_blocks_rules(c) for c in causes):
            return causes + [v.invalid("<nil>", "null", "some validation rules were not checked because the "
                                                        "object was invalid; correct the existing errors to "
                                                        "complete validation")]
        return causes + self.rules.validate(obj, old)

    status_subresource = True
    # set by the registry's CRD controller once the definition is being deleted: its objects go, none is created
    terminating: ClassVar[bool] = False

    def refuse(self, verb: str) -> None:
        if verb == "create" and self.terminating:
            raise errors.MethodNotAllowed(f"{verb} not allowed while custom resource definition is terminating",
                                          details={"group": self.info.group, "kind": self.info.plural})

    # Field selectors (the version's selectableFields) ------------------------------------------------

    # the version's own selectable fields, and those of every version: all are stored with the object, so that
    # a list in any version finds what it selects on
    selectable: ClassVar[tuple[str, ...]] = ()
    stored_selectable: ClassVar[tuple[str, ...]] = ()

    @functools.cached_property
    def field_labels(self) -> frozenset[str]:
        return self.meta_field_labels | frozenset(self.selectable)

    def selectable_fields(self, obj: Obj) -> dict[str, str]:
        return super().selectable_fields(obj) | {name: selectablefields.value(obj, name)
                                                 for name in self.stored_selectable}

    # Scale (the version's subresources.scale paths) ----------------------------------------------

    def to_scale(self, obj: Obj) -> Obj:
        """The object's autoscaling/v1 Scale, read through specReplicasPath, statusReplicasPath and
        labelSelectorPath (kube's customresource scale REST)."""
        meta = obj.get("metadata") or {}
        paths = self.scale_paths
        status: Obj = {"replicas": _get_path(obj, paths.get("statusReplicasPath") or "") or 0}
        selector = _get_path(obj, paths.get("labelSelectorPath") or "")
        if isinstance(selector, str) and selector:
            status["selector"] = selector
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                             if k in meta},
                "spec": {"replicas": _get_path(obj, paths.get("specReplicasPath") or "") or 0}, "status": status}

    def scale_into(self, obj: Obj, replicas: int) -> None:
        node = obj
        *parents, last = (self.scale_paths.get("specReplicasPath") or ".spec.replicas").lstrip(".").split(".")
        for name in parents:
            node = node.setdefault(name, {})
        node[last] = replicas


def _blocks_rules(cause: v.Cause) -> bool:
    """A wrong type or an unsupported value: the rules are not run on such an object."""
    return cause["reason"] == "FieldValueNotSupported" or " must be of type " in cause["message"]


def _get_path(obj: Obj, path: str) -> Any:
    """A scale path's value (.spec.replicas); None when absent."""
    node: Any = obj
    for name in path.lstrip(".").split(".") if path else ():
        node = node.get(name) if isinstance(node, dict) else None
    return node if path else None


def custom_resource_strategy(kind: str, schema: Obj, status_enabled: bool, scale_paths: Obj | None = None,
                             deprecation_warning: str = "", selectable: tuple[str, ...] = (),
                             stored_selectable: tuple[str, ...] = ()) -> type[CustomResourceStrategy]:
    """The strategy class of one served version of a CustomResourceDefinition; its rules are compiled here,
    once per version each time the definition changes."""
    compiled = celcompilation.compile_schema(schema)
    return type(f"{kind}Strategy", (CustomResourceStrategy,),
                {"schema": copy.deepcopy(schema), "status_enabled": status_enabled,
                 "rules": Validator(compiled) if compiled is not None else None,
                 "scale_paths": dict(scale_paths or {}), "deprecation_warning": deprecation_warning,
                 "selectable": selectable, "stored_selectable": stored_selectable or selectable})
