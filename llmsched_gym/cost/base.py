"""The cost-model protocol: a batch's features in, the engine step's duration in seconds out.

A step's batch is summarised by five features (DESIGN.md, "Cost model"). For each scheduled item
with ``c`` new tokens on top of ``m`` tokens already in the KV cache:

* ``num_tokens``   = sum of c over all items (tokens the model computes this step);
* ``prefill_attn`` = sum of (c*c + 2*m*c) over prefill items (attention work of a chunk);
* ``decode_kv``    = sum of m over decode items (KV tokens a decode reads);
* ``num_prefill``  = items with c > 1 (prefills, chunks and refills);
* ``num_decode``   = items with c == 1 (computationally a decode, whatever the request's phase).

An empty batch (all zero) is a legal step: it costs the model's value at zero.

``step_times`` is the vectorised twin of ``step_time`` used by fast-forward: element ``i`` must be
bit-for-bit equal to ``step_time`` of the i-th features, so fast-forwarded runs match runs stepped
one iteration at a time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

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


def item_features(
    items: Iterable[tuple[int, int]], phases: Iterable[bool] | None = None
) -> tuple[int, int, int, int, int, int]:
    """The five features of ``(c, m)`` items plus ``prefill_kv`` (InferMax's sum of m).

    Accumulated in item order with integers, as the engine does (``prefill_kv`` sums ``m`` over
    the prefill items). An item is a prefill when it has more than one token (vLLM V1's kernels)
    or, with ``phases`` (per item: its request has not sampled since its (re)admission), when its
    request is in its prefill phase (Vidur's classification; cost models with ``phase_items``).
    """
    tokens = attn = dkv = npf = ndc = pkv = 0
    if phases is None:
        pairs: Iterable[tuple[tuple[int, int], bool]] = ((it, it[0] != 1) for it in items)
    else:
        pairs = zip(items, phases, strict=True)
    for (c, m), prefill in pairs:
        tokens += c
        if prefill:
            attn += c * c + 2 * m * c
            npf += 1
            pkv += m
        else:
            dkv += m
            ndc += 1
    return tokens, attn, dkv, npf, ndc, pkv


def items_step_time(
    model: Any, items: Iterable[tuple[int, int]], phases: Iterable[bool] | None = None
) -> float:
    """``model``'s time of a step of ``(c, m)`` items: the same floats as the engine's step.

    Models flagged ``uses_prefill_kv`` also get ``prefill_kv``; models flagged ``phase_items``
    class items by ``phases`` when given (see :func:`item_features`), others by size.
    """
    if not getattr(model, "phase_items", False):
        phases = None
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
        kv, pz, dn = self.c_decode_kv, self.c_prefill * 0.0, self.c_decode * fn
        durations: list[float] = []
        starts = [start]
        t = start
        m = m0
        for _ in range(k):
            if t >= stop:
                break
            d = head + kv * float(m) + pz + dn
            durations.append(d)
            t = t + d
            starts.append(t)
            m += n
        return durations, starts

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
