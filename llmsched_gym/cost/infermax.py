"""InferMax's batch cost model (Kim et al., §3.2; coefficients from the authors' code).

Per layer, in milliseconds (the authors' code, ``ValerioL29/infermax@f18ad5a``:
``vidur/vidur/execution_time_predictor/sklearn_execution_time_predictor.py`` and
``vidur/vidur/entities/execution_time.py``):

* non-attention ("other", TP all-reduce folded in): ``a_o·Σc + b_o``;
* decode attention, when the batch has ``B_d >= 1`` decodes:
  ``(a_d·Σ_d m + b_d)·(1 + 0.1·[B_d > 1]) + s_d·B_d`` (``B_d·avg_kv = Σ_d m``);
* prefill attention, when it has ``B_p >= 1`` prefill items:
  ``(a_p·Σ_p(c² + 2mc) + b_p)·(1 + 0.1·[B_p > 1]) + s_p·B_p + m_p·Σ_p m``.

Batch time = ``layers × (other + decode + prefill)`` ms, returned in seconds.

Mapping onto the engine's five features (``llmsched_gym.cost.base``): ``Σc = num_tokens``,
``Σ_p(c² + 2mc) = prefill_attn``, ``Σ_d m = decode_kv``, ``B_p = num_prefill``,
``B_d = num_decode``. ``m_p·Σ_p m`` (KV read by prefill chunks) is not among the five: the engine
passes it as ``prefill_kv`` to models with ``uses_prefill_kv`` (this one); given only the five:

* with one prefill item it is recovered exactly: ``c = num_tokens - num_decode`` and
  ``m = (prefill_attn - c²) / (2c)``;
* with ``B_p > 1`` items it is estimated assuming equal chunk sizes
  (``Σm ≈ (prefill_attn - C_p²/B_p) / (2·C_p/B_p)``, ``C_p = num_tokens - num_decode``), clamped
  to ``[0, ...]``; exact when the chunks are equal, an overestimate otherwise (by Cauchy-Schwarz),
  and zero-ish for fresh prefills with ``m = 0`` of equal size. In the §4 grids every multi-item
  prefill batch has equal fresh prompts, so the estimate is exact there;
* the engine passes ``prefill_kv=`` (``Σ_p m``, accumulated next to ``prefill_attn``) to models
  that set ``uses_prefill_kv``, as this one does, so in simulation the term is exact; the
  estimate above serves callers that give only the five common features.

Another engine detail: the engine's step features class an item with ``c = 1`` as a decode
(vLLM V1's kernels do). Vidur classifies by phase instead (``Request.is_prefill_complete``:
``vidur/entities/batch.py`` and ``_get_batch_prefill_attention_params`` /
``_get_batch_decode_attention_params`` in ``sklearn_execution_time_predictor.py``), so a
one-token prompt (``I = 1``) or the last one-token chunk of a refill pays the prefill terms
(``b_p``, ``s_p``). This model declares ``phase_items``, so the engine (and the live backend's
``timer="model"``) prices its items by phase (``Request.in_prefill_phase``): the first batch of
1,024 one-token prompts costs 118.2 ms, as in Vidur, not the 89.6 ms of decode pricing.

Left out: Vidur's profiled elementwise ``add`` per layer (no coefficients published) and CPU
overheads (skipped by the paper). At ~3 ms per decode step the 7B set looks low for an A100; we
reproduce the coefficients as the authors' code has them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmsched_gym.errors import CostModelError

__all__ = ["COEFFICIENTS", "InferMaxCoefficients", "InferMaxCostModel", "load_infermax"]


@dataclass(frozen=True)
class InferMaxCoefficients:
    """One coefficient set of §3.2 (per layer, milliseconds)."""

    a_p: float
    b_p: float
    a_d: float
    b_d: float
    a_o: float
    b_o: float
    s_p: float
    s_d: float
    m_p: float
    num_layers: int


COEFFICIENTS: dict[str, InferMaxCoefficients] = {
    # The authors' hard-coded values (``sklearn_execution_time_predictor.py``); layers from the
    # model cards.
    "llama-2-7b": InferMaxCoefficients(
        a_p=1.6773e-7,
        b_p=0.0926,
        a_d=8.513e-6,
        b_d=0.01921,
        a_o=0.00191,
        b_o=0.06486,
        s_p=0.001534,
        s_d=0.00074,
        m_p=9.224e-6,
        num_layers=32,
    ),
    "llama-3-70b": InferMaxCoefficients(
        a_p=4.309e-8,
        b_p=0.2112,
        a_d=1.222e-6,
        b_d=0.081,
        a_o=0.002,
        b_o=0.159,
        s_p=9.03e-4,
        s_d=3.92e-4,
        m_p=3.805e-7,
        num_layers=80,
    ),
}
"""Coefficient sets by model: the 7B set (Llama-2-7B, A100) and the 70B set (Llama-3-70B TP4)."""

_ALIASES = {"llama-2-70b": "llama-3-70b", "7b": "llama-2-7b", "70b": "llama-3-70b"}


def _prefill_kv_estimate(num_tokens, prefill_attn, num_prefill, num_decode) -> float:
    """Σ_p m from the five features: exact for one prefill item, equal-chunk estimate otherwise."""
    if num_prefill <= 0:
        return 0.0
    cp = float(num_tokens - num_decode)
    if cp <= 0.0:
        return 0.0
    k = float(num_prefill)
    est = (float(prefill_attn) - cp * cp / k) / (2.0 * cp / k)
    return est if est > 0.0 else 0.0


class InferMaxCostModel:
    """The §3.2 cost model (``infermax:<model>``), in seconds per engine step.

    Args:
        model: ``llama-2-7b`` or ``llama-3-70b`` (aliases ``7b``, ``70b``).
        coefficients: Override the coefficient set.
    """

    uses_prefill_kv = True
    """The engine passes ``prefill_kv`` (Σ m over prefill items), so the m_p term is exact."""
    phase_items = True
    """Items are priced by phase, as Vidur classifies them: a one-token prompt (I = 1) or the
    last one-token chunk of a refill is a prefill (``Request.in_prefill_phase``)."""

    def __init__(self, model: str = "llama-2-7b", coefficients=None) -> None:
        key = _ALIASES.get(model.lower(), model.lower())
        if coefficients is None:
            if key not in COEFFICIENTS:
                known = ", ".join(COEFFICIENTS)
                raise CostModelError(
                    f"infermax cost model: unknown model {model!r}; known: {known}"
                )
            coefficients = COEFFICIENTS[key]
        self.coef: InferMaxCoefficients = coefficients
        self.model = key
        self.gpu = "a100-80gb"
        self.tp = 4 if key == "llama-3-70b" else 1
        self.name = f"infermax:{key}"

    def layer_ms(
        self,
        num_tokens: int,
        prefill_attn: int,
        decode_kv: int,
        num_prefill: int,
        num_decode: int,
        prefill_kv: float | None = None,
    ) -> tuple[float, float, float]:
        """Per-layer milliseconds (other, decode attention, prefill attention)."""
        k = self.coef
        other = k.a_o * float(num_tokens) + k.b_o
        dec = 0.0
        if num_decode > 0:
            dec = (k.a_d * float(decode_kv) + k.b_d) * (1.1 if num_decode > 1 else 1.0)
            dec += k.s_d * float(num_decode)
        pre = 0.0
        if num_prefill > 0:
            if prefill_kv is None:
                prefill_kv = _prefill_kv_estimate(num_tokens, prefill_attn, num_prefill, num_decode)
            pre = (k.a_p * float(prefill_attn) + k.b_p) * (1.1 if num_prefill > 1 else 1.0)
            pre += k.s_p * float(num_prefill) + k.m_p * float(prefill_kv)
        return other, dec, pre

    def step_time(
        self,
        num_tokens: int,
        prefill_attn: int,
        decode_kv: int,
        num_prefill: int,
        num_decode: int,
        prefill_kv: float | None = None,
    ) -> float:
        """Seconds of one batch: ``layers × (other + decode + prefill) / 1000``."""
        other, dec, pre = self.layer_ms(
            num_tokens, prefill_attn, decode_kv, num_prefill, num_decode, prefill_kv
        )
        return float(self.coef.num_layers) * (other + dec + pre) / 1000.0

    def step_times(self, num_tokens, prefill_attn, decode_kv, num_prefill, num_decode):
        """Vectorised :meth:`step_time`, element by element (bitwise equal by construction)."""
        cols = [np.asarray(x).ravel().tolist() for x in (num_tokens, prefill_attn, decode_kv)]
        cols += [np.asarray(x).ravel().tolist() for x in (num_prefill, num_decode)]
        out = [self.step_time(*row) for row in zip(*cols, strict=True)]
        return np.asarray(out, dtype=np.float64).reshape(np.shape(num_tokens))

    def num_gpu_blocks(self, block_size: int = 1, **_: object) -> int:
        """The paper's M = 100K KV tokens (+ vLLM's null block), in blocks of ``block_size``."""
        return -(-100_000 // block_size) + 1

    def __repr__(self) -> str:
        return f"InferMaxCostModel({self.model!r})"


def load_infermax(spec: str) -> InferMaxCostModel:
    """Parse ``infermax:<model>[@<gpu>[/tp<N>]]`` (the GPU/TP part is informational)."""
    body = spec.split(":", 1)[1] if ":" in spec else spec
    model = body.split("@", 1)[0]
    return InferMaxCostModel(model)
