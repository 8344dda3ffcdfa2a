import ast
import json

from tools.bench_envtest import (
    KINDS,
    SUITE_TESTS,
    crd_manifest,
    figures,
    members,
    summary,
    write_crds,
    write_session,
)
from tools.bench_goals import ENVTEST_GOALS, goal_lines


def test_members_are_the_groups_and_descendants_of_the_roots():
    table = {1: (0, 1), 10: (1, 10), 11: (10, 10), 12: (11, 12), 20: (1, 20), 21: (1, 10), 30: (1, 30)}
    assert members(table, [10]) == {10, 11, 12, 21}
    assert members(table, [10, 20]) == {10, 11, 12, 20, 21}
    assert members(table, [99]) == set()


def test_summary_is_nearest_rank_p50_and_p90():
    s = summary([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s["p50_s"], s["p90_s"]) == (3.0, 5.0)
    assert s["runs_s"] == [5.0, 1.0, 3.0, 2.0, 4.0]


def test_three_distinct_crds_are_written(tmp_path):
    write_crds(tmp_path)
    crds = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*.json"))]
    assert len(crds) == len(KINDS) == 3
    assert len({c["metadata"]["name"] for c in crds}) == 3
    widget = crd_manifest("Widget")
    assert widget["metadata"]["name"] == f"widgets.{widget['spec']['group']}"
    assert widget["spec"]["names"]["kind"] == "Widget"


def test_generated_sessions_are_python(tmp_path):
    for suite in (False, True):
        project = write_session(tmp_path / str(suite), suite)
        for f in ("conftest.py", "test_envtest.py"):
            ast.parse((project / f).read_text())
    suite_tests = (tmp_path / "True" / "test_envtest.py").read_text()
    assert f"range({SUITE_TESTS})" in suite_tests


def test_every_envtest_goal_reads_a_figure():
    r = {"up_cold": {"p50_s": 2.0, "p90_s": 6.0}, "up_warm": {"p50_s": 0.3},
         "pytest_cold": {"cold": {"p50_s": 2.5}, "reuse": {"p50_s": 0.4}},
         "down": {"all_gone_p50_s": 0.6}, "memory": {"total_mb": 500.0}, "suite": {"ratio": 1.5}}
    lines = goal_lines(figures(r), {}, ENVTEST_GOALS)
    assert len(lines) == len(ENVTEST_GOALS)
    assert all("not run" not in line for line in lines)
    assert sum("NOT MET" in line for line in lines) == 2  # the p90 and the memory
