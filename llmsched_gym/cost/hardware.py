"""GPU and model specifications, loaded from the YAML data files shipped with the package.

``profiles/gpus.yaml`` holds datasheet numbers (peak dense BF16 throughput, DRAM bandwidth, memory,
interconnect) and ``profiles/models.yaml`` holds Hugging Face ``config.json`` shapes; both cite
their sources. This module turns them into frozen dataclasses and derives what the roofline and the
KV-capacity calculation need: parameter counts, weight bytes and KV bytes per GPU under tensor
parallelism (TP), sharded the way vLLM shards them.

Names are case-insensitive and accept aliases (``a100`` is ``a100-80gb``,
``meta-llama/Llama-2-7b-hf`` is ``llama-2-7b``); unknown names raise
:class:`~llmsched_gym.errors.CostModelError` listing the known ones and the closest matches.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

from llmsched_gym import _yaml
from llmsched_gym.errors import CostModelError

__all__ = [
    "GPUSpec",
    "ModelSpec",
    "get_gpu",
    "get_model",
    "list_gpus",
    "list_models",
    "resolve_gpu",
    "resolve_model",
]

GB = 1e9
"""Datasheet bandwidths are in decimal GB/s."""

VOCAB_PADDING = 64
"""vLLM pads the vocabulary of ``VocabParallelEmbedding`` / ``ParallelLMHead`` to a multiple of 64
(``DEFAULT_VOCAB_PADDING_SIZE`` in vllm/model_executor/layers/vocab_parallel_embedding.py)."""


@dataclass(frozen=True)
class GPUSpec:
    """One GPU's datasheet numbers (see ``profiles/gpus.yaml`` for the sources)."""

    name: str
    """Canonical name, e.g. ``a100-80gb``."""
    full_name: str
    """Marketing name, e.g. ``NVIDIA A100-SXM4-80GB``."""
    dense_bf16_tflops: float
    """Peak dense BF16 Tensor Core throughput in 1e12 FLOP/s (no 2:4 sparsity)."""
    memory_bandwidth_gbps: float
    """Peak DRAM bandwidth in 1e9 bytes/s."""
    memory_gb_datasheet: float
    """Marketed memory size in GB."""
    memory_bytes_cuda: int
    """Total memory CUDA reports, in bytes: what vLLM multiplies by ``gpu_memory_utilization``."""
    nvlink_gbps_bidirectional: float | None
    """NVLink bandwidth per GPU, both directions, 1e9 bytes/s; None without NVLink."""
    nvlink_max_gpus: int
    """Largest TP group that is all-NVLink (8 on HGX/DGX, 2 for a bridged pair, 1 without)."""
    pcie_gbps_bidirectional: float
    """PCIe bandwidth per GPU, both directions, 1e9 bytes/s."""
    source: str
    """Which datasheet the numbers come from."""

    @property
    def peak_flops(self) -> float:
        """Peak dense BF16 throughput in FLOP/s."""
        return self.dense_bf16_tflops * 1e12

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        """Peak DRAM bandwidth in bytes/s."""
        return self.memory_bandwidth_gbps * GB

    def link_bytes_per_s(self, tp: int) -> float:
        """One-direction interconnect bandwidth (bytes/s) a ring all-reduce over ``tp`` GPUs sees.

        All-NVLink groups (``tp <= nvlink_max_gpus``) use NVLink, larger ones fall back to PCIe.
        Datasheets print bidirectional figures; a ring sends and receives at once, so each
        direction carries half.
        """
        if self.nvlink_gbps_bidirectional is not None and tp <= self.nvlink_max_gpus:
            return self.nvlink_gbps_bidirectional * GB / 2.0
        return self.pcie_gbps_bidirectional * GB / 2.0


@dataclass(frozen=True)
class ModelSpec:
    """One decoder-only transformer's shapes (see ``profiles/models.yaml`` for the sources)."""

    name: str
    """Canonical name, e.g. ``llama-2-70b``."""
    hf_repo: str
    """Hugging Face repo id whose ``config.json`` gave the numbers."""
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    gated_mlp: bool
    """SwiGLU (gate, up, down) when True; two-matrix MLP (fc1, fc2) when False."""
    norm: str
    """``rmsnorm`` (weight) or ``layernorm`` (weight and bias)."""
    qkv_bias: bool
    linear_bias: bool
    """Biases on every linear layer (OPT)."""
    qk_norm: bool
    """Per-head RMSNorm on q and k (Qwen3)."""
    tie_word_embeddings: bool
    learned_pos_embeddings: int
    """Rows of a learned position-embedding table (OPT: 2050); 0 for rotary models."""
    max_position_embeddings: int
    """Context length from ``config.json``: vLLM's ``max_model_len`` when none is given."""
    dtype_bytes: int
    """Bytes per weight / activation / KV element (2 for fp16 and bf16)."""
    num_params: int
    """Total parameter count as listed in the YAML (checked against :meth:`param_count`)."""

    # ---------------------------------------------------------------- tensor parallelism
    def check_tp(self, tp: int) -> None:
        """Raise CostModelError unless vLLM can shard this model over ``tp`` GPUs.

        vLLM needs ``num_attention_heads % tp == 0`` and either ``num_key_value_heads % tp == 0``
        or ``tp % num_key_value_heads == 0`` (then each KV head is replicated on ``tp / kv`` GPUs).
        """
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            raise CostModelError(f"tensor parallel size tp must be an integer >= 1, got {tp!r}")
        if self.num_attention_heads % tp:
            raise CostModelError(
                f"{self.name}: tp={tp} does not divide num_attention_heads="
                f"{self.num_attention_heads}; pick a tp that divides it"
            )
        kv = self.num_key_value_heads
        if kv % tp and tp % kv:
            raise CostModelError(
                f"{self.name}: tp={tp} and num_key_value_heads={kv} must divide one another "
                "(vLLM shards or replicates whole KV heads)"
            )

    def q_heads_per_gpu(self, tp: int) -> int:
        """Query heads each GPU holds under TP."""
        return self.num_attention_heads // tp

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads each GPU holds: ``kv / tp``, at least 1 (vLLM replicates when ``tp > kv``)."""
        return max(1, self.num_key_value_heads // tp)

    def intermediate_per_gpu(self, tp: int) -> float:
        """MLP intermediate width per GPU (column-parallel up/gate, row-parallel down)."""
        return self.intermediate_size / tp

    def padded_vocab(self) -> int:
        """Vocabulary rounded up to vLLM's padding of 64 rows."""
        return -(-self.vocab_size // VOCAB_PADDING) * VOCAB_PADDING

    # ---------------------------------------------------------------- parameters
    def layer_linear_params_per_gpu(self, tp: int) -> float:
        """Weights of one layer's GEMMs on one GPU: QKV, O, and the MLP matrices (no biases)."""
        h, d = self.hidden_size, self.head_dim
        q = self.q_heads_per_gpu(tp) * d
        kv = self.kv_heads_per_gpu(tp) * d
        attn = h * (q + 2 * kv) + q * h
        mlp = (3 if self.gated_mlp else 2) * h * self.intermediate_size / tp
        return attn + mlp

    def layer_params_per_gpu(self, tp: int) -> float:
        """All parameters of one layer on one GPU: GEMM weights, biases and norms."""
        h, d = self.hidden_size, self.head_dim
        q = self.q_heads_per_gpu(tp) * d
        kv = self.kv_heads_per_gpu(tp) * d
        n = self.layer_linear_params_per_gpu(tp)
        if self.qkv_bias or self.linear_bias:
            n += q + 2 * kv
        if self.linear_bias:
            # o_proj and down/fc2 are row-parallel: their bias is whole on every rank; fc1 is
            # column-parallel: its bias is sharded.
            n += h + self.intermediate_size / tp + h
        n += (4 if self.norm == "layernorm" else 2) * h
        if self.qk_norm:
            n += 2 * d
        return n

    def _params(self, tp: int, vocab: int) -> float:
        h = self.hidden_size
        embed = vocab * h / tp
        head = 0.0 if self.tie_word_embeddings else vocab * h / tp
        final_norm = (2 if self.norm == "layernorm" else 1) * h
        pos = self.learned_pos_embeddings * h
        layers = self.num_hidden_layers * self.layer_params_per_gpu(tp)
        return embed + head + final_norm + pos + layers

    def param_count(self) -> int:
        """Total parameters implied by the shapes (unpadded vocab), as checkpoints count them."""
        return int(round(self._params(1, self.vocab_size)))

    def params_per_gpu(self, tp: int) -> float:
        """Parameters one GPU holds under TP, with vLLM's padded vocabulary."""
        self.check_tp(tp)
        return self._params(tp, self.padded_vocab())

    def weight_bytes_per_gpu(self, tp: int) -> float:
        """Bytes of weights one GPU loads (what vLLM logs as "Model loading took")."""
        return self.params_per_gpu(tp) * self.dtype_bytes

    def lm_head_params_per_gpu(self, tp: int) -> float:
        """Parameters of the LM head each GPU multiplies by (shared with the embedding if tied)."""
        return self.padded_vocab() * self.hidden_size / tp

    # ---------------------------------------------------------------- KV cache
    def kv_bytes_per_token_per_layer(self, tp: int) -> int:
        """Bytes of one token's K and V in one layer on one GPU: ``2 * kv_heads/TP * d * bytes``."""
        return 2 * self.kv_heads_per_gpu(tp) * self.head_dim * self.dtype_bytes

    def kv_bytes_per_token(self, tp: int) -> int:
        """Bytes one token's K and V take across all layers on one GPU."""
        self.check_tp(tp)
        return self.num_hidden_layers * self.kv_bytes_per_token_per_layer(tp)


# -------------------------------------------------------------------- loading
_GPU_FIELDS = {
    "full_name",
    "aliases",
    "form_factor",
    "dense_bf16_tflops",
    "memory_bandwidth_gbps",
    "memory_gb_datasheet",
    "memory_bytes_cuda",
    "memory_bytes_cuda_note",
    "nvlink_gbps_bidirectional",
    "nvlink_max_gpus",
    "pcie_gbps_bidirectional",
    "source",
}
_MODEL_FIELDS = {
    "hf_repo",
    "aliases",
    "architecture",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "gated_mlp",
    "norm",
    "qkv_bias",
    "linear_bias",
    "qk_norm",
    "tie_word_embeddings",
    "learned_pos_embeddings",
    "max_position_embeddings",
    "torch_dtype",
    "dtype_bytes",
    "num_params",
}


def _read_yaml(filename: str) -> dict[str, Any]:
    text = resources.files("llmsched_gym.cost").joinpath("profiles", filename).read_text("utf-8")
    data = _yaml.safe_load(text)
    if not isinstance(data, dict):
        raise CostModelError(f"{filename}: expected a mapping of name -> spec, got {type(data)}")
    return data


def _check_fields(filename: str, name: str, entry: dict[str, Any], allowed: set[str]) -> None:
    unknown = set(entry) - allowed
    missing = allowed - set(entry) - {"aliases", "memory_bytes_cuda_note", "form_factor"}
    if unknown or missing:
        raise CostModelError(
            f"{filename}: entry {name!r} has unknown fields {sorted(unknown)} and lacks "
            f"{sorted(missing)}; allowed fields are {sorted(allowed)}"
        )


@functools.lru_cache(maxsize=1)
def _gpus() -> tuple[dict[str, GPUSpec], dict[str, str]]:
    specs: dict[str, GPUSpec] = {}
    aliases: dict[str, str] = {}
    for name, entry in _read_yaml("gpus.yaml").items():
        _check_fields("gpus.yaml", name, entry, _GPU_FIELDS)
        nvlink = entry["nvlink_gbps_bidirectional"]
        specs[name] = GPUSpec(
            name=name,
            full_name=str(entry["full_name"]),
            dense_bf16_tflops=float(entry["dense_bf16_tflops"]),
            memory_bandwidth_gbps=float(entry["memory_bandwidth_gbps"]),
            memory_gb_datasheet=float(entry["memory_gb_datasheet"]),
            memory_bytes_cuda=int(entry["memory_bytes_cuda"]),
            nvlink_gbps_bidirectional=None if nvlink is None else float(nvlink),
            nvlink_max_gpus=int(entry["nvlink_max_gpus"]),
            pcie_gbps_bidirectional=float(entry["pcie_gbps_bidirectional"]),
            source=str(entry["source"]),
        )
        for alias in [name, *entry.get("aliases", [])]:
            aliases[str(alias).lower()] = name
    return specs, aliases


@functools.lru_cache(maxsize=1)
def _models() -> tuple[dict[str, ModelSpec], dict[str, str]]:
    specs: dict[str, ModelSpec] = {}
    aliases: dict[str, str] = {}
    for name, entry in _read_yaml("models.yaml").items():
        _check_fields("models.yaml", name, entry, _MODEL_FIELDS)
        specs[name] = ModelSpec(
            name=name,
            hf_repo=str(entry["hf_repo"]),
            hidden_size=int(entry["hidden_size"]),
            num_hidden_layers=int(entry["num_hidden_layers"]),
            num_attention_heads=int(entry["num_attention_heads"]),
            num_key_value_heads=int(entry["num_key_value_heads"]),
            head_dim=int(entry["head_dim"]),
            intermediate_size=int(entry["intermediate_size"]),
            vocab_size=int(entry["vocab_size"]),
            gated_mlp=bool(entry["gated_mlp"]),
            norm=str(entry["norm"]),
            qkv_bias=bool(entry["qkv_bias"]),
            linear_bias=bool(entry["linear_bias"]),
            qk_norm=bool(entry["qk_norm"]),
            tie_word_embeddings=bool(entry["tie_word_embeddings"]),
            learned_pos_embeddings=int(entry["learned_pos_embeddings"]),
            max_position_embeddings=int(entry["max_position_embeddings"]),
            dtype_bytes=int(entry["dtype_bytes"]),
            num_params=int(entry["num_params"]),
        )
        for alias in [name, entry["hf_repo"], *entry.get("aliases", [])]:
            aliases[str(alias).lower()] = name
    return specs, aliases


def _unknown(kind: str, name: str, known: list[str], aliases: list[str]) -> CostModelError:
    close = difflib.get_close_matches(name.lower(), sorted(set(known) | set(aliases)), n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return CostModelError(f"unknown {kind} {name!r}{hint} Known {kind}s: {', '.join(known)}")


def list_gpus() -> list[str]:
    """Canonical names of the GPUs in ``profiles/gpus.yaml``."""
    return sorted(_gpus()[0])


def list_models() -> list[str]:
    """Canonical names of the models in ``profiles/models.yaml``."""
    return sorted(_models()[0])


def resolve_gpu(name: str) -> str:
    """Canonical GPU name for ``name`` or an alias of it (case-insensitive)."""
    specs, aliases = _gpus()
    key = str(name).lower()
    if key not in aliases:
        raise _unknown("GPU", str(name), sorted(specs), list(aliases))
    return aliases[key]


def resolve_model(name: str) -> str:
    """Canonical model name for ``name``, an alias or its Hugging Face repo id."""
    specs, aliases = _models()
    key = str(name).lower()
    if key not in aliases:
        raise _unknown("model", str(name), sorted(specs), list(aliases))
    return aliases[key]


def get_gpu(gpu: str | GPUSpec) -> GPUSpec:
    """The :class:`GPUSpec` for a name or alias (a GPUSpec passes through)."""
    if isinstance(gpu, GPUSpec):
        return gpu
    return _gpus()[0][resolve_gpu(gpu)]


def get_model(model: str | ModelSpec) -> ModelSpec:
    """The :class:`ModelSpec` for a name, alias or HF repo id (a ModelSpec passes through)."""
    if isinstance(model, ModelSpec):
        return model
    return _models()[0][resolve_model(model)]
