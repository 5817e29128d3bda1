"""Fast tests of ProServe's TDG metric and SlideBatching pieces."""

from __future__ import annotations

import numpy as np

from llmsched_gym.core.request import Request, RequestSpec, RequestStatus
from llmsched_gym.metrics.tdg import slo_attainment, tdg_of_times, tdg_uniform
from llmsched_gym.policies.proserve import LatencyEstimator, SlideBatchingPolicy

COEF = {"tc": 0.01, "ap": 1e-8, "bp": 0.0, "cp": 1e-5, "ad": 0.0, "bd": 1e-3}


def _req(rid, arrival=0.0, prompt=100, out=10, weight=1.0, ttft=1.0, tpot=0.1, **state):
    spec = RequestSpec(
        request_id=rid,
        arrival_time=arrival,
        prompt_len=prompt,
        output_len=out,
        max_tokens=out,
        weight=weight,
        slo_ttft_s=ttft,
        slo_tpot_s=tpot,
    )
    r = Request(spec, 0, 16)
    for k, v in state.items():
        setattr(r, k, v)
    return r


def test_tdg_hand_computed():
    # deadlines: 1.0, 1.1, 1.2, 1.3; token 2 at 1.15 misses, token 4 at exactly 1.3 misses.
    g = tdg_of_times([0.5, 1.15, 1.19, 1.3], 0.0, 1.0, 0.1, weight=2.0, wp=3.0, wd=1.0)
    assert g == 2.0 * (3.0 + 1.0)


def test_tdg_uniform_matches_even_spacing_and_slo_strict():
    table = {
        "arrival_time_s": np.array([0.0, 0.0]),
        "first_token_time_s": np.array([0.5, 1.0]),
        "finish_time_s": np.array([0.5 + 3 * 0.2, 1.3]),
        "num_output_tokens": np.array([4, 4]),
        "slo_ttft_s": np.array([1.0, 1.0]),
        "slo_tpot_s": np.array([0.1, 0.1]),
        "weight": np.array([1.0, 1.0]),
    }
    gain, ideal = tdg_uniform(table)
    exact0 = tdg_of_times([0.5, 0.7, 0.9, 1.1], 0.0, 1.0, 0.1)
    exact1 = tdg_of_times([1.0, 1.1, 1.2, 1.3], 0.0, 1.0, 0.1)
    assert np.allclose(gain, [exact0, exact1]) and np.allclose(ideal, [4, 4])
    assert list(slo_attainment(table)) == [False, False]  # tpot 0.2; ttft == SLO is not < SLO


def _policy():
    p = SlideBatchingPolicy(estimator=LatencyEstimator(COEF))
    return p


def test_urgent_partition_and_density_order():
    p = _policy()
    a = _req("a", prompt=100, ttft=0.05)  # tight: urgent
    b = _req("b", prompt=100, ttft=50.0)  # loose: normal
    c = _req("c", prompt=4000, ttft=0.05, weight=2.0)  # urgent, low density (long prefill)
    order, budget, _ = p.order([b, c, a], now=0.0)
    assert p.last_partition == {"a": "URGENT", "b": "NORMAL", "c": "URGENT"}
    assert [r.request_id for r in order] == ["a", "c", "b"]
    dec = _req(
        "d",
        prompt=100,
        ttft=0.05,
        tpot=0.001,  # its next token is due at TTFT + 1 x TPOT = 0.001 s: urgent
        status=RequestStatus.RUNNING,
        num_computed_tokens=100,
        num_tokens=101,
        num_output_tokens=1,
        first_token_time=0.0,
    )
    order, _, _ = p.order([a, dec], now=0.0)
    assert p.last_partition["d"] == "URGENT"
    assert order[0].request_id == "d"  # URGENT decodes first


def test_only_modes():
    p = SlideBatchingPolicy(estimator=LatencyEstimator(COEF), mode="only-deadline")
    p.order([_req("a", ttft=0.01), _req("b", ttft=5.0)], 0.0)
    assert set(p.last_partition.values()) == {"NORMAL"}
    p = SlideBatchingPolicy(estimator=LatencyEstimator(COEF), mode="only-density")
    p.order([_req("a", ttft=0.01), _req("b", ttft=5.0)], 0.0)
    assert set(p.last_partition.values()) == {"URGENT"}


def test_getmaxchunk():
    est = LatencyEstimator(COEF)
    c = est.max_chunk(0, 0.0234, 10_000)
    assert est.prefill(c, 0) <= 0.0234 < est.prefill(c + 1, 0)
    assert est.max_chunk(0, 1e9, 123) == 123 and est.max_chunk(0, float("inf"), 7) == 7
    assert est.max_chunk(0, 0.0, 100) == 0


def test_momentum():
    est = LatencyEstimator(COEF, theta=0.5, window=10)
    est.observe(real=0.2, est=0.1)
    assert abs(est.beta - 1.5) < 1e-12
    fixed = LatencyEstimator(COEF)
    fixed.observe(0.2, 0.1)
    assert fixed.beta == 1.0
