"""Scores: a policy's metric relative to the reference's on the same workload, aggregated.

For a workload ``w`` the **ratio** is ``reference(w) / policy(w)`` for a metric where lower is
better (latency) and ``policy(w) / reference(w)`` where higher is better (SLO attainment), so a
ratio above 1 always means better than the reference (``vllm-v1``; round-robin routing for
Route). A **score** is the geometric mean of the ratios over a set of held-out workloads, with a
paired 95% interval: the t interval of the mean log ratio (the pairing is the shared workload),
``exp(mean +- t_{0.975, n-1} * sd / sqrt(n))``. One workload gives no interval (NaN).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsched_gym.leaderboard.suite import LOWER_IS_BETTER

__all__ = ["Score", "geometric_score", "ratio", "score_rows", "t_quantile_975"]

_T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
    10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
    18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060,
    26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip


def t_quantile_975(df: int) -> float:
    """Student's t 97.5% quantile for ``df`` degrees of freedom (table; df > 120: normal)."""
    if df < 1:
        return math.nan
    if df in _T975:
        return _T975[df]
    if df > 120:
        return 1.960
    return _T975[max(k for k in _T975 if k < df)]  # conservative: the tabulated df below


def ratio(value: float, reference: float, metric: str) -> float:
    """The ratio of one workload (> 1: better than the reference); NaN when undefined."""
    if not (math.isfinite(value) and math.isfinite(reference)) or value <= 0 or reference <= 0:
        return math.nan
    return reference / value if LOWER_IS_BETTER[metric] else value / reference


@dataclass(frozen=True)
class Score:
    """A geometric-mean ratio with its paired 95% interval over ``n`` workloads."""

    value: float
    low: float
    high: float
    n: int

    def text(self) -> str:
        """``1.234 [1.100, 1.380]`` (or ``1.234`` for one workload, ``—`` for none)."""
        if self.n == 0 or not math.isfinite(self.value):
            return "—"
        if not math.isfinite(self.low):
            return f"{self.value:.3f}"
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}]"


def geometric_score(ratios: Iterable[float]) -> Score:
    """The geometric mean of finite positive ``ratios`` and its 95% t interval on logs."""
    logs = np.log([r for r in ratios if math.isfinite(r) and r > 0])
    n = len(logs)
    if n == 0:
        return Score(math.nan, math.nan, math.nan, 0)
    mean = float(logs.mean())
    if n == 1:
        return Score(math.exp(mean), math.nan, math.nan, 1)
    half = t_quantile_975(n - 1) * float(logs.std(ddof=1)) / math.sqrt(n)
    return Score(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n)


def score_rows(
    rows: Sequence[Mapping[str, Any]], reference_rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Per-workload ratios of ``rows`` against ``reference_rows`` (matched by workload id).

    Adds ``reference_value``, ``ratio`` and ``tail_ratio``; a failed row (policy or reference)
    has NaN ratios.
    """
    ref = {r["workload"]: r for r in reference_rows}
    out = []
    for row in rows:
        r = ref.get(row["workload"])
        new = dict(row)
        ok = r is not None and row["status"] == "ok" and r["status"] == "ok"
        new["reference_value"] = float(r["value"]) if ok else math.nan
        new["ratio"] = (
            ratio(float(row["value"]), float(r["value"]), row["metric"]) if ok else math.nan
        )
        new["tail_ratio"] = (
            ratio(float(row["tail_value"]), float(r["tail_value"]), row["tail_metric"])
            if ok
            else math.nan
        )
        out.append(new)
    return out
