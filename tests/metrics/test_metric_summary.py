"""Run summaries on hand-computed records, weighted ITL percentiles, comparison tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from llmsched_gym.metrics import (
    DEFAULT_COMPARE_METRICS,
    Metric,
    compare,
    requests_frame,
    steps_frame,
    summarize,
    weighted_percentile,
)
from llmsched_gym.metrics import summary as summary_module


def test_summary_hand_computed(tiny_rows, make_steps) -> None:
    s = summarize(requests_frame(tiny_rows), steps_frame(make_steps()))
    assert list(s.index) == [m.value for m in Metric]
    assert s["num_requests"] == 3 and isinstance(s["num_requests"], int)
    assert s["num_finished"] == 3
    assert s["duration_s"] == 6.0  # first arrival 0 -> last finish 6
    assert s["request_throughput"] == pytest.approx(3 / 6)
    assert s["output_token_throughput"] == pytest.approx(9 / 6)
    assert s["total_token_throughput"] == pytest.approx((400 + 9) / 6)
    # TTFT [1.0, 0.5, 2.0]: p90 at virtual index 1.8 of [0.5, 1, 2] = 1.8; p99 = 1.98.
    assert s["ttft_s_mean"] == pytest.approx(3.5 / 3)
    assert (s["ttft_s_p50"], s["ttft_s_p90"], s["ttft_s_p99"]) == pytest.approx((1.0, 1.8, 1.98))
    # TPOT [0.5, NaN, 1.0]: the single-token request is left out.
    assert s["tpot_s_mean"] == pytest.approx(0.75) and s["tpot_s_p50"] == pytest.approx(0.75)
    assert s["e2e_s_mean"] == pytest.approx(7.5 / 3) and s["e2e_s_p50"] == 3.0
    # Per-request SLOs: only b meets its SLO.
    assert s["goodput"] == pytest.approx(1 / 6) and s["slo_attainment"] == pytest.approx(1 / 3)
    assert s["num_preemptions"] == 1 and s["num_refill_tokens"] == 0
    assert s["prefix_cache_hit_rate"] == pytest.approx(150 / 400)
    # Step usage 0.2 for 1 s and 0.6 for 3 s.
    assert s["kv_cache_usage_mean"] == pytest.approx(0.5) and s["kv_cache_usage_max"] == 0.6
    assert math.isnan(s["itl_s_mean"])
    # Jobs j1 (latency 3.0) and j2 (latency 4.0).
    assert s["num_jobs"] == 2 and s["job_latency_s_mean"] == pytest.approx(3.5)


def test_global_slos_replace_per_request_ones(tiny_rows) -> None:
    df = requests_frame(tiny_rows)
    # TTFT [1.0, 0.5, 2.0] < 1.5 for a and b.
    s = summarize(df, slo_ttft_s=1.5)
    assert s["goodput"] == pytest.approx(2 / 6) and s["slo_attainment"] == pytest.approx(2 / 3)
    # TPOT [0.5, NaN, 1.0] < 0.75: a, and b (a single token meets any TPOT SLO).
    s = summarize(df, slo_tpot_s=0.75)
    assert s["goodput"] == pytest.approx(2 / 6)
    s = summarize(df, slo_ttft_s=1.5, slo_tpot_s=0.75)
    assert s["goodput"] == pytest.approx(2 / 6)
    s = summarize(df, slo_ttft_s=0.5)  # strict: 0.5 is not < 0.5
    assert s["goodput"] == 0.0
    with pytest.raises(ValueError, match=r"slo_ttft_s must be a finite number > 0 or None, got 0"):
        summarize(df, slo_ttft_s=0)


def test_goodput_without_any_slo_is_nan(make_row) -> None:
    s = summarize(requests_frame([make_row(request_id="a"), make_row(request_id="b")]))
    assert math.isnan(s["goodput"]) and math.isnan(s["slo_attainment"])
    assert s["num_jobs"] == 0 and math.isnan(s["job_latency_s_mean"])
    assert math.isnan(s["kv_cache_usage_mean"])


def test_requests_without_slo_count_as_good(make_row) -> None:
    rows = [make_row(request_id="free"), make_row(request_id="bound", slo_ttft_s=0.5)]
    s = summarize(requests_frame(rows))  # bound: ttft 1.0 misses 0.5
    assert s["goodput"] == pytest.approx(1 / 2.0) and s["slo_attainment"] == 0.0


def test_unfinished_requests(make_row) -> None:
    rows = [make_row(request_id="a"), make_row(request_id="b", finish_time_s=None)]
    s = summarize(requests_frame(rows))
    assert s["num_requests"] == 2 and s["num_finished"] == 1
    assert s["request_throughput"] == pytest.approx(0.5)


def test_itl_statistics_match_the_expanded_sample() -> None:
    values = np.array([0.02, 0.05, 0.01, 0.3])
    weights = np.array([1000, 3, 50, 1])
    expanded = np.repeat(values, weights)
    rows_df = requests_frame(
        [
            {
                "request_id": "r",
                "arrival_time_s": 0.0,
                "first_scheduled_time_s": 0.0,
                "first_token_time_s": 1.0,
                "finish_time_s": 2.0,
                "num_prompt_tokens": 1,
                "num_output_tokens": 2,
                "num_cached_tokens": 0,
                "num_computed_tokens": 2,
                "num_refill_tokens": 0,
                "num_preemptions": 0,
            }
        ]
    )
    s = summarize(rows_df, itl=(values, weights))
    assert s["itl_s_mean"] == pytest.approx(expanded.mean(), rel=1e-12)
    expected = np.percentile(expanded, [50, 90, 99])
    assert [s["itl_s_p50"], s["itl_s_p90"], s["itl_s_p99"]] == list(expected)
    plain = summarize(rows_df, itl=expanded)
    assert plain["itl_s_p99"] == s["itl_s_p99"]


def test_weighted_percentile_small_cases() -> None:
    # Expanded sample [1, 1, 1, 5]: median at index 1.5 -> 1; p100 -> 5; p75 at 2.25 -> 2.
    result = weighted_percentile([5.0, 1.0], [1, 3], [50, 100, 75, 0])
    assert list(result) == [1.0, 5.0, 2.0, 1.0]
    assert math.isnan(weighted_percentile([1.0], [0], 50))
    assert weighted_percentile([], [], [50]).shape == (1,)
    with pytest.raises(ValueError, match="weights must be integers >= 0"):
        weighted_percentile([1.0, 2.0], [1, -1], 50)
    with pytest.raises(ValueError, match="weights must be integers >= 0"):
        weighted_percentile([1.0, 2.0], [1, 0.5], 50)
    with pytest.raises(ValueError, match="equal length"):
        weighted_percentile([1.0, 2.0], [1], 50)
    with pytest.raises(ValueError, match=r"percentiles must be in \[0, 100\]"):
        weighted_percentile([1.0], [1], 101)
    with pytest.raises(ValueError, match="values must be finite"):
        weighted_percentile([math.nan], [1], 50)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=10, allow_nan=False, allow_subnormal=False),
            st.integers(min_value=0, max_value=40),
        ),
        min_size=1,
        max_size=30,
    ),
    st.lists(st.floats(min_value=0, max_value=100), min_size=1, max_size=5),
)
def test_weighted_percentile_equals_brute_force(pairs, percentiles) -> None:
    values = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs], dtype=np.int64)
    expanded = np.repeat(values, weights)
    result = weighted_percentile(values, weights, percentiles)
    if expanded.size == 0:
        assert np.isnan(result).all()
    else:
        np.testing.assert_array_equal(result, np.percentile(expanded, percentiles))


def _sorted_reference(values, weights, percentiles):
    """The weighted percentile by a full stable sort (what the bucketed selection replaces)."""
    order = np.argsort(values, kind="stable")
    v, cumulative = values[order], np.cumsum(weights[order])
    virtual = (int(cumulative[-1]) - 1) * (np.asarray(percentiles, np.float64) / 100.0)
    lower = np.floor(virtual)
    upper = np.minimum(lower + 1, int(cumulative[-1]) - 1)
    a = v[np.searchsorted(cumulative, lower.astype(np.int64), side="right")]
    b = v[np.searchsorted(cumulative, upper.astype(np.int64), side="right")]
    diff = b - a
    t = virtual - lower
    return np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)


@pytest.mark.parametrize("chunk", [5, 1 << 21])
def test_weighted_percentile_bucketed_selection_is_bitwise_the_sort(monkeypatch, chunk) -> None:
    # Slices of 5 samples cross every bucket; ties, signed zeros, negatives, subnormals, zero
    # weights and values of one bucket (close floats) must pick the same bits as a stable sort.
    monkeypatch.setattr(summary_module, "_CHUNK", chunk)
    rng = np.random.default_rng(7)
    special = np.array([-0.0, 0.0, -0.0, 5e-324, -5e-324, -1e300, 1e300, 1.0, 1.0 + 2**-52])
    for _ in range(30):
        n = int(rng.integers(1, 400))
        values = np.concatenate(
            [rng.choice(special, n), rng.integers(-3, 4, n) / 3.0, 0.01 + rng.random(n) * 1e-9]
        )
        rng.shuffle(values)
        weights = rng.integers(0, 4, values.size)
        weights[0] = 1
        percentiles = [0, 0.1, 25, 50, 90, 99, 99.9, 100, float(rng.random() * 100)]
        got = weighted_percentile(values, weights, percentiles)
        assert got.tobytes() == _sorted_reference(values, weights, percentiles).tobytes()
    with pytest.raises(ValueError, match="weights must be below 2"):
        weighted_percentile([1.0, 2.0], [1, 2**31], 50)


def test_compare_table(tiny_rows, make_row) -> None:
    a = summarize(requests_frame(tiny_rows))
    b = dict(summarize(requests_frame([make_row()])))
    b["num_steps"] = 12
    table = compare({"vllm-v1": a, "sarathi": b})
    assert list(table.index) == ["vllm-v1", "sarathi"] and table.index.name == "scheduler"
    assert list(table.columns) == [m.value for m in DEFAULT_COMPARE_METRICS]
    assert table.loc["vllm-v1", "ttft_s_mean"] == pytest.approx(3.5 / 3)
    assert table["request_throughput"].dtype == np.float64
    chosen = compare({"vllm-v1": a, "sarathi": b}, metrics=[Metric.E2E_S_P99, "num_steps"])
    assert list(chosen.columns) == ["e2e_s_p99", "num_steps"]
    assert (
        math.isnan(chosen.loc["vllm-v1", "num_steps"]) and chosen.loc["sarathi", "num_steps"] == 12
    )
    with pytest.raises(ValueError, match="metric 'ttft_mean' is in none of the summaries"):
        compare({"x": a}, metrics=["ttft_mean"])
    with pytest.raises(ValueError, match="no summaries given"):
        compare({})
    assert "vllm-v1" in table.to_string()


def test_summary_reads_records_back_from_csv(tiny_rows, tmp_path) -> None:
    from llmsched_gym.metrics import read_frame, write_frame

    df = requests_frame(tiny_rows)
    back = read_frame(write_frame(df, tmp_path / "r.csv"))
    pd.testing.assert_series_equal(summarize(df), summarize(back))


@settings(max_examples=400, deadline=None)
@example([-0.0], [0.0])  # one value: numpy's "previous" index is -1, and 0.0 != -0.0
@example([1.0, -0.0, -0.0], [100.0, 50.0, 0.0])
@example([-0.0, -0.0, 7.25, 0.0, -1.0, 0.0, 0.5], [66.6, 100.0])  # which zero a partition keeps
@given(
    st.lists(st.floats(allow_nan=False, allow_infinity=True), min_size=1, max_size=80),
    st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=6),
)
def test_percentiles_are_numpys_bit_for_bit(values, ps):
    """The summary's own percentiles (no ``numpy.ma`` import) equal ``np.percentile``'s bits."""
    sample = np.array(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf between two infinite order statistics
        ours = summary_module.percentiles(sample, ps)
        theirs = np.asarray(np.percentile(sample, ps), dtype=np.float64)
    nan = np.isnan(theirs)
    assert np.array_equal(np.isnan(ours), nan)
    assert ours[~nan].tobytes() == theirs[~nan].tobytes()  # -0.0 and 0.0 told apart
    assert sample.tolist() == values  # the caller's array is left as it was
