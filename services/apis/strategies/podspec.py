"""The pod spec, in one place: kube's defaulting (pkg/apis/core/v1 SetDefaults_PodSpec, _Container,
_ContainerPort, _Probe, _Volume, _EnvVar...) and validation (pkg/apis/core/validation ValidatePodSpec, a
subset) of a PodSpec and a PodTemplateSpec. Pod and every workload template (ReplicationController,
PodTemplate, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob) use it.

Validation covers what users hit: containers required; container, init container, ephemeral container
and volume names DNS-1123 labels, container names unique across the three lists; image required; ephemeral
containers without ports, probes or lifecycle; ports (range, protocol, names,
unique names); env names (1.33's relaxed rule: printable ASCII but "="); resource quantities, requests
not above limits; volume mounts naming a volume, with a mount path, unique paths; restartPolicy,
dnsPolicy, imagePullPolicy, terminationMessagePolicy enums; terminationGracePeriodSeconds and
activeDeadlineSeconds ranges; nodeSelector and template labels. Security contexts, affinity, topology
spread and the volume sources' own fields are not validated beyond the schema's types.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from services.apiserver import validation as v
from services.common import quantity

Obj = dict[str, Any]

RESTART_POLICIES = ["Always", "OnFailure", "Never"]
DNS_POLICIES = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"]
PULL_POLICIES = ["Always", "IfNotPresent", "Never"]
TERMINATION_MESSAGE_POLICIES = ["File", "FallbackToLogsOnError"]
PROTOCOLS = ["SCTP", "TCP", "UDP"]
DEFAULT_MODE = 0o644
PORT_RANGE = "must be between 1 and 65535, inclusive"
_ENV_NAME = re.compile(r"^[ -<>-~]+$")  # printable ASCII without "=" (RelaxedEnvironmentVariableValidation)
ENV_NAME_MSG = "a valid environment variable name must consist only of printable ASCII characters other than '='"
_PORT_NAME_CHARS = re.compile(r"^[-a-z0-9]+$")
_HAS_LETTER = re.compile(r"[a-z]")
# A PodSpec's container lists, in the order kube's podutil.VisitContainers walks them
INIT_CONTAINERS, CONTAINERS, EPHEMERAL_CONTAINERS = "initContainers", "containers", "ephemeralContainers"
ALL_CONTAINERS = (INIT_CONTAINERS, CONTAINERS, EPHEMERAL_CONTAINERS)
EPHEMERAL_FORBIDDEN = ("ports", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle")


def visit_containers(spec: Obj, lists: tuple[str, ...] = ALL_CONTAINERS,
                     path: str = "spec") -> Iterator[tuple[str, str, Obj]]:
    """podutil.VisitContainers: (list, field path, container) for each container object in spec's lists."""
    for key in lists:
        for i, c in enumerate(spec.get(key) or []):
            if isinstance(c, dict):
                yield key, f"{path}.{key}[{i}]", c


# Defaulting ---------------------------------------------------------------------------------------


def _pull_policy(image: str) -> str:
    """SetDefaults_Container: Always for ":latest" or no tag, else IfNotPresent (a digest, or an image that does
    not parse, as kube's parser leaves it without a tag)."""
    if "@" in image or not image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _default_probe(probe: Any) -> None:
    if not isinstance(probe, dict):
        return
    for k, val in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)):
        probe.setdefault(k, val)
    http = probe.get("httpGet")
    if isinstance(http, dict):
        http.setdefault("path", "/")
        http.setdefault("scheme", "HTTP")


def _default_container(c: Obj) -> None:
    if not c.get("imagePullPolicy"):
        c["imagePullPolicy"] = _pull_policy(c.get("image") or "")
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    if c.get("resources") is None:
        c["resources"] = {}  # a struct, not a pointer: v1 always serializes it
    for p in c.get("ports") or []:
        if isinstance(p, dict) and not p.get("protocol"):
            p["protocol"] = "TCP"
    for e in c.get("env") or []:
        ref = ((e or {}).get("valueFrom") or {}).get("fieldRef") if isinstance(e, dict) else None
        if isinstance(ref, dict) and not ref.get("apiVersion"):
            ref["apiVersion"] = "v1"
    for k in ("livenessProbe", "readinessProbe", "startupProbe"):
        _default_probe(c.get(k))


def _default_volume(vol: Any) -> None:
    """SetDefaults_Volume (no source: emptyDir) and the sources' defaultMode 0644."""
    if not isinstance(vol, dict):
        return
    if not any(k != "name" for k in vol):
        vol["emptyDir"] = {}
    for src in ("secret", "configMap", "downwardAPI", "projected"):
        s = vol.get(src)
        if isinstance(s, dict) and s.get("defaultMode") is None:
            s["defaultMode"] = DEFAULT_MODE
    for item in ((vol.get("downwardAPI") or {}).get("items") or []):
        ref = (item or {}).get("fieldRef") if isinstance(item, dict) else None
        if isinstance(ref, dict) and not ref.get("apiVersion"):
            ref["apiVersion"] = "v1"


def default_pod_spec(spec: Obj) -> None:
    """SetDefaults_PodSpec and its nested types' defaults."""
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    spec.setdefault("schedulerName", "default-scheduler")
    for _, _, c in visit_containers(spec):
        _default_container(c)
    for vol in spec.get("volumes") or []:
        _default_volume(vol)


def default_pod(pod: Obj) -> None:
    """SetDefaults_Pod: the spec's defaults, enableServiceLinks (pods only, not templates), and requests
    copied from limits where a container gives limits only."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    default_pod_spec(spec)
    if spec.get("enableServiceLinks") is None:
        spec["enableServiceLinks"] = True
    for _, _, c in visit_containers(spec, (INIT_CONTAINERS, CONTAINERS)):
        res = c.get("resources")
        if isinstance(res, dict) and res.get("limits"):
            requests = dict(res.get("requests") or {})
            for name, val in res["limits"].items():
                requests.setdefault(name, val)
            res["requests"] = requests


def default_template(template: Any) -> None:
    """A PodTemplateSpec: its spec's defaults; metadata as v1 serializes an empty ObjectMeta's time."""
    if not isinstance(template, dict):
        return
    meta = template.get("metadata")
    if not isinstance(meta, dict):
        meta = template["metadata"] = {}
    meta.setdefault("creationTimestamp", None)
    spec = template.get("spec")
    if isinstance(spec, dict):
        default_pod_spec(spec)


# Validation ---------------------------------------------------------------------------------------


def _port_name_errors(name: str) -> list[str]:
    """validation.IsValidPortName."""
    errs = []
    if len(name) < 1 or len(name) > 15:
        errs.append("must be no more than 15 characters")
    if not _PORT_NAME_CHARS.match(name):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not _HAS_LETTER.search(name):
        errs.append("must contain at least one letter (a-z)")
    if "--" in name:
        errs.append("must not contain consecutive hyphens")
    if name and (name[0] == "-" or name[-1] == "-"):
        errs.append("must not begin or end with a hyphen")
    return errs


def _valid_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535


def _validate_ports(ports: list[Any], path: str) -> list[v.Cause]:
    causes: list[v.Cause] = []
    names: set[str] = set()
    for i, p in enumerate(ports):
        if not isinstance(p, dict):
            continue
        f = f"{path}[{i}]"
        name = p.get("name")
        if name:
            causes += [v.invalid(f"{f}.name", name, m) for m in _port_name_errors(name)]
            if name in names:
                causes.append(v.duplicate(f"{f}.name", name))
            names.add(name)
        cp = p.get("containerPort")
        if not cp:
            causes.append(v.required(f"{f}.containerPort"))
        elif not _valid_port(cp):
            causes.append(v.invalid(f"{f}.containerPort", cp, PORT_RANGE))
        hp = p.get("hostPort")
        if hp and not _valid_port(hp):
            causes.append(v.invalid(f"{f}.hostPort", hp, PORT_RANGE))
        causes += v.one_of(f"{f}.protocol", p.get("protocol"), PROTOCOLS)
    return causes


def _validate_env(env: list[Any], path: str) -> list[v.Cause]:
    causes: list[v.Cause] = []
    for i, e in enumerate(env):
        if not isinstance(e, dict):
            continue
        f = f"{path}[{i}]"
        name = e.get("name") or ""
        if not name:
            causes.append(v.required(f"{f}.name"))
        elif not _ENV_NAME.match(name):
            causes.append(v.invalid(f"{f}.name", name, ENV_NAME_MSG))
        src = e.get("valueFrom")
        if src is not None:
            if e.get("value"):
                causes.append(v.invalid(f"{f}.valueFrom", "",
                                        "may not be specified when `value` is not empty"))
            if isinstance(src, dict) and len([k for k in src if src[k] is not None]) > 1:
                causes.append(v.invalid(f"{f}.valueFrom", "", "may not have more than one field specified at a "
                                        "time"))
    return causes


def resource_quantities(values: Any, path: str) -> tuple[dict[str, Decimal], list[v.Cause]]:
    """A ResourceList's quantities by name, with kube's causes for bad names, bad or negative values."""
    out: dict[str, Decimal] = {}
    causes: list[v.Cause] = []
    for name, val in (values or {}).items():
        f = f"{path}[{name}]"
        causes += [v.invalid(f, name, m) for m in v.is_qualified_name(name)]
        try:
            q = quantity.parse(val)
        except ValueError as e:
            causes.append(v.invalid(f, val, str(e)))
            continue
        if q < 0:
            causes.append(v.invalid(f, val, "must be greater than or equal to 0"))
        out[name] = q
    return out, causes


def _validate_resources(res: Any, path: str) -> list[v.Cause]:
    if not isinstance(res, dict):
        return []
    limits, causes = resource_quantities(res.get("limits"), f"{path}.limits")
    requests, more = resource_quantities(res.get("requests"), f"{path}.requests")
    causes += more
    for name, q in requests.items():
        if name in limits and q > limits[name]:
            causes.append(v.invalid(f"{path}.requests", res["requests"][name],
                                    f"must be less than or equal to {name} limit of {res['limits'][name]}"))
    return causes


def _validate_container(c: Obj, f: str, volumes: set[str]) -> list[v.Cause]:
    causes: list[v.Cause] = []
    if not c.get("image"):
        causes.append(v.required(f"{f}.image"))
    causes += v.one_of(f"{f}.imagePullPolicy", c.get("imagePullPolicy"), PULL_POLICIES)
    causes += v.one_of(f"{f}.terminationMessagePolicy", c.get("terminationMessagePolicy"),
                       TERMINATION_MESSAGE_POLICIES)
    causes += _validate_ports(c.get("ports") or [], f"{f}.ports")
    causes += _validate_env(c.get("env") or [], f"{f}.env")
    causes += _validate_resources(c.get("resources"), f"{f}.resources")
    paths: set[str] = set()
    for i, m in enumerate(c.get("volumeMounts") or []):
        if not isinstance(m, dict):
            continue
        mf = f"{f}.volumeMounts[{i}]"
        name = m.get("name") or ""
        if not name:
            causes.append(v.required(f"{mf}.name"))
        elif name not in volumes:
            causes.append(v.not_found(f"{mf}.name", name))
        path = m.get("mountPath") or ""
        if not path:
            causes.append(v.required(f"{mf}.mountPath"))
        elif path in paths:
            causes.append(v.invalid(f"{mf}.mountPath", path, "must be unique"))
        paths.add(path)
    return causes


def _validate_ephemeral_container(c: Obj, f: str) -> list[v.Cause]:
    """What validateEphemeralContainers adds: an image, and no fields that serve the pod's own workload."""
    causes = [] if c.get("image") else [v.required(f"{f}.image")]
    return causes + [v.forbidden(f"{f}.{field}", "cannot be set for an Ephemeral Container")
                     for field in EPHEMERAL_FORBIDDEN if c.get(field)]


def validate_pod_spec(spec: Any, path: str) -> list[v.Cause]:
    """ValidatePodSpec, the subset named in this module's docstring."""
    if not isinstance(spec, dict):
        return [v.required(path)]
    causes: list[v.Cause] = []
    volumes: set[str] = set()
    for i, vol in enumerate(spec.get("volumes") or []):
        if not isinstance(vol, dict):
            continue
        f = f"{path}.volumes[{i}]"
        causes += v.unique_name(f"{f}.name", vol.get("name") or "", volumes, v.is_dns1123_label)
        sources = [k for k in vol if k != "name" and vol[k] is not None]
        if not sources:
            causes.append(v.required(f, "must specify a volume type"))
        elif len(sources) > 1:
            causes.append(v.forbidden(f"{f}.{sources[1]}", "may not specify more than 1 volume type"))
    if not spec.get(CONTAINERS):
        causes.append(v.required(f"{path}.{CONTAINERS}"))
    names: set[str] = set()  # unique across the three lists
    for key, f, c in visit_containers(spec, path=path):
        causes += v.unique_name(f"{f}.name", c.get("name") or "", names, v.is_dns1123_label)
        if key == EPHEMERAL_CONTAINERS:
            causes += _validate_ephemeral_container(c, f)
        else:
            causes += _validate_container(c, f, volumes)
    causes += v.one_of(f"{path}.restartPolicy", spec.get("restartPolicy"), RESTART_POLICIES)
    causes += v.one_of(f"{path}.dnsPolicy", spec.get("dnsPolicy"), DNS_POLICIES)
    tgps = spec.get("terminationGracePeriodSeconds")
    if isinstance(tgps, int) and tgps < 0:
        causes.append(v.invalid(f"{path}.terminationGracePeriodSeconds", tgps,
                                "must be greater than or equal to 0"))
    ads = spec.get("activeDeadlineSeconds")
    if ads is not None and isinstance(ads, int) and not 1 <= ads <= 2**32 - 1:
        causes.append(v.invalid(f"{path}.activeDeadlineSeconds", ads,
                                f"must be between 1 and {2**32 - 1}, inclusive"))
    causes += v.validate_labels(spec.get("nodeSelector") or {}, f"{path}.nodeSelector")
    sa = spec.get("serviceAccountName")
    if sa:
        causes += [v.invalid(f"{path}.serviceAccountName", sa, m) for m in v.is_dns1123_subdomain(sa)]
    return causes


def validate_template(template: Any, path: str) -> list[v.Cause]:
    """ValidatePodTemplateSpec: labels and annotations of its metadata, then its spec."""
    if not isinstance(template, dict):
        return [v.required(path)]
    meta = template.get("metadata") or {}
    causes = v.validate_labels(meta.get("labels") or {}, f"{path}.metadata.labels")
    causes += v.validate_annotations(meta.get("annotations") or {}, f"{path}.metadata.annotations")
    return causes + validate_pod_spec(template.get("spec"), f"{path}.spec")


def qos_class(spec: Obj) -> str:
    """qos.GetPodQOS: BestEffort without requests or limits; Guaranteed when every container's cpu and memory
    limits equal its requests; Burstable otherwise."""
    any_set = False
    guaranteed = True
    for _, _, c in visit_containers(spec, (INIT_CONTAINERS, CONTAINERS)):
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        if any(k in ("cpu", "memory") for k in list(requests) + list(limits)):
            any_set = True
        for k in ("cpu", "memory"):
            try:
                if k not in limits or quantity.parse(requests.get(k, limits[k])) != quantity.parse(limits[k]):
                    guaranteed = False
            except ValueError:  # validation answers it
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"
