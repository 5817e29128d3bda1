"""Synthetic arrival times for traces that have none (ShareGPT, arXiv token counts).

>>> from llmsched_gym.workloads import load_trace, arrival_times_s
>>> specs = load_trace("sharegpt", limit=1000,
...                    arrival_times_s=arrival_times_s(1000, rate_per_s=8.0, seed=0))
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["arrival_times_s"]


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
    values are burstier, larger ones more regular (vLLM ``benchmark_serving --burstiness``). The
    first request arrives at 0 s.

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
    if isinstance(num_requests, bool) or not isinstance(num_requests, (int, np.integer)):
        raise ValueError(f"num_requests must be an int >= 0, got {num_requests!r}")
    if num_requests < 0:
        raise ValueError(f"num_requests must be an int >= 0, got {num_requests!r}")
    for name, value in (("rate_per_s", rate_per_s), ("burstiness", burstiness)):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not (math.isfinite(value) and value > 0)
        ):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate_per_s * burstiness), size=num_requests)
    times = np.zeros(num_requests, dtype=np.float64)
    if num_requests > 1:
        np.cumsum(gaps[:-1], out=times[1:])
    return times
