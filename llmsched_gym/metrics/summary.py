"""Run-level metrics from the records, and side-by-side comparison tables.

Statistic definitions (the names are ``Metric``):

* Percentiles are numpy's default ``np.percentile`` (``method="linear"``): for ``n`` sorted
  values and percentile ``p``, the value at virtual index ``h = (n - 1) * p / 100``, linearly
  interpolated between order statistics ``floor(h)`` and ``floor(h) + 1``. vLLM's
  ``benchmark_serving`` uses the same.
* Inter-token latencies (ITL) arrive as ``(values, weights)``: the gap ``values[i]`` occurred
  ``weights[i]`` times (the engine aggregates identical gaps of fast-forwarded decode stretches).
  Their statistics are exactly those of the expanded sample ``np.repeat(values, weights)``,
  computed without expanding it (``weighted_percentile``).
* TTFT and end-to-end statistics are over finished requests, TPOT over finished requests with more
  than one output token.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched_gym.metrics.columns import JobColumn, Metric, RequestColumn, StepColumn
from llmsched_gym.metrics.slo import slo_outcome

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DEFAULT_COMPARE_METRICS",
    "compare",
    "summarize",
    "summary_values",
    "weighted_mean",
    "weighted_percentile",
]

RC = RequestColumn
_PERCENTILES = (50.0, 90.0, 99.0)

DEFAULT_COMPARE_METRICS: tuple[Metric, ...] = (
    Metric.REQUEST_THROUGHPUT,
    Metric.OUTPUT_TOKEN_THROUGHPUT,
    Metric.TTFT_S_MEAN,
    Metric.TTFT_S_P99,
    Metric.TPOT_S_MEAN,
    Metric.TPOT_S_P99,
    Metric.E2E_S_MEAN,
    Metric.E2E_S_P99,
    Metric.GOODPUT,
    Metric.NUM_PREEMPTIONS,
    Metric.PREFIX_CACHE_HIT_RATE,
)
"""Columns ``compare`` shows by default."""


def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Interpolates as numpy's percentile does (so results are bit-identical to it)."""
    diff = b - a
    return np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)


def weighted_percentile(
    values: np.ndarray | Iterable[float],
    weights: np.ndarray | Iterable[int],
    percentiles: float | Iterable[float],
) -> np.ndarray:
    """Percentiles of a sample given as distinct values with integer multiplicities.

    Equal (to rounding) to ``np.percentile(np.repeat(values, weights), percentiles)`` with
    numpy's default linear method, in O(k log k) for k values whatever the total weight.

    Args:
        values: Sample values (finite).
        weights: Non-negative integer multiplicity of each value.
        percentiles: Percentile(s) in [0, 100].

    Returns:
        One value per percentile (NaN for an empty sample), shaped like ``percentiles``.

    Raises:
        ValueError: If shapes differ, a weight is negative, not an integer or 2**31 or more, a
            value is not finite, or a percentile is outside [0, 100].
    """
    v = np.asarray(values, dtype=np.float64)
    w_raw = np.asarray(weights)
    p = np.asarray(percentiles, dtype=np.float64)
    if v.ndim != 1 or v.shape != w_raw.shape:
        raise ValueError(
            f"weighted_percentile: values and weights must be 1-D of equal length, got shapes "
            f"{v.shape} and {w_raw.shape}"
        )
    if w_raw.size and not _multiplicities(w_raw):
        raise ValueError(
            "weighted_percentile: weights must be integers >= 0 (multiplicities), got "
            f"{w_raw[:5]!r}..."
        )
    if not np.all(np.isfinite(v)):
        raise ValueError("weighted_percentile: values must be finite; drop NaN/inf gaps first")
    if np.any((p < 0) | (p > 100)) or np.any(np.isnan(p)):
        raise ValueError(f"weighted_percentile: percentiles must be in [0, 100], got {p!r}")
    w = w_raw.astype(np.int64, copy=False)
    if w.size and w.max() >= _MAX_WEIGHT:
        raise ValueError(
            f"weighted_percentile: weights must be below 2**31, got {int(w.max())} (a "
            "multiplicity, e.g. of an inter-token gap)"
        )
    total = int(w.sum()) if w.size else 0
    if total == 0:
        return np.full(p.shape, np.nan)
    virtual = (total - 1) * (p / 100.0)
    lower = np.floor(virtual)
    upper = np.minimum(lower + 1, total - 1)
    # Expanded index k holds the first value, in a stable sort of the sample, whose cumulative
    # weight exceeds k. Rather than sorting every sample, find each k's bucket of values (the
    # high bits of an order-preserving integer key) from weight sums per bucket, then sort only
    # that bucket's samples stably (in sample order): the same value, bit for bit.
    targets = np.concatenate([lower.ravel(), upper.ravel()]).astype(np.int64)
    picked = _select_weighted(v, w, targets)
    a = picked[: lower.size].reshape(p.shape)
    b = picked[lower.size :].reshape(p.shape)
    return _lerp(a, b, virtual - lower)


_CHUNK = 1 << 21
"""Samples per slice of the passes of ``_select_weighted`` (bounds their temporaries)."""
_BUCKET_BITS = 20
"""High bits of the order-preserving key that name a bucket (``_select_weighted``)."""
_SMALL_BUCKET_BITS = 16
"""The same for a sample of at most 2**20 values: a 64k-bucket table, not 1M (8 MiB)."""
_MAX_WEIGHT = 1 << 31
"""Weights must be below this, so that a slice's weight sums are exact in float64 (bincount)."""
_SIGN = np.uint64(1 << 63)
_LOW = np.uint64((1 << 63) - 1)


def _multiplicities(w: np.ndarray) -> bool:
    """Whether every weight is a non-negative integer (no temporary copy for integer arrays)."""
    if np.issubdtype(w.dtype, np.integer):
        return bool(w.min() >= 0)
    if not np.issubdtype(w.dtype, np.number):
        return False
    f = np.asarray(w, np.float64)
    return not (np.any(f < 0) or np.any(f != np.floor(f)))


def _buckets(v: np.ndarray, bucket_bits: int) -> np.ndarray:
    """Bucket of each value: the high bits of a key ordered as the floats (-0.0 as 0.0)."""
    bits = (v + 0.0).view(np.uint64)  # + 0.0 turns -0.0 into 0.0: equal values, one bucket
    key = bits ^ ((bits >> np.uint64(63)) * _LOW | _SIGN)
    return (key >> np.uint64(64 - bucket_bits)).astype(np.intp)


def _select_weighted(v: np.ndarray, w: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """For each target k, the value at expanded index k of the stably sorted weighted sample.

    Two passes of ``_CHUNK`` samples: weight per bucket, then the
    samples of the buckets the targets fall in, in sample order, which a stable sort orders as
    the whole sample's stable sort does.
    """
    n = v.size
    bucket_bits = _BUCKET_BITS if n > 1 << _BUCKET_BITS else _SMALL_BUCKET_BITS
    cumulative = np.zeros(1 << bucket_bits, dtype=np.int64)
    for s in range(0, n, _CHUNK):  # float sums of fewer than 2**21 weights below 2**31: exact
        chunk = np.bincount(
            _buckets(v[s : s + _CHUNK], bucket_bits),
            weights=w[s : s + _CHUNK],
            minlength=cumulative.size,
        )
        cumulative += chunk.astype(np.int64)
    np.cumsum(cumulative, out=cumulative)
    where = np.searchsorted(cumulative, targets, side="right")
    wanted = sorted(set(where.tolist()))  # not np.unique: it imports numpy.ma
    members: dict[int, list[np.ndarray]] = {b: [] for b in wanted}
    for s in range(0, n, _CHUNK):
        buckets = _buckets(v[s : s + _CHUNK], bucket_bits)
        for b in wanted:
            members[b].append(np.flatnonzero(buckets == b) + s)
    out = np.empty(targets.size, dtype=np.float64)
    for b, parts in members.items():
        rows = np.concatenate(parts)
        order = np.argsort(v[rows], kind="stable")
        values = v[rows][order]
        inside = np.cumsum(w[rows][order])
        before = int(cumulative[b - 1]) if b > 0 else 0
        hit = where == b
        out[hit] = values[np.searchsorted(inside, targets[hit] - before, side="right")]
    return out


def _stats(values: np.ndarray) -> tuple[float, float, float, float]:
    """(mean, p50, p90, p99) of the non-NaN values; NaN for none."""
    finite = values[~np.isnan(values)]
    if finite.size == 0:
        return (math.nan,) * 4
    p50, p90, p99 = percentiles(finite, _PERCENTILES)
    return float(finite.mean()), float(p50), float(p90), float(p99)


def percentiles(values: np.ndarray, ps: Iterable[float]) -> np.ndarray:
    """``np.percentile(values, ps)`` (linear method) of a non-empty 1-D sample without NaN.

    The same arithmetic as numpy's (virtual index ``(n - 1) * p / 100``, ``_lerp``), so the
    same bits, from one ``np.partition`` at the order statistics needed; numpy's own path
    also imports ``numpy.ma`` (~7 ms of a short run's start-up).
    """
    n = values.size
    virtual = (n - 1) * (np.asarray(ps, dtype=np.float64) / 100)
    # numpy's _get_indexes: at or past the last index both neighbours are the last value and
    # the "previous" index is -1, which enters the interpolation weight (and the sign of a zero).
    top = virtual >= n - 1
    previous = np.where(top, -1, np.floor(virtual)).astype(np.intp)
    lower = np.where(top, n - 1, previous)
    upper = np.where(top, n - 1, previous + 1)
    # numpy's partition points (with the ends): equal values, -0.0 and 0.0, land alike.
    ordered = np.partition(values, sorted({0, n - 1, *lower.tolist(), *upper.tolist()}))
    return _lerp(ordered[lower], ordered[upper], virtual - previous)


def _itl_stats(itl: Any) -> tuple[float, float, float, float]:
    """(mean, p50, p90, p99) of inter-token latencies given as (values, weights) or values."""
    if itl is None:
        return (math.nan,) * 4
    if isinstance(itl, tuple) and len(itl) == 2:
        values, weights = np.asarray(itl[0], np.float64), np.asarray(itl[1])
    else:
        values = np.asarray(itl, np.float64)
        weights = np.ones(values.shape, np.int64)
    p50, p90, p99 = weighted_percentile(values, weights, _PERCENTILES)
    return weighted_mean(values, weights), float(p50), float(p90), float(p99)


def weighted_mean(values: np.ndarray, weights: np.ndarray) -> float:
    """Mean of ``values`` each counted ``weights`` times (NaN when the weights sum to 0)."""
    total = float(np.sum(weights, dtype=np.float64))
    return float(np.dot(values, weights.astype(np.float64)) / total) if total > 0 else math.nan


def _check_slo(name: str, value: float | None) -> float:
    """Returns a global SLO as a float (NaN for None), checking it is finite and > 0."""
    if value is None:
        return math.nan
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and value > 0)
    ):
        raise ValueError(f"summarize: {name} must be a finite number > 0 or None, got {value!r}")
    return float(value)


def _column(records: Any, column: RequestColumn) -> np.ndarray:
    """A numeric request column as float64, from a DataFrame (or one read from CSV) or a table."""
    names = records.columns if hasattr(records, "columns") else records
    if column.value not in names:
        raise ValueError(
            f"summarize: the request records have no column {column.value!r}; build them with "
            "requests_frame"
        )
    if isinstance(records, Mapping):
        return np.asarray(records[column.value], dtype=np.float64)
    import pandas as pd

    return pd.to_numeric(records[column.value], errors="coerce").to_numpy(np.float64)


def summarize(
    requests_df: pd.DataFrame,
    steps_df: pd.DataFrame | None = None,
    itl: tuple[np.ndarray, np.ndarray] | np.ndarray | None = None,
    slo_ttft_s: float | None = None,
    slo_tpot_s: float | None = None,
) -> pd.Series:
    """Summarizes one run as a Series; see ``summary_values`` for the arguments and metrics."""
    import pandas as pd

    values = summary_values(requests_df, steps_df, itl, slo_ttft_s, slo_tpot_s)
    return pd.Series(values, dtype=object, name="summary")


def summary_values(
    requests_df: Any,
    steps_df: pd.DataFrame | None = None,
    itl: tuple[np.ndarray, np.ndarray] | np.ndarray | None = None,
    slo_ttft_s: float | None = None,
    slo_tpot_s: float | None = None,
) -> dict[str, Any]:
    """Summarizes one run: throughput, latency statistics, goodput, preemptions, cache and KV use.

    Args:
        requests_df: Per-request records (``requests_frame``, or a request table from
            ``metrics.table.request_table``: then pandas is not needed unless there are jobs).
        steps_df: Per-step records (``steps_frame``); without them the KV usage metrics are NaN.
        itl: Inter-token gaps as ``(values_s, weights)`` with integer multiplicities (or a plain
            array of gaps); without them the ITL metrics are NaN.
        slo_ttft_s: A TTFT SLO applied to every request for goodput (replacing the per-request
            SLO columns, deadlines included).
        slo_tpot_s: A TPOT SLO applied to every request for goodput, likewise.

    Returns:
        A dict keyed by ``Metric`` values in the enum's order (counts stay ints). Goodput counts
        finished requests per second of ``duration_s`` that meet their SLOs. With a global SLO,
        every request is judged by it (strict ``<``; a single-token request meets any TPOT SLO).
        Otherwise the per-request SLO columns decide (see ``RequestColumn.SLO_MET``); requests
        without any SLO count as good, and when no request has an SLO, goodput and
        ``slo_attainment`` are NaN.

    Raises:
        ValueError: If a column is missing or a global SLO is not a finite number > 0.
    """
    global_ttft = _check_slo("slo_ttft_s", slo_ttft_s)
    global_tpot = _check_slo("slo_tpot_s", slo_tpot_s)
    arrival = _column(requests_df, RC.ARRIVAL_TIME_S)
    first_token = _column(requests_df, RC.FIRST_TOKEN_TIME_S)
    finish = _column(requests_df, RC.FINISH_TIME_S)
    num_prompt = _column(requests_df, RC.NUM_PROMPT_TOKENS)
    num_output = _column(requests_df, RC.NUM_OUTPUT_TOKENS)
    finished = ~np.isnan(finish)
    num_finished = int(finished.sum())

    ttft = first_token - arrival
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(num_output > 1, (finish - first_token) / (num_output - 1), np.nan)
    e2e = finish - arrival
    duration = float(np.max(finish[finished]) - np.min(arrival)) if num_finished else math.nan
    per_second = 1.0 / duration if duration > 0 else math.nan

    if not (math.isnan(global_ttft) and math.isnan(global_tpot)):
        n = len(arrival)
        met, has_slo = slo_outcome(
            ttft,
            tpot,
            finish,
            np.full(n, global_ttft),
            np.full(n, global_tpot),
            np.full(n, np.nan),
        )
    else:
        met, has_slo = slo_outcome(
            ttft,
            tpot,
            finish,
            _column(requests_df, RC.SLO_TTFT_S),
            _column(requests_df, RC.SLO_TPOT_S),
            _column(requests_df, RC.DEADLINE_S),
        )
    if has_slo.any():
        good = finished & (met | ~has_slo)
        goodput = float(good.sum()) * per_second
        attainment = float(met[has_slo].mean())
    else:
        goodput = attainment = math.nan

    cached = _column(requests_df, RC.NUM_CACHED_TOKENS)
    prompt_total = float(num_prompt.sum())
    hit_rate = float(cached.sum()) / prompt_total if prompt_total > 0 else math.nan

    kv_mean = kv_max = math.nan
    usage = durations = None
    if steps_df is not None:  # a frame or a step table (``metrics.table.step_table``)
        usage = np.asarray(steps_df[StepColumn.KV_CACHE_USAGE.value], dtype=np.float64)
        durations = np.asarray(steps_df[StepColumn.DURATION_S.value], dtype=np.float64)
    if usage is not None and len(usage):
        total_time = float(durations.sum())
        kv_mean = (
            float(np.dot(usage, durations) / total_time) if total_time > 0 else float(usage.mean())
        )
        kv_max = float(usage.max())

    ttft_stats = _stats(ttft[finished])
    tpot_stats = _stats(tpot[finished])
    e2e_stats = _stats(e2e[finished])
    itl_stats = _itl_stats(itl)
    values: dict[Metric, Any] = {
        Metric.NUM_REQUESTS: len(arrival),
        Metric.NUM_FINISHED: num_finished,
        Metric.DURATION_S: duration,
        Metric.REQUEST_THROUGHPUT: num_finished * per_second,
        Metric.OUTPUT_TOKEN_THROUGHPUT: float(num_output[finished].sum()) * per_second,
        Metric.TOTAL_TOKEN_THROUGHPUT: float((num_prompt + num_output)[finished].sum())
        * per_second,
    }
    for prefix, stats in (
        ("TTFT_S", ttft_stats),
        ("TPOT_S", tpot_stats),
        ("ITL_S", itl_stats),
        ("E2E_S", e2e_stats),
    ):
        for suffix, value in zip(("MEAN", "P50", "P90", "P99"), stats, strict=True):
            values[Metric[f"{prefix}_{suffix}"]] = value
    values.update(
        {
            Metric.GOODPUT: goodput,
            Metric.SLO_ATTAINMENT: attainment,
            Metric.NUM_PREEMPTIONS: int(_column(requests_df, RC.NUM_PREEMPTIONS).sum()),
            Metric.NUM_REFILL_TOKENS: int(_column(requests_df, RC.NUM_REFILL_TOKENS).sum()),
            Metric.PREFIX_CACHE_HIT_RATE: hit_rate,
            Metric.KV_CACHE_USAGE_MEAN: kv_mean,
            Metric.KV_CACHE_USAGE_MAX: kv_max,
        }
    )
    values.update(_job_metrics(requests_df))
    return {metric.value: values[metric] for metric in Metric}


def _job_metrics(requests_df: Any) -> dict[Metric, Any]:
    """Job-level metrics (RelServe's relQuery latency and its phases); NaN without jobs."""
    if isinstance(requests_df, Mapping):
        job_ids = requests_df.get(RC.JOB_ID.value)
        has_jobs = job_ids is not None and any(j is not None for j in job_ids)
        if has_jobs:
            from llmsched_gym.metrics.records import frame_from_table

            requests_df = frame_from_table(requests_df)
    else:
        has_jobs = (
            RC.JOB_ID.value in requests_df.columns and requests_df[RC.JOB_ID.value].notna().any()
        )
    if not has_jobs:
        return {
            Metric.NUM_JOBS: 0,
            Metric.JOB_LATENCY_S_MEAN: math.nan,
            Metric.JOB_LATENCY_S_P99: math.nan,
            Metric.JOB_WAITING_TIME_S_MEAN: math.nan,
            Metric.JOB_CORE_RUNNING_TIME_S_MEAN: math.nan,
            Metric.JOB_TAIL_RUNNING_TIME_S_MEAN: math.nan,
        }
    from llmsched_gym.metrics.records import jobs_frame

    jobs = jobs_frame(requests_df)
    latency = _stats(jobs[JobColumn.LATENCY_S.value].to_numpy(np.float64))
    return {
        Metric.NUM_JOBS: len(jobs),
        Metric.JOB_LATENCY_S_MEAN: latency[0],
        Metric.JOB_LATENCY_S_P99: latency[3],
        Metric.JOB_WAITING_TIME_S_MEAN: _stats(jobs[JobColumn.WAITING_TIME_S.value].to_numpy())[0],
        Metric.JOB_CORE_RUNNING_TIME_S_MEAN: _stats(
            jobs[JobColumn.CORE_RUNNING_TIME_S.value].to_numpy()
        )[0],
        Metric.JOB_TAIL_RUNNING_TIME_S_MEAN: _stats(
            jobs[JobColumn.TAIL_RUNNING_TIME_S.value].to_numpy()
        )[0],
    }


def compare(
    frames: Mapping[str, Mapping[str, Any] | pd.Series],
    metrics: Iterable[str] | None = None,
) -> pd.DataFrame:
    """Side-by-side table of run summaries: one row per scheduler, one column per metric.

    Args:
        frames: Summaries (from ``summarize``, or dicts with extra keys) by scheduler name, in the
            row order wanted.
        metrics: Metric names to show (``Metric`` members or any key of the summaries), in column
            order; default ``DEFAULT_COMPARE_METRICS``.

    Returns:
        A DataFrame indexed by scheduler (index name ``"scheduler"``); a metric a summary lacks is
        NaN. Print it with ``to_string()``; write it with
        ``write_frame(table.reset_index(), path)``.

    Raises:
        ValueError: If no summaries are given, or a requested metric is in none of them.
    """
    if not frames:
        raise ValueError("compare: no summaries given; pass {scheduler name: summary}")
    chosen = [str(m) for m in (DEFAULT_COMPARE_METRICS if metrics is None else metrics)]
    available = set().union(*(set(map(str, s.keys())) for s in frames.values()))
    unknown = [m for m in chosen if m not in available]
    if unknown and metrics is not None:
        raise ValueError(
            f"compare: metric {unknown[0]!r} is in none of the summaries; available: "
            f"{', '.join(sorted(available))}"
        )
    rows = {
        name: [dict(summary.items()).get(metric, math.nan) for metric in chosen]
        for name, summary in frames.items()
    }
    import pandas as pd

    table = pd.DataFrame.from_dict(rows, orient="index", columns=chosen)
    table.index.name = "scheduler"
    return table.infer_objects()
