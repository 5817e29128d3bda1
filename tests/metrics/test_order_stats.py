"""Exact order statistics in bounded memory: the ITL statistics of ``summary_values``, bit for bit.

``itl_statistics`` (used by cluster runs with ``records="summary"``) must give exactly what
``summary_values`` gives for the same inter-token samples, including samples with many ties
and one crowded bucket, where ``weighted_percentile`` would sort millions of members.
"""

from __future__ import annotations

import numpy as np
import pytest

from llmsched_gym.metrics.order_stats import itl_statistics, weighted_order_statistics
from llmsched_gym.metrics.summary import summary_values, weighted_percentile


def _summary_itl(values: np.ndarray, weights: np.ndarray) -> tuple:
    table = {"arrival_time_s": [0.0], "first_token_time_s": [1.0], "finish_time_s": [2.0]}
    table.update({k: [1] for k in ("num_prompt_tokens", "num_output_tokens")})
    table.update({k: [np.nan] for k in ("slo_ttft_s", "slo_tpot_s", "deadline_s")})
    table.update({k: [0] for k in ("num_cached_tokens", "num_preemptions", "num_refill_tokens")})
    s = summary_values(table, itl=(values, weights.astype(np.int64)))
    return tuple(s[f"itl_s_{k}"] for k in ("mean", "p50", "p90", "p99"))


@pytest.mark.parametrize("seed", range(6))
def test_itl_statistics_equal_the_summary(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5000))
    values = rng.gamma(2.0, 0.01, n)
    if seed % 2:  # ties, and a crowded value
        values = np.round(values, 3)
        values[rng.random(n) < 0.6] = 0.0123
    if seed == 4:
        values = values - 0.02  # negative values and zero
        values[:10] = 0.0
    weights = rng.integers(0, 40, n).astype(np.uint8)
    weights[0] = 1
    assert repr(itl_statistics(values, weights)) == repr(_summary_itl(values, weights))


def test_order_statistics_are_those_of_the_sorted_sample() -> None:
    rng = np.random.default_rng(1)
    values = np.round(rng.normal(0, 1, 700), 2)
    weights = rng.integers(0, 5, 700)
    expanded = np.sort(np.repeat(values, weights))
    ranks = np.arange(0, expanded.size, 7)
    np.testing.assert_array_equal(
        weighted_order_statistics(values, weights, ranks), expanded[ranks]
    )


def test_totals_past_the_weight_limit_and_empty_samples() -> None:
    values = np.array([0.5, 0.25, 0.75])
    weights = np.array([2**30, 2**30 + 5, 2**30 - 1], dtype=np.int64)  # total above 2**31
    expected = weighted_percentile(values, weights, (50.0, 90.0, 99.0))
    assert itl_statistics(values, weights)[1:] == tuple(float(x) for x in expected)
    assert all(np.isnan(itl_statistics(np.zeros(0), np.zeros(0, dtype=np.uint8))))
