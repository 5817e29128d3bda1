from __future__ import annotations

import numpy as np
import pytest

from llmsched_gym.workloads import arrival_times_s, load_trace


def test_poisson_arrivals_are_deterministic_and_have_the_rate() -> None:
    times = arrival_times_s(20_000, rate_per_s=4.0, seed=3)
    assert times[0] == 0.0 and np.all(np.diff(times) >= 0)
    np.testing.assert_array_equal(times, arrival_times_s(20_000, rate_per_s=4.0, seed=3))
    assert not np.array_equal(times, arrival_times_s(20_000, rate_per_s=4.0, seed=4))
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(0.25, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: CV 1


def test_burstiness_changes_variability_not_rate() -> None:
    bursty = np.diff(arrival_times_s(20_000, 4.0, burstiness=0.25, seed=1))
    regular = np.diff(arrival_times_s(20_000, 4.0, burstiness=16.0, seed=1))
    assert bursty.mean() == pytest.approx(0.25, rel=0.06)
    assert regular.mean() == pytest.approx(0.25, rel=0.03)
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.1)  # CV = 1/sqrt(shape)
    assert regular.std() / regular.mean() == pytest.approx(0.25, rel=0.1)


def test_edge_cases_and_errors() -> None:
    assert arrival_times_s(0, 1.0).shape == (0,)
    assert list(arrival_times_s(1, 1.0)) == [0.0]
    with pytest.raises(ValueError, match="num_requests must be an int >= 0, got -1"):
        arrival_times_s(-1, 1.0)
    with pytest.raises(ValueError, match="rate_per_s must be a finite number > 0, got 0"):
        arrival_times_s(5, 0)
    with pytest.raises(ValueError, match="burstiness must be a finite number > 0, got inf"):
        arrival_times_s(5, 1.0, burstiness=float("inf"))


def test_with_a_token_count_trace() -> None:
    specs = load_trace("arxiv-summarization", limit=50, arrival_times_s=arrival_times_s(50, 2.0))
    assert specs[0].arrival_time == 0.0 and specs[-1].arrival_time > 5.0
