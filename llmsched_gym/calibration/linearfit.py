"""Fitting the 6-coefficient :class:`LinearCostModel` to any step-time oracle.

The pieces, shared by :func:`linearize` and the Vidur fitting pipeline
(:mod:`llmsched_gym.calibration.vidur_fit`):

* :func:`design_batches` draws a seeded, designed set of batch compositions (decode-only,
  single and multiple prefill chunks, and vLLM-style mixed batches of chunks plus decodes) within an
  engine's limits;
* :func:`nnls` solves non-negative least squares (Lawson and Hanson, "Solving Least Squares
  Problems", 1974, ch. 23), so every fitted coefficient is >= 0 and the fitted model stays monotone
  in every feature;
* :func:`fit_linear` fits on a seeded train split, minimising *relative* squared error (rows
  weighted by 1 / time, so a 2 ms decode step counts as much as a 400 ms prefill), and reports
  MAPE and the worst error on the train and held-out splits;
* :func:`fit_extended` fits :class:`~llmsched_gym.cost.base.ExtendedLinearCostModel` (GEMM knee
  and item-level terms) the same way on the same split, and :func:`fit_columns` any design
  matrix (analysis forms that are not shipped);
* :func:`linearize` fits a linear profile to any cost model's ``step_times`` (e.g. the
  analytic :class:`~llmsched_gym.cost.roofline.RooflineCostModel`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from llmsched_gym.config import VLLM_MAX_NUM_BATCHED_TOKENS, VLLM_MAX_NUM_SEQS
from llmsched_gym.cost.base import (
    LONG_MIN_CACHED,
    SHORT_MAX_NEW_TOKENS,
    TOKEN_KNOTS,
    ExtendedLinearCostModel,
    LinearCostModel,
    PiecewiseCostModel,
)
from llmsched_gym.errors import CostModelError

__all__ = [
    "BatchSet",
    "FitResult",
    "FitStats",
    "design_batches",
    "fit_columns",
    "fit_extended",
    "fit_linear",
    "fit_piecewise",
    "linearize",
    "nnls",
]

FEATURES = ("num_tokens", "prefill_attn", "decode_kv", "num_prefill", "num_decode")
"""The five batch features of llmsched_gym.cost.base, in LinearCostModel's coefficient order."""
ITEM_TERMS = ("split_path", "longest_context", "short_prefill_kv")
"""The item-level features of ExtendedLinearCostModel, in its coefficient order."""
PREFILL_TERMS = ("short_prefill_chunks", "longest_prefill")
"""PiecewiseCostModel's per-item prefill terms (after :data:`ITEM_TERMS` in its arguments)."""


@dataclass(frozen=True)
class BatchSet:
    """Many batches as flat item arrays.

    Item ``i`` belongs to batch ``batch[i]`` and computes ``c[i]`` new tokens on top of ``m[i]``
    tokens already in the KV cache.
    """

    batch: np.ndarray
    """Batch index of each item (int64, non-decreasing)."""
    c: np.ndarray
    """New tokens of each item (int64, >= 1)."""
    m: np.ndarray
    """Cached tokens of each item (int64, >= 0)."""
    num_batches: int

    def features(self) -> dict[str, np.ndarray]:
        """The five cost-model features of every batch (int64 arrays of length num_batches)."""
        n = self.num_batches
        prefill = self.c > 1
        c, m = self.c, self.m

        def total(values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
            w = values if mask is None else np.where(mask, values, 0)
            return np.bincount(self.batch, weights=w, minlength=n).round().astype(np.int64)

        return {
            "num_tokens": total(c),
            "prefill_attn": total(c * c + 2 * m * c, prefill),
            "decode_kv": total(m, ~prefill),
            "num_prefill": total(np.ones_like(c), prefill),
            "num_decode": total(np.ones_like(c), ~prefill),
        }

    def item_terms(
        self, short_max_new: int = SHORT_MAX_NEW_TOKENS, long_min_cached: int = LONG_MIN_CACHED
    ) -> dict[str, np.ndarray]:
        """The item-level features of every batch (as :func:`~llmsched_gym.cost.base.item_terms`).

        Also the prefill terms of :func:`~llmsched_gym.cost.base.prefill_item_terms`
        (``short_prefill_chunks``, ``longest_prefill``), and ``decode_kv_short_prefill``:
        ``decode_kv`` of batches holding a prefill with ``c <= short_max_new`` over
        ``m > long_min_cached`` (0 otherwise), an analysis feature for PyTorch
        FlashAttention-2's GQA artefact (profiler version 1), never shipped.
        """
        n = self.num_batches
        c, m = self.c, self.m
        short_long = (c <= short_max_new) & (m > long_min_cached)
        short_prefill = short_long & (c > 1)

        def total(values: np.ndarray) -> np.ndarray:
            return np.bincount(self.batch, weights=values, minlength=n).round().astype(np.int64)

        longest = np.zeros(n, dtype=np.int64)
        np.maximum.at(longest, self.batch, m)
        span = np.zeros(n, dtype=np.int64)
        np.maximum.at(span, self.batch, np.where((c > 1) & ~short_long, c + m, 0))
        chunk = max(long_min_cached, 1)
        has_short_prefill = total(short_prefill.astype(np.int64)) > 0
        return {
            "split_path": (total(short_long.astype(np.int64)) > 0).astype(np.int64),
            "longest_context": longest,
            "short_prefill_kv": total(np.where(short_prefill, m, 0)),
            "short_prefill_chunks": total(np.where(short_prefill, (m + chunk - 1) // chunk, 0)),
            "longest_prefill": span,
            "decode_kv_short_prefill": np.where(
                has_short_prefill, total(np.where(c == 1, m, 0)), 0
            ),
        }

    def items_of(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """The (c, m) arrays of batch ``b``."""
        lo, hi = np.searchsorted(self.batch, [b, b + 1])
        return self.c[lo:hi], self.m[lo:hi]


def _loguniform_int(
    rng: np.random.Generator, lo: int, hi: int, size: int | None = None
) -> np.ndarray:
    """Integers spread evenly in log space over [lo, hi] (small batches matter as much as big)."""
    x = np.exp(rng.uniform(np.log(lo), np.log(hi + 1), size=size))
    return np.clip(np.floor(x), lo, hi).astype(np.int64)


def design_batches(
    num_batches: int,
    seed: int = 0,
    max_num_batched_tokens: int = 4096,
    max_num_seqs: int = 128,
    max_model_len: int = 4096,
) -> BatchSet:
    """Draw a designed, seeded set of batch compositions within an engine's limits.

    Four kinds in equal shares, each respecting ``num_tokens <= max_num_batched_tokens``, at most
    ``max_num_seqs`` items and ``c + m <= max_model_len`` per item:

    * decode-only: 1..max_num_seqs decodes (log-uniform), contexts uniform in [1, max_model_len);
    * one prefill chunk: c log-uniform in [2, max tokens], on an empty or a cached prefix (half
      each);
    * 2-4 prefill chunks sharing the token budget;
    * mixed, as vLLM's chunked prefill builds them: decodes first, then 1-2 prefill chunks that fill
      part of the remaining budget.

    Args:
        num_batches: how many batches to draw.
        seed: seed of the numpy Generator (same seed, same batches).
        max_num_batched_tokens: token budget per step.
        max_num_seqs: most items per batch.
        max_model_len: most tokens per request (prompt plus generated).

    Returns:
        The batches as a :class:`BatchSet`.
    """
    if min(num_batches, max_num_batched_tokens, max_num_seqs, max_model_len) < 2:
        raise CostModelError(
            "design_batches needs num_batches, max_num_batched_tokens, max_num_seqs and "
            f"max_model_len >= 2, got {num_batches}, {max_num_batched_tokens}, {max_num_seqs}, "
            f"{max_model_len}"
        )
    rng = np.random.default_rng(seed)
    max_tokens = min(max_num_batched_tokens, max_model_len)
    bs: list[int] = []
    cs: list[int] = []
    ms: list[int] = []

    def prefill_item(budget: int) -> tuple[int, int]:
        c = int(_loguniform_int(rng, 2, max(2, budget)))
        m = 0 if rng.random() < 0.5 else int(rng.integers(0, max_model_len - c + 1))
        return c, m

    for b in range(num_batches):
        kind = b % 4
        items: list[tuple[int, int]] = []
        if kind == 0:
            n = int(_loguniform_int(rng, 1, min(max_num_seqs, max_num_batched_tokens)))
            items = [(1, int(m)) for m in rng.integers(1, max_model_len, size=n)]
        elif kind == 1:
            items = [prefill_item(max_tokens)]
        elif kind == 2:
            k = int(rng.integers(2, 5))
            budget = max_tokens
            for _ in range(k):
                if budget < 2 or len(items) >= max_num_seqs:
                    break
                c, m = prefill_item(int(rng.integers(2, budget + 1)))
                items.append((c, m))
                budget -= c
        else:
            n = int(
                _loguniform_int(rng, 1, max(1, min(max_num_seqs - 2, max_num_batched_tokens // 2)))
            )
            items = [(1, int(m)) for m in rng.integers(1, max_model_len, size=n)]
            budget = min(max_num_batched_tokens - n, max_model_len)
            for _ in range(int(rng.integers(1, 3))):
                if budget < 2:
                    break
                c, m = prefill_item(int(rng.integers(2, budget + 1)))
                items.append((c, m))
                budget -= c
        for c, m in items:
            bs.append(b)
            cs.append(c)
            ms.append(m)
    return BatchSet(
        batch=np.asarray(bs, dtype=np.int64),
        c=np.asarray(cs, dtype=np.int64),
        m=np.asarray(ms, dtype=np.int64),
        num_batches=num_batches,
    )


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """Solve ``min ||a x - b||_2`` subject to ``x >= 0`` (Lawson-Hanson active-set method).

    Args:
        a: (n, k) design matrix.
        b: (n,) target.
        max_iter: iteration cap (default 30 * k).

    Returns:
        The (k,) non-negative solution.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n, k = a.shape
    x = np.zeros(k)
    passive = np.zeros(k, dtype=bool)
    max_iter = 30 * k if max_iter is None else max_iter
    tol = 10 * np.finfo(float).eps * np.linalg.norm(a, 1) * max(n, k)
    w = a.T @ (b - a @ x)
    for _ in range(max_iter):
        if passive.all() or (w[~passive] <= tol).all():
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            z = np.zeros(k)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            # Step back to the boundary: move x towards z until the first passive variable hits 0.
            bad = passive & (z <= 0)
            alpha = np.min(x[bad] / (x[bad] - z[bad]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
        w = a.T @ (b - a @ x)
    return x


@dataclass(frozen=True)
class FitStats:
    """Error of a fitted model on one split (percent errors relative to the oracle's time)."""

    n: int
    mape_pct: float
    """Mean absolute percentage error."""
    max_ape_pct: float
    """Worst absolute percentage error."""
    p90_ape_pct: float
    """90th percentile of the absolute percentage error."""

    @staticmethod
    def of(pred: np.ndarray, true: np.ndarray) -> FitStats:
        """Errors of ``pred`` against ``true`` (both > 0)."""
        ape = np.abs(pred - true) / true * 100.0
        return FitStats(
            n=int(len(true)),
            mape_pct=float(np.mean(ape)),
            max_ape_pct=float(np.max(ape)),
            p90_ape_pct=float(np.percentile(ape, 90)),
        )


@dataclass(frozen=True)
class FitResult:
    """A fitted linear cost model and how well it reproduces its oracle."""

    model: LinearCostModel
    train: FitStats
    heldout: FitStats
    seed: int
    heldout_fraction: float
    heldout_index: np.ndarray | None = field(default=None, repr=False, compare=False)
    """Row indices of the held-out split (in the order of the fitted arrays)."""

    def to_dict(self) -> dict[str, object]:
        """Plain-data summary (for YAML profiles and reports)."""
        return {
            "coefficients": self.model.coefficients(),
            "train": asdict(self.train),
            "heldout": asdict(self.heldout),
            "seed": self.seed,
            "heldout_fraction": self.heldout_fraction,
        }


def design_matrix(features: dict[str, np.ndarray]) -> np.ndarray:
    """(n, 6) matrix: a column of ones, then the five features as float64."""
    cols = [np.ones(len(features["num_tokens"]))]
    cols += [np.asarray(features[f], dtype=np.float64) for f in FEATURES]
    return np.stack(cols, axis=1)


def _split(
    times_s: np.ndarray, seed: int, heldout_fraction: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times, held-out rows, train rows) of the seeded split; bad input raises."""
    y = np.asarray(times_s, dtype=np.float64)
    if y.ndim != 1 or len(y) < 10 or not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise CostModelError("fit_linear needs at least 10 finite step times > 0 seconds")
    if not (0.0 < heldout_fraction < 1.0):
        raise CostModelError(f"heldout_fraction must be in (0, 1), got {heldout_fraction!r}")
    order = np.random.default_rng(seed).permutation(len(y))
    n_held = max(1, int(round(heldout_fraction * len(y))))
    return y, order[:n_held], order[n_held:]


def _solve(a: np.ndarray, y: np.ndarray, train: np.ndarray, min_c0_s: float) -> np.ndarray:
    """Relative-error NNLS coefficients of design matrix ``a`` (column 0: the intercept)."""
    # Relative error: divide each row by its time, then scale columns to unit norm so that the
    # solver sees a well-conditioned problem (prefill_attn is ~1e7 where num_prefill is ~1).
    aw = a[train] / y[train, None]
    scale = np.linalg.norm(aw, axis=0)
    scale[scale == 0] = 1.0
    coef = nnls(aw / scale, np.ones(len(train))) / scale
    coef[0] = max(coef[0], min_c0_s)
    return coef


def fit_columns(
    columns: list[np.ndarray],
    times_s: np.ndarray,
    seed: int = 0,
    heldout_fraction: float = 0.2,
    min_c0_s: float = 1e-6,
) -> tuple[np.ndarray, FitStats, FitStats]:
    """Fit ``c0 + sum_i coef_i * columns[i]`` as :func:`fit_linear` does (same split).

    Returns:
        ``(coefficients with the intercept first, train stats, held-out stats)``.
    """
    y, held, train = _split(times_s, seed, heldout_fraction)
    cols = [np.ones(len(y))] + [np.asarray(col, dtype=np.float64) for col in columns]
    a = np.stack(cols, axis=1)
    coef = _solve(a, y, train, min_c0_s)
    pred = a @ coef
    return coef, FitStats.of(pred[train], y[train]), FitStats.of(pred[held], y[held])


def knee_tokens(num_tokens: np.ndarray, knee: int) -> np.ndarray:
    """``max(num_tokens, knee)`` for non-empty batches (ExtendedLinearCostModel's token term)."""
    t = np.asarray(num_tokens, dtype=np.float64)
    return np.where((t > 0.0) & (t < knee), float(knee), t)


def _result(model, pred, y, train, held, seed: int, heldout_fraction: float) -> FitResult:
    """The fitted model with its train and held-out errors."""
    return FitResult(
        model=model,
        train=FitStats.of(pred[train], y[train]),
        heldout=FitStats.of(pred[held], y[held]),
        seed=seed,
        heldout_fraction=heldout_fraction,
        heldout_index=np.sort(held),
    )


def fit_extended(
    features: dict[str, np.ndarray],
    terms: dict[str, np.ndarray],
    times_s: np.ndarray,
    name: str,
    token_knee: int = 128,
    seed: int = 0,
    heldout_fraction: float = 0.2,
    min_c0_s: float = 1e-6,
    short_max_new_tokens: int = SHORT_MAX_NEW_TOKENS,
    long_min_cached: int = LONG_MIN_CACHED,
) -> FitResult:
    """Fit an ExtendedLinearCostModel like :func:`fit_linear` (same split, same solver).

    Args:
        features: the five features (:data:`FEATURES`).
        terms: the item-level features (:data:`ITEM_TERMS`, from :meth:`BatchSet.item_terms`
            with the same thresholds).
        times_s: the measured step times in seconds (> 0).
        name: name for the fitted model.
        token_knee: the knee of the token term (fixed, not fitted).
        seed: seed of the train / held-out permutation (as :func:`fit_linear`).
        heldout_fraction: share of batches kept out of the fit.
        min_c0_s: floor on the intercept.
        short_max_new_tokens: recorded in the model (the thresholds ``terms`` were computed
            with).
        long_min_cached: likewise.
    """
    y, held, train = _split(times_s, seed, heldout_fraction)
    cols = [np.ones(len(y)), knee_tokens(features["num_tokens"], token_knee)]
    cols += [np.asarray(features[f], dtype=np.float64) for f in FEATURES[1:]]
    cols += [np.asarray(terms[f], dtype=np.float64) for f in ITEM_TERMS]
    coef = _solve(np.stack(cols, axis=1), y, train, min_c0_s)
    model = ExtendedLinearCostModel(
        *(float(v) for v in coef),
        name=name,
        token_knee=token_knee,
        short_max_new_tokens=short_max_new_tokens,
        long_min_cached=long_min_cached,
    )
    pred = model.step_times(*(features[f] for f in FEATURES), *(terms[f] for f in ITEM_TERMS))
    return _result(model, pred, y, train, held, seed, heldout_fraction)


def fit_linear(
    features: dict[str, np.ndarray],
    times_s: np.ndarray,
    name: str,
    seed: int = 0,
    heldout_fraction: float = 0.2,
    min_c0_s: float = 1e-6,
) -> FitResult:
    """Fit a LinearCostModel to ``times_s`` by relative-error NNLS on a seeded train split.

    Args:
        features: the five feature arrays (see :data:`FEATURES`).
        times_s: the oracle's step times in seconds (> 0).
        name: name for the fitted model.
        seed: seed of the train / held-out permutation.
        heldout_fraction: share of batches kept out of the fit.
        min_c0_s: floor on the intercept (LinearCostModel needs c0 > 0 so the clock advances).

    Returns:
        The fitted model with train and held-out errors.
    """
    y, held, train = _split(times_s, seed, heldout_fraction)
    coef = _solve(design_matrix(features), y, train, min_c0_s)
    model = LinearCostModel(*(float(v) for v in coef), name=name)
    pred = model.step_times(*(features[f] for f in FEATURES))
    return _result(model, pred, y, train, held, seed, heldout_fraction)


def token_segments(num_tokens: np.ndarray, knots: tuple[int, ...]) -> list[np.ndarray]:
    """PiecewiseCostModel's token columns.

    ``(min(t, k_{i+1}) - k_i)^+`` per interval, then ``(t - k_K)^+`` (the ``c_tokens`` column).
    """
    t = np.asarray(num_tokens, dtype=np.float64)
    cols = [
        np.clip(t - lo, 0.0, float(hi - lo)) for lo, hi in zip(knots[:-1], knots[1:], strict=True)
    ]
    return cols + [np.maximum(t - knots[-1], 0.0)]


def piecewise_columns(
    features: dict[str, np.ndarray], terms: dict[str, np.ndarray], knots: tuple[int, ...]
) -> list[np.ndarray]:
    """Design columns (without the intercept) of :class:`PiecewiseCostModel`, in fit order.

    The interval slopes, ``c_tokens``, the other four features, then the six extra coefficients.
    """
    mixed = (np.asarray(features["num_prefill"]) > 0) & (np.asarray(features["num_decode"]) > 0)
    return [
        *token_segments(features["num_tokens"], knots),
        *(features[f] for f in FEATURES[1:]),
        *(terms[f] for f in ITEM_TERMS),
        mixed.astype(np.float64),
        *(terms[f] for f in PREFILL_TERMS),
    ]


def fit_piecewise(
    features: dict[str, np.ndarray],
    terms: dict[str, np.ndarray],
    times_s: np.ndarray,
    name: str,
    token_knots: tuple[int, ...] = TOKEN_KNOTS,
    *,
    seed: int = 0,
    heldout_fraction: float = 0.2,
    thresholds: tuple[int, int] = (SHORT_MAX_NEW_TOKENS, LONG_MIN_CACHED),
) -> FitResult:
    """Fit a PiecewiseCostModel like :func:`fit_extended` (same split, solver, intercept floor).

    ``terms`` are :meth:`BatchSet.item_terms` with the same ``thresholds``
    (``short_max_new_tokens``, ``long_min_cached``; their ``short_prefill_chunks`` and
    ``longest_prefill`` included). NNLS keeps every slope >= 0, so the token term is monotone.
    """
    knots = tuple(int(k) for k in token_knots)
    y, held, train = _split(times_s, seed, heldout_fraction)
    cols = piecewise_columns(features, terms, knots)
    a = np.stack([np.ones(len(y))] + [np.asarray(c, dtype=np.float64) for c in cols], axis=1)
    coef = [float(v) for v in _solve(a, y, train, 1e-6)]
    k = len(knots) - 1
    slopes, rest = coef[1 : 1 + k], coef[1 + k :]
    lin = dict(zip(LinearCostModel.COEFFICIENTS[1:], rest[:5], strict=True))
    extra = dict(zip(PiecewiseCostModel.EXTRA_COEFFICIENTS, rest[5:], strict=True))
    model = PiecewiseCostModel(
        coef[0],
        **lin,
        **extra,
        name=name,
        token_knots=knots,
        token_slopes=slopes,
        short_max_new_tokens=thresholds[0],
        long_min_cached=thresholds[1],
    )
    pred = model.step_times(
        *(features[f] for f in FEATURES), *(terms[f] for f in ITEM_TERMS + PREFILL_TERMS)
    )
    return _result(model, pred, y, train, held, seed, heldout_fraction)


def linearize(
    cost_model: Any,
    num_batches: int = 4000,
    seed: int = 0,
    max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = VLLM_MAX_NUM_SEQS,
    max_model_len: int = 8192,
    heldout_fraction: float = 0.2,
) -> FitResult:
    """Least-squares :class:`LinearCostModel` of ``cost_model`` over a designed grid of batches.

    A roofline is piecewise linear (a kink at its ``ridge_tokens``), so the fit trades accuracy
    at small and large T; read ``result.heldout.mape_pct`` before relying on it.

    Args:
        cost_model: any model with the vectorised ``step_times`` of the five features.
        num_batches: batches drawn by :func:`design_batches`.
        seed: seed of the design and of the train / held-out split.
        max_num_batched_tokens: token budget of the design's batches.
        max_num_seqs: most requests per batch.
        max_model_len: most tokens per request.
        heldout_fraction: share of batches kept out of the fit.

    Returns:
        The fit (``.model`` is the LinearCostModel, named ``<name>:linear``) and its errors.
    """
    batches = design_batches(num_batches, seed, max_num_batched_tokens, max_num_seqs, max_model_len)
    feats = batches.features()
    y = cost_model.step_times(*(feats[f] for f in FEATURES))
    return fit_linear(
        feats, y, name=f"{cost_model.name}:linear", seed=seed, heldout_fraction=heldout_fraction
    )
