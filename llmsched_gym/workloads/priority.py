"""Priority classes, weights and TTFT/TPOT SLOs on any trace (ProServe-style workloads).

ProServe (Huang et al., arXiv 2512.12928, §5.1 "Details") marks each request high or low
priority with probability 0.5, with weights 2 and 1, and judges it against TTFT and TPOT SLOs.
The paper does not give its SLO values (its Fig. 5 shows a 0.8 s TTFT SLO; the authors'
``weizhehuang0827/xllm-service@0f87e4bb`` defaults to 1,000 ms / 50 ms), so they are set as
multiples (5× by default) of the *unloaded* TTFT and TPOT, i.e. the latency one request sees
alone on the engine, computed from a cost model.

Priorities follow vLLM: a lower ``priority`` is served first, so high = 0 and low = 1.

>>> from llmsched_gym.workloads import assign_priority_classes, assign_slos, load_trace
>>> specs = assign_priority_classes(load_trace("splitwise-conv", limit=100), seed=0)
>>> specs = assign_slos(specs, ttft_s=1.0, tpot_s=0.05)             # xllm-service defaults
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsched_gym.core.request import RequestSpec

__all__ = [
    "PROSERVE_CLASSES",
    "PriorityClass",
    "assign_priority_classes",
    "assign_slos",
    "unloaded_tpot_s",
    "unloaded_ttft_s",
]


@dataclass(frozen=True)
class PriorityClass:
    """One priority class of a workload."""

    priority: int
    """vLLM priority value (lower is served first)."""
    weight: float
    """Gain weight of a request of this class (ProServe's w_p)."""
    probability: float
    """Share of requests (or clients) in this class."""


PROSERVE_CLASSES: tuple[PriorityClass, ...] = (
    PriorityClass(priority=0, weight=2.0, probability=0.5),
    PriorityClass(priority=1, weight=1.0, probability=0.5),
)
"""ProServe §5.1: high (priority 0, weight 2) or low (priority 1, weight 1), each with p = 0.5."""


def assign_priority_classes(
    specs: Sequence[RequestSpec],
    classes: Sequence[PriorityClass] = PROSERVE_CLASSES,
    *,
    per_client: bool = False,
    seed: int = 0,
) -> list[RequestSpec]:
    """Draws a priority class for every request (or client) and sets ``priority`` and ``weight``.

    Args:
        specs: The trace; the order of draws follows it.
        classes: The classes; their probabilities must sum to 1.
        per_client: Draw once per ``client_id`` (in order of first appearance) so all requests of
            a client share its class, as ProServe's client priorities do; requests without a
            client id are drawn individually.
        seed: Seed; the same seed gives the same classes.

    Returns:
        New specs, in the given order.

    Raises:
        ValueError: For an empty class list, a bad priority, weight or probability; the message
            names the class index, field and value.
    """
    if not classes:
        raise ValueError("classes must hold at least one PriorityClass")
    probs = []
    for index, cls in enumerate(classes):
        if isinstance(cls.priority, bool) or not isinstance(cls.priority, (int, np.integer)):
            raise ValueError(f"classes[{index}].priority must be an int, got {cls.priority!r}")
        _check_positive(f"classes[{index}].weight", cls.weight)
        p = cls.probability
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0 <= p <= 1):
            raise ValueError(f"classes[{index}].probability must be in [0, 1], got {p!r}")
        probs.append(float(p))
    if not math.isclose(sum(probs), 1.0, abs_tol=1e-9):
        raise ValueError(f"classes: probabilities must sum to 1, got {sum(probs)!r}")
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(probs)

    def draw() -> PriorityClass:
        return classes[
            min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), len(classes) - 1)
        ]

    by_client: dict[str, PriorityClass] = {}
    out = []
    for spec in specs:
        if per_client and spec.client_id is not None:
            cls = by_client.get(spec.client_id)
            if cls is None:
                cls = by_client[spec.client_id] = draw()
        else:
            cls = draw()
        out.append(dataclasses.replace(spec, priority=int(cls.priority), weight=float(cls.weight)))
    return out


def _check_positive(name: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not (math.isfinite(value) and value > 0)
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _item(c: int, m: int) -> tuple[int, int, int, int, int]:
    """Batch features of one scheduled item: ``c`` new tokens on ``m`` cached (cost/base.py)."""
    if c > 1:
        return c, c * c + 2 * m * c, 0, 1, 0
    return c, 0, m, 0, 1


def unloaded_ttft_s(cost_model: Any, prompt_len: int, *, chunk_size: int | None = None) -> float:
    """TTFT of one request alone on the engine: its prefill steps, in chunks of ``chunk_size``.

    Each chunk of ``c`` tokens on ``m`` already computed costs
    ``cost_model.step_time(c, c*c + 2*m*c, 0, 1, 0)``; the last chunk yields the first token.

    Args:
        cost_model: Anything with ``step_time(tokens, prefill_attn, decode_kv, num_prefill,
            num_decode)`` (``llmsched_gym.cost``).
        prompt_len: Prompt tokens (>= 1).
        chunk_size: Token budget per step (vLLM ``max_num_batched_tokens``); None: one step.
    """
    if (
        isinstance(prompt_len, bool)
        or not isinstance(prompt_len, (int, np.integer))
        or prompt_len < 1
    ):
        raise ValueError(f"prompt_len must be an int >= 1, got {prompt_len!r}")
    step = int(prompt_len) if chunk_size is None else int(_check_positive("chunk_size", chunk_size))
    total, done = 0.0, 0
    while done < prompt_len:
        c = min(step, prompt_len - done)
        total += float(cost_model.step_time(*_item(c, done)))
        done += c
    return total


def unloaded_tpot_s(cost_model: Any, prompt_len: int, output_len: int) -> float:
    """Mean time per output token of one request alone: a decode step at its mid-decode context.

    Decode step ``k`` (k = 1 .. output_len - 1) reads ``prompt_len + k - 1`` cached tokens; the
    step at the mean context ``prompt_len + (output_len - 2) / 2`` (rounded down) stands for
    them all, which is exact for the linear cost models and cheap for long outputs.
    """
    for name, value in (("prompt_len", prompt_len), ("output_len", output_len)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    context = int(prompt_len) + max(int(output_len) - 2, 0) // 2
    return float(cost_model.step_time(*_item(1, context)))


def assign_slos(
    specs: Sequence[RequestSpec],
    *,
    ttft_s: float | None = None,
    tpot_s: float | None = None,
    cost_model: Any = None,
    ttft_scale: float = 5.0,
    tpot_scale: float = 5.0,
    basis: str = "trace",
    chunk_size: int | None = None,
    with_deadline: bool = False,
) -> list[RequestSpec]:
    """Sets ``slo_ttft_s`` and ``slo_tpot_s``, in seconds or as multiples of unloaded latency.

    An SLO given in seconds (``ttft_s``, ``tpot_s``) is used as is. Otherwise, with a
    ``cost_model``, it is ``scale × unloaded latency`` (``unloaded_ttft_s`` /
    ``unloaded_tpot_s``), where the unloaded latency is that of a request of the trace's mean
    prompt and output length (``basis="trace"``: one SLO per trace, as ProServe sets one per
    dataset and model) or of each request itself (``basis="request"``).

    Args:
        specs: The trace.
        ttft_s: TTFT SLO in seconds for every request.
        tpot_s: TPOT SLO in seconds for every request.
        cost_model: Cost model for SLOs given as multiples (``llmsched_gym.cost``).
        ttft_scale: Multiple of the unloaded TTFT (default 5).
        tpot_scale: Multiple of the unloaded TPOT (default 5).
        basis: ``"trace"`` or ``"request"``.
        chunk_size: Prefill token budget per step for the unloaded TTFT (None: one step).
        with_deadline: Also set ``deadline_s = arrival + TTFT-SLO + (output_len - 1) × TPOT-SLO``,
            the last token's deadline in ProServe's Eq. 3.

    Returns:
        New specs, in the given order.

    Raises:
        ValueError: If neither seconds nor a cost model are given for an SLO, or a value is out
            of range; the message names the argument and value.
    """
    if basis not in ("trace", "request"):
        raise ValueError(f"basis must be 'trace' or 'request', got {basis!r}")
    fixed_ttft = None if ttft_s is None else _check_positive("ttft_s", ttft_s)
    fixed_tpot = None if tpot_s is None else _check_positive("tpot_s", tpot_s)
    if cost_model is None and (fixed_ttft is None or fixed_tpot is None):
        missing = "ttft_s" if fixed_ttft is None else "tpot_s"
        raise ValueError(f"{missing} is None and no cost_model is given to derive it from")
    ttft_scale = _check_positive("ttft_scale", ttft_scale)
    tpot_scale = _check_positive("tpot_scale", tpot_scale)
    if not specs:
        return []
    trace_ttft = trace_tpot = None
    if basis == "trace" and cost_model is not None:
        mean_prompt = max(1, round(sum(s.prompt_len for s in specs) / len(specs)))
        mean_output = max(1, round(sum(s.output_len for s in specs) / len(specs)))
        trace_ttft = ttft_scale * unloaded_ttft_s(cost_model, mean_prompt, chunk_size=chunk_size)
        trace_tpot = tpot_scale * unloaded_tpot_s(cost_model, mean_prompt, mean_output)
    out = []
    for spec in specs:
        ttft = fixed_ttft
        if ttft is None:
            ttft = (
                trace_ttft
                if basis == "trace"
                else ttft_scale
                * unloaded_ttft_s(cost_model, spec.prompt_len, chunk_size=chunk_size)
            )
        tpot = fixed_tpot
        if tpot is None:
            tpot = (
                trace_tpot
                if basis == "trace"
                else tpot_scale * unloaded_tpot_s(cost_model, spec.prompt_len, spec.output_len)
            )
        changes: dict[str, Any] = {"slo_ttft_s": float(ttft), "slo_tpot_s": float(tpot)}
        if with_deadline:
            changes["deadline_s"] = spec.arrival_time + ttft + (spec.output_len - 1) * tpot
        out.append(dataclasses.replace(spec, **changes))
    return out
