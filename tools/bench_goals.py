"""The goals `make bench` prints: issue 24's table and issue 22's custom resources' goals, each read from one
number of the run (tools.bench_history.flatten's `figure.field`) and shown with the previous run's value and its flag."""
from __future__ import annotations

import operator
from dataclasses import dataclass

from tools.bench_history import Verdict


@dataclass(frozen=True)
class Goal:
    label: str
    metric: str        # "figure.field" of the flattened run; "" when make bench does not measure it
    op: str            # "<=" or ">="
    target: float
    unit: str = ""
    where: str = ""    # where the figure is measured, when not by make bench

    def met(self, value: float) -> bool:
        return {"<=": operator.le, ">=": operator.ge}[self.op](value, self.target)


GOALS = (
    Goal("summed CPU per GET over all processes", "get.cpu_ms_per_request", "<=", 1.0, " ms"),
    Goal("summed CPU per CREATE over all processes", "create.cpu_ms_per_request", "<=", 2.5, " ms"),
    Goal("GET ÷ bare hello on the same HTTP stack", "get.ratio", ">=", 0.25),
    Goal("CREATE ÷ raw etcd put", "create.ratio", ">=", 0.25),
    Goal("GET through the APF gate ÷ with --enable-priority-and-fairness=false", "apf_gate.ratio", ">=", 0.9),
    Goal("200 HTTPS watchers, 100 writes/s: proxy CPU per delivery", "watch_https_200.proxy_cpu_us_per_delivery",
         "<=", 15, " µs"),
    Goal("200 HTTPS watchers, 100 writes/s: delivery p99", "watch_https_200.p99_ms", "<=", 100, " ms"),
    Goal("1,000 HTTPS watchers, 20 writes/s: delivery p99", "watch_https_1000.p99_ms", "<=", 150, " ms"),
    Goal("1,000 HTTPS watchers, 20 writes/s: delivered", "watch_https_1000.delivered_pct", ">=", 100, " %"),
    Goal("100 watchers on storage's gRPC watch: p99", "watch_fanout_single_100.p99_ms", "<=", 100, " ms"),
    Goal("LIST of 10,000 configmaps through HTTPS ÷ the same bytes from a bare HTTPS handler",
         "list_10k.ratio", "<=", 2.0),
    Goal("storage RSS per object ÷ its JSON", "storage_memory.ratio", "<=", 2.0),
    Goal("open-loop GET at half the sustained rate: p99", "get_open_loop.p99_ms", "<=", 20, " ms"),
    Goal("open-loop CREATE at half the sustained rate: p99", "create_open_loop.p99_ms", "<=", 50, " ms"),
    Goal("GET during a 200 MB Table / PartialObjectMetadata LIST ÷ idle GET", "", "<=", 2.0,
         where="python -m tools.bench_fairness"),
    Goal("service ready after its process starts", "", "<=", 1.0, " s", where="tools/faults (kill -9)"),
    Goal("custom object CREATE (20-field schema, 2 CEL rules) ÷ ConfigMap CREATE of the same size",
         "crd_create.ratio", ">=", 0.7),
    Goal("custom object GET ÷ ConfigMap GET of the same size", "crd_get.ratio", ">=", 0.7),
    Goal("CRD create to Established and servable through the proxy: p50", "crd_established.p50_ms", "<=", 1000,
         " ms"),
    Goal("2 proxy workers ÷ 1: HTTPS watch deliveries/s at p99 <= 100 ms; GET rate", "", ">=", 1.5,
         where="python -m tools.bench workers"),
    # issue 25's: two users of one level (a hand of 6 of 64 queues), one at 20x the other's rate, 2x the capacity
    Goal("APF, the quiet user under the noisy one's overload: completed ÷ offered", "apf_fairness.ratio", ">=", 0.95),
    Goal("APF, the quiet user under the noisy one's overload: p99 wait ÷ its service time", "apf_fairness.wait_ratio",
         "<=", 5.0),
    # issue 27's: the same GET and CREATE with a tracing configuration ÷ without any (tools/bench_tracing.py)
    Goal("GET, tracing configured at samplingRatePerMillion 0 ÷ no tracing config", "tracing_get_rate0.ratio",
         ">=", 0.97),
    Goal("CREATE, tracing configured at samplingRatePerMillion 0 ÷ no tracing config", "tracing_create_rate0.ratio",
         ">=", 0.97),
    Goal("GET, every request traced and exported to a local receiver ÷ no tracing config",
         "tracing_get_every.ratio", ">=", 0.8),
    Goal("CREATE, every request traced and exported to a local receiver ÷ no tracing config",
         "tracing_create_every.ratio", ">=", 0.8),
)


# issue 23's: apiary as a test cluster (`python -m tools.bench envtest`, tools/bench_envtest.py)
ENVTEST_GOALS = (
    Goal("`apiary up`, fresh state, to ready with 3 CRDs Established: p50", "envtest.up_cold_p50_s", "<=", 3.0, " s"),
    Goal("`apiary up`, fresh state, to ready with 3 CRDs Established: p90", "envtest.up_cold_p90_s", "<=", 5.0, " s"),
    Goal("`apiary up` again on the running cluster", "envtest.up_warm_p50_s", "<=", 0.5, " s"),
    Goal("pytest session fixture, cold, to the first test: p50", "envtest.pytest_cold_p50_s", "<=", 3.0, " s"),
    Goal("pytest session fixture, --apiary-reuse, to the first test", "envtest.pytest_reuse_p50_s", "<=", 0.5, " s"),
    Goal("`apiary down` until every process is gone", "envtest.down_all_gone_p50_s", "<=", 1.0, " s"),
    Goal("summed RSS of the stack at rest (etcd, no pizza)", "envtest.memory_mb", "<=", 400, " MB"),
    Goal("50 operator tests starting the cluster ÷ on a running one", "envtest.suite_ratio", "<=", 2.0),
)


def goal_lines(figures: dict[str, float], verdicts: dict[str, Verdict],
               goals: tuple[Goal, ...] = GOALS) -> list[str]:
    """One line per goal: its label, this run's value, whether it is met, the previous run's value
    and the flag when the value moved beyond its known spread."""
    lines = []
    width = max(len(g.label) for g in goals)
    for g in goals:
        want = f"{g.op} {g.target:g}{g.unit}"
        if not g.metric:
            lines.append(f"{g.label:{width}}  {'not measured':>14}  goal {want:12} ({g.where})")
            continue
        value = figures.get(g.metric)
        if value is None:
            # the figure ran, without this number: a latency beyond its measurement window
            ran = any(m.startswith(g.metric.split(".")[0] + ".") for m in figures)
            lines.append(f"{g.label:{width}}  {'beyond window' if ran else 'not run':>14}  goal {want:12} "
                         f"{'NOT MET' if ran else ''}".rstrip())
            continue
        mark = "met" if g.met(value) else "NOT MET"
        verdict = verdicts.get(g.metric)
        history = verdict.describe() if verdict else "new"
        lines.append(f"{g.label:{width}}  {f'{value:g}{g.unit}':>14}  goal {want:12} {mark:7}  {history}")
    return lines
