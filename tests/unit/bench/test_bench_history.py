"""The benchmarks' history: what is kept of a run, the known spread, and the flags beside a figure."""
from __future__ import annotations

from pathlib import Path

from tools.bench_goals import GOALS, goal_lines
from tools.bench_history import append, better, compare, flatten, judge, load, machine, spread

RESULTS = {
    "get": {"rate": 800.0, "p50_ms": 30.0, "p99_ms": 90.0, "baseline": "http_hello", "baseline_rate": 6000.0,
            "ratio": 0.1333, "cpu_ms_per_request": {"etcd": 0.33, "storage": 0.49, "registry": 0.43,
                                                    "proxy": 0.75}},
    "list_10k": {"seconds": 0.057, "p50_ms": 57.0, "p99_ms": None, "ratio": 6.9, "ratio_is_cost": True,
                 "via": "https"},
}


def test_a_run_is_kept_as_numbers_per_figure_with_the_cpu_summed_over_processes():
    assert flatten(RESULTS) == {"get.rate": 800.0, "get.p50_ms": 30.0, "get.p99_ms": 90.0, "get.ratio": 0.1333,
                                "get.baseline_rate": 6000.0, "get.cpu_ms_per_request": 2.0,
                                "list_10k.seconds": 0.057, "list_10k.p50_ms": 57.0, "list_10k.ratio": 6.9,
                                "list_10k.ratio_is_cost": 1}


def test_which_way_is_better():
    figures = flatten(RESULTS)
    assert better("get.rate", figures) == 1 and better("get.p99_ms", figures) == -1
    assert better("get.cpu_ms_per_request", figures) == -1
    assert better("get.ratio", figures) == 1          # a rate over a baseline's rate
    assert better("list_10k.ratio", figures) == -1    # a time over a floor's time
    assert better("get.baseline_rate", figures) == 1 and better("list_10k.baseline_rate", figures) == -1


def test_the_known_spread_is_the_last_runs_deviation_from_their_median():
    assert spread([100.0, 110.0, 90.0]) == (100.0, 0.1)
    # only the last five runs count
    assert spread([10.0, 100.0, 101.0, 99.0, 100.0, 100.0]) == (100.0, 0.03)
    # with fewer than three runs the spread is at least 10 %
    assert spread([100.0, 101.0]) == (100.5, 0.1)
    assert spread([100.0]) == (100.0, 0.1)


def test_a_value_within_its_spread_is_not_flagged_beyond_it_is():
    past = [800.0, 760.0, 840.0, 800.0]  # ±5 %
    within = judge(830.0, past, 1)
    assert (within.previous, within.moved, within.flag()) == (800.0, 0, "")
    assert within.describe() == "prev 800 ±5%"
    assert judge(700.0, past, 1).flag() == "↓ WORSE"
    assert judge(900.0, past, 1).flag() == "↑ better"
    assert judge(900.0, past, -1).flag() == "↑ WORSE"  # a latency that went up
    assert judge(1.0, [], 1).describe() == "new"


def test_the_storage_memory_regression_is_flagged_the_day_it_happens():
    runs = [{"figures": {"storage_memory.ratio": r, "storage_memory.ratio_is_cost": 1}} for r in (2.5, 2.6, 2.5)]
    verdicts = compare({"storage_memory.ratio": 3.4, "storage_memory.ratio_is_cost": 1}, runs)
    assert list(verdicts) == ["storage_memory.ratio"]
    assert verdicts["storage_memory.ratio"].flag() == "↑ WORSE"


def test_history_is_appended_and_read_back_by_mode(tmp_path: Path):
    path = tmp_path / "bench-history" / "m.jsonl"
    assert load(path, "full") == []
    append(path, {"mode": "full", "figures": {"get.rate": 1.0}})
    append(path, {"mode": "quick", "figures": {"get.rate": 2.0}})
    append(path, {"mode": "full", "figures": {"get.rate": 3.0}})
    assert [r["figures"]["get.rate"] for r in load(path, "full")] == [1.0, 3.0]
    assert [r["figures"]["get.rate"] for r in load(path, "quick")] == [2.0]


def test_the_machine_name_is_a_file_name():
    name = machine()
    assert name and "/" not in name and " " not in name


def test_every_goal_is_printed_with_its_value_history_and_whether_it_is_met():
    figures = flatten(RESULTS)
    verdicts = compare(figures, [{"figures": {"get.cpu_ms_per_request": 2.05, "get.ratio": 0.12}}])
    lines = goal_lines(figures, verdicts)
    assert len(lines) == len(GOALS)
    text = "\n".join(lines)
    assert "summed CPU per GET over all processes" in text
    cpu_line = next(line for line in lines if line.startswith("summed CPU per GET"))
    assert "2 ms" in cpu_line and "<= 1 ms" in cpu_line and "NOT MET" in cpu_line and "prev 2.05" in cpu_line
    list_line = next(line for line in lines if line.startswith("LIST of 10,000"))
    assert "6.9" in list_line and "<= 2" in list_line and "new" in list_line
    storage_line = next(line for line in lines if line.startswith("storage RSS per object"))
    assert "not run" in storage_line and "<= 2" in storage_line
    assert "not measured" in next(line for line in lines if line.startswith("service ready"))


def test_a_latency_beyond_the_window_is_not_met():
    figures = flatten({"watch_https_200": {"deliveries_per_s": 4000.0, "p99_ms": None, "ratio": None}})
    line = next(line for line in goal_lines(figures, {}) if line.startswith("200 HTTPS watchers, 100 writes/s: "
                                                                            "delivery p99"))
    assert "beyond window" in line and "NOT MET" in line
