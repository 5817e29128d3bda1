"""HexGen-Text2SQL's evaluation metrics of a cluster run (per-query latency, SLO-scale curves).

Metrics (:func:`hexgen_metrics`): per-query latency, SLO attainment vs SLO scale of the code's
base SLO (:func:`hexgen_base_slo`), the minimum scale and deadline (s) reaching 95% / 99%, and
throughput (completed queries / (last completion - first arrival)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from llmsched_gym.errors import ConfigError
from llmsched_gym.metrics.slo import latency_slo_met

__all__ = ["drain_bound_s", "hexgen_base_slo", "hexgen_metrics", "slo_attainment"]


def hexgen_base_slo(cost_models: Sequence[Any], trace: str = "trace3") -> float:
    """The code's base SLO: the 15-call template's single-request latencies, mean over GPUs.

    ``sum over STANDARD_WORKFLOW of mean over deployed instances of the single-request latency at
    the stage-typical pair`` (Hexgen-Flow@396a3ba ``start_simulator.py:92-99``) = the mean of
    ``base_slo_s`` over the instances.

    Args:
        cost_models: One cost model (or spec string) per deployed instance.
        trace: Trace of the stage-typical lengths.
    """
    from llmsched_gym.workloads.text2sql import base_slo_s

    if not cost_models:
        raise ConfigError("hexgen_base_slo needs at least one cost model")
    return float(np.mean([base_slo_s(m, trace) for m in cost_models]))


def slo_attainment(latencies: np.ndarray, base_s: float, scales: np.ndarray) -> np.ndarray:
    """Fraction of queries meeting an end-to-end SLO of ``scale * base``, per scale.

    The job rule of the records (``metrics.slo.latency_slo_met``: latency <= SLO); an
    unfinished query (NaN latency) misses.
    """
    lat = np.nan_to_num(np.asarray(latencies, dtype=np.float64), nan=np.inf)
    if lat.size == 0:
        return np.zeros(len(scales))
    return np.array(
        [latency_slo_met(lat, s * base_s).mean() for s in np.asarray(scales)], dtype=np.float64
    )


def _min_scale(latencies: np.ndarray, base_s: float, target: float) -> float:
    """Smallest scale s with attainment >= target (exact, from the latency quantile)."""
    lat = np.sort(np.nan_to_num(np.asarray(latencies, dtype=np.float64), nan=np.inf))
    if lat.size == 0:
        return math.inf
    k = max(1, math.ceil(target * lat.size - 1e-9))
    return float(lat[k - 1] / base_s)


def drain_bound_s(
    arrival_s: Sequence[float], finish_s: Sequence[float], target: float = 0.95
) -> float:
    """Lower bound on the ``target``-attainment deadline of ANY order with these completions.

    With ``N`` queries and ``k = ceil(target * N)`` (the index :func:`hexgen_metrics` reads), at
    most ``N - k`` queries may miss the deadline. The ``N - k + 1`` queries that complete last all
    finish at or after the ``k``-th completion ``f_(k)``, and one of them must meet the deadline,
    so ``D >= f_(k) - (latest arrival)``. A local order that keeps the throughput (the same set
    of completion times, in any assignment to queries) cannot beat it: in an overloaded run the
    deadline is bounded by the drain time, whatever the queue does (issue 10 queue probe).

    Args:
        arrival_s: Query arrival times.
        finish_s: Query completion times (NaN = unfinished, counted as never).
        target: Attainment target in (0, 1].

    Returns:
        The bound in seconds (``inf`` when fewer than ``k`` queries finished).
    """
    if not 0 < target <= 1:
        raise ConfigError(f"target must be in (0, 1], got {target}")
    arr = np.asarray(arrival_s, dtype=np.float64)
    fin = np.sort(np.nan_to_num(np.asarray(finish_s, dtype=np.float64), nan=np.inf))
    if arr.size == 0 or arr.size != fin.size:
        raise ConfigError("drain_bound_s needs one finish time per arrival")
    k = max(1, math.ceil(target * fin.size - 1e-9))
    return float(fin[k - 1] - arr.max())


def hexgen_metrics(
    result: Any,
    base_s: float,
    scales: Sequence[float] | None = None,
    window: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """HexGen-Text2SQL metrics of one cluster run.

    Args:
        result: A ``ClusterResult`` (or anything with a ``jobs`` DataFrame) of a text2sql run.
        base_s: Base SLO in seconds (:func:`hexgen_base_slo`).
        scales: SLO scales of the attainment curve (default 1.0-20.0 by 0.1).
        window: Arrival-order slice of queries to score (``calculate_and_plot.py`` uses
            (25, 75)); None scores all.

    Returns:
        ``latency_s`` (per query, arrival order; NaN unfinished), ``scales``, ``attainment``,
        ``min_scale_95``/``min_scale_99`` and ``deadline_95_s``/``deadline_99_s`` (= scale x
        base), ``throughput_qps``, ``mean_latency_s``, ``num_queries``, ``num_finished``.
    """
    jobs = result.jobs
    if jobs is None or len(jobs) == 0:
        raise ConfigError("hexgen_metrics needs a run with jobs")
    lat_all = jobs["latency_s"].to_numpy(np.float64)
    arrival = jobs["arrival_time_s"].to_numpy(np.float64)
    finish = jobs["finish_time_s"].to_numpy(np.float64)
    sel = slice(None) if window is None else slice(*window)
    lat = lat_all[sel]
    grid = np.round(np.arange(1.0, 20.0001, 0.1), 4) if scales is None else np.asarray(scales)
    done = np.isfinite(finish)
    span = float(np.nanmax(finish) - np.nanmin(arrival)) if done.any() else math.nan
    s95 = _min_scale(lat, base_s, 0.95)
    s99 = _min_scale(lat, base_s, 0.99)
    return {
        "latency_s": lat,
        "scales": grid,
        "attainment": slo_attainment(lat, base_s, grid),
        "min_scale_95": s95,
        "min_scale_99": s99,
        "deadline_95_s": s95 * base_s,
        "deadline_99_s": s99 * base_s,
        "throughput_qps": float(done.sum() / span) if span and span > 0 else math.nan,
        "mean_latency_s": float(np.nanmean(lat)) if np.isfinite(lat).any() else math.nan,
        "num_queries": int(lat.size),
        "num_finished": int(np.isfinite(lat).sum()),
    }
