"""Analytic roofline cost model: a step's time from model shapes, GPU datasheet and TP degree.

Every operator of a step is either compute-bound or memory-bound; its time is the larger of
FLOPs / (peak FLOP/s x efficiency) and bytes / (peak bandwidth x efficiency) (Williams, Waterman and
Patterson, "Roofline", CACM 2009). For one step with the batch features of
:mod:`llmsched_gym.cost.base` (``T`` = num_tokens, ``P`` = prefill_attn = sum of c^2 + 2mc over
prefill chunks, ``D`` = decode_kv = sum of m over decodes, ``R`` = num_prefill + num_decode), per
GPU of a TP group, with ``L`` layers, hidden size ``h``, ``q`` query heads / TP and ``k`` KV heads /
TP of size ``d``, MLP width ``I`` / TP and ``b`` bytes per element::

    step = step_overhead + per_request_overhead * R
         + [T > 0] * (L * layer_floor + 2 L * allreduce_latency
                      + max(2 W T / F_gemm,  (W b + A b T) / B))        # QKV, O, MLP GEMMs
         + [R > 0] * max(2 H R / F_gemm,  (H b + (h + V/TP) b R) / B)    # LM head, 1 row/request
         + L * E b T / B                                                 # norms, rope, act, adds
         + L * 2 q d P / F_attn                                          # prefill attention
         + L * max(2 k d b / B_attn, 4 q d / F_attn) * D                 # decode attention
         + 2 L * 2 (TP-1)/TP * h b T / (link x link_efficiency)          # TP all-reduces

where ``W`` is one layer's GEMM weights per GPU, ``A`` its GEMM input + output widths, ``H`` the LM
head's weights per GPU, ``E`` the bytes per token the element-wise kernels move, ``F_gemm = peak x
gemm_mfu``, ``B = bandwidth x hbm_bw_efficiency``, ``F_attn = peak x attn_prefill_mfu``, ``B_attn =
bandwidth x attn_decode_bw_efficiency``.

Derivations:

* GEMM FLOPs are 2 per weight per token; at small T the weights are read once per step whatever T
  is, which is why decode is memory-bound and the time flat in T up to the ridge point.
* Prefill attention: a chunk of c new tokens on top of m cached ones has each new token i (1..c)
  attend to m + i keys, so sum_i (m + i) ~ mc + c^2/2 query-key pairs per head; QK^T and PV cost
  2d FLOPs per pair each, so 4 d (mc + c^2/2) = 2 d (c^2 + 2mc) FLOPs per head: ``2 q d P`` per
  layer.
* Decode attention reads every cached K and V once: ``2 k d b`` bytes per cached token per layer.
* Tensor parallelism all-reduces the hidden states twice per layer (after attention and after the
  MLP), ``T h b`` bytes each; a ring all-reduce moves 2 (TP-1)/TP of that over each GPU's link.

Ignored, and why: KV writes of the new tokens (``2 k d b T`` per layer, under 2% of the GEMM weight
traffic at realistic T); the prefill's reads of cached KV (compute dominates); sampling and
detokenisation beyond the per-request overhead; overlap between kernels (vLLM runs them in order).

Default efficiencies are calibrated on Vidur's real A100 / H100 operator timings
(``data/profiling/vidur``, microsoft/vidur 7d47513): see :class:`RooflineParams`.

Scalar and vectorised paths evaluate the same closed form, term by term in the same order, on IEEE
doubles (Python floats and numpy float64 round every + * max identically), so they agree bit for
bit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np

from llmsched_gym.config import VLLM_MAX_NUM_BATCHED_TOKENS, VLLM_MAX_NUM_SEQS
from llmsched_gym.cost.base import affine_decode_series
from llmsched_gym.cost.capacity import KVCapacity, MemoryOverheads, kv_capacity
from llmsched_gym.cost.hardware import GPUSpec, ModelSpec, get_gpu, get_model
from llmsched_gym.errors import CostModelError

__all__ = ["RooflineCostModel", "RooflineParams"]


@dataclass(frozen=True)
class RooflineParams:
    """Efficiency factors and overheads of the roofline, with the evidence behind each default.

    Evidence (Vidur's CUDA-timed operator medians, ``compute/<gpu>/<model>/mlp.csv`` and
    ``historical/e2d00e9/a100/attention.csv``, analysed in
    ``calibration/reports/roofline_defaults.md``):
    4096-token GEMMs reach 69-78% of peak BF16 on A100 and 66-76% on H100; 8-token GEMMs stream
    weights at 60-77% (A100) and 42-89% (H100) of datasheet bandwidth (lower for the small shards of
    TP 4-8); FlashAttention prefill reaches 10-19% of A100 peak on fresh 512-4096-token prompts and
    30-36% with a long cached prefix; decode attention reaches 67-78% of bandwidth at batch >= 32;
    the element-wise kernels of a layer take 12-46 us at T=1.
    """

    gemm_mfu: float = 0.72
    """Fraction of peak dense BF16 FLOP/s that large GEMMs reach (Vidur: 0.69-0.78 A100,
    0.66-0.76 H100)."""
    hbm_bw_efficiency: float = 0.80
    """Fraction of datasheet DRAM bandwidth that weight-streaming GEMMs reach (Vidur: 0.71-0.77 A100
    and 0.76-0.89 H100 at TP 1-4)."""
    attn_prefill_mfu: float = 0.25
    """Fraction of peak FLOP/s that prefill attention reaches on the (c^2 + 2mc) work (Vidur A100:
    0.10-0.19 on fresh prompts, 0.30-0.36 with a long cached prefix; 0.25 splits the difference)."""
    attn_decode_bw_efficiency: float = 0.75
    """Fraction of DRAM bandwidth that decode attention reaches reading the KV cache (Vidur A100:
    0.67-0.78 at batch >= 32; small batches sit on the layer floor instead)."""
    link_bw_efficiency: float = 0.60
    """Fraction of one-direction link bandwidth a ring all-reduce reaches (Vidur, 67 MB messages:
    bus bandwidth 156-167 GB/s of 300 on a100_dgx, 274-317 GB/s of 450 on h100_dgx)."""
    allreduce_latency_s: float = 10e-6
    """Fixed time per all-reduce call. Vidur's eager-NCCL tables show 7-60 us for small messages;
    vLLM's custom all-reduce inside CUDA graphs is at the low end."""
    layer_floor_s: float = 40e-6
    """Fixed time per layer per non-empty step: norms, rotary, activation, residual adds and the
    attention kernel at their minimum duration (Vidur: 12-46 us element-wise, 9-15 us
    attention)."""
    step_overhead_s: float = 1.0e-3
    """Fixed CPU time per step (scheduling, input preparation, sampling launch). Vidur's vLLM-V0
    measurements (historical cpu_overheads.csv) show 1.2 ms at batch 8; vLLM V1 overlaps part of
    it."""
    per_request_overhead_s: float = 10e-6
    """CPU time per scheduled request per step (V0 measurements: ~38 us; V1 persistent batches are
    cheaper)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
                raise CostModelError(
                    f"RooflineParams.{f.name} must be a finite number >= 0, got {value!r}"
                )
        for name in (
            "gemm_mfu",
            "hbm_bw_efficiency",
            "attn_prefill_mfu",
            "attn_decode_bw_efficiency",
            "link_bw_efficiency",
        ):
            value = getattr(self, name)
            if not (0.0 < value <= 1.0):
                raise CostModelError(
                    f"RooflineParams.{name} is a fraction in (0, 1], got {value!r}"
                )


class RooflineCostModel:
    """Roofline step times for one (model, GPU, TP); implements the CostModel protocol.

    Attributes:
        name: ``roofline:<model>@<gpu>/tp<N>``.
        model, gpu, tp: what it models (names, as the registry and the engine use them).
        coefficients: the precomputed closed-form constants (seconds, per unit of their feature).
    """

    def __init__(
        self,
        model: str | ModelSpec,
        gpu: str | GPUSpec,
        tp: int = 1,
        params: RooflineParams | None = None,
    ) -> None:
        self.model_spec = get_model(model)
        self.gpu_spec = get_gpu(gpu)
        self.model_spec.check_tp(tp)
        self.tp = tp
        self.params = params or RooflineParams()
        self.model = self.model_spec.name
        self.gpu = self.gpu_spec.name
        self.name = f"roofline:{self.model}@{self.gpu}/tp{tp}"
        self._precompute()

    # ------------------------------------------------------------------ constants
    def _precompute(self) -> None:
        m, g, p, tp = self.model_spec, self.gpu_spec, self.params, self.tp
        L, h, d, b = m.num_hidden_layers, m.hidden_size, m.head_dim, m.dtype_bytes
        q, k = m.q_heads_per_gpu(tp), m.kv_heads_per_gpu(tp)
        inter = m.intermediate_size / tp
        up = (2 if m.gated_mlp else 1) * inter
        f_gemm = g.peak_flops * p.gemm_mfu
        bw = g.memory_bandwidth_bytes_per_s * p.hbm_bw_efficiency
        f_attn = g.peak_flops * p.attn_prefill_mfu
        bw_attn = g.memory_bandwidth_bytes_per_s * p.attn_decode_bw_efficiency

        w_layer = m.layer_linear_params_per_gpu(tp)
        # GEMM activations in + out per token: QKV (h -> (q+2k)d), O (qd -> h), up (h -> up), down.
        act_layer = (h + (q + 2 * k) * d) + (q * d + h) + (h + up) + (inter + h)
        # Element-wise bytes per token: 2 norms (read+write h), 2 residual adds (read 2h, write h),
        # rotary on q and k (read+write), activation (read up, write I/TP).
        elem_layer = 2 * 2 * h + 2 * 3 * h + 2 * (q + k) * d + (up + inter)
        head = m.lm_head_params_per_gpu(tp)

        ar = 0.0
        ar_lat = 0.0
        if tp > 1:
            link = g.link_bytes_per_s(tp) * p.link_bw_efficiency
            ar = 2 * L * (2.0 * (tp - 1) / tp) * h * b / link
            ar_lat = 2 * L * p.allreduce_latency_s

        self.coefficients: dict[str, float] = {
            "step_overhead_s": p.step_overhead_s,
            "per_request_s": p.per_request_overhead_s,
            "nonempty_fixed_s": L * p.layer_floor_s + ar_lat,
            "gemm_compute_s_per_token": L * 2.0 * w_layer / f_gemm,
            "gemm_weights_s": L * w_layer * b / bw,
            "gemm_act_s_per_token": L * act_layer * b / bw,
            "head_compute_s_per_request": 2.0 * head / f_gemm,
            "head_weights_s": head * b / bw,
            "head_act_s_per_request": (h + m.padded_vocab() / tp) * b / bw,
            "per_token_s": L * elem_layer * b / bw + ar,
            "prefill_attn_s": L * 2.0 * q * d / f_attn,
            "decode_kv_s": L * max(2.0 * k * d * b / bw_attn, 4.0 * q * d / f_attn),
        }
        c = self.coefficients
        self._k = (
            c["step_overhead_s"],
            c["per_request_s"],
            c["nonempty_fixed_s"],
            c["gemm_compute_s_per_token"],
            c["gemm_weights_s"],
            c["gemm_act_s_per_token"],
            c["head_compute_s_per_request"],
            c["head_weights_s"],
            c["head_act_s_per_request"],
            c["per_token_s"],
            c["prefill_attn_s"],
            c["decode_kv_s"],
        )

    # ------------------------------------------------------------------ CostModel protocol
    def step_time(
        self,
        num_tokens: int,
        prefill_attn: int,
        decode_kv: int,
        num_prefill: int,
        num_decode: int,
    ) -> float:
        """Duration in seconds of one engine step with these batch features."""
        so, pr, fx, gc, gw, ga, hc, hw, ha, tk, pa, dk = self._k
        t = float(num_tokens)
        r = float(num_prefill) + float(num_decode)
        gt = 1.0 if t > 0.0 else 0.0
        gr = 1.0 if r > 0.0 else 0.0
        return (
            so
            + pr * r
            + gt * (fx + max(gc * t, gw + ga * t))
            + gr * max(hc * r, hw + ha * r)
            + tk * t
            + pa * float(prefill_attn)
            + dk * float(decode_kv)
        )

    def decode_series(
        self, n: int, m0: int, k: int, start: float, stop: float
    ) -> tuple[list[float], list[float]]:
        """Durations and start times of up to ``k`` pure-decode steps of ``n`` requests.

        Step ``j`` has ``decode_kv = m0 + j * n``; steps are taken while they start before
        ``stop``. Every term but the decode-attention one is the same for all steps, so it is
        summed once, in :meth:`step_time`'s order: each duration is bitwise
        ``step_time(n, 0, m0 + j * n, 0, n)`` and fast-forwarded stretches equal stepping.

        Returns:
            ``(durations, starts)`` with ``len(starts) == len(durations) + 1``.
        """
        so, pr, fx, gc, gw, ga, hc, hw, ha, tk, pa, dk = self._k
        t = float(n)
        r = float(0) + float(n)
        gt = 1.0 if t > 0.0 else 0.0
        gr = 1.0 if r > 0.0 else 0.0
        head = (
            so
            + pr * r
            + gt * (fx + max(gc * t, gw + ga * t))
            + gr * max(hc * r, hw + ha * r)
            + tk * t
            + pa * float(0)
        )
        return affine_decode_series(head, dk, 0.0, 0.0, m0, n, k, start, stop)

    def step_times(
        self,
        num_tokens: np.ndarray,
        prefill_attn: np.ndarray,
        decode_kv: np.ndarray,
        num_prefill: np.ndarray,
        num_decode: np.ndarray,
    ) -> np.ndarray:
        """Vectorised :meth:`step_time`: the same expression, same order, on float64 arrays."""
        so, pr, fx, gc, gw, ga, hc, hw, ha, tk, pa, dk = self._k
        f = np.asarray
        t = f(num_tokens, dtype=np.float64)
        r = f(num_prefill, dtype=np.float64) + f(num_decode, dtype=np.float64)
        gt = (t > 0.0).astype(np.float64)
        gr = (r > 0.0).astype(np.float64)
        return (
            so
            + pr * r
            + gt * (fx + np.maximum(gc * t, gw + ga * t))
            + gr * np.maximum(hc * r, hw + ha * r)
            + tk * t
            + pa * f(prefill_attn, dtype=np.float64)
            + dk * f(decode_kv, dtype=np.float64)
        )

    # ------------------------------------------------------------------ explanation
    def breakdown(
        self,
        num_tokens: int,
        prefill_attn: int,
        decode_kv: int,
        num_prefill: int,
        num_decode: int,
    ) -> dict[str, float]:
        """Seconds spent per component for one batch (they sum to :meth:`step_time` up to rounding).

        Keys: ``overhead``, ``gemm``, ``gemm_bound`` (1.0 compute-bound, 0.0 memory-bound),
        ``lm_head``, ``elementwise_and_allreduce``, ``prefill_attention``, ``decode_attention``.
        """
        so, pr, fx, gc, gw, ga, hc, hw, ha, tk, pa, dk = self._k
        t, r = float(num_tokens), float(num_prefill + num_decode)
        gt, gr = float(t > 0), float(r > 0)
        return {
            "overhead": so + pr * r + gt * fx,
            "gemm": gt * max(gc * t, gw + ga * t),
            "gemm_bound": float(gc * t > gw + ga * t),
            "lm_head": gr * max(hc * r, hw + ha * r),
            "elementwise_and_allreduce": tk * t,
            "prefill_attention": pa * float(prefill_attn),
            "decode_attention": dk * float(decode_kv),
        }

    def ridge_tokens(self) -> float:
        """Batch size (tokens) above which the layer GEMMs turn compute-bound."""
        so, pr, fx, gc, gw, ga, *_ = self._k
        return gw / (gc - ga) if gc > ga else float("inf")

    # ------------------------------------------------------------------ capacity
    def max_model_len(self) -> int:
        """vLLM's default ``max_model_len``: the model's ``max_position_embeddings``."""
        return self.model_spec.max_position_embeddings

    def num_gpu_blocks(
        self,
        block_size: int = 16,
        gpu_memory_utilization: float = 0.9,
        max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS,
        max_num_seqs: int = VLLM_MAX_NUM_SEQS,
        overheads: MemoryOverheads | None = None,
    ) -> int:
        """KV blocks vLLM would allocate for this (model, GPU, TP); see :func:`kv_capacity`."""
        return self.kv_capacity(
            block_size, gpu_memory_utilization, max_num_batched_tokens, max_num_seqs, overheads
        ).num_gpu_blocks

    def kv_capacity(
        self,
        block_size: int = 16,
        gpu_memory_utilization: float = 0.9,
        max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS,
        max_num_seqs: int = VLLM_MAX_NUM_SEQS,
        overheads: MemoryOverheads | None = None,
    ) -> KVCapacity:
        """The full KV budget breakdown; see :func:`llmsched_gym.cost.capacity.kv_capacity`."""
        return kv_capacity(
            self.model_spec,
            self.gpu_spec,
            self.tp,
            block_size=block_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            overheads=overheads,
        )

    def describe(self) -> dict[str, object]:
        """Plain-data description: what is modelled, with which parameters and constants."""
        return {
            "name": self.name,
            "model": self.model,
            "gpu": self.gpu,
            "tp": self.tp,
            "params": asdict(self.params),
            "coefficients": dict(self.coefficients),
        }

    def __repr__(self) -> str:
        return f"RooflineCostModel({self.model!r}, {self.gpu!r}, tp={self.tp})"
