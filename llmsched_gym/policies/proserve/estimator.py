"""ProServe's batch latency estimator (arXiv 2512.12928, Eq. 4-7), for SlideBatching and GoRouting.

:class:`LatencyEstimator`: ``T(B) = t_c + sum_prefill (a_p lq^2 + b_p lq lkv + c_p lq)
+ sum_decode (a_d lkv + b_d)``, fitted by least squares on profiling batches priced by the
engine's own cost model (single-prefill batches over a (lq, lkv) grid and pure-decode batches
over (n, KV) — exactly what the engine charges such steps), negative coefficients clamped to 0
(xLLM ``profile_manager``). Online correction: ``beta <- theta beta + (1 - theta) mean(real /
est)`` over the last ``window`` steps (paper §4.1), or the code's fixed factor 1.0
(``theta=None``, default).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

__all__ = ["LatencyEstimator"]


class LatencyEstimator:
    """ProServe's batch latency estimator (Eq. 4-7) with optional momentum correction."""

    def __init__(
        self,
        coef: dict[str, float],
        theta: float | None = None,
        window: int = 100,
    ) -> None:
        self.ap, self.bp, self.cp = coef["ap"], coef["bp"], coef["cp"]
        self.ad, self.bd, self.tc = coef["ad"], coef["bd"], coef["tc"]
        self.theta = theta
        self.beta = 1.0
        self._ratios: deque[float] = deque(maxlen=window)

    @classmethod
    def fit(cls, cost_model: Any, max_tokens: int = 8192, **kw: Any) -> LatencyEstimator:
        """Least-squares fit on profiling batches priced by ``cost_model`` (the engine's)."""
        rows, ys = [], []
        for lq in (16, 64, 128, 256, 512, 1024, 2048, 4096, max_tokens):
            for lkv in (0, 512, 2048, 8192):
                rows.append([1, lq * lq, lq * lkv, lq, 0, 0])
                ys.append(cost_model.step_time(lq, lq * lq + 2 * lkv * lq, 0, 1, 0))
        for n in (1, 4, 16, 64, 128, 256):
            for ctx_len in (128, 512, 1024, 2048, 4096):
                k = n * ctx_len
                rows.append([1, 0, 0, 0, k, n])
                ys.append(cost_model.step_time(n, 0, k, 0, n))
        a, y = np.asarray(rows, float), np.asarray(ys, float)
        scale = np.maximum(np.abs(a).max(axis=0), 1e-12)
        sol, *_ = np.linalg.lstsq(a / scale, y, rcond=None)
        sol = np.maximum(sol / scale, 0.0)
        names = ("tc", "ap", "bp", "cp", "ad", "bd")
        return cls(dict(zip(names, sol.tolist(), strict=True)), **kw)

    def prefill(self, lq: int, lkv: int) -> float:
        """Core prefill time of ``lq`` new tokens on ``lkv`` cached ones (Eq. 5), corrected."""
        return self.beta * (self.ap * lq * lq + self.bp * lq * lkv + self.cp * lq)

    def decode(self, lkv: int) -> float:
        """Core decode time of one sequence with ``lkv`` KV tokens (Eq. 6), corrected."""
        return self.beta * (self.ad * lkv + self.bd)

    @property
    def t_c(self) -> float:
        """Constant per-batch overhead, corrected."""
        return self.beta * self.tc

    def max_chunk(self, lkv: int, budget: float, limit: int) -> int:
        """GETMAXCHUNK: largest c <= limit with ``prefill(c, lkv) <= budget`` (quadratic root)."""
        if budget <= 0 or limit <= 0:
            return 0
        if math.isinf(budget):
            return limit
        a = self.beta * self.ap
        b = self.beta * (self.bp * lkv + self.cp)
        if a <= 0:
            c = budget / b if b > 0 else limit
        else:
            c = (-b + math.sqrt(b * b + 4 * a * budget)) / (2 * a)
        return int(min(limit, max(0, math.floor(c))))

    def observe(self, real: float, est: float) -> None:
        """Momentum update of the correction factor (no-op when ``theta`` is None)."""
        if self.theta is None or est <= 0:
            return
        self._ratios.append(real / (est / self.beta))
        self.beta = self.theta * self.beta + (1 - self.theta) * float(np.mean(self._ratios))
