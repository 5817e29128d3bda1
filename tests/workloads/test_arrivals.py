"""Arrival processes, replay, rate rescaling and sampling over RequestSpecs."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.workloads import (
    gamma_arrivals,
    load_trace,
    mean_rate_per_s,
    poisson_arrivals,
    replay_arrivals,
    rescale_to_rate,
    sample_requests,
    workload_stats,
)


def _specs(n: int) -> list[RequestSpec]:
    return [RequestSpec(f"r{i}", 0.0, 10 + i, 5, 5) for i in range(n)]


def test_poisson_and_gamma_are_deterministic_and_keep_order() -> None:
    specs = _specs(5000)
    a = poisson_arrivals(specs, 10.0, seed=7)
    assert a == poisson_arrivals(specs, 10.0, seed=7)
    assert a != poisson_arrivals(specs, 10.0, seed=8)
    assert [s.request_id for s in a] == [s.request_id for s in specs]  # i-th gets i-th arrival
    assert a[0].arrival_time == 0.0
    assert specs[1].arrival_time == 0.0  # inputs untouched
    gaps = np.diff([s.arrival_time for s in a])
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0])
def test_gamma_cv_and_rate(cv: float) -> None:
    times = np.array([s.arrival_time for s in gamma_arrivals(_specs(20_000), 4.0, cv, seed=1)])
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(0.25, rel=0.06)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)


def test_replay_takes_real_timestamps() -> None:
    azure = load_trace("azure-code-2023", limit=300)
    out = replay_arrivals(_specs(200), azure)
    assert [s.arrival_time for s in out] == [s.arrival_time for s in azure[:200]]
    assert [s.prompt_len for s in out] == [s.prompt_len for s in _specs(200)]
    shifted = replay_arrivals(_specs(3), [12.0, 10.0, 11.5, 30.0])
    assert [s.arrival_time for s in shifted] == [0.0, 1.5, 2.0]
    with pytest.raises(ValueError, match=r"at least one value per request \(3\), got 2"):
        replay_arrivals(_specs(3), [0.0, 1.0])
    with pytest.raises(ValueError, match=r"timestamps\[1\] must be a finite number, got nan"):
        replay_arrivals(_specs(2), [0.0, float("nan")])


def test_rescale_hits_the_target_rate_and_keeps_shape() -> None:
    trace = load_trace("splitwise-conv", limit=2000)
    for target in (0.5, 3.0, 40.0):
        out = rescale_to_rate(trace, target)
        assert mean_rate_per_s(out) == pytest.approx(target, rel=1e-12)
        assert workload_stats(out)["mean_rate_per_s"] == pytest.approx(target, rel=1e-12)
        gaps_in = np.diff([s.arrival_time for s in trace])
        gaps_out = np.diff([s.arrival_time for s in out])
        np.testing.assert_allclose(
            gaps_out, gaps_in * (mean_rate_per_s(trace) / target), rtol=1e-9, atol=1e-9
        )
    with pytest.raises(ValueError, match="target_rate_per_s must be a finite number > 0, got -1"):
        rescale_to_rate(trace, -1)
    with pytest.raises(ValueError, match="has no arrival rate"):
        rescale_to_rate(_specs(10), 1.0)


def test_sample_requests_seeded_and_ordered() -> None:
    trace = load_trace("splitwise-code", limit=500)
    a = sample_requests(trace, 100, seed=3)
    assert a == sample_requests(trace, 100, seed=3) and a != sample_requests(trace, 100, seed=4)
    assert len({s.request_id for s in a}) == 100
    times = [s.arrival_time for s in a]
    assert times == sorted(times)
    index = {s.request_id: i for i, s in enumerate(trace)}
    assert [index[s.request_id] for s in a] == sorted(index[s.request_id] for s in a)
    with pytest.raises(ValueError, match=r"num_requests must be <= the number of requests \(500\)"):
        sample_requests(trace, 501)
    with pytest.raises(ValueError, match="num_requests must be an int >= 0, got 2.5"):
        sample_requests(trace, 2.5)


def test_bad_rates_name_the_argument() -> None:
    with pytest.raises(ValueError, match="cv must be a finite number > 0, got 0"):
        gamma_arrivals(_specs(3), 1.0, 0)
    with pytest.raises(ValueError, match="rate_per_s must be a finite number > 0, got nan"):
        poisson_arrivals(_specs(3), float("nan"))
