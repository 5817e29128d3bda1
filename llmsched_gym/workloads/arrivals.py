"""Arrival processes and trace scaling over sequences of ``RequestSpec``.

Every function is deterministic under its ``seed`` and returns new immutable specs (built with
``dataclasses.replace``); the input is never modified.

* ``arrival_times_s``: gamma renewal arrival times (vLLM ``benchmark_serving`` style).
* ``poisson_arrivals`` / ``gamma_arrivals``: give a trace synthetic arrivals at a mean rate;
  burstiness as a coefficient of variation CV of the gaps (Gamma shape = 1 / CV², so CV = 1 is
  Poisson, CV > 1 bursty, CV < 1 regular).
* ``replay_arrivals``: give a trace the real timestamps of another (e.g. ShareGPT lengths on the
  Azure 2023 arrival pattern).
* ``rescale_to_rate``: multiply every inter-arrival gap by one constant so the mean rate is a
  target, keeping the trace's burst structure (the rate sweep of ProServe, Huang et al.,
  arXiv 2512.12928, §5.1, and of most serving papers).
* ``sample_requests``: a seeded random subset of N requests, in arrival order.

The mean rate of a trace is ``1 / mean inter-arrival gap = (N - 1) / (t_last - t_first)``, the
same definition as ``workload_stats``, so a rescaled trace reports exactly its target.

>>> from llmsched_gym.workloads import load_trace, poisson_arrivals, rescale_to_rate
>>> sharegpt = poisson_arrivals(load_trace("sharegpt", limit=1000), rate_per_s=8.0, seed=0)
>>> azure = rescale_to_rate(load_trace("azure-conv-2023"), target_rate_per_s=12.0)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from llmsched_gym.core.request import RequestSpec

__all__ = [
    "arrival_times_s",
    "gamma_arrivals",
    "mean_rate_per_s",
    "poisson_arrivals",
    "replay_arrivals",
    "rescale_to_rate",
    "sample_requests",
]


def _positive(name: str, value: Any) -> float:
    """Checks a finite number > 0 (bools rejected); the error names the argument."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not (math.isfinite(value) and value > 0)
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return int(value)


def arrival_times_s(
    num_requests: int,
    rate_per_s: float,
    *,
    burstiness: float = 1.0,
    seed: int = 0,
) -> np.ndarray:
    """Arrival times of a renewal process with gamma inter-arrival gaps, as vLLM's benchmark.

    The gaps follow ``Gamma(shape=burstiness, scale=1 / (rate_per_s * burstiness))``: mean
    ``1 / rate_per_s`` whatever the burstiness; ``burstiness = 1`` is a Poisson process, smaller
    values are burstier, larger ones more regular (vLLM ``benchmark_serving --burstiness``;
    the gaps' CV is ``1 / sqrt(burstiness)``). The first request arrives at 0 s.

    Args:
        num_requests: Number of arrival times (>= 0).
        rate_per_s: Mean arrival rate in requests per second (finite, > 0).
        burstiness: Gamma shape (finite, > 0); 1.0 gives Poisson arrivals.
        seed: Seed of ``numpy.random.default_rng``; the same seed gives the same times.

    Returns:
        Non-decreasing float64 arrival times in seconds, starting at 0.

    Raises:
        ValueError: If an argument is out of range; the message names it.
    """
    num_requests = _count("num_requests", num_requests)
    rate_per_s = _positive("rate_per_s", rate_per_s)
    burstiness = _positive("burstiness", burstiness)
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate_per_s * burstiness), size=num_requests)
    times = np.zeros(num_requests, dtype=np.float64)
    if num_requests > 1:
        np.cumsum(gaps[:-1], out=times[1:])
    return times


def _with_times(specs: Sequence[RequestSpec], times: Sequence[float]) -> list[RequestSpec]:
    """``specs`` in their given order with new arrival times, then sorted stably by time."""
    out = [
        dataclasses.replace(spec, arrival_time=float(t))
        for spec, t in zip(specs, times, strict=True)
    ]
    out.sort(key=lambda spec: spec.arrival_time)
    return out


def gamma_arrivals(
    specs: Sequence[RequestSpec], rate_per_s: float, cv: float = 1.0, *, seed: int = 0
) -> list[RequestSpec]:
    """Replaces the arrival times by a gamma renewal process with mean rate and gap CV.

    The requests keep their order: the i-th request (in the given order) gets the i-th arrival;
    the first arrives at 0 s. The gaps are ``Gamma(shape=1/cv**2, scale=cv**2/rate_per_s)``:
    mean ``1/rate_per_s``, coefficient of variation ``cv``.

    Args:
        specs: The requests (e.g. a token-count trace with no timestamps).
        rate_per_s: Mean arrival rate, requests per second (> 0).
        cv: Coefficient of variation of the gaps (> 0); 1 is Poisson, larger is burstier.
        seed: Seed; the same seed gives the same times.

    Returns:
        New specs sorted by arrival time.

    Raises:
        ValueError: If ``rate_per_s`` or ``cv`` is not a finite number > 0.
    """
    shape = 1.0 / _positive("cv", cv) ** 2
    times = arrival_times_s(
        len(specs), _positive("rate_per_s", rate_per_s), burstiness=shape, seed=seed
    )
    return _with_times(specs, times)


def poisson_arrivals(
    specs: Sequence[RequestSpec], rate_per_s: float, *, seed: int = 0
) -> list[RequestSpec]:
    """Replaces the arrival times by a Poisson process (``gamma_arrivals`` with ``cv = 1``)."""
    return gamma_arrivals(specs, rate_per_s, 1.0, seed=seed)


def replay_arrivals(
    specs: Sequence[RequestSpec], timestamps: Sequence[float] | Sequence[RequestSpec]
) -> list[RequestSpec]:
    """Gives ``specs`` the real arrival pattern of another trace.

    The timestamps are sorted, shifted so the earliest is 0, and the first ``len(specs)`` of
    them are assigned to the requests in their given order.

    Args:
        specs: The requests that get new arrival times.
        timestamps: Arrival times in seconds (any origin), or requests whose ``arrival_time``
            is taken (e.g. ``load_trace("azure-conv-2023")``).

    Returns:
        New specs sorted by arrival time.

    Raises:
        ValueError: If there are fewer timestamps than requests, or one is not finite.
    """
    raw = [t.arrival_time if isinstance(t, RequestSpec) else t for t in timestamps]
    try:
        times = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"timestamps must be numbers or RequestSpecs, got {raw[:3]!r}..."
        ) from None
    bad = np.flatnonzero(~np.isfinite(times))
    if len(bad):
        raise ValueError(f"timestamps[{bad[0]}] must be a finite number, got {raw[bad[0]]!r}")
    if len(times) < len(specs):
        raise ValueError(
            f"timestamps must have at least one value per request ({len(specs)}), got {len(times)}"
        )
    times = np.sort(times)[: len(specs)]
    if len(times):
        times = times - times[0]
    return _with_times(specs, times)


def mean_rate_per_s(specs: Sequence[RequestSpec]) -> float:
    """Mean arrival rate ``(N - 1) / (t_last - t_first)``, i.e. 1 / mean gap (NaN if undefined)."""
    if len(specs) < 2:
        return math.nan
    times = [spec.arrival_time for spec in specs]
    span = max(times) - min(times)
    return (len(specs) - 1) / span if span > 0 else math.nan


def rescale_to_rate(specs: Sequence[RequestSpec], target_rate_per_s: float) -> list[RequestSpec]:
    """Scales every inter-arrival gap by one constant so the mean rate equals a target.

    The burst structure of the trace (relative gaps) is kept; only time is stretched or
    compressed around the first arrival, which keeps its time. Afterwards
    ``mean_rate_per_s(result) == target_rate_per_s`` up to float rounding.

    Args:
        specs: A trace with at least two distinct arrival times.
        target_rate_per_s: The wanted mean rate, requests per second (> 0).

    Returns:
        New specs sorted by arrival time.

    Raises:
        ValueError: If the target is not a finite number > 0, or the trace has no rate (fewer
            than two requests, or all arriving at once: give it arrivals with
            ``poisson_arrivals`` instead).
    """
    target = _positive("target_rate_per_s", target_rate_per_s)
    ordered = sorted(specs, key=lambda spec: spec.arrival_time)
    current = mean_rate_per_s(ordered)
    if math.isnan(current):
        raise ValueError(
            f"rescale_to_rate: the trace has no arrival rate ({len(ordered)} requests spanning "
            "0 s); use poisson_arrivals or gamma_arrivals to give it arrivals"
        )
    factor = current / target
    start = ordered[0].arrival_time
    times = [start + (spec.arrival_time - start) * factor for spec in ordered]
    return _with_times(ordered, times)


def sample_requests(
    specs: Sequence[RequestSpec], num_requests: int, *, seed: int = 0
) -> list[RequestSpec]:
    """A seeded random subset of ``num_requests`` requests, without replacement, in order.

    The chosen requests keep their arrival times and their relative order (stable by arrival
    time); follow with ``rescale_to_rate`` to restore a rate.

    Args:
        specs: The trace.
        num_requests: How many to keep (0 <= num_requests <= len(specs)).
        seed: Seed; the same seed gives the same subset.

    Raises:
        ValueError: If ``num_requests`` is not an int in that range.
    """
    n = _count("num_requests", num_requests)
    if n > len(specs):
        raise ValueError(
            f"num_requests must be <= the number of requests ({len(specs)}), got {num_requests!r}"
        )
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(len(specs), size=n, replace=False))
    picked = [specs[int(i)] for i in chosen]
    picked.sort(key=lambda spec: spec.arrival_time)
    return picked
