"""The cost-model protocol: a batch's features in, the engine step's duration in seconds out.

A step's batch is summarised by five features (DESIGN.md, "Cost model"). For each scheduled item
with ``c`` new tokens on top of ``m`` tokens already in the KV cache:

* ``num_tokens``   = sum of c over all items (tokens the model computes this step);
* ``prefill_attn`` = sum of (c*c + 2*m*c) over prefill items (attention work of a chunk);
* ``decode_kv``    = sum of m over decode items (KV tokens a decode reads);
* ``num_prefill``  = items with c > 1 (prefills, chunks and refills);
* ``num_decode``   = items with c == 1 (computationally a decode, whatever the request's phase).

An empty batch (all zero) is a legal step: it costs the model's value at zero.

Cost models flagged ``item_priced`` (:class:`ExtendedLinearCostModel`) are priced from the
step's items by :func:`items_step_time`, which also hands them three item-level features
(:func:`item_terms`): ``split_path`` (1 when some item has few new tokens over a long cached
context: the split-KV attention path), ``longest_context`` (the most cached tokens of any item)
and ``short_prefill_kv`` (cached tokens under short prefill chunks).

``step_times`` is the vectorised twin of ``step_time`` used by fast-forward: element ``i`` must be
bit-for-bit equal to ``step_time`` of the i-th features, so fast-forwarded runs match runs stepped
one iteration at a time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

import cython
import numpy as np

from llmsched_gym.errors import CostModelError


@runtime_checkable
class CostModel(Protocol):
    """Maps a batch's features to the engine step's duration in seconds."""

    name: str
    """A label naming the profile (shown in records and tables)."""

    def step_time(
        self,
        num_tokens: int,
        prefill_attn: int,
        decode_kv: int,
        num_prefill: int,
        num_decode: int,
    ) -> float:
        """Duration in seconds of one engine step with these batch features."""
        ...

    def step_times(
        self,
        num_tokens: np.ndarray,
        prefill_attn: np.ndarray,
        decode_kv: np.ndarray,
        num_prefill: np.ndarray,
        num_decode: np.ndarray,
    ) -> np.ndarray:
        """Vectorised ``step_time``; must equal it element by element, bit for bit."""
        ...


SHORT_MAX_NEW_TOKENS = 128
"""An item with at most this many new tokens is "short" (one FlashAttention query tile)."""
LONG_MIN_CACHED = 512
"""An item with more cached tokens than this has a "long" context (one split-KV chunk)."""


def item_terms(
    items: Iterable[tuple[int, int]],
    phases: Iterable[bool] | None = None,
    short_max_new: int = SHORT_MAX_NEW_TOKENS,
    long_min_cached: int = LONG_MIN_CACHED,
) -> tuple[int, int, int, int, int, int, int, int, int]:
    """Every per-item feature of ``(c, m)`` items, in one pass (see :func:`item_features`).

    Returns the five features, ``prefill_kv``, then ``split_path`` (1 when some item has
    ``c <= short_max_new`` and ``m > long_min_cached``, decodes included: the profiler's and
    vLLM's split-KV condition), ``longest_context`` (max of m) and ``short_prefill_kv`` (sum of m
    over prefill items with ``c <= short_max_new`` and ``m > long_min_cached``).
    """
    return _item_pass(items, phases, short_max_new, long_min_cached, 0)[:9]


def prefill_item_terms(
    items: Iterable[tuple[int, int]],
    phases: Iterable[bool] | None = None,
    short_max_new: int = SHORT_MAX_NEW_TOKENS,
    long_min_cached: int = LONG_MIN_CACHED,
) -> tuple[int, int, int, int, int, int, int, int, int, int, int]:
    """:func:`item_terms` plus the two prefill attention terms of :class:`PiecewiseCostModel`.

    ``short_prefill_chunks``: split-KV chunks of ``long_min_cached`` cached tokens (rounded up)
    under short prefill chunks (``c <= short_max_new`` over ``m > long_min_cached``: the
    split-KV call's thread blocks); ``longest_prefill``: the largest ``c + m`` of the other
    prefill items (the longest unsplit attention span, one thread block's work).
    """
    if long_min_cached < 1:
        raise CostModelError(
            f"prefill_item_terms needs long_min_cached >= 1, got {long_min_cached}"
        )
    return _item_pass(items, phases, short_max_new, long_min_cached, 1)


def _item_pass(
    items: Iterable[tuple[int, int]],
    phases: Iterable[bool] | None,
    short_max_new: int,
    long_min_cached: int,
    prefill_terms: int,
) -> tuple[int, int, int, int, int, int, int, int, int, int, int]:
    """One pass over the items: :func:`prefill_item_terms`' eleven values.

    The last two stay 0 unless ``prefill_terms`` (:func:`item_terms` drops them).
    """
    tokens = attn = dkv = npf = ndc = pkv = split = longest = spkv = chunks = span = 0
    if phases is None:
        pairs: Iterable[tuple[tuple[int, int], bool]] = ((it, it[0] != 1) for it in items)
    else:
        pairs = zip(items, phases, strict=True)
    for (c, m), prefill in pairs:
        tokens += c
        if m > longest:
            longest = m
        if prefill:
            attn += c * c + 2 * m * c
            npf += 1
            pkv += m
        else:
            dkv += m
            ndc += 1
        if c <= short_max_new and m > long_min_cached:
            split = 1
            if prefill:
                spkv += m
                if prefill_terms:
                    chunks += (m + long_min_cached - 1) // long_min_cached
        elif prefill and prefill_terms and c + m > span:
            span = c + m
    return tokens, attn, dkv, npf, ndc, pkv, split, longest, spkv, chunks, span


@cython.locals(
    head=cython.double,
    per_kv=cython.double,
    tail=cython.double,
    last=cython.double,
    m=cython.long,
    n=cython.long,
    k=cython.long,
    _j=cython.long,
    now=cython.double,
    stop=cython.double,
    d=cython.double,
)
def affine_decode_series(
    head: float,
    per_kv: float,
    tail: float,
    last: float,
    m0: int,
    n: int,
    k: int,
    start: float,
    stop: float,
) -> tuple[list[float], list[float]]:
    """``decode_series`` of a model whose pure-decode step is affine in ``decode_kv``.

    Step ``j`` of up to ``k`` has ``decode_kv = m0 + j * n`` and lasts ``head + per_kv *
    float(decode_kv) + tail + last``: the terms before and after the decode-attention one, each
    summed once by the caller in its ``step_time``'s order, so each duration is that model's
    ``step_time`` bit for bit (a model without terms after it passes 0.0: adding 0.0 to a
    duration, never -0.0, changes no bit). Steps are taken while they start before ``stop``.
    Compiled, this is one C loop per stretch (96% of a long cluster run's steps).

    Returns:
        ``(durations, starts)`` with ``len(starts) == len(durations) + 1``.
    """
    durations: list[float] = []
    starts = [start]
    now = start
    m = m0
    for _j in range(k):
        if now >= stop:
            break
        d = head + per_kv * float(m) + tail + last
        durations.append(d)
        now = now + d
        starts.append(now)
        m += n
    return durations, starts


def item_features(
    items: Iterable[tuple[int, int]], phases: Iterable[bool] | None = None
) -> tuple[int, int, int, int, int, int]:
    """The five features of ``(c, m)`` items plus ``prefill_kv`` (InferMax's sum of m).

    Accumulated in item order with integers, as the engine does (``prefill_kv`` sums ``m`` over
    the prefill items). An item is a prefill when it has more than one token (vLLM V1's kernels)
    or, with ``phases`` (per item: its request has not sampled since its (re)admission), when its
    request is in its prefill phase (Vidur's classification; cost models with ``phase_items``).
    """
    return item_terms(items, phases)[:6]


def items_step_time(
    model: Any, items: Iterable[tuple[int, int]], phases: Iterable[bool] | None = None
) -> float:
    """``model``'s time of a step of ``(c, m)`` items: the same floats as the engine's step.

    Models flagged ``uses_prefill_kv`` also get ``prefill_kv``; models flagged ``phase_items``
    class items by ``phases`` when given (see :func:`item_features`), others by size; models
    flagged ``item_priced`` get the item-level terms of :func:`item_terms` (with their own
    ``short_max_new_tokens`` and ``long_min_cached``).
    """
    if not getattr(model, "phase_items", False):
        phases = None
    if getattr(model, "item_priced", False):
        if getattr(model, "prefill_item_terms", False):
            tokens, attn, dkv, npf, ndc, _, split, longest, spkv, chunks, span = _item_pass(
                items, phases, model.short_max_new_tokens, model.long_min_cached, 1
            )
            return float(
                model.step_time(tokens, attn, dkv, npf, ndc, split, longest, spkv, chunks, span)
            )
        tokens, attn, dkv, npf, ndc, _, split, longest, spkv = _item_pass(
            items, phases, model.short_max_new_tokens, model.long_min_cached, 0
        )[:9]
        return float(model.step_time(tokens, attn, dkv, npf, ndc, split, longest, spkv))
    tokens, attn, dkv, npf, ndc, pkv = item_features(items, phases)
    if getattr(model, "uses_prefill_kv", False):
        return float(model.step_time(tokens, attn, dkv, npf, ndc, prefill_kv=pkv))
    return float(model.step_time(tokens, attn, dkv, npf, ndc))


class ConstantCostModel:
    """Every step costs the same number of seconds (``constant:SECONDS``), for tests and oracles."""

    def __init__(self, seconds: float) -> None:
        if not (seconds > 0.0) or seconds != seconds or seconds == float("inf"):
            raise CostModelError(
                f"constant cost model needs a finite step time > 0 seconds, got {seconds!r}"
            )
        self.seconds = float(seconds)
        self.name = f"constant:{seconds:g}"

    def step_time(self, num_tokens, prefill_attn, decode_kv, num_prefill, num_decode) -> float:
        """Return the constant."""
        return self.seconds

    def step_times(self, num_tokens, prefill_attn, decode_kv, num_prefill, num_decode):
        """Return the constant for every step."""
        return np.full(np.shape(num_tokens), self.seconds, dtype=np.float64)


class LinearCostModel:
    """A step time linear in the five batch features, in seconds.

    ``c0 + c_tokens*num_tokens + c_prefill_attn*prefill_attn + c_decode_kv*decode_kv
    + c_prefill*num_prefill + c_decode*num_decode``.

    The scalar and vectorised paths evaluate the same expression in the same order, so they agree
    bit for bit (tested), which fast-forward relies on.
    """

    COEFFICIENTS = ("c0", "c_tokens", "c_prefill_attn", "c_decode_kv", "c_prefill", "c_decode")

    def __init__(
        self,
        c0: float,
        c_tokens: float = 0.0,
        c_prefill_attn: float = 0.0,
        c_decode_kv: float = 0.0,
        c_prefill: float = 0.0,
        c_decode: float = 0.0,
        name: str = "linear",
    ) -> None:
        values = (c0, c_tokens, c_prefill_attn, c_decode_kv, c_prefill, c_decode)
        for key, value in zip(self.COEFFICIENTS, values, strict=True):
            if not isinstance(value, (int, float)) or value != value or abs(value) == float("inf"):
                raise CostModelError(
                    f"linear cost model: {key} must be a finite number, got {value!r}"
                )
        if c0 <= 0.0:
            raise CostModelError(
                f"linear cost model: c0 (the empty-batch step time) must be > 0 s, got {c0!r}; "
                "a zero-cost step would let the clock stand still"
            )
        self.c0, self.c_tokens, self.c_prefill_attn = (
            float(c0),
            float(c_tokens),
            float(c_prefill_attn),
        )
        self.c_decode_kv, self.c_prefill, self.c_decode = (
            float(c_decode_kv),
            float(c_prefill),
            float(c_decode),
        )
        self.name = name

    def coefficients(self) -> dict[str, float]:
        """The six coefficients by name."""
        return {key: getattr(self, key) for key in self.COEFFICIENTS}

    def step_time(self, num_tokens, prefill_attn, decode_kv, num_prefill, num_decode) -> float:
        """Evaluate the linear model for one batch."""
        return (
            self.c0
            + self.c_tokens * float(num_tokens)
            + self.c_prefill_attn * float(prefill_attn)
            + self.c_decode_kv * float(decode_kv)
            + self.c_prefill * float(num_prefill)
            + self.c_decode * float(num_decode)
        )

    def decode_series(
        self, n: int, m0: int, k: int, start: float, stop: float
    ) -> tuple[list[float], list[float]]:
        """Durations and start times of up to ``k`` pure-decode steps of ``n`` requests.

        Step ``j`` has ``decode_kv = m0 + j * n``; steps are taken while they start before
        ``stop``. Each duration is bitwise ``step_time(n, 0, m0 + j * n, 0, n)`` (the same float
        operations in the same order), so fast-forwarded stretches equal stepping.

        Returns:
            ``(durations, starts)`` with ``len(starts) == len(durations) + 1``.
        """
        fn = float(n)
        head = self.c0 + self.c_tokens * fn + self.c_prefill_attn * 0.0
        pz, dn = self.c_prefill * 0.0, self.c_decode * fn
        return affine_decode_series(head, self.c_decode_kv, pz, dn, m0, n, k, start, stop)

    def step_times(self, num_tokens, prefill_attn, decode_kv, num_prefill, num_decode):
        """Evaluate the linear model for many batches (same expression order as ``step_time``)."""
        f = np.asarray
        return (
            self.c0
            + self.c_tokens * f(num_tokens, dtype=np.float64)
            + self.c_prefill_attn * f(prefill_attn, dtype=np.float64)
            + self.c_decode_kv * f(decode_kv, dtype=np.float64)
            + self.c_prefill * f(num_prefill, dtype=np.float64)
            + self.c_decode * f(num_decode, dtype=np.float64)
        )


class ExtendedLinearCostModel(LinearCostModel):
    """:class:`LinearCostModel` plus a GEMM knee and three item-level terms (``item_priced``).

    ``c0 + c_tokens*max(num_tokens, token_knee) + c_prefill_attn*prefill_attn
    + c_decode_kv*decode_kv + c_prefill*num_prefill + c_decode*num_decode
    + c_split_path*split_path + c_longest_context*longest_context
    + c_short_prefill_kv*short_prefill_kv`` (an empty batch gets no knee).

    Why: below about 128 tokens a step is memory-bound and flat (the knee); a short chunk over a
    long cached context takes the split-KV attention path, and attention is set by the longest
    context, not only by the sums (``calibration/README.md``, "Profiles measured on a GPU").
    The engine prices such a model from each step's items (:func:`items_step_time`); a caller
    with only the five features gets the item-level terms at 0. A pure-decode step's price
    depends on its longest context unless ``c_split_path == c_longest_context == 0``
    (``decode_priced_by_sums``); the engine's decode stretches price each step with the longest
    context growing by one (:meth:`decode_series_longest`), exact either way.
    """

    item_priced = True
    EXTRA_COEFFICIENTS = ("c_split_path", "c_longest_context", "c_short_prefill_kv")
    TERMS = ("token_knee", "short_max_new_tokens", "long_min_cached")
    TERM_DEFAULTS = {"token_knee": 0, "short_max_new_tokens": SHORT_MAX_NEW_TOKENS,
                     "long_min_cached": LONG_MIN_CACHED}  # fmt: skip

    def __init__(
        self,
        c0: float,
        c_tokens: float = 0.0,
        c_prefill_attn: float = 0.0,
        c_decode_kv: float = 0.0,
        c_prefill: float = 0.0,
        c_decode: float = 0.0,
        c_split_path: float = 0.0,
        c_longest_context: float = 0.0,
        c_short_prefill_kv: float = 0.0,
        name: str = "linear+items",
        token_knee: int = 0,
        short_max_new_tokens: int = SHORT_MAX_NEW_TOKENS,
        long_min_cached: int = LONG_MIN_CACHED,
    ) -> None:
        LinearCostModel.__init__(
            self, c0, c_tokens, c_prefill_attn, c_decode_kv, c_prefill, c_decode, name=name
        )
        self._init_terms(
            {"c_split_path": c_split_path, "c_longest_context": c_longest_context,
             "c_short_prefill_kv": c_short_prefill_kv},
            {"token_knee": token_knee, "short_max_new_tokens": short_max_new_tokens,
             "long_min_cached": long_min_cached},
        )  # fmt: skip

    def _init_terms(self, extra: dict[str, float], terms: dict[str, int]) -> None:
        """Validate and set the extra coefficients and the terms' integer parameters."""
        for key in self.EXTRA_COEFFICIENTS:
            value = extra.get(key, 0.0)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                raise CostModelError(f"linear cost model: {key} must be a number, got {value!r}")
            if abs(value) == float("inf"):
                raise CostModelError(f"linear cost model: {key} must be finite, got {value!r}")
            setattr(self, key, float(value))
        unknown = set(terms) - set(self.TERMS)
        if unknown:
            raise CostModelError(
                f"{type(self).__name__}: unknown terms {sorted(unknown)}; allowed: "
                f"{list(self.TERMS)}"
            )
        for key in self.TERMS:
            value = terms.get(key, self.TERM_DEFAULTS[key])
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CostModelError(
                    f"linear cost model: {key} must be an integer >= 0, got {value!r}"
                )
            setattr(self, key, value)
        self._knee = float(getattr(self, "token_knee", 0))

    @property
    def decode_priced_by_sums(self) -> bool:
        """Whether a pure-decode step's price depends on (n, sum of contexts) only."""
        return self.c_split_path == 0.0 and self.c_longest_context == 0.0

    def coefficients(self) -> dict[str, float]:
        """The nine coefficients by name."""
        return {key: getattr(self, key) for key in self.COEFFICIENTS + self.EXTRA_COEFFICIENTS}

    def terms(self) -> dict[str, int]:
        """The knee and the short / long thresholds of the item-level terms."""
        return {key: getattr(self, key) for key in self.TERMS}

    def step_time(
        self,
        num_tokens,
        prefill_attn,
        decode_kv,
        num_prefill,
        num_decode,
        split_path=0,
        longest_context=0,
        short_prefill_kv=0,
    ) -> float:
        """Evaluate the model for one batch (item-level terms default to 0)."""
        t = float(num_tokens)
        if 0.0 < t < self._knee:
            t = self._knee
        return (
            self.c0
            + self.c_tokens * t
            + self.c_prefill_attn * float(prefill_attn)
            + self.c_decode_kv * float(decode_kv)
            + self.c_prefill * float(num_prefill)
            + self.c_decode * float(num_decode)
            + self.c_split_path * float(split_path)
            + self.c_longest_context * float(longest_context)
            + self.c_short_prefill_kv * float(short_prefill_kv)
        )

    def step_times(
        self,
        num_tokens,
        prefill_attn,
        decode_kv,
        num_prefill,
        num_decode,
        split_path=0,
        longest_context=0,
        short_prefill_kv=0,
    ):
        """Vectorised ``step_time`` (same expression order, so equal bit for bit)."""
        f = np.asarray
        t = f(num_tokens, dtype=np.float64)
        t = np.where((t > 0.0) & (t < self._knee), self._knee, t)
        return (
            self.c0
            + self.c_tokens * t
            + self.c_prefill_attn * f(prefill_attn, dtype=np.float64)
            + self.c_decode_kv * f(decode_kv, dtype=np.float64)
            + self.c_prefill * f(num_prefill, dtype=np.float64)
            + self.c_decode * f(num_decode, dtype=np.float64)
            + self.c_split_path * f(split_path, dtype=np.float64)
            + self.c_longest_context * f(longest_context, dtype=np.float64)
            + self.c_short_prefill_kv * f(short_prefill_kv, dtype=np.float64)
        )

    decode_series = None
    """Not the linear closed form (the knee and item terms): stretches use
    :meth:`decode_series_longest`."""

    def decode_series_longest(
        self, n: int, m0: int, longest: int, k: int, start: float, stop: float
    ) -> tuple[list[float], list[float]]:
        """Durations and start times of up to ``k`` pure-decode steps, cut at ``stop``.

        ``n`` decodes whose cached tokens sum to ``m0`` and peak at ``longest`` at the first
        step; each step adds one token to every context. The item-level terms of step ``j`` are
        those :func:`item_terms` gives its items (no prefill: ``short_prefill_kv`` is 0; a
        decode is short, so ``split_path`` is 1 once the longest context exceeds
        ``long_min_cached``), priced with the same integer arguments, so the floats equal
        stepping one step at a time.
        """
        durations: list[float] = []
        starts = [start]
        t = start
        step_time = self.step_time
        threshold = self.long_min_cached
        short = 1 <= self.short_max_new_tokens
        for j in range(k):
            if t >= stop:
                break
            top = longest + j
            d = float(
                step_time(n, 0, m0 + j * n, 0, n, 1 if short and top > threshold else 0, top, 0)
            )
            durations.append(d)
            t = t + d
            starts.append(t)
        return durations, starts


TOKEN_KNOTS = (16, 128, 512, 2048)
"""Knots of :class:`PiecewiseCostModel`'s token term (powers of two at GEMM tile multiples,
fixed a priori: flat below 16 tokens, one slope per interval, ``c_tokens`` above 2048)."""


class PiecewiseCostModel(ExtendedLinearCostModel):
    """:class:`ExtendedLinearCostModel` with a piecewise token term and per-item prefill terms.

    Flags ``item_priced`` and ``prefill_item_terms`` (:func:`items_step_time`).

    ``c0 + tok(num_tokens) + c_prefill_attn*prefill_attn + c_decode_kv*decode_kv
    + c_prefill*num_prefill + c_decode*num_decode + c_split_path*split_path
    + c_longest_context*longest_context + c_short_prefill_kv*short_prefill_kv
    + c_mixed*[num_prefill > 0 and num_decode > 0] + c_short_prefill_chunks*short_prefill_chunks
    + c_longest_prefill*longest_prefill``, where for knots ``k_0 < ... < k_K`` and a non-empty
    batch ``tok(t) = sum_i token_slopes[i] * (min(t, k_{i+1}) - k_i)^+ + c_tokens * (t - k_K)^+``
    (flat below ``k_0``; 0 for an empty batch).

    Why: a step's GEMM time is flat while memory-bound and then grows with a slope that changes
    with tile utilisation (one knee is not enough for steps of 16-512 tokens); a mixed batch
    runs two attention calls; a short chunk over a long context costs by its KV chunks; a long
    prefill's attention is bound by its longest span (``calibration/reports/cost-forms``).
    The two prefill terms and the mixed indicator are 0 in a pure-decode step, so decode
    stretches are priced exactly as :class:`ExtendedLinearCostModel`'s
    (:meth:`decode_series_longest`, stepping the same ``step_time``).
    """

    prefill_item_terms = True
    EXTRA_COEFFICIENTS = (
        *ExtendedLinearCostModel.EXTRA_COEFFICIENTS,
        "c_mixed",
        "c_short_prefill_chunks",
        "c_longest_prefill",
    )
    TERMS = ("short_max_new_tokens", "long_min_cached")
    TERM_DEFAULTS = {
        "short_max_new_tokens": SHORT_MAX_NEW_TOKENS,
        "long_min_cached": LONG_MIN_CACHED,
    }

    def __init__(
        self,
        c0: float,
        *linear: float,
        name: str = "piecewise",
        token_knots: Iterable[int] = TOKEN_KNOTS,
        token_slopes: Iterable[float] | None = None,
        short_max_new_tokens: int = SHORT_MAX_NEW_TOKENS,
        long_min_cached: int = LONG_MIN_CACHED,
        **coefficients: float,
    ) -> None:
        """``linear``: c_tokens ... c_decode by position; ``coefficients``: any by name."""
        names = LinearCostModel.COEFFICIENTS[1:]
        if len(linear) > len(names):
            raise CostModelError(
                f"piecewise cost model: at most {len(names)} positional coefficients after c0 "
                f"({', '.join(names)}), got {len(linear)}"
            )
        lin = dict(zip(names, linear, strict=False))
        extra = {}
        for key, value in coefficients.items():
            if key in lin:
                raise CostModelError(f"piecewise cost model: {key} given twice")
            if key not in names and key not in self.EXTRA_COEFFICIENTS:
                raise CostModelError(
                    f"piecewise cost model: unknown coefficient {key!r}; allowed: "
                    f"{list(LinearCostModel.COEFFICIENTS + self.EXTRA_COEFFICIENTS)}"
                )
            (lin if key in names else extra)[key] = value
        LinearCostModel.__init__(self, c0, **lin, name=name)
        self._init_terms(
            extra,
            {"short_max_new_tokens": short_max_new_tokens, "long_min_cached": long_min_cached},
        )
        if self.long_min_cached < 1:
            raise CostModelError(
                f"piecewise cost model: long_min_cached (the split-KV chunk) must be >= 1, got "
                f"{self.long_min_cached}"
            )
        self._init_knots(token_knots, token_slopes)
        self._term_coefs = tuple(
            getattr(self, key)
            for key in self.COEFFICIENTS[2:] + self.EXTRA_COEFFICIENTS
            if key != "c_mixed"
        )

    def decode_series_longest(
        self, n: int, m0: int, longest: int, k: int, start: float, stop: float
    ) -> tuple[list[float], list[float]]:
        """:meth:`ExtendedLinearCostModel.decode_series_longest` with ``step_time`` inlined.

        The same float operations in the same order as ``step_time(n, 0, m0 + j * n, 0, n,
        split, longest + j, 0)``, the constant head computed once (a pure-decode step has no
        mixed term), so durations equal stepping bit for bit.
        """
        a, kv, p, dc, sp, lc, spkv = self._term_coefs[:7]
        head = self.c0 + self.token_term(n) + a * 0.0
        pz, dn, tail = p * 0.0, dc * float(n), spkv * 0.0
        split = 1 <= self.short_max_new_tokens
        threshold = self.long_min_cached
        durations: list[float] = []
        starts = [start]
        t = start
        for j in range(k):
            if t >= stop:
                break
            top = longest + j
            on = 1.0 if split and top > threshold else 0.0
            d = head + kv * float(m0 + j * n) + pz + dn + sp * on + lc * float(top) + tail
            durations.append(d)
            t = t + d
            starts.append(t)
        return durations, starts

    def _init_knots(self, knots: Iterable[int], slopes: Iterable[float] | None) -> None:
        """Validate and set the token term's knots and per-interval slopes."""
        try:
            ks = list(knots)
        except TypeError:
            raise CostModelError(
                f"piecewise cost model: token_knots must be a list of integers, got {knots!r}"
            ) from None
        if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
            raise CostModelError(
                f"piecewise cost model: token_knots must be a non-empty list of integers >= 1, "
                f"got {ks!r}"
            )
        if any(b <= a for a, b in zip(ks[:-1], ks[1:], strict=True)):
            raise CostModelError(
                f"piecewise cost model: token_knots must be strictly increasing, got {ks!r}"
            )
        ss = [0.0] * (len(ks) - 1) if slopes is None else list(slopes)
        if len(ss) != len(ks) - 1:
            raise CostModelError(
                f"piecewise cost model: token_slopes needs one slope per interval between knots "
                f"({len(ks) - 1} for knots {ks}), got {len(ss)}"
            )
        for i, v in enumerate(ss):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0.0):
                raise CostModelError(
                    f"piecewise cost model: token_slopes[{i}] must be a finite number >= 0 (the "
                    f"step time may not fall as tokens grow), got {v!r}"
                )
            if v == float("inf"):
                raise CostModelError(f"piecewise cost model: token_slopes[{i}] is infinite")
        if self.c_tokens < 0.0:
            raise CostModelError(
                f"piecewise cost model: c_tokens (the slope above the last knot) must be >= 0, "
                f"got {self.c_tokens!r}"
            )
        self.token_knots = tuple(ks)
        self.token_slopes = tuple(float(v) for v in ss)
        self._segments = tuple(
            (float(a), float(b), s)
            for a, b, s in zip(ks[:-1], ks[1:], self.token_slopes, strict=True)
        )
        self._last_knot = float(ks[-1])

    def terms(self) -> dict[str, Any]:
        """The short / long thresholds, the knots and the slopes."""
        return {
            **{key: getattr(self, key) for key in self.TERMS},
            "token_knots": list(self.token_knots),
            "token_slopes": list(self.token_slopes),
        }

    def token_term(self, num_tokens: float) -> float:
        """``tok(num_tokens)`` of the class docstring (seconds)."""
        t = float(num_tokens)
        tok = 0.0
        for lo, hi, slope in self._segments:
            if t <= lo:
                return tok
            tok = tok + slope * ((t if t < hi else hi) - lo)
        if t > self._last_knot:
            tok = tok + self.c_tokens * (t - self._last_knot)
        return tok

    def step_time(
        self, num_tokens, prefill_attn, decode_kv, num_prefill, num_decode, *terms
    ) -> float:
        """Evaluate the model for one batch.

        ``terms``: up to five item-level values in the order ``split_path``,
        ``longest_context``, ``short_prefill_kv``, ``short_prefill_chunks``, ``longest_prefill``
        (missing ones are 0). The mixed-batch term is added last.
        """
        if len(terms) > 5:
            raise TypeError(f"step_time takes at most 5 item-level terms, got {len(terms)}")
        coefs = self._term_coefs
        t = self.c0 + self.token_term(num_tokens)
        for i, x in enumerate((prefill_attn, decode_kv, num_prefill, num_decode, *terms)):
            t = t + coefs[i] * float(x)
        if num_prefill > 0 and num_decode > 0:
            t = t + self.c_mixed
        return t

    def step_times(self, num_tokens, prefill_attn, decode_kv, num_prefill, num_decode, *terms):
        """Vectorised ``step_time`` (same operations in the same order, so equal bit for bit).

        ``terms``: up to five item-level arrays in ``step_time``'s order (missing ones are 0).
        """
        if len(terms) > 5:
            raise TypeError(f"step_times takes at most 5 item-level terms, got {len(terms)}")
        f = np.asarray
        t = f(num_tokens, dtype=np.float64)
        tok = np.zeros(np.shape(t))
        for lo, hi, slope in self._segments:
            tok = tok + slope * (np.minimum(t, hi) - lo) * (t > lo)
        tok = tok + self.c_tokens * np.maximum(t - self._last_knot, 0.0)
        npf = f(num_prefill, dtype=np.float64)
        ndc = f(num_decode, dtype=np.float64)
        coefs = self._term_coefs
        out = self.c0 + tok
        for i, x in enumerate((prefill_attn, decode_kv, npf, ndc, *terms)):
            out = out + coefs[i] * f(x, dtype=np.float64)
        mixed = ((npf > 0.0) & (ndc > 0.0)).astype(np.float64)
        return out + self.c_mixed * mixed
