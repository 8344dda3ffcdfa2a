from services.common.backoff import CAP, INITIAL, Backoff


def test_grows_to_the_cap_with_jitter_and_resets() -> None:
    b = Backoff()
    delays = [b.delay() for _ in range(8)]
    ceilings = [min(INITIAL * 2 ** i, CAP) for i in range(8)]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings))
    assert max(delays) <= CAP
    b.reset()
    assert INITIAL / 2 <= b.delay() <= INITIAL
