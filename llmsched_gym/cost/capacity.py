"""KV-cache capacity (``num_gpu_blocks``) computed the way vLLM V1 computes it.

How vLLM 0.32 sizes the KV cache (read in the wheel's ``vllm/v1/worker/gpu_worker.py``,
``Worker.determine_available_memory``; ``vllm/v1/worker/utils.py``, ``request_memory``;
``vllm/utils/mem_utils.py``, ``memory_profiling``; ``vllm/v1/core/kv_cache_utils.py``,
``get_kv_cache_config_from_groups``)::

    requested_memory  = ceil(total_memory * gpu_memory_utilization)   # total: cudaMemGetInfo
    profile run       = one forward pass of max_num_batched_tokens dummy tokens, then a dummy
                        sampler pass over max_num_seqs rows of logits
    non_kv_cache_mem  = total_consumed (weights + non-torch memory: NCCL buffers, cuBLAS and
                        attention workspaces, ...) + transient_peak_headroom (the activation peak)
    available_kv      = requested_memory - non_kv_cache_mem - cudagraph_memory_estimate
                        (the CUDA-graph estimate is on by default since v0.21,
                        VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1)
    bytes_per_block   = sum over attention layers of page_size_bytes
                      = num_layers * 2 (K and V) * block_size * kv_heads/TP * head_dim * dtype_bytes
    num_blocks        = available_kv // bytes_per_block

``num_blocks`` includes the null block that vLLM's ``BlockPool`` reserves (DESIGN.md counts it in
``num_gpu_blocks`` too).

``mode="vllm-0.6"`` sizes the cache as vLLM 0.6.6's V0 worker does (``Worker.
determine_num_available_blocks`` in ``vllm/worker/worker.py``): ``total * gpu_memory_utilization -
(weights + non-torch memory + the profiled activation peak)``, divided by the block size. There is
no CUDA-graph term (V0 captures its graphs after sizing the cache) and V0 has no null block; the
returned ``num_gpu_blocks`` adds one for the simulator's reserved block, so it is V0's count + 1.
With the default estimates this reproduces the RelServe scenarios' counts (vLLM 0.6.6 defaults,
0.9 utilisation, block 16, ``max_num_seqs`` 256): 832 for OPT-13B on A100-40GB (TP1,
``max_num_batched_tokens`` 2048), 455 for Qwen2.5-32B on 2×A100-40GB (TP2, 8192) and 344 for
Llama-2-70B on 4×A100-40GB (TP4, 4096).

Each TP rank computes its own count and the engine takes the minimum; ranks are symmetric here,
so one computation suffices.

The weights and the KV page size follow from the model's shapes exactly. The activation peak, the
non-torch memory and the CUDA-graph pool are *measured* by vLLM at start-up; here they are explicit,
documented estimates (:class:`MemoryOverheads`), so the result is an estimate of what vLLM would
print as "GPU KV cache size", typically within a few percent. When you have a vLLM log, pass its
"Available KV cache memory" as ``available_kv_cache_bytes`` to reproduce vLLM's count exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmsched_gym.config import VLLM_MAX_NUM_BATCHED_TOKENS, VLLM_MAX_NUM_SEQS
from llmsched_gym.cost.hardware import GPUSpec, ModelSpec, get_gpu, get_model
from llmsched_gym.errors import CostModelError

__all__ = [
    "CAPACITY_MODES",
    "KVCapacity",
    "MemoryOverheads",
    "kv_capacity",
    "num_gpu_blocks",
    "peak_activation_bytes",
]

GiB = 1 << 30

CAPACITY_MODES = ("vllm-v1", "vllm-0.6")
"""How the KV budget is computed: vLLM V1 (0.32, CUDA-graph estimate, null block counted) or
vLLM 0.6.6's V0 worker (no CUDA-graph term, no null block; +1 added for the simulator's)."""


@dataclass(frozen=True)
class MemoryOverheads:
    """Estimates of the memory vLLM measures at start-up (bytes per GPU unless noted).

    Defaults are read off public vLLM memory-profiling logs (vllm-project/vllm PR #10511: on an
    H100, Llama-3-8B showed ``non_torch_memory`` 1.79 GiB at TP1 and 3.58 GiB at TP2, and an
    activation peak of 1.26 GiB for 8192 tokens; other logs show 0.2 GiB non-torch on smaller
    setups).
    """

    non_torch_bytes: int = 1 * GiB
    """Non-torch memory at TP=1 (cuBLAS / attention workspaces, allocator slack). Logs show
    0.1-1.8 GiB; 1 GiB sits in the middle."""
    nccl_bytes: int = int(1.5 * GiB)
    """Extra non-torch memory when TP > 1 (NCCL / custom all-reduce buffers). The TP2-minus-TP1
    difference in the PR #10511 log is 1.79 GiB."""
    cudagraph_bytes: int = GiB // 2
    """CUDA-graph pool that vLLM >= 0.21 subtracts (``cudagraph_memory_estimate``); 0.3-1 GiB is
    typical for dense 7B-70B models with the default capture sizes."""
    activation_hidden_factor: float = 4.0
    """Hidden-size-wide tensors alive at the activation peak (residual, normed input, attention
    output, layer output), per token."""
    sampler_bytes_per_logit: float = 20.0
    """Bytes per (sequence, vocab) element in the dummy sampler pass: fp32 logits (4) and
    probabilities (4), plus the top-k/top-p sort's fp32 values (4) and int64 indices (8)."""


@dataclass(frozen=True)
class KVCapacity:
    """The KV-cache budget of one GPU and how it was derived (bytes unless noted)."""

    num_gpu_blocks: int
    """Blocks vLLM would allocate, including the reserved null block."""
    block_size: int
    """Tokens per block."""
    bytes_per_block: int
    requested_bytes: int
    """ceil(total_memory * gpu_memory_utilization)."""
    weight_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    available_kv_cache_bytes: int

    @property
    def num_tokens(self) -> int:
        """Tokens the KV cache holds (vLLM's "GPU KV cache size"), null block excluded."""
        return (self.num_gpu_blocks - 1) * self.block_size


def peak_activation_bytes(
    model: ModelSpec,
    tp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    overheads: MemoryOverheads | None = None,
) -> int:
    """Estimate vLLM's profiled activation peak (``transient_peak_headroom``) on one GPU.

    vLLM measures the peak torch allocation of a dummy forward pass over ``max_num_batched_tokens``
    tokens followed by a dummy sampler pass over ``max_num_seqs`` rows. The estimate counts the
    tensors alive at the widest point of one layer, for every token of the pass::

        tokens * dtype_bytes * (4 * hidden + (q + 2 kv heads)/TP * head_dim + (k+1) * I/TP)

    with ``k = 2`` for a gated MLP (gate_up output, then the activation's output) and 1 otherwise,
    plus the sampler's ``max_num_seqs * vocab * 20`` bytes. For Llama-3-8B at 8192 tokens and 256
    sequences this gives 1.6 GiB against 1.26 GiB in the PR #10511 log: a slight over-estimate,
    which errs towards fewer blocks.
    """
    overheads = overheads or MemoryOverheads()
    d = model.head_dim
    qkv = (model.q_heads_per_gpu(tp) + 2 * model.kv_heads_per_gpu(tp)) * d
    mlp = (3 if model.gated_mlp else 2) * model.intermediate_size / tp
    per_token = overheads.activation_hidden_factor * model.hidden_size + qkv + mlp
    forward = max_num_batched_tokens * model.dtype_bytes * per_token
    sampler = max_num_seqs * model.padded_vocab() * overheads.sampler_bytes_per_logit
    return int(forward + sampler)


def _smallest_fitting_tp(model: ModelSpec, gpu: GPUSpec, util: float) -> int | None:
    for tp in (1, 2, 4, 8, 16):
        try:
            model.check_tp(tp)
        except CostModelError:
            continue
        if model.weight_bytes_per_gpu(tp) < 0.8 * gpu.memory_bytes_cuda * util:
            return tp
    return None


def kv_capacity(
    model: str | ModelSpec,
    gpu: str | GPUSpec,
    tp: int = 1,
    block_size: int = 16,
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = VLLM_MAX_NUM_SEQS,
    overheads: MemoryOverheads | None = None,
    available_kv_cache_bytes: int | None = None,
    mode: str = "vllm-v1",
) -> KVCapacity:
    """Compute one GPU's KV-cache budget the way vLLM does; see the module docstring.

    Args:
        model: model name / alias / HF repo id, or a ModelSpec.
        gpu: GPU name / alias, or a GPUSpec.
        tp: tensor-parallel size.
        block_size: tokens per KV block (vLLM ``--block-size``).
        gpu_memory_utilization: fraction of the GPU vLLM may use (vLLM default 0.9).
        max_num_batched_tokens: tokens of vLLM's profiling forward pass.
        max_num_seqs: rows of vLLM's profiling sampler pass.
        overheads: estimates of what vLLM measures (activation, non-torch, CUDA graphs);
            None means the documented defaults of :class:`MemoryOverheads`.
        available_kv_cache_bytes: if given (from a vLLM log's "Available KV cache memory"), skip the
            estimate and only divide by the block size.
        mode: ``"vllm-v1"`` (default) or ``"vllm-0.6"``: vLLM 0.6.6's V0 budget, without the
            CUDA-graph term; its block count (no null block in V0) plus one for the simulator's
            null block (see the module docstring).

    Returns:
        A :class:`KVCapacity` with ``num_gpu_blocks`` and every term of the budget.

    Raises:
        CostModelError: on a bad argument, or when the weights and estimated overheads leave no
            room for even one block (the message gives the memory budget and the smallest TP that
            would fit).
    """
    m, g = get_model(model), get_gpu(gpu)
    overheads = overheads or MemoryOverheads()
    if mode not in CAPACITY_MODES:
        raise CostModelError(f"capacity mode must be one of {CAPACITY_MODES}, got {mode!r}")
    m.check_tp(tp)
    if not isinstance(block_size, int) or block_size < 1:
        raise CostModelError(f"block_size must be a positive integer of tokens, got {block_size!r}")
    if not (0.0 < gpu_memory_utilization <= 1.0):
        raise CostModelError(
            f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}"
        )
    for key, value in (
        ("max_num_batched_tokens", max_num_batched_tokens),
        ("max_num_seqs", max_num_seqs),
    ):
        if not isinstance(value, int) or value < 1:
            raise CostModelError(f"{key} must be a positive integer, got {value!r}")

    bytes_per_block = block_size * m.kv_bytes_per_token(tp)
    requested = math.ceil(g.memory_bytes_cuda * gpu_memory_utilization)
    weights = int(m.weight_bytes_per_gpu(tp))
    if available_kv_cache_bytes is not None:
        act = non_torch = cudagraph = 0
        available = int(available_kv_cache_bytes)
    else:
        act = peak_activation_bytes(m, tp, max_num_batched_tokens, max_num_seqs, overheads)
        non_torch = overheads.non_torch_bytes + (overheads.nccl_bytes if tp > 1 else 0)
        cudagraph = overheads.cudagraph_bytes if mode == "vllm-v1" else 0
        available = requested - weights - act - non_torch - cudagraph
    blocks = available // bytes_per_block if available > 0 else 0
    if mode == "vllm-0.6" and blocks > 0:
        blocks += 1  # V0 has no null block; the simulator reserves one
    if blocks < 2:  # the null block plus at least one usable block
        fits = _smallest_fitting_tp(m, g, gpu_memory_utilization)
        fix = (
            f"use tensor parallelism tp>={fits}"
            if fits is not None and fits > tp
            else "use a larger GPU or more tensor parallelism"
        )
        raise CostModelError(
            f"{m.name} does not fit on {g.name} with tp={tp}: gpu_memory_utilization="
            f"{gpu_memory_utilization} gives {requested / GiB:.2f} GiB, weights take "
            f"{weights / GiB:.2f} GiB per GPU, estimated activations {act / GiB:.2f} GiB, "
            f"non-torch {non_torch / GiB:.2f} GiB, CUDA graphs {cudagraph / GiB:.2f} GiB, leaving "
            f"{available / GiB:.2f} GiB for the KV cache (one block of {block_size} tokens needs "
            f"{bytes_per_block / 2**20:.2f} MiB); {fix}, or raise gpu_memory_utilization"
        )
    return KVCapacity(
        num_gpu_blocks=int(blocks),
        block_size=block_size,
        bytes_per_block=bytes_per_block,
        requested_bytes=requested,
        weight_bytes=weights,
        activation_bytes=act,
        non_torch_bytes=non_torch,
        cudagraph_bytes=cudagraph,
        available_kv_cache_bytes=available,
    )


def num_gpu_blocks(
    model: str | ModelSpec,
    gpu: str | GPUSpec,
    tp: int = 1,
    block_size: int = 16,
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = VLLM_MAX_NUM_SEQS,
    overheads: MemoryOverheads | None = None,
    available_kv_cache_bytes: int | None = None,
    mode: str = "vllm-v1",
) -> int:
    """Number of KV blocks vLLM would allocate (null block included); see :func:`kv_capacity`.

    ``floor((total * util - weights - activation peak - non-torch - CUDA graphs) /
    (block_size * 2 * layers * kv_heads/TP * head_dim * dtype_bytes))``; ``mode="vllm-0.6"``:
    no CUDA-graph term, plus one (V0 has no null block).
    """
    return kv_capacity(
        model,
        gpu,
        tp=tp,
        block_size=block_size,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        overheads=overheads,
        available_kv_cache_bytes=available_kv_cache_bytes,
        mode=mode,
    ).num_gpu_blocks
