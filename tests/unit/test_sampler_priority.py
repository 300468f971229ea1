"""When py-spy runs real-time (collect/priority.py): the decision from py-spy's own waits."""

from __future__ import annotations

from infertop.collect.priority import LATE_PER_TICK_S, PROBE_EVERY, SamplerPriority


def test_late_ticks_at_normal_priority_make_the_next_windows_real_time() -> None:
    p = SamplerPriority(rate_hz=200)
    assert p.next_window() is False  # a session starts at normal priority
    # waited 55 µs a tick (a core free, measured): on time
    p.judge(waited_s=200 * 55e-6, elapsed=1.0)
    assert p.next_window() is False
    # waited 1 ms a tick (the text-generation sample filling both cores, measured)
    p.judge(waited_s=200 * 1e-3, elapsed=1.0)
    assert p.next_window() is True


def test_the_threshold_is_per_tick_whatever_the_rate() -> None:
    for rate in (25, 50, 200):
        p = SamplerPriority(rate_hz=rate)
        p.judge(waited_s=rate * 2.0 * 0.9 * LATE_PER_TICK_S, elapsed=2.0)
        assert p.next_window() is False, rate
        p.judge(waited_s=rate * 2.0 * 1.1 * LATE_PER_TICK_S, elapsed=2.0)
        assert p.next_window() is True, rate


def test_real_time_windows_are_not_judged_and_one_in_probe_every_runs_normal_again() -> None:
    p = SamplerPriority(rate_hz=100)
    p.judge(waited_s=1.0, elapsed=1.0)
    kinds = []
    for _ in range(2 * PROBE_EVERY + 2):
        kinds.append(p.next_window())
        p.ended(pid=-1, elapsed=1.0)  # a real-time window leaves the judgement as it was
        if not p.realtime:
            p.judge(waited_s=1.0, elapsed=1.0)  # the probe at normal priority: still late
    assert kinds[:PROBE_EVERY] == [True] * PROBE_EVERY
    assert kinds[PROBE_EVERY] is False
    assert kinds[PROBE_EVERY + 1 : 2 * PROBE_EVERY + 1] == [True] * PROBE_EVERY
    assert kinds[2 * PROBE_EVERY + 1] is False


def test_a_probe_on_time_goes_back_to_normal() -> None:
    p = SamplerPriority(rate_hz=100)
    p.judge(waited_s=1.0, elapsed=1.0)
    assert all(p.next_window() for _ in range(PROBE_EVERY))
    assert p.next_window() is False
    p.judge(waited_s=0.001, elapsed=1.0)  # the neighbour that filled the cores is gone
    assert not any(p.next_window() for _ in range(3))
