"""batch/v1 Job and CronJob (kube's registry/batch): SetDefaults_Job/_CronJob, the generated selector
of a Job (generateSelector), and validation (ValidateJob/ValidateCronJob, a subset: counts, restart
policy, selector, schedule shape, concurrency policy, immutable selector and template)."""
from __future__ import annotations

import copy
import re
from typing import ClassVar

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy

from . import podspec
from .workload import WorkloadStrategy, non_negative, raw_invalid

CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID = "controller-uid"
LEGACY_JOB_NAME = "job-name"
JOB_RESTART_POLICIES = ("OnFailure", "Never")
_CRON_DESCRIPTORS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
_CRON_FIELD = re.compile(r"^(\*|\?|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/[0-9]+)?(,(\*|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/[0-9]+)?)*$")


def default_job_spec(spec: Obj) -> None:
    """SetDefaults_Job's spec part."""
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if spec.get("podReplacementPolicy") is None:
        spec["podReplacementPolicy"] = "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"


def validate_job_spec(spec: Obj, path: str) -> list[v.Cause]:
    causes: list[v.Cause] = []
    for f in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        val = spec.get(f)
        if isinstance(val, int) and not isinstance(val, bool) and val < 0:
            causes.append(v.invalid(f"{path}.{f}", val, "must be greater than or equal to 0"))
    ads = spec.get("activeDeadlineSeconds")
    if isinstance(ads, int) and ads == 0:
        causes.append(v.invalid(f"{path}.activeDeadlineSeconds", ads, "must be greater than 0"))
    mode = spec.get("completionMode")
    if mode is not None and mode not in ("NonIndexed", "Indexed"):
        causes.append(v.not_supported(f"{path}.completionMode", mode, ["NonIndexed", "Indexed"]))
    if mode == "Indexed" and spec.get("completions") is None:
        causes.append(v.required(f"{path}.completions", "when completion mode is Indexed"))
    template = spec.get("template")
    if template is None:
        causes.append(v.required(f"{path}.template"))
        return causes
    causes += podspec.validate_template(template, f"{path}.template")
    restart = ((template or {}).get("spec") or {}).get("restartPolicy")
    if restart in podspec.RESTART_POLICIES and restart not in JOB_RESTART_POLICIES:
        causes.append(v.not_supported(f"{path}.template.spec.restartPolicy", restart, list(JOB_RESTART_POLICIES)))
    return causes


class JobStrategy(WorkloadStrategy):
    selectable_status: ClassVar[dict[str, str]] = {"status.successful": "succeeded"}
    selector_kind = "job"
    restart_policies = JOB_RESTART_POLICIES

    def canonicalize(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            default_job_spec(spec)
        super().canonicalize(obj)

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {}

    @staticmethod
    def generate_selector(obj: Obj) -> None:
        """generateSelector: unless spec.manualSelector, the template is labelled with the job's uid and name
        (new and legacy keys) and the selector is that uid."""
        spec = obj.get("spec")
        if not isinstance(spec, dict) or spec.get("manualSelector") is True:
            return
        meta = obj.get("metadata") or {}
        uid, name = meta.get("uid") or "", meta.get("name") or ""
        template = spec.get("template")
        if isinstance(template, dict):
            tmeta = template.get("metadata")
            if not isinstance(tmeta, dict):
                tmeta = template["metadata"] = {}
            labels = dict(tmeta.get("labels") or {})
            for k, val in ((CONTROLLER_UID, uid), (JOB_NAME, name), (LEGACY_CONTROLLER_UID, uid),
                           (LEGACY_JOB_NAME, name)):
                labels.setdefault(k, val)
            tmeta["labels"] = labels
        if spec.get("selector") is None:
            spec["selector"] = {"matchLabels": {CONTROLLER_UID: uid}}

    def validate(self, obj: Obj) -> list[v.Cause]:
        self.generate_selector(obj)
        causes = Strategy.validate(self, obj)
        spec = obj.get("spec") or {}
        if spec.get("manualSelector") is not True and spec.get("selector") is not None:
            uid = (obj.get("metadata") or {}).get("uid") or ""
            labels = (spec["selector"] or {}).get("matchLabels") or {}
            if labels.get(CONTROLLER_UID) != uid:
                causes.append(raw_invalid("spec.selector", "", "`selector` not auto-generated"))
        return causes + self.validate_spec(obj)

    def validate_spec(self, obj: Obj) -> list[v.Cause]:
        spec = obj.get("spec") or {}
        return self.validate_selector(spec) + validate_job_spec(spec, "spec")

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        spec, old_spec = obj.get("spec") or {}, old.get("spec") or {}
        if spec.get("completions") != old_spec.get("completions") and spec.get("completionMode") != "Indexed":
            causes.append(v.immutable("spec.completions", spec.get("completions")))
        if spec.get("template") != old_spec.get("template") and not old_spec.get("suspend"):
            causes.append(raw_invalid("spec.template", "core.PodTemplateSpec{...}", "field is immutable"))
        return causes


def _cron_errors(schedule: str) -> str | None:
    """The schedule's shape as robfig/cron's standard parser sees it (five fields or a descriptor)."""
    text = schedule.strip()
    if text.startswith(("TZ=", "CRON_TZ=")):
        return None
    if text.startswith("@"):
        if text in _CRON_DESCRIPTORS or text.startswith("@every "):
            return None
        return f"unrecognized descriptor: {text}"
    fields = text.split()
    if len(fields) != 5:
        return f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]"
    for f in fields:
        if not _CRON_FIELD.match(f):
            return f"failed to parse int from {f}: strconv.Atoi: parsing \"{f}\": invalid syntax"
    return None


class CronJobStrategy(WorkloadStrategy):
    selector_kind = "cronjob"
    restart_policies = JOB_RESTART_POLICIES

    def template(self, obj: Obj) -> object:
        return (((obj.get("spec") or {}).get("jobTemplate") or {}).get("spec") or {}).get("template")

    def template_path(self) -> str:
        return "spec.jobTemplate.spec.template"

    def canonicalize(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.setdefault("concurrencyPolicy", "Allow")
            spec.setdefault("suspend", False)
            spec.setdefault("successfulJobsHistoryLimit", 3)
            spec.setdefault("failedJobsHistoryLimit", 1)
            jt = spec.get("jobTemplate")
            if isinstance(jt, dict):
                jm = jt.setdefault("metadata", {})
                if isinstance(jm, dict):
                    jm.setdefault("creationTimestamp", None)
        super().canonicalize(obj)

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {}

    def validate_spec(self, obj: Obj) -> list[v.Cause]:
        spec = obj.get("spec") or {}
        causes: list[v.Cause] = []
        schedule = spec.get("schedule") or ""
        if not schedule:
            causes.append(v.required("spec.schedule"))
        elif (err := _cron_errors(schedule)) is not None:
            causes.append(v.invalid("spec.schedule", schedule, err))
        policy = spec.get("concurrencyPolicy") or ""
        if policy not in ("Allow", "Forbid", "Replace"):
            causes.append(v.not_supported("spec.concurrencyPolicy", policy, ["Allow", "Forbid", "Replace"]))
        for f in ("startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
            causes += non_negative(obj, f)
        job_spec = (spec.get("jobTemplate") or {}).get("spec")
        if job_spec is None:
            causes.append(v.required("spec.jobTemplate.spec"))
        else:
            copy_spec = copy.deepcopy(job_spec)
            causes += validate_job_spec(copy_spec, "spec.jobTemplate.spec")
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        # a CronJob has no selector of its own: only the spec's rules apply on update
        return Strategy.validate(self, obj) + v.validate_object_meta_update(obj.get("metadata") or {},
                                                                            old.get("metadata") or {}) \
            + self.validate_spec(obj)
