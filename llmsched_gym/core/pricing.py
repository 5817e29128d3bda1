"""How an engine prices its steps: one adapter per engine, chosen once from the cost model.

Cost models differ in what a step's price reads: the batch's five sums (every model), the five
plus ``prefill_kv`` (models flagged ``uses_prefill_kv``: InferMax's m_p term), or the step's
items (``item_priced`` or ``phase_items``: the extended and piecewise profiles, Vidur's phase
rule); and in how a decode stretch is priced: by the model's closed form over the longest
context too (``decode_series_longest``), by its own ``decode_series``, or step by step with the
same floats. ``step_pricer(cost_model)`` reads those flags once and returns the ``StepPricer``
that prices as the model asks, so the engine's step makes one call and probes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from llmsched_gym.cost.base import items_step_time

if TYPE_CHECKING:
    from llmsched_gym.core.context import StepContext

_SERIES_LOOP_MAX = 256
"""Longest stretch priced step by step (or by the model's ``decode_series``); longer ones use
the vectorised ``step_times``."""


class StepPricer:
    """Prices a step from the batch's five sums, and decode stretches (the default adapter).

    Attributes read by the engine: ``phase_items`` (the model prices items by phase, so a
    one-token prefill item is not a decode: stretches stop at it) and ``needs_longest``
    (stretches are priced with the longest context too).
    """

    def __init__(self, cost_model: Any) -> None:
        self.cost_model = cost_model
        self.phase_items = bool(getattr(cost_model, "phase_items", False))
        """The model prices items by phase (``Request.in_prefill_phase``), not by size."""
        self._series_longest = getattr(cost_model, "decode_series_longest", None)
        self.needs_longest = self._series_longest is not None
        """Decode stretches are priced with the longest context too (item-level models)."""
        self._series = getattr(cost_model, "decode_series", None)

    def price(self, ctx: StepContext) -> float:
        """The model's time of the batch built on ``ctx``."""
        return self.cost_model.step_time(
            ctx._tokens, ctx._prefill_attn, ctx._decode_kv, ctx._num_prefill, ctx._num_decode
        )

    def decode_series(
        self, n: int, m0: int, longest: int, k: int, now: float, t_next: float
    ) -> tuple[list[float], list[float]]:
        """Durations and starts of up to ``k`` decode steps of ``n`` requests, cut at ``t_next``.

        Step ``j`` has context sum ``m0 + j * n`` (and longest context ``longest + j``); each
        duration is priced with the same float operations as stepping it, so a stretch priced
        in pieces equals one priced whole. ``len(starts) == len(durations) + 1``.
        """
        if self._series_longest is not None:
            return self._series_longest(n, m0, longest, k, now, t_next)
        if k <= _SERIES_LOOP_MAX:
            if self._series is not None:
                return self._series(n, m0, k, now, t_next)
            step_time = self.cost_model.step_time
            durations: list[float] = []
            starts = [now]
            t = now
            for j in range(k):
                if t >= t_next:
                    break
                d = step_time(n, 0, m0 + j * n, 0, n)
                durations.append(d)
                t = t + d
                starts.append(t)
            return durations, starts
        # A long stretch is cut at t_next after a few steps more often than not (a cluster's
        # next event): price its first _SERIES_LOOP_MAX steps as a short one, the rest (if it
        # gets there) vectorised from where they end; in pieces, as the docstring allows.
        head = _SERIES_LOOP_MAX
        durations, starts = self.decode_series(n, m0, longest, head, now, t_next)
        if len(durations) < head:
            return durations, starts
        k -= head
        m0 += head * n
        now = starts[-1]
        steps = np.arange(k, dtype=np.int64)
        nn = np.full(k, n, dtype=np.int64)
        zero = np.zeros(k, dtype=np.int64)
        dur = self.cost_model.step_times(nn, zero, m0 + steps * n, zero, nn)
        st = np.cumsum(np.concatenate(([now], dur)))  # sequential additions
        k = min(k, int(np.searchsorted(st[:k], t_next, side="left")))
        return durations + dur[:k].tolist(), starts + st[1 : k + 1].tolist()


class _PrefillKVPricer(StepPricer):
    """The five sums plus ``prefill_kv``, the context under the prefill chunks (InferMax)."""

    def price(self, ctx: StepContext) -> float:
        """The model's time of the batch built on ``ctx``."""
        return self.cost_model.step_time(
            ctx._tokens, ctx._prefill_attn, ctx._decode_kv, ctx._num_prefill,
            ctx._num_decode, prefill_kv=ctx._prefill_kv,
        )  # fmt: skip


class _ItemPricer(StepPricer):
    """Priced from the step's (new tokens, cached tokens) items (``items_step_time``).

    With ``phase_items`` (Vidur's rule) an item of a request that has not sampled since its
    (re)admission is a prefill even with one token (a one-token prompt, the last chunk of a
    refill); ``item_priced`` models also get item-level terms (longest context...).
    """

    def price(self, ctx: StepContext) -> float:
        """The model's time of the batch built on ``ctx``."""
        scheduled = ctx.scheduled
        items = [(n, req.num_computed_tokens) for req, n in scheduled.items()]
        phases = [r.in_prefill_phase for r in scheduled] if self.phase_items else None
        return items_step_time(self.cost_model, items, phases)


def step_pricer(cost_model: Any) -> StepPricer:
    """The adapter that prices steps as ``cost_model`` asks (see the module docstring)."""
    if getattr(cost_model, "phase_items", False) or getattr(cost_model, "item_priced", False):
        return _ItemPricer(cost_model)
    if getattr(cost_model, "uses_prefill_kv", False):
        return _PrefillKVPricer(cost_model)
    return StepPricer(cost_model)
