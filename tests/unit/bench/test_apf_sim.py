"""tools/apf_sim.py, kube's fair queuing (services/apf/queueset.py) alone under bench_apf's overload on a
simulated clock: a quiet flow waits about one service behind a noisy flow of one queue, and about a round
of the noisy flow's queues when it holds a hand of 6; and bench_apf's seat times from the histogram."""
from tools.apf_sim import simulate
from tools.bench_apf import seat_samples

QUIET, NOISY = "bench-apf/bench-quiet", "bench-apf/bench-noisy"  # disjoint hands of 6 out of 64


def test_a_hand_of_one_queue_keeps_the_quiet_flow_one_service_behind() -> None:
    out = simulate([0.04], 1, QUIET, NOISY, quiet_requests=300)
    assert out["quiet_rejected"] == 0
    assert out["wait_p99"] <= 1.0


def test_a_hand_of_six_queues_makes_the_quiet_flow_wait_a_round_of_them() -> None:
    out = simulate([0.04], 6, QUIET, NOISY, quiet_requests=300)
    assert out["quiet_rejected"] == 0
    assert 4.0 <= out["wait_p50"] <= out["wait_p99"] <= 7.0


def test_varied_service_times_lengthen_the_quiet_flows_tail() -> None:
    """Its p99 in median service times grows with their spread: it waits behind the noisy flow's longest."""
    fixed = simulate([0.02], 6, QUIET, NOISY, quiet_requests=300)
    varied = simulate([0.01, 0.02, 0.02, 0.03, 0.08], 6, QUIET, NOISY, quiet_requests=300)
    assert varied["wait_p99"] > fixed["wait_p99"]


def test_seat_times_are_spread_over_the_buckets_filled_between_two_scrapes() -> None:
    inf = float("inf")
    before = {0.02: 1.0, 0.05: 1.0, 0.1: 1.0, inf: 1.0}
    after = {0.02: 1.0, 0.05: 3.0, 0.1: 4.0, inf: 5.0}
    assert [round(s, 4) for s in seat_samples(before, after)] == [0.0275, 0.0425, 0.075, 0.1]
