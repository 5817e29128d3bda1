"""Measure a transformer's operators and whole engine steps with PyTorch (GPU or CPU).

The measuring half of ``llmsched-gym calibrate --backend torch`` (the fitting half is
:mod:`llmsched_gym.calibration.torch_fit`, which needs no torch). Nothing is downloaded: the
model is built from its shapes in ``cost/profiles/models.yaml`` with random weights, in bf16 on
a GPU.

What one engine step runs, per layer (vLLM's Llama forward, with PyTorch's kernels standing in
for vLLM's custom ones)::

    input_layernorm -> attn_pre_proj (fused q/k/v) -> attn_rope -> attn_kv_write (new K/V into the
    cache) -> attention (FlashAttention varlen over the cached + new tokens of every request; a
    mixed batch runs its decode rows and its prefill rows in two calls, see below) ->
    attn_post_proj -> add ->
    post_attention_layernorm -> mlp_up_proj (fused gate/up) -> mlp_act (SiLU * up) ->
    mlp_down_proj -> add

plus, once per step, the embedding of the batch's tokens, the final norm, the LM head on one row
per scheduled request and greedy sampling.

Two kinds of measurement, so that composition can be checked against the real thing:

* **operators** (Vidur's method): each operator alone over a designed grid -- token-level
  operators by number of tokens; prefill attention by (chunk, context); decode attention by
  (batch, context);
* **steps**: whole steps (all layers) for a seeded set of batch compositions from
  :func:`~llmsched_gym.calibration.linearfit.design_batches` (decode-only, single and multiple
  prefill chunks, vLLM-style mixed batches).

Timing on CUDA: each measured callable is captured once in a CUDA graph and replayed ``repeats``
times between CUDA events after ``warmup`` eager runs, with the L2 cache flushed before every
replay; the median is kept. Graph replay removes the CPU launch gaps that eager PyTorch would add
(vLLM itself runs steps under CUDA graphs), so the figures are GPU times. On CPU the same
callables are timed with ``time.perf_counter`` (median of ``repeats``), so CI can run the whole
pipeline on a tiny model.

Attention of a mixed batch (profiler version 2, :data:`PROFILER_VERSION`): vLLM V1 runs one
FlashAttention-3 varlen call for the whole batch, and FA3 packs the query heads of a KV group
into one tile for decode rows in mixed batches too. PyTorch's FlashAttention-2 packs them only
when the call's ``max_seqlen_q`` is 1, so one call for a mixed batch reads every decode's KV once
per query head instead of once per KV head (an artefact that made GQA models' mixed steps look
slow, see ``calibration/README.md``). Version 2 therefore runs the decode rows (requests with one
new token) in their own call (``max_seqlen_q == 1``) and the prefill rows in another; batches of
one kind still run one call. Version 1 (one call per batch; the H200 data of 2026-11-23) is
``ProfilerConfig(separate_decode_attention=False)``.

Size: one module because the operator grid and the whole-step runs build the same layer from the
same shapes and time it with the same CUDA-graph timer, and the profile they write is one file
whose versions must move together.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_gym.calibration.linearfit import BatchSet, design_batches
from llmsched_gym.cost.hardware import ModelSpec, get_model
from llmsched_gym.errors import CostModelError

__all__ = [
    "PROFILER_VERSION",
    "TINY_LLAMA",
    "ProfileGrid",
    "ProfilerConfig",
    "model_spec",
    "run_profile",
]

PROFILER_VERSION = 2
"""Recorded as ``profiler_version`` in meta.json. 1 (no field): one attention call per batch;
2: a mixed batch's decode rows and prefill rows in separate attention calls."""

TOKEN_OPERATORS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_kv_write",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
"""Per-layer operators whose cost depends on the number of tokens only (``add`` runs twice)."""
STEP_OPERATORS = ("embedding", "final_norm")
"""Once-per-step operators, by number of tokens."""
SAMPLE_OPERATORS = ("lm_head", "sampling")
"""Once-per-step operators, by number of sampled rows (one per scheduled request)."""

TINY_LLAMA = ModelSpec(
    name="tiny-llama",
    hf_repo="(none: a test configuration with random weights)",
    hidden_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    intermediate_size=704,
    vocab_size=2048,
    gated_mlp=True,
    norm="rmsnorm",
    qkv_bias=False,
    linear_bias=False,
    qk_norm=False,
    tie_word_embeddings=False,
    learned_pos_embeddings=0,
    max_position_embeddings=4096,
    dtype_bytes=4,
    num_params=0,
)
"""A Llama-architecture model small enough to profile on a CPU in seconds (CI)."""


def model_spec(name: str) -> ModelSpec:
    """The model's shapes: ``tiny-llama`` or any model of ``profiles/models.yaml``."""
    if name == TINY_LLAMA.name:
        return TINY_LLAMA
    spec = get_model(name)
    if not spec.gated_mlp or spec.norm != "rmsnorm" or spec.learned_pos_embeddings:
        raise CostModelError(
            f"the torch profiler builds Llama-style models (RMSNorm, rotary, SwiGLU); {spec.name} "
            "is not one"
        )
    return spec


def _geometric(lo: int, hi: int, n: int) -> list[int]:
    """About ``n`` distinct integers spread geometrically over [lo, hi], both ends included."""
    if hi <= lo:
        return [lo]
    xs = np.unique(np.round(np.geomspace(lo, hi, n)).astype(np.int64))
    return [int(x) for x in xs]


@dataclass(frozen=True)
class ProfileGrid:
    """Where operators and steps are measured (the design), within an engine's limits."""

    max_num_batched_tokens: int = 4096
    max_num_seqs: int = 128
    max_model_len: int = 4096
    num_token_points: int = 24
    """Token counts for the token-level operators (geometric over 1..max_num_batched_tokens)."""
    num_attn_points: int = 9
    """Points per axis of the attention grids."""
    num_steps: int = 320
    """Whole steps measured (batch compositions from design_batches)."""
    seed: int = 0

    @classmethod
    def small(cls) -> ProfileGrid:
        """A grid that runs in seconds on a CPU with :data:`TINY_LLAMA` (CI)."""
        return cls(
            max_num_batched_tokens=256,
            max_num_seqs=16,
            max_model_len=256,
            num_token_points=8,
            num_attn_points=4,
            num_steps=60,
        )

    def validate(self) -> None:
        """Raise CostModelError on a grid that cannot be measured."""
        for name in ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "num_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 2:
                raise CostModelError(f"profile grid: {name} must be an integer >= 2, got {v!r}")
        for name in ("num_token_points", "num_attn_points"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 2:
                raise CostModelError(f"profile grid: {name} must be an integer >= 2, got {v!r}")

    def token_counts(self) -> list[int]:
        """Token counts at which token-level operators are timed."""
        return _geometric(1, self.max_num_batched_tokens, self.num_token_points)

    def sample_counts(self) -> list[int]:
        """Row counts at which the LM head and sampling are timed."""
        return _geometric(1, self.max_num_seqs, self.num_token_points // 2 + 1)

    def prefill_points(self) -> list[tuple[int, int]]:
        """(chunk c, cached context m) pairs for prefill attention, c + m <= max_model_len."""
        top = min(self.max_num_batched_tokens, self.max_model_len)
        cs = _geometric(2, top, self.num_attn_points)
        ms = [0] + _geometric(16, self.max_model_len - 2, self.num_attn_points - 1)
        return [(c, m) for c in cs for m in ms if c + m <= self.max_model_len]

    def decode_points(self) -> list[tuple[int, int]]:
        """(batch size B, context m) pairs for decode attention."""
        bs = _geometric(1, self.max_num_seqs, self.num_attn_points)
        ms = _geometric(16, self.max_model_len - 1, self.num_attn_points)
        return [(b, m) for b in bs for m in ms]

    def step_batches(self) -> BatchSet:
        """The batch compositions whose whole steps are timed."""
        return design_batches(
            self.num_steps,
            seed=self.seed,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            max_model_len=self.max_model_len,
        )


@dataclass(frozen=True)
class ProfilerConfig:
    """One profiling run: which model, where, how carefully."""

    model: str = "llama-2-7b"
    device: str = "cuda"
    dtype: str = "bfloat16"
    grid: ProfileGrid = field(default_factory=ProfileGrid)
    warmup: int = 2
    repeats: int = 7
    num_layers: int | None = None
    """Layers actually built and run in whole steps (default: the model's own count)."""
    cuda_graphs: bool = True
    compile: bool = True
    """On a GPU, fuse the element-wise operators with torch.compile as vLLM does."""
    kv_split_tokens: int = 512
    """Split-KV ("flash-decoding") chunk for requests with few new tokens (0: off). vLLM's
    attention backends split long KV for decodes; PyTorch's FlashAttention varlen kernel does
    not, so without this a few long decodes run on a handful of SMs."""
    separate_decode_attention: bool = True
    """Run a mixed batch's decode rows in their own attention call (``max_seqlen_q == 1``, so
    FlashAttention-2 packs GQA heads as vLLM's FA3 does) and its prefill rows in another
    (profiler version 2); False: one call per batch (version 1)."""
    flush_l2_mib: int = 256
    """Bytes written between timed CUDA replays so no run starts with a warm L2 (0: off)."""
    seed: int = 0

    def validate(self) -> None:
        """Raise CostModelError on settings that cannot run."""
        self.grid.validate()
        if self.warmup < 0 or self.repeats < 1:
            raise CostModelError(
                f"profiler: warmup must be >= 0 and repeats >= 1, got {self.warmup}, {self.repeats}"
            )
        if self.dtype not in ("bfloat16", "float16", "float32"):
            raise CostModelError(
                f"profiler: dtype must be bfloat16, float16 or float32, got {self.dtype!r}"
            )
        if self.num_layers is not None and self.num_layers < 1:
            raise CostModelError(f"profiler: num_layers must be >= 1, got {self.num_layers}")


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise CostModelError(
            "the torch profiler needs PyTorch: run `bash scripts/setup.sh` (it installs the CPU "
            "build torch==2.13.0) or, on a GPU machine, a CUDA build of torch"
        ) from None
    return torch


class _Timer:
    """Median time of a callable: CUDA graphs + events on a GPU, perf_counter on a CPU."""

    def __init__(self, torch: Any, cfg: ProfilerConfig) -> None:
        self.torch = torch
        self.cfg = cfg
        self.cuda = cfg.device.startswith("cuda")
        self.graphs = self.cuda and cfg.cuda_graphs
        self.graph_failures = 0
        self._flush = None
        if self.cuda and cfg.flush_l2_mib > 0:
            self._flush = torch.empty(cfg.flush_l2_mib << 20, dtype=torch.uint8, device=cfg.device)

    def __call__(self, fn: Callable[[], Any]) -> float:
        """Median seconds of one call of ``fn``."""
        torch = self.torch
        for _ in range(self.cfg.warmup):
            fn()
        if not self.cuda:
            times = []
            for _ in range(self.cfg.repeats):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return statistics.median(times)
        torch.cuda.synchronize()
        run = fn
        graph = None
        if self.graphs:
            try:
                graph = torch.cuda.CUDAGraph()
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    fn()
                torch.cuda.current_stream().wait_stream(side)
                with torch.cuda.graph(graph):
                    fn()
                run = graph.replay
            except Exception:  # noqa: BLE001 - an op that cannot be captured is timed eagerly
                self.graph_failures += 1
                graph = None
                torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.cfg.repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.cfg.repeats)]
        for s, e in zip(starts, ends, strict=True):
            if self._flush is not None:
                self._flush.zero_()
            s.record()
            run()
            e.record()
        torch.cuda.synchronize()
        ms = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
        del graph
        return statistics.median(ms) / 1e3


def _rms_norm(x: Any, w: Any) -> Any:
    import torch

    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-5)


def _rope(q: Any, k: Any, cos_t: Any, sin_t: Any, positions: Any) -> tuple[Any, Any]:
    import torch

    cos = cos_t[positions].unsqueeze(1)
    sin = sin_t[positions].unsqueeze(1)

    def rot(x: Any) -> Any:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    return rot(q), rot(k)


def _silu_mul(gu: Any) -> Any:
    import torch

    g, u = gu.chunk(2, dim=-1)
    return torch.nn.functional.silu(g) * u


SPLIT_MAX_NEW_TOKENS = 128
"""Requests with at most this many new tokens get their cached KV split (one FlashAttention
query block holds 128 rows: longer chunks already spread over many thread blocks)."""


@dataclass
class SplitPlan:
    """How one batch's attention runs as two varlen calls whose partial results are merged.

    Call A (non-causal) attends query rows to fixed-size chunks of their request's cached KV;
    call B (causal, bottom-right) attends every query row to the rest: its request's new tokens
    for split requests, cached plus new tokens for the others. Spans of both calls tile the KV
    buffer through ``cu_k`` (start offsets) with ``used_k`` keys actually read from each.
    """

    a_rows: np.ndarray
    """Query row (into the batch's q) of every call-A row."""
    a_cu_q: np.ndarray
    a_cu_k: np.ndarray
    a_used_k: np.ndarray
    a_max_k: int
    b_cu_q: np.ndarray
    b_cu_k: np.ndarray
    b_used_k: np.ndarray
    b_max_q: int
    b_max_k: int
    num_rows: int

    def to_device(self, torch: Any, dev: Any) -> Any:
        """The plan as device tensors (a SimpleNamespace)."""
        from types import SimpleNamespace

        def t(a: np.ndarray, dtype: Any) -> Any:
            return torch.as_tensor(a, device=dev, dtype=dtype)

        i32 = torch.int32
        return SimpleNamespace(
            a_rows=t(self.a_rows, torch.long),
            a_cu_q=t(self.a_cu_q, i32),
            a_cu_k=t(self.a_cu_k, i32),
            a_used_k=t(self.a_used_k, i32),
            a_max_q=int(np.diff(self.a_cu_q).max()) if len(self.a_cu_q) > 1 else 0,
            a_max_k=self.a_max_k,
            b_cu_q=t(self.b_cu_q, i32),
            b_cu_k=t(self.b_cu_k, i32),
            b_used_k=t(self.b_used_k, i32),
            b_max_q=self.b_max_q,
            b_max_k=self.b_max_k,
            rows=t(
                np.concatenate([self.a_rows, np.arange(self.num_rows)]).astype(np.int64),
                torch.long,
            ),
            num_rows=self.num_rows,
            num_a=len(self.a_rows),
        )


def split_plan(
    c: Sequence[int], m: Sequence[int], chunk: int, k_start: Sequence[int] | None = None
) -> SplitPlan | None:
    """The split-KV plan of a batch, or None when no request has cached KV worth splitting.

    ``k_start``: where each request's KV starts in the cache (default: packed in item order).
    """
    c = np.asarray(c, np.int64)
    m = np.asarray(m, np.int64)
    if k_start is None:
        k0 = np.concatenate([[0], np.cumsum(c + m)[:-1]])
    else:
        k0 = np.asarray(k_start, np.int64)
    q0 = np.concatenate([[0], np.cumsum(c)[:-1]])
    split = (c <= SPLIT_MAX_NEW_TOKENS) & (m > chunk)
    if not split.any():
        return None
    a_rows: list[np.ndarray] = []
    a_starts: list[int] = []
    a_used: list[int] = []
    a_lens: list[int] = []
    for i in np.flatnonzero(split):
        for s0 in range(0, int(m[i]), chunk):
            a_starts.append(int(k0[i]) + s0)
            a_used.append(min(chunk, int(m[i]) - s0))
            a_rows.append(np.arange(q0[i], q0[i] + c[i]))
            a_lens.append(int(c[i]))
    a_cu_k = np.asarray(a_starts + [a_starts[-1] + a_used[-1]], np.int64)
    b_start = np.where(split, k0 + m, k0)
    b_used = np.where(split, c, c + m)
    b_cu_k = np.concatenate([b_start, [b_start[-1] + b_used[-1]]])
    return SplitPlan(
        a_rows=np.concatenate(a_rows),
        a_cu_q=np.concatenate([[0], np.cumsum(a_lens)]).astype(np.int64),
        a_cu_k=a_cu_k,
        a_used_k=np.asarray(a_used, np.int64),
        a_max_k=int(max(a_used)),
        b_cu_q=np.concatenate([[0], np.cumsum(c)]).astype(np.int64),
        b_cu_k=b_cu_k.astype(np.int64),
        b_used_k=b_used.astype(np.int64),
        b_max_q=int(c.max()),
        b_max_k=int(b_used.max()),
        num_rows=int(c.sum()),
    )


def attention_groups(c: Sequence[int], separate_decodes: bool = True) -> list[np.ndarray]:
    """Item indices of each attention call of a batch, in call order.

    With ``separate_decodes`` a batch holding both decodes (one new token) and prefills runs two
    calls, decodes first; any other batch runs one call over all its items.
    """
    c = np.asarray(c, np.int64)
    dec = c == 1
    if separate_decodes and dec.any() and not dec.all():
        return [np.flatnonzero(dec), np.flatnonzero(~dec)]
    return [np.arange(len(c))]


@dataclass
class _AttnGroup:
    """One attention call: some items' query rows over their KV (see :func:`attention_groups`)."""

    items: np.ndarray
    """Item indices of the batch this call covers."""
    rows: np.ndarray
    """The batch's query rows of those items, in item order."""
    whole: bool
    """The call covers the whole batch (KV packed from 0, no ``seqused_k`` needed)."""
    q_slice: tuple[int, int] | None
    """``rows`` as a contiguous range, or None (then ``rows_t`` gathers them)."""
    rows_t: Any
    cu_q: Any
    cu_k: Any
    """KV start of each item (plus the end): cumulative when ``whole``, else cache offsets."""
    used_k: Any
    """KV length of each item (None when ``whole``)."""
    max_q: int
    max_k: int
    kv_total: int
    spans: list[tuple[int, int, int, int]]
    """CPU: (q0, q1) within the group's rows and (k0, k1) in the cache, per item."""
    masks: list[Any]
    split: Any = None
    """The device :class:`SplitPlan` of the call (split-KV, FlashAttention only) or None."""


def combine_partials(o: Any, lse: Any, rows: Any, num_rows: int) -> Any:
    """Merge partial attention outputs of the same query rows by their log-sum-exp weights.

    ``o`` (P, H, d) and ``lse`` (H, P) are partial results; ``rows`` (P,) names the output row
    of each. Returns (num_rows, H, d) in ``o``'s dtype.
    """
    import torch

    h = lse.shape[0]
    idx = rows.unsqueeze(0).expand(h, -1)
    mx = torch.full((h, num_rows), float("-inf"), device=lse.device, dtype=lse.dtype)
    mx = mx.scatter_reduce(1, idx, lse, reduce="amax")
    w = torch.exp(lse - mx.gather(1, idx))
    den = torch.zeros((h, num_rows), device=lse.device, dtype=lse.dtype).index_add(1, rows, w)
    w = (w / den.gather(1, idx)).transpose(0, 1).unsqueeze(-1)
    out = torch.zeros((num_rows,) + tuple(o.shape[1:]), device=o.device, dtype=torch.float32)
    return out.index_add(0, rows, o.float() * w).to(o.dtype)


def split_kv_attention(
    torch: Any, varlen: Callable[..., Any], q: Any, k: Any, v: Any, plan: Any, combine: Any
) -> Any:
    """Attention by a :class:`SplitPlan`: two ``varlen`` calls and an LSE-weighted merge."""
    qa = q.index_select(0, plan.a_rows)
    oa, lse_a = varlen(
        qa, k, v, plan.a_cu_q, plan.a_cu_k, plan.a_used_k, plan.a_max_q, plan.a_max_k, False
    )[:2]
    ob, lse_b = varlen(
        q, k, v, plan.b_cu_q, plan.b_cu_k, plan.b_used_k, plan.b_max_q, plan.b_max_k, True
    )[:2]
    o = torch.cat([oa, ob], dim=0)
    lse = torch.cat([lse_a, lse_b], dim=1)
    return combine(o, lse, plan.rows, plan.num_rows)


def _flash_varlen(
    q: Any,
    k: Any,
    v: Any,
    cu_q: Any,
    cu_k: Any,
    used_k: Any,
    max_q: int,
    max_k: int,
    causal: bool,
) -> tuple[Any, Any]:
    """PyTorch's FlashAttention varlen kernel: (out (T, H, d), lse (H, T))."""
    import torch

    out = torch.ops.aten._flash_attention_forward(
        q, k, v, cu_q, cu_k, max_q, max_k, 0.0, causal, False, seqused_k=used_k
    )
    return out[0], out[1]


def reference_varlen(
    q: Any,
    k: Any,
    v: Any,
    cu_q: Any,
    cu_k: Any,
    used_k: Any,
    max_q: int,
    max_k: int,
    causal: bool,
) -> tuple[Any, Any]:
    """The varlen kernel's contract in plain PyTorch (any device; used to test split-KV)."""
    import torch

    outs, lses = [], []
    group = q.shape[1] // k.shape[1]
    scale = q.shape[-1] ** -0.5
    for s in range(len(cu_q) - 1):
        q0, q1 = int(cu_q[s]), int(cu_q[s + 1])
        k0 = int(cu_k[s])
        kn = int(used_k[s]) if used_k is not None else int(cu_k[s + 1]) - k0
        qi = q[q0:q1].float().transpose(0, 1)
        ki = k[k0 : k0 + kn].float().repeat_interleave(group, dim=1).transpose(0, 1)
        vi = v[k0 : k0 + kn].float().repeat_interleave(group, dim=1).transpose(0, 1)
        sc = qi @ ki.transpose(1, 2) * scale
        if causal:
            qn = q1 - q0
            qpos = torch.arange(qn).unsqueeze(1) + (kn - qn)
            sc = sc.masked_fill(torch.arange(kn).unsqueeze(0) > qpos, float("-inf"))
        lse = torch.logsumexp(sc, dim=-1)
        outs.append((torch.softmax(sc, dim=-1) @ vi).transpose(0, 1).to(q.dtype))
        lses.append(lse)
    return torch.cat(outs, dim=0), torch.cat(lses, dim=1)


class _Model:
    """Random-weight Llama-style layers and the kernels of one engine step."""

    def __init__(self, torch: Any, spec: ModelSpec, cfg: ProfilerConfig, max_kv_tokens: int):
        self.torch = torch
        self.spec = spec
        self.cfg = cfg
        dev = torch.device(cfg.device)
        dt = getattr(torch, cfg.dtype)
        self.dev, self.dt = dev, dt
        gen = torch.Generator(device=dev)
        gen.manual_seed(cfg.seed)
        h, d = spec.hidden_size, spec.head_dim
        self.hq, self.hkv, self.d = spec.num_attention_heads, spec.num_key_value_heads, d
        self.q_size, self.kv_size = self.hq * d, self.hkv * d
        self.num_layers = cfg.num_layers or spec.num_hidden_layers

        def rand(*shape: int) -> Any:
            return (torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32) * 0.02).to(
                dt
            )

        inter = spec.intermediate_size
        self.layers = [
            {
                "in_norm": torch.ones(h, device=dev, dtype=dt),
                "qkv": rand(self.q_size + 2 * self.kv_size, h),
                "o": rand(h, self.q_size),
                "post_norm": torch.ones(h, device=dev, dtype=dt),
                "gate_up": rand(2 * inter, h),
                "down": rand(h, inter),
            }
            for _ in range(self.num_layers)
        ]
        self.embed = rand(spec.vocab_size, h)
        self.final_norm = torch.ones(h, device=dev, dtype=dt)
        self.lm_head = rand(spec.vocab_size, h)
        # One K and one V cache shared by every layer: between two layers the next layer's
        # weights (far larger than the L2) pass through the cache, so sharing changes no timing.
        kv_tokens = max(1, max_kv_tokens)
        self.k_cache = rand(kv_tokens, self.hkv, d)
        self.v_cache = rand(kv_tokens, self.hkv, d)
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
        pos = torch.arange(cfg.grid.max_model_len + 1, device=dev, dtype=torch.float32)
        freqs = torch.outer(pos, inv)
        self.cos = freqs.cos().to(dt)
        self.sin = freqs.sin().to(dt)
        self.flash = self.cfg.device.startswith("cuda") and hasattr(
            torch.ops.aten, "_flash_attention_forward"
        )

        self.compiled = cfg.device.startswith("cuda") and cfg.compile
        self.compile_error: str | None = None
        if self.compiled:
            # vLLM compiles the model's element-wise parts with torch.compile (Inductor fuses
            # norm, rotary and activation into one kernel each); do the same so that eager
            # PyTorch's chains of small kernels do not stand in for vLLM's fused ones.
            opts = {"dynamic": True, "fullgraph": True}
            self.rms_norm = torch.compile(_rms_norm, **opts)
            self._rope = torch.compile(_rope, **opts)
            self.silu_mul = torch.compile(_silu_mul, **opts)
            try:  # compile now, at two sizes, so that a failure falls back to eager kernels
                for t in (3, 17):
                    b = self.batch_inputs([t], [0])
                    x = torch.randn(t, h, device=dev, dtype=dt)
                    self.rms_norm(x, self.final_norm)
                    qk = torch.randn(t, self.hq, d, device=dev, dtype=dt)
                    kk = torch.randn(t, self.hkv, d, device=dev, dtype=dt)
                    self.rope(qk, kk, b.positions)
                    self.silu_mul(torch.randn(t, 2 * inter, device=dev, dtype=dt))
            except Exception as err:  # noqa: BLE001 - any compiler failure: measure eagerly
                self.compile_error = f"{type(err).__name__}: {str(err)[:200]}"
                self.compiled = False
        self.combine = torch.compile(combine_partials, dynamic=True) if self.compiled else None
        if self.combine is None:
            self.combine = combine_partials
        if not self.compiled:
            self.rms_norm = _rms_norm
            self._rope = _rope
            self.silu_mul = _silu_mul

    # ------------------------------------------------------------------ kernels
    def rope(self, q: Any, k: Any, positions: Any) -> tuple[Any, Any]:
        """Rotary embedding (GPT-NeoX style halves) on q (T, Hq, d) and k (T, Hkv, d)."""
        return self._rope(q, k, self.cos, self.sin, positions)

    def attention(self, q: Any, batch: _BatchInputs) -> Any:
        """Causal attention of each request's new tokens over its cached + new tokens.

        One :meth:`attend` call per attention group (a mixed batch: decodes, then prefills), the
        outputs put back in the batch's row order.
        """
        groups = batch.groups
        if len(groups) == 1:
            return self.attend(q, groups[0])
        outs = []
        for g in groups:
            qg = q[g.q_slice[0] : g.q_slice[1]] if g.q_slice else q.index_select(0, g.rows_t)
            outs.append(self.attend(qg, g))
        o = self.torch.cat(outs, dim=0)
        return o if batch.unpermute is None else o.index_select(0, batch.unpermute)

    def attend(self, q: Any, g: _AttnGroup) -> Any:
        """One attention call over a group's query rows ``q`` (the group's rows, in order).

        CUDA: one FlashAttention varlen kernel (bottom-right causal mask, GQA native), or the
        split-KV pair of kernels and their merge. CPU: scaled_dot_product_attention per request
        with a lower-right causal mask.
        """
        torch = self.torch
        if self.flash:
            if g.split is not None:
                return split_kv_attention(
                    torch, _flash_varlen, q, self.k_cache, self.v_cache, g.split, self.combine
                )
            k = self.k_cache[: g.kv_total] if g.whole else self.k_cache
            v = self.v_cache[: g.kv_total] if g.whole else self.v_cache
            return _flash_varlen(
                q, k, v, g.cu_q, g.cu_k, g.used_k, g.max_q, g.max_k, True
            )[0]  # fmt: skip
        outs = []
        group = self.hq // self.hkv
        for i, (q0, q1, k0, k1) in enumerate(g.spans):
            qi = q[q0:q1].transpose(0, 1).unsqueeze(0)
            ki = self.k_cache[k0:k1].repeat_interleave(group, dim=1).transpose(0, 1).unsqueeze(0)
            vi = self.v_cache[k0:k1].repeat_interleave(group, dim=1).transpose(0, 1).unsqueeze(0)
            o = torch.nn.functional.scaled_dot_product_attention(qi, ki, vi, attn_mask=g.masks[i])
            outs.append(o.squeeze(0).transpose(0, 1))
        return torch.cat(outs, dim=0)

    def layer(self, x: Any, w: dict[str, Any], batch: _BatchInputs) -> Any:
        """One decoder layer on the batch's hidden states (T, H)."""
        torch = self.torch
        h = self.rms_norm(x, w["in_norm"])
        qkv = torch.nn.functional.linear(h, w["qkv"])
        q, k, v = qkv.split((self.q_size, self.kv_size, self.kv_size), dim=-1)
        q = q.view(-1, self.hq, self.d)
        k = k.view(-1, self.hkv, self.d)
        v = v.view(-1, self.hkv, self.d)
        q, k = self.rope(q, k, batch.positions)
        self.k_cache.index_copy_(0, batch.slots, k)
        self.v_cache.index_copy_(0, batch.slots, v)
        a = self.attention(q, batch).reshape(-1, self.q_size)
        x = x + torch.nn.functional.linear(a, w["o"])
        h = self.rms_norm(x, w["post_norm"])
        gu = torch.nn.functional.linear(h, w["gate_up"])
        h = self.silu_mul(gu)
        return x + torch.nn.functional.linear(h, w["down"])

    def step(self, batch: _BatchInputs) -> Any:
        """One engine step: embed, every layer, final norm, LM head on sampled rows, argmax."""
        torch = self.torch
        x = torch.nn.functional.embedding(batch.token_ids, self.embed)
        for w in self.layers:
            x = self.layer(x, w, batch)
        x = self.rms_norm(x, self.final_norm)
        logits = torch.nn.functional.linear(x[batch.sample_rows], self.lm_head)
        return logits.argmax(dim=-1)

    def batch_inputs(self, c: Sequence[int], m: Sequence[int]) -> _BatchInputs:
        """Device tensors describing a batch of items with c new tokens on m cached ones."""
        torch = self.torch
        c = [int(x) for x in c]
        m = [int(x) for x in m]
        cu_q = np.concatenate([[0], np.cumsum(c)]).astype(np.int64)
        kv_len = np.add(c, m)
        cu_k = np.concatenate([[0], np.cumsum(kv_len)]).astype(np.int64)
        positions = np.concatenate([np.arange(mi, mi + ci) for ci, mi in zip(c, m, strict=True)])
        slots = np.concatenate(
            [np.arange(k0 + mi, k0 + mi + ci) for ci, mi, k0 in zip(c, m, cu_k[:-1], strict=True)]
        )
        total = int(cu_q[-1])
        rng = np.random.default_rng(total)

        def dev(a: np.ndarray, dtype: Any) -> Any:
            return torch.as_tensor(a, device=self.dev, dtype=dtype)

        ca, ma = np.asarray(c, np.int64), np.asarray(m, np.int64)
        groups = []
        for idx in attention_groups(c, self.cfg.separate_decode_attention):
            gc, gm, gk = ca[idx], ma[idx], cu_k[:-1][idx]
            rows = np.concatenate([np.arange(cu_q[i], cu_q[i + 1]) for i in idx])
            whole = len(idx) == len(c)
            contiguous = bool(rows[-1] - rows[0] + 1 == len(rows))
            g_cu_q = np.concatenate([[0], np.cumsum(gc)])
            masks: list[Any] = []
            if not self.flash:
                for ci, mi in zip(gc, gm, strict=True):
                    if ci == 1:
                        masks.append(None)
                    else:
                        # Lower-right causal: new token j sees cached tokens and new tokens <= j.
                        qpos = torch.arange(int(ci), device=self.dev).unsqueeze(1) + int(mi)
                        kpos = torch.arange(int(ci + mi), device=self.dev).unsqueeze(0)
                        masks.append(kpos <= qpos)
            split = None
            if self.flash and self.cfg.kv_split_tokens > 0:
                plan = split_plan(gc, gm, self.cfg.kv_split_tokens, k_start=gk)
                if plan is not None:
                    split = plan.to_device(torch, self.dev)
            g_len = gc + gm
            groups.append(
                _AttnGroup(
                    items=idx,
                    rows=rows,
                    whole=whole,
                    q_slice=(int(rows[0]), int(rows[-1]) + 1) if contiguous else None,
                    rows_t=None if contiguous else dev(rows, torch.long),
                    cu_q=dev(g_cu_q, torch.int32),
                    cu_k=dev(cu_k if whole else np.append(gk, gk[-1] + g_len[-1]), torch.int32),
                    used_k=None if whole else dev(g_len, torch.int32),
                    max_q=int(gc.max()),
                    max_k=int(g_len.max()),
                    kv_total=int(cu_k[-1]),
                    spans=[
                        (int(g_cu_q[j]), int(g_cu_q[j + 1]), int(gk[j]), int(gk[j] + g_len[j]))
                        for j in range(len(idx))
                    ],
                    masks=masks,
                    split=split,
                )
            )
        order = np.concatenate([g.rows for g in groups])
        unpermute = None
        if not np.array_equal(order, np.arange(total)):
            unpermute = dev(np.argsort(order), torch.long)
        return _BatchInputs(
            token_ids=dev(rng.integers(0, self.spec.vocab_size, total), torch.long),
            positions=dev(positions, torch.long),
            slots=dev(slots, torch.long),
            sample_rows=dev(cu_q[1:] - 1, torch.long),
            groups=groups,
            unpermute=unpermute,
        )


@dataclass
class _BatchInputs:
    token_ids: Any
    positions: Any
    slots: Any
    sample_rows: Any
    groups: list[_AttnGroup]
    """The attention calls of the batch (:func:`attention_groups`)."""
    unpermute: Any = None
    """Gather index putting the groups' concatenated outputs back in row order (None: already)."""


def _progress(items: Iterable[Any], total: int, desc: str, show: bool) -> Iterable[Any]:
    if not show:
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, total=total, desc=desc, leave=False)


def _measure_operators(
    model: _Model, timer: _Timer, grid: ProfileGrid, progress: bool
) -> list[dict[str, Any]]:
    """Rows ``{operator, x, y, time_s}`` for every operator of the grid."""
    torch = model.torch
    w = model.layers[0]
    rows: list[dict[str, Any]] = []
    h = model.spec.hidden_size
    tokens = grid.token_counts()
    for t in _progress(tokens, len(tokens), "token operators", progress):
        batch = model.batch_inputs([t], [0])
        x = torch.randn(t, h, device=model.dev, dtype=model.dt)
        qkv = torch.nn.functional.linear(x, w["qkv"])
        q, k, v = qkv.split((model.q_size, model.kv_size, model.kv_size), dim=-1)
        q = q.reshape(t, model.hq, model.d)
        k = k.reshape(t, model.hkv, model.d)
        v = v.reshape(t, model.hkv, model.d)
        a = torch.randn(t, model.q_size, device=model.dev, dtype=model.dt)
        gu = torch.randn(t, 2 * model.spec.intermediate_size, device=model.dev, dtype=model.dt)
        hm = torch.randn(t, model.spec.intermediate_size, device=model.dev, dtype=model.dt)
        ids = batch.token_ids
        ops: dict[str, Callable[[], Any]] = {
            "input_layernorm": lambda x=x: model.rms_norm(x, w["in_norm"]),
            "attn_pre_proj": lambda x=x: torch.nn.functional.linear(x, w["qkv"]),
            "attn_rope": lambda q=q, k=k, b=batch: model.rope(q, k, b.positions),
            "attn_kv_write": lambda k=k, v=v, b=batch: (
                model.k_cache.index_copy_(0, b.slots, k),
                model.v_cache.index_copy_(0, b.slots, v),
            ),
            "attn_post_proj": lambda a=a: torch.nn.functional.linear(a, w["o"]),
            "post_attention_layernorm": lambda x=x: model.rms_norm(x, w["post_norm"]),
            "mlp_up_proj": lambda x=x: torch.nn.functional.linear(x, w["gate_up"]),
            "mlp_act": lambda gu=gu: model.silu_mul(gu),
            "mlp_down_proj": lambda hm=hm: torch.nn.functional.linear(hm, w["down"]),
            "add": lambda x=x: x + x,
            "embedding": lambda ids=ids: torch.nn.functional.embedding(ids, model.embed),
            "final_norm": lambda x=x: model.rms_norm(x, model.final_norm),
        }
        for name, fn in ops.items():
            rows.append({"operator": name, "x": t, "y": 0, "time_s": timer(fn)})
    for b in grid.sample_counts():
        x = torch.randn(b, h, device=model.dev, dtype=model.dt)
        logits = torch.nn.functional.linear(x, model.lm_head)
        rows.append(
            {
                "operator": "lm_head",
                "x": b,
                "y": 0,
                "time_s": timer(lambda x=x: torch.nn.functional.linear(x, model.lm_head)),
            }
        )
        rows.append(
            {
                "operator": "sampling",
                "x": b,
                "y": 0,
                "time_s": timer(lambda lg=logits: lg.argmax(dim=-1)),
            }
        )
    attn_points = [("attn_prefill", c, mm, [c], [mm]) for c, mm in grid.prefill_points()]
    attn_points += [("attn_decode", b, mm, [1] * b, [mm] * b) for b, mm in grid.decode_points()]
    for name, xv, yv, cs, ms in _progress(attn_points, len(attn_points), "attention", progress):
        batch = model.batch_inputs(cs, ms)
        q = torch.randn(sum(cs), model.hq, model.d, device=model.dev, dtype=model.dt)
        t = timer(lambda q=q, b=batch: model.attention(q, b))
        rows.append({"operator": name, "x": xv, "y": yv, "time_s": t})
    return rows


def _measure_steps(
    model: _Model, timer: _Timer, batches: BatchSet, progress: bool
) -> list[dict[str, Any]]:
    """Rows ``{batch, items, time_s}`` of whole measured steps (items as "c:m;c:m...")."""
    rows: list[dict[str, Any]] = []
    for b in _progress(range(batches.num_batches), batches.num_batches, "steps", progress):
        c, m = batches.items_of(b)
        inputs = model.batch_inputs(c, m)
        t = timer(lambda inp=inputs: model.step(inp))
        items = ";".join(f"{int(ci)}:{int(mi)}" for ci, mi in zip(c, m, strict=True))
        rows.append({"batch": b, "items": items, "time_s": t})
    return rows


def _start(cfg: ProfilerConfig) -> tuple[Any, ModelSpec]:
    """Validate ``cfg``, import torch for its device, seed it; ``(torch, the model's shapes)``."""
    cfg.validate()
    torch = _import_torch()
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise CostModelError(
            "profiler: device 'cuda' asked for but torch sees no GPU; use --device cpu"
        )
    spec = model_spec(cfg.model)
    if spec.num_attention_heads % spec.num_key_value_heads:
        raise CostModelError(f"{spec.name}: attention heads must be a multiple of KV heads")
    torch.manual_seed(cfg.seed)
    if not cfg.device.startswith("cuda"):
        # One thread: CPU timings on a shared machine are far steadier without OpenMP spinning.
        torch.set_num_threads(1)
    return torch, spec


def time_batches(
    cfg: ProfilerConfig, batches: BatchSet, progress: bool = False
) -> tuple[np.ndarray, dict[str, Any]]:
    """Whole-step times (s) of ``batches`` on ``cfg.device``, with the profiler's own kernels.

    The same model, timer and step as ``run_profile``'s ``steps.csv`` (CUDA graphs, warm-ups,
    median of repeats, L2 flush on a GPU); the KV cache is sized for the largest batch. Returns
    the times and the hardware description (as ``meta.json``'s).
    """
    longest = int((batches.c + batches.m).max()) if batches.num_batches else 1
    if longest > cfg.grid.max_model_len:  # rotary tables cover every position of the batches
        cfg = replace(cfg, grid=replace(cfg.grid, max_model_len=longest))
    torch, spec = _start(cfg)
    kv = np.bincount(batches.batch, weights=batches.c + batches.m, minlength=batches.num_batches)
    with torch.inference_mode():
        model = _Model(torch, spec, cfg, int(kv.max()) + 1)
        rows = _measure_steps(model, _Timer(torch, cfg), batches, progress)
    return np.array([r["time_s"] for r in rows], dtype=np.float64), _hardware(torch, cfg.device)


def _hardware(torch: Any, device: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "device": device,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host": platform.machine(),
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        info.update(
            gpu_name=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            gpu_sm_count=props.multi_processor_count,
            cuda=torch.version.cuda,
        )
        try:
            import subprocess

            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
            if out.returncode == 0:
                info["driver"] = out.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError):
            pass
    else:
        cpu = "unknown"
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        info.update(cpu_name=cpu, cpu_threads=torch.get_num_threads())
    return info


def run_profile(cfg: ProfilerConfig, out_dir: str | Path, progress: bool = True) -> Path:
    """Measure operators and whole steps; write ``operators.csv``, ``steps.csv``, ``meta.json``.

    The files are written to a temporary name and renamed at the end, so an interrupted run
    leaves no half-written measurement behind.

    Returns:
        The output folder.
    """
    torch, spec = _start(cfg)
    grid = cfg.grid
    batches = grid.step_batches()
    kv_per_step = np.bincount(batches.batch, weights=batches.c + batches.m).max()
    max_kv = int(max(kv_per_step, grid.max_num_seqs * grid.max_model_len))
    t0 = time.perf_counter()
    with torch.inference_mode():
        model = _Model(torch, spec, cfg, max_kv)
        timer = _Timer(torch, cfg)
        op_rows = _measure_operators(model, timer, grid, progress)
        step_rows = _measure_steps(model, timer, batches, progress)
    elapsed = time.perf_counter() - t0
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "profiler_version": PROFILER_VERSION if cfg.separate_decode_attention else 1,
        "model": spec.name,
        "model_config": {
            k: v for k, v in asdict(spec).items() if k not in ("num_params", "hf_repo", "name")
        },
        "hf_repo": spec.hf_repo,
        "num_layers_run": model.num_layers,
        "dtype": cfg.dtype,
        "config": {
            "warmup": cfg.warmup,
            "repeats": cfg.repeats,
            "cuda_graphs": timer.graphs,
            "torch_compile": model.compiled,
            "compile_error": model.compile_error,
            "graph_capture_failures": timer.graph_failures,
            "flush_l2_mib": cfg.flush_l2_mib if timer.cuda else 0,
            "seed": cfg.seed,
            "attention_kernel": "aten._flash_attention_forward (varlen)"
            if model.flash
            else "scaled_dot_product_attention per request",
            "mixed_batch_attention": "decode rows and prefill rows in separate calls"
            if cfg.separate_decode_attention
            else "one call for the whole batch",
            "kv_split_tokens": cfg.kv_split_tokens,
        },
        "grid": asdict(grid),
        "hardware": _hardware(torch, cfg.device),
        "created": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "elapsed_s": round(elapsed, 1),
    }
    _write_csv(out / "operators.csv", ("operator", "x", "y", "time_s"), op_rows)
    _write_csv(out / "steps.csv", ("batch", "items", "time_s"), step_rows)
    tmp = out / "meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, out / "meta.json")
    return out


def _write_csv(path: Path, columns: Sequence[str], rows: list[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        f.write(",".join(columns) + "\n")
        for r in rows:
            f.write(",".join(repr(r[c]) if isinstance(r[c], float) else str(r[c]) for c in columns))
            f.write("\n")
    os.replace(tmp, path)


def default_config(model: str, device: str, small: bool = False) -> ProfilerConfig:
    """The profiler settings for a model and device (``small``: the CI grid, float32 on CPU)."""
    grid = ProfileGrid.small() if small else ProfileGrid()
    dtype = "float32" if device == "cpu" else "bfloat16"
    cfg = ProfilerConfig(model=model, device=device, dtype=dtype, grid=grid)
    if small:
        cfg = replace(cfg, warmup=1, repeats=3)
    return cfg


def add_arguments(p: Any) -> None:
    """The measuring options of ``llmsched-gym calibrate --backend torch`` (argparse)."""
    p.add_argument(
        "--model",
        action="append",
        help="model of profiles/models.yaml (Llama-style), or tiny-llama; repeat for several "
        "(default: llama-2-7b on a GPU, tiny-llama on a CPU)",
    )
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if present)")
    p.add_argument("--dtype", default=None, help="bfloat16 (GPU default), float16 or float32")
    p.add_argument("--small", action="store_true", help="the small CI grid (seconds on a CPU)")
    p.add_argument("--steps", type=int, default=None, help="whole steps to measure")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per point")
    p.add_argument("--warmup", type=int, default=None, help="untimed runs per point")
    p.add_argument("--num-layers", type=int, default=None, help="layers to run (default: all)")
    p.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="largest step of the measured grid in tokens (default: the grid's, by device)",
    )
    p.add_argument(
        "--max-num-seqs",
        type=int,
        default=None,
        help="largest batch of the measured grid (default: the grid's, by device)",
    )
    p.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="longest context of the measured grid (default: the grid's, by device)",
    )
    p.add_argument("--no-cuda-graphs", action="store_true", help="time eagerly on a GPU")
    p.add_argument(
        "--no-compile", action="store_true", help="do not fuse element-wise ops with torch.compile"
    )


def configs_from_args(args: Any, cuda_available: bool) -> list[ProfilerConfig]:
    """One ProfilerConfig per ``--model`` from parsed :func:`add_arguments` options."""
    device = args.device or ("cuda" if cuda_available else "cpu")
    models = args.model or (["llama-2-7b"] if device.startswith("cuda") else ["tiny-llama"])
    out = []
    for model in models:
        cfg = default_config(model, device, small=args.small)
        grid = cfg.grid
        grid_over = {
            "num_steps": args.steps,
            "max_num_batched_tokens": args.max_num_batched_tokens,
            "max_num_seqs": args.max_num_seqs,
            "max_model_len": args.max_model_len,
        }
        grid = replace(grid, **{k: v for k, v in grid_over.items() if v is not None})
        over = {
            "dtype": args.dtype,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "num_layers": args.num_layers,
        }
        cfg = replace(cfg, grid=grid, **{k: v for k, v in over.items() if v is not None})
        if args.no_cuda_graphs:
            cfg = replace(cfg, cuda_graphs=False)
        if args.no_compile:
            cfg = replace(cfg, compile=False)
        cfg.validate()
        out.append(cfg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m llmsched_gym.calibration.torch_profile``: measure only (no fit), on a GPU."""
    import argparse

    p = argparse.ArgumentParser(description=main.__doc__)
    add_arguments(p)
    p.add_argument("--out", required=True, help="folder; one sub-folder per model")
    args = p.parse_args(argv)
    torch = _import_torch()
    for cfg in configs_from_args(args, torch.cuda.is_available()):
        t0 = time.perf_counter()
        path = run_profile(cfg, Path(args.out) / cfg.model, progress=False)
        print(f"{cfg.model}: {path} in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
