"""Exact order statistics of a large weighted sample in bounded memory (inter-token latencies).

``summary.weighted_percentile`` sorts every sample of the bucket each wanted rank falls in, and
holds about 48 bytes per member. Inter-token gaps cluster: on a day of a 64-instance cluster
one bucket holds millions of the 27 M gaps, and the selection needs some 750 MiB. Here each
rank is found by a radix selection over the order-preserving 64-bit key of the values, 16 bits
per pass and every pass over slices of ``_CHUNK`` samples, so it holds a few slices and
65,536-bin histograms whatever the sample or its buckets. The value found at a rank is the
value a sort would put there, so interpolating between them gives ``weighted_percentile``'s
result bit for bit (``itl_statistics`` interpolates with ``weighted_percentile`` itself).
"""

from __future__ import annotations

import math

import numpy as np

from llmsched_gym.metrics.summary import weighted_mean, weighted_percentile

__all__ = ["itl_statistics", "weighted_order_statistics"]

_CHUNK = 1 << 20
"""Samples per slice of a pass (its temporaries are a few times 8 MiB)."""
_DIGIT_BITS = 16
_SIGN = np.uint64(1 << 63)
_LOW = np.uint64((1 << 63) - 1)
_PERCENTILES = (50.0, 90.0, 99.0)
"""The percentiles of ``summary_values`` (``ITL_S_P50`` ... ``ITL_S_P99``)."""


def _keys(v: np.ndarray) -> np.ndarray:
    """An unsigned key per value, ordered as the floats (-0.0 as 0.0; ``summary._buckets``)."""
    bits = (v + 0.0).view(np.uint64)
    return bits ^ ((bits >> np.uint64(63)) * _LOW | _SIGN)


def _value(key: int) -> float:
    """The float whose ``_keys`` key is ``key``."""
    bits = key ^ (1 << 63) if key >> 63 else ~key & ((1 << 64) - 1)
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


def weighted_order_statistics(
    values: np.ndarray, weights: np.ndarray, ranks: np.ndarray
) -> np.ndarray:
    """For each rank k, the value at index k of the sample ``np.repeat(values, weights)`` sorted.

    Exact, in memory bounded by ``_CHUNK`` whatever the sample size: four passes of 16 bits of
    each value's order-preserving key (``_keys``), each pass a weighted histogram of the next
    16 bits over the samples that share a wanted rank's bits found so far.

    Args:
        values: Finite values (float64).
        weights: Their non-negative integer multiplicities (any integer type).
        ranks: Indices into the expanded sorted sample, each in ``[0, total weight)``.
    """
    ranks = np.asarray(ranks, dtype=np.int64).ravel()
    n = values.size
    prefixes = [0] * ranks.size  # each rank's key bits found so far
    left = ranks.tolist()  # each rank's index within the samples that share them
    for level in range(64 // _DIGIT_BITS):
        shift = 64 - _DIGIT_BITS * (level + 1)
        groups = sorted(set(prefixes))  # ranks that share their bits so far share a pass
        hists = {p: np.zeros(1 << _DIGIT_BITS, dtype=np.int64) for p in groups}
        for s in range(0, n, _CHUNK):
            keys = _keys(values[s : s + _CHUNK])
            w = weights[s : s + _CHUNK]
            digits = ((keys >> np.uint64(shift)) & np.uint64((1 << _DIGIT_BITS) - 1)).astype(
                np.intp
            )
            for p in groups:
                if level == 0:
                    inside = slice(None)
                else:
                    inside = (keys >> np.uint64(shift + _DIGIT_BITS)) == np.uint64(
                        p >> (shift + _DIGIT_BITS)
                    )
                # Float sums of fewer than 2**20 weights below 2**31 each: exact.
                hists[p] += np.bincount(
                    digits[inside], weights=w[inside], minlength=1 << _DIGIT_BITS
                ).astype(np.int64)
        for i, p in enumerate(prefixes):
            cumulative = np.cumsum(hists[p])
            digit = int(np.searchsorted(cumulative, left[i], side="right"))
            left[i] -= int(cumulative[digit - 1]) if digit else 0
            prefixes[i] = p | (digit << shift)
    return np.array([_value(p) for p in prefixes], dtype=np.float64)


def _pieces(count: int) -> list[int]:
    """``count`` as weights below ``weighted_percentile``'s limit of 2**31 (at least one)."""
    step = (1 << 31) - 1
    return [min(step, count - k) for k in range(0, count, step)] or [0]


def itl_statistics(values: np.ndarray, weights: np.ndarray) -> tuple[float, float, float, float]:
    """(mean, p50, p90, p99) of inter-token gaps given as (values, multiplicities).

    The values of ``summary_values``' ITL statistics bit for bit, in bounded memory beyond the
    mean's float64 copy of the weights (the mean is ``summary.weighted_mean``). Percentiles: the
    order statistics around each virtual index (``weighted_order_statistics``) interpolated by
    ``weighted_percentile`` on a two-point sample with the same total weight, whose
    ``lower`` and ``upper`` order statistics are those two values.
    """
    total_weight = int(np.sum(weights, dtype=np.int64)) if weights.size else 0
    if total_weight == 0:
        return (math.nan,) * 4
    p = np.asarray(_PERCENTILES)
    virtual = (total_weight - 1) * (p / 100.0)
    lower = np.floor(virtual).astype(np.int64)
    upper = np.minimum(lower + 1, total_weight - 1)
    found = weighted_order_statistics(values, weights, np.concatenate([lower, upper]))
    picked = []
    for i in range(p.size):
        a, b = found[i], found[p.size + i]
        # a at sorted indices 0..lower, b after: the same total, lower and upper values.
        below, above = _pieces(int(lower[i]) + 1), _pieces(total_weight - int(lower[i]) - 1)
        two = weighted_percentile([a] * len(below) + [b] * len(above), below + above, p[i])
        picked.append(float(two))
    return weighted_mean(values, weights), picked[0], picked[1], picked[2]
