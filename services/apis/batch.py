"""batch/v1: Job, CronJob."""
from __future__ import annotations

from typing import Any

from services.apiserver.printers import AGE, NAME, TableConvertor, age, column, human_duration, parse_time, since
from services.apiserver.resource import GroupVersion

from .strategies.batch import CronJobStrategy, JobStrategy
from .strategies.workload import containers_images, selector_string
from .kinds import workload
from .workload_columns import CONTAINERS, IMAGES, integer, selector_column

Obj = dict[str, Any]
GROUP = "batch"
JOB_SELECTOR_DOC = ("A label query over pods that should match the pod count. Normally, the system sets this field "
                    "for you. More info: "
                    "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors")


def _job_status(o: Obj) -> str:
    """printJob's Status: the last true terminal condition, else Suspended or Running."""
    status = "Running"
    conds = {c.get("type"): c.get("status") for c in (o.get("status") or {}).get("conditions") or []}
    for typ in ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet", "Suspended"):
        if conds.get(typ) == "True":
            status = typ
            break
    if (conds.get("Failed") != "True" and conds.get("Complete") != "True"
            and conds.get("Suspended") != "True" and (o.get("spec") or {}).get("suspend")):
        status = "Suspended"
    if (o.get("metadata") or {}).get("deletionTimestamp"):
        status = "Terminating"
    return status


def job_row(o: Obj) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    succeeded = status.get("succeeded") or 0
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif (spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    start, end = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
    if start is None:
        duration = ""
    elif end is None:
        duration = since(status.get("startTime"))
    else:
        duration = human_duration((end - start).total_seconds())
    names, images = containers_images(spec.get("template"))
    return [(o.get("metadata") or {}).get("name", ""), _job_status(o), completions, duration, age(o), names,
            images, selector_string(spec.get("selector")) or "<none>"]


def _bool_ptr(value: Any) -> str:
    """printBoolPtr: the Suspend column is a string cell though its column says boolean."""
    return "<unset>" if value is None else ("True" if value else "False")


def cronjob_row(o: Obj) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    job_spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    names, images = containers_images(job_spec.get("template"))
    last = since(status.get("lastScheduleTime")) if parse_time(status.get("lastScheduleTime")) else "<none>"
    return [(o.get("metadata") or {}).get("name", ""), spec.get("schedule") or "", spec.get("timeZone") or "<none>",
            _bool_ptr(spec.get("suspend")), len(status.get("active") or []), last, age(o), names, images,
            selector_string(job_spec.get("selector")) or "<none>"]


JOB_TABLE = TableConvertor((
    NAME,
    column("Status", "string", "Status of the job."),
    column("Completions", "string", "The number of pods which reached phase Succeeded. The value increases "
           "monotonically for a given spec. However, it may decrease in reaction to scale down of elastic indexed "
           "jobs."),
    column("Duration", "string", "Time required to complete the job."),
    AGE, CONTAINERS, IMAGES, selector_column(JOB_SELECTOR_DOC),
), job_row)

CRONJOB_TABLE = TableConvertor((
    NAME,
    column("Schedule", "string", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
    column("Timezone", "string", "The time zone name for the given schedule, see "
           "https://en.wikipedia.org/wiki/List_of_tz_database_time_zones. If not specified, this will default to "
           "the time zone of the kube-controller-manager process. The set of valid time zone names and the time "
           "zone offset is loaded from the system-wide time zone database by the API server during CronJob "
           "validation and the controller manager during execution. If no system-wide time zone database can be "
           "found a bundled version of the database is used instead. If the time zone name becomes invalid during "
           "the lifetime of a CronJob or due to a change in host configuration, the controller will stop creating "
           "new new Jobs and will create a system event with the reason UnknownTimeZone. More information can be "
           "found in https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/#time-zones"),
    column("Suspend", "boolean", "This flag tells the controller to suspend subsequent executions, it does not "
           "apply to already started executions.  Defaults to false."),
    integer("Active", "A list of pointers to currently running jobs."),
    column("Last Schedule", "string", "Information when was the last time the job was successfully scheduled."),
    AGE, CONTAINERS, IMAGES, selector_column(JOB_SELECTOR_DOC),
), cronjob_row)

V1 = GroupVersion(GROUP, "v1", 17400, 15, (
    workload(GROUP, "CronJob", CronJobStrategy, CRONJOB_TABLE, ("cj",)),
    workload(GROUP, "Job", JobStrategy, JOB_TABLE),
))

GROUP_VERSIONS = (V1,)
