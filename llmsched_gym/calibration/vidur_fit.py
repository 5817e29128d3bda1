"""Fit linear cost profiles from Vidur's real GPU operator timings.

Vidur (Agrawal et al., "Vidur: A Large-Scale Simulation Framework for LLM Inference", MLSys
2024, arXiv 2405.05465; microsoft/vidur at 7d47513363ec447a741ac5e47241580b47724fbf) profiled
every operator of one transformer layer on real A100 / H100 GPUs. This module composes those
timings into step times for a designed set of batches *the way Vidur does*
(``vidur/execution_time_predictor/sklearn_execution_time_predictor.py`` and
``vidur/entities/execution_time.py``), then fits our
6-coefficient :class:`~llmsched_gym.cost.base.LinearCostModel` to them
(:func:`~llmsched_gym.calibration.linearfit.fit_linear`: relative-error NNLS, seeded 80/20 split).

Vidur's composition of one batch, per layer, in milliseconds::

    T8     = num_tokens rounded up to a multiple of 8
    layer  = attn_pre_proj + attn_post_proj + attn_rope + mlp_up_proj + mlp_down_proj + mlp_act
             + input_layernorm + post_attention_layernorm + add          (each at T8, table medians)
           + attn_decode(B_d, ceil64(mean m of decodes)) * (1 + 0.1 [B_d > 1])
           + attn_prefill(sum ceil64(m), round(sqrt(sum c^2))^2) * (1 + 0.1 [n_p > 1])
           + 2 * (all_reduce(T8) + 0.02)                                 (only when TP > 1)
    step   = layer * num_layers          (embedding, LM head and CPU overheads are not counted)

(The 1.1 batching factors apply to GQA models only; 0.02 ms is Vidur's default NCCL CPU launch
overhead.) Vidur fits a random forest per operator and evaluates it on a grid; we interpolate the
table medians linearly instead (piecewise-constant forests and linear interpolation agree at the
profiled points; between them interpolation is smoother and deterministic). Outside a table's range
values are clamped to its edge, as a forest would.

Attention: only one attention table survives (Llama-2-70B shapes, TP2, A100; see the data
README). For every other (model, GPU, TP) the attention terms come from the roofline
(:class:`~llmsched_gym.cost.roofline.RooflineCostModel`, whose default efficiencies are
calibrated on that table), plus a 12 us per-layer kernel floor for each non-empty attention
kind (the smallest times in the A100 table). The profile's provenance says which source each fit
used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from llmsched_gym.calibration.linearfit import (
    FEATURES,
    BatchSet,
    FitResult,
    design_batches,
    fit_linear,
)
from llmsched_gym.config import VLLM_MAX_NUM_BATCHED_TOKENS, VLLM_MAX_NUM_SEQS
from llmsched_gym.cost.hardware import get_model
from llmsched_gym.cost.roofline import RooflineCostModel, RooflineParams
from llmsched_gym.errors import CostModelError

__all__ = [
    "VIDUR_COMMIT",
    "VIDUR_TARGETS",
    "VidurTarget",
    "VidurStepTimes",
    "fit_vidur_target",
    "profile_document",
]

VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
VIDUR_REPO = "https://github.com/microsoft/vidur"
ATTENTION_HISTORICAL = "historical/e2d00e9/a100/attention.csv"
"""The one attention table (Llama-2-70B shapes, TP2, A100), from Vidur commit e2d00e9."""

MLP_OPERATORS = (
    "attn_pre_proj",
    "attn_post_proj",
    "attn_rope",
    "mlp_up_proj",
    "mlp_down_proj",
    "mlp_act",
    "input_layernorm",
    "post_attention_layernorm",
    "add",
)
"""The token-level operators Vidur sums per layer (ExecutionTime._get_block_execution_time)."""

NCCL_CPU_LAUNCH_OVERHEAD_MS = 0.02
"""Vidur's default ``nccl_cpu_launch_overhead_ms``, added to every all-reduce."""
BATCHING_OVERHEAD_FRACTION = 0.1
"""Vidur's default attention prefill / decode batching overhead fractions (GQA models only)."""
KV_GRANULARITY = 64
"""Vidur's ``kv_cache_prediction_granularity``: KV sizes are rounded up to a multiple of 64."""
ROOFLINE_ATTENTION_FLOOR_MS = 0.012
"""Per-layer floor of a non-empty attention kernel when the roofline stands in for a missing table
(the smallest decode and prefill times in Vidur's A100 attention table are 12-15 us)."""


@dataclass(frozen=True)
class VidurTarget:
    """One (model, GPU, TP) to fit, and which Vidur tables describe it."""

    model: str
    """Our model name (profiles/models.yaml)."""
    gpu: str
    """Our GPU name (profiles/gpus.yaml)."""
    tp: int
    vidur_device: str
    """Vidur's compute folder: ``a100`` (A100 80GB) or ``h100``."""
    vidur_model: str
    """Vidur's model folder under compute/<device>/, e.g. ``meta-llama/Llama-2-70b-hf``."""
    network: str
    """Vidur's network folder for the all-reduce table."""
    attention: str | None = None
    """Attention table path relative to the Vidur data dir, or None to use the roofline."""
    max_num_batched_tokens: int = 4096
    """Design domain: token budget per step (Vidur's tables for Llama-2 stop at 4096 tokens)."""
    max_num_seqs: int = 128
    """Design domain: requests per step (the attention table stops at batch 128)."""
    max_model_len: int = 4096
    """Design domain: tokens per request (the attention table stops at 4096)."""

    @property
    def name(self) -> str:
        """Registry name of the fitted profile: ``vidur:<model>@<gpu>/tp<N>``."""
        return f"vidur:{self.model}@{self.gpu}/tp{self.tp}"

    @property
    def file_stem(self) -> str:
        """File name (without .yaml) of the fitted profile."""
        return f"vidur-{self.model}-{self.gpu}-tp{self.tp}"


VIDUR_TARGETS: dict[str, VidurTarget] = {
    t.name: t
    for t in (
        # The benchmark configuration: every table Vidur needs exists (attention included).
        VidurTarget(
            "llama-2-70b",
            "a100-80gb",
            2,
            "a100",
            "meta-llama/Llama-2-70b-hf",
            "a100_dgx",
            attention=ATTENTION_HISTORICAL,
        ),
        VidurTarget("llama-2-70b", "a100-80gb", 4, "a100", "meta-llama/Llama-2-70b-hf", "a100_dgx"),
        VidurTarget("llama-2-70b", "h100-80gb", 2, "h100", "meta-llama/Llama-2-70b-hf", "h100_dgx"),
        VidurTarget("llama-2-70b", "h100-80gb", 4, "h100", "meta-llama/Llama-2-70b-hf", "h100_dgx"),
        VidurTarget("llama-2-7b", "a100-80gb", 1, "a100", "meta-llama/Llama-2-7b-hf", "a100_dgx"),
        VidurTarget("llama-2-7b", "h100-80gb", 1, "h100", "meta-llama/Llama-2-7b-hf", "h100_dgx"),
        VidurTarget(
            "llama-3-8b",
            "a100-80gb",
            1,
            "a100",
            "meta-llama/Meta-Llama-3-8B",
            "a100_dgx",
            max_num_batched_tokens=VLLM_MAX_NUM_BATCHED_TOKENS,
            max_num_seqs=VLLM_MAX_NUM_SEQS,
            max_model_len=8192,
        ),
        VidurTarget(
            "llama-3-70b",
            "a100-80gb",
            4,
            "a100",
            "meta-llama/Meta-Llama-3-70B",
            "a100_dgx",
            max_num_batched_tokens=VLLM_MAX_NUM_BATCHED_TOKENS,
            max_num_seqs=VLLM_MAX_NUM_SEQS,
            max_model_len=8192,
        ),
    )
}
"""Profiles the calibration script fits. A100 targets use Vidur's ``a100_dgx`` all-reduce table
(A100-SXM4 behind NVSwitch, like our ``a100-80gb``); Vidur's own default is
``a100_pairwise_nvlink`` (PCIe A100s bridged in pairs), which ``--network`` can select."""


# ---------------------------------------------------------------------- table access
def _read_csv(base: Path, rel: str) -> pd.DataFrame:
    """Read ``base/rel`` or its gzipped twin ``base/rel.gz`` (the shipped CI subset)."""
    for path in (base / rel, base / (rel + ".gz")):
        if path.exists():
            return pd.read_csv(path)
    raise CostModelError(
        f"Vidur table {rel!r} not found under {str(base)!r} (nor {rel}.gz); pass --vidur-dir "
        "pointing at Vidur's data/profiling folder (or the project's calibration/data/vidur subset)"
    )


def _median(df: pd.DataFrame, op: str) -> np.ndarray:
    return df[f"time_stats.{op}.median"].fillna(0.0).to_numpy(dtype=np.float64)


class _Rows2D:
    """Interpolate a table sampled on rows of a key (each row a 1-D curve over x).

    Query (key, x): interpolate each neighbouring row over x (clamped to the row's range), then
    blend the two rows linearly in ``key_transform(key)``. Duplicate (key, x) points are averaged.
    """

    def __init__(self, keys: np.ndarray, xs: np.ndarray, ys: np.ndarray, square_keys: bool) -> None:
        frame = (
            pd.DataFrame({"k": keys, "x": xs, "y": ys}).groupby(["k", "x"], as_index=False).mean()
        )
        self.square = square_keys
        self.keys = np.sort(frame["k"].unique()).astype(np.float64)
        self.rows = [
            (g["x"].to_numpy(np.float64), g["y"].to_numpy(np.float64))
            for _, g in frame.sort_values(["k", "x"]).groupby("k", sort=True)
        ]

    def __call__(self, key: float, x: float) -> float:
        keys = self.keys
        key = min(max(key, keys[0]), keys[-1])
        j = int(np.searchsorted(keys, key))
        if keys[min(j, len(keys) - 1)] == key:
            rx, ry = self.rows[min(j, len(keys) - 1)]
            return float(np.interp(x, rx, ry))
        lo, hi = j - 1, j
        rx0, ry0 = self.rows[lo]
        rx1, ry1 = self.rows[hi]
        y0, y1 = float(np.interp(x, rx0, ry0)), float(np.interp(x, rx1, ry1))
        k0, k1, k = keys[lo], keys[hi], key
        if self.square:
            k0, k1, k = k0 * k0, k1 * k1, k * k
        w = (k - k0) / (k1 - k0)
        return y0 + w * (y1 - y0)


@dataclass
class VidurTables:
    """The Vidur tables one target needs, already filtered to its shape and TP."""

    mlp_tokens: np.ndarray
    """Profiled num_tokens (sorted, unique)."""
    mlp_ms: np.ndarray
    """Sum of the per-layer token-level operator medians at those token counts (ms)."""
    allreduce_tokens: np.ndarray | None
    allreduce_ms: np.ndarray | None
    decode: _Rows2D | None
    """attn_decode(batch_size, kv_cache_size) in ms, or None without an attention table."""
    prefill: _Rows2D | None
    """attn_prefill(prefill_chunk_size, kv_cache_size) in ms; rows keyed by chunk, blended in
    chunk^2."""
    files: list[str] = field(default_factory=list)
    """Relative paths of the tables read (for provenance)."""


def load_vidur_tables(vidur_dir: str | Path, target: VidurTarget) -> VidurTables:
    """Load and filter the Vidur tables of ``target`` from ``vidur_dir``.

    Raises:
        CostModelError: if a table is missing or has no rows for the target's shape and TP.
    """
    base = Path(vidur_dir)
    m = get_model(target.model)
    mlp_rel = f"compute/{target.vidur_device}/{target.vidur_model}/mlp.csv"
    mlp = _read_csv(base, mlp_rel)
    mlp = mlp[
        (mlp["n_head"] == m.num_attention_heads)
        & (mlp["n_kv_head"] == m.num_key_value_heads)
        & (mlp["n_embd"] == m.hidden_size)
        & (mlp["n_expanded_embd"] == m.intermediate_size)
        & (mlp["num_tensor_parallel_workers"] == target.tp)
    ]
    if mlp.empty:
        raise CostModelError(
            f"{mlp_rel} has no rows for {m.name} shapes at num_tensor_parallel_workers={target.tp}"
        )
    total = sum(_median(mlp, op) for op in MLP_OPERATORS)
    per_t = pd.DataFrame({"t": mlp["num_tokens"].to_numpy(), "ms": total}).groupby("t").mean()
    files = [mlp_rel]

    ar_t = ar_ms = None
    if target.tp > 1:
        ar_rel = f"network/{target.network}/all_reduce.csv"
        ar = _read_csv(base, ar_rel)
        ar = ar[
            (ar["num_workers"] == target.tp)
            & (ar["devices_per_node"] == target.tp)
            & (ar["collective"] == "all_reduce")
        ]
        if ar.empty:
            raise CostModelError(
                f"{ar_rel} has no all_reduce rows with num_workers == "
                f"devices_per_node == {target.tp}"
            )
        # Vidur reads `size` as bytes of fp16 activations: tokens = size / (2 * hidden).
        tok = ar["size"].to_numpy(np.float64) / m.hidden_size / 2.0
        g = pd.DataFrame({"t": tok, "ms": _median(ar, "all_reduce")}).groupby("t").mean()
        ar_t, ar_ms = g.index.to_numpy(np.float64), g["ms"].to_numpy(np.float64)
        files.append(ar_rel)

    decode = prefill = None
    if target.attention is not None:
        at = _read_csv(base, target.attention)
        at = at[
            (at["n_embd"] == m.hidden_size)
            & (at["n_q_head"] == m.num_attention_heads)
            & (at["n_kv_head"] == m.num_key_value_heads)
            & (at["block_size"] == 16)
            & (at["num_tensor_parallel_workers"] == target.tp)
        ]
        dec = at[at["prefill_chunk_size"] == 0]
        pre = at[at["prefill_chunk_size"] > 0]
        if dec.empty or pre.empty:
            raise CostModelError(
                f"{target.attention} has no decode or prefill rows for {m.name} at TP{target.tp}"
            )
        decode = _Rows2D(
            dec["batch_size"].to_numpy(),
            dec["kv_cache_size"].to_numpy(),
            _median(dec, "attn_decode"),
            square_keys=False,
        )
        prefill = _Rows2D(
            pre["prefill_chunk_size"].to_numpy(),
            pre["kv_cache_size"].to_numpy(),
            _median(pre, "attn_prefill"),
            square_keys=True,
        )
        files.append(target.attention)

    return VidurTables(
        mlp_tokens=per_t.index.to_numpy(np.float64),
        mlp_ms=per_t["ms"].to_numpy(np.float64),
        allreduce_tokens=ar_t,
        allreduce_ms=ar_ms,
        decode=decode,
        prefill=prefill,
        files=files,
    )


def _ceil_to(x: int, k: int) -> int:
    return (x + k - 1) // k * k


class VidurStepTimes:
    """Step times (seconds) of batches, composed from Vidur's tables as Vidur composes them."""

    def __init__(
        self,
        tables: VidurTables,
        target: VidurTarget,
        roofline_params: RooflineParams | None = None,
    ) -> None:
        self.tables = tables
        self.target = target
        self.spec = get_model(target.model)
        self.gqa = self.spec.num_attention_heads > self.spec.num_key_value_heads
        self.roofline = RooflineCostModel(target.model, target.gpu, target.tp, roofline_params)

    @property
    def attention_source(self) -> str:
        """``vidur`` when the measured attention table is used, else ``roofline``."""
        return "vidur" if self.tables.decode is not None else "roofline"

    def _attention_ms(self, c: np.ndarray, m: np.ndarray) -> float:
        """Per-layer attention time (ms) of one batch's items."""
        dec = c == 1
        pre = ~dec
        n_d, n_p = int(dec.sum()), int(pre.sum())
        t = self.tables
        ms = 0.0
        if t.decode is not None and t.prefill is not None:
            if n_d:
                kv = _ceil_to(int(np.mean(m[dec])), KV_GRANULARITY)
                f = 1 + BATCHING_OVERHEAD_FRACTION * (n_d > 1) if self.gqa else 1.0
                ms += t.decode(float(n_d), float(kv)) * f
            if n_p:
                kv = sum(_ceil_to(int(x), KV_GRANULARITY) for x in m[pre])
                chunk = round(math.sqrt(float(np.sum(c[pre].astype(np.float64) ** 2))))
                f = 1 + BATCHING_OVERHEAD_FRACTION * (n_p > 1) if self.gqa else 1.0
                ms += t.prefill(float(chunk), float(kv)) * f
            return ms
        # Roofline stand-in: the model's per-layer attention terms plus a kernel floor.
        layers = self.spec.num_hidden_layers
        k = self.roofline.coefficients
        if n_p:
            work = float(np.sum(c[pre] * c[pre] + 2 * m[pre] * c[pre]))
            ms += ROOFLINE_ATTENTION_FLOOR_MS + k["prefill_attn_s"] / layers * work * 1e3
        if n_d:
            ms += (
                ROOFLINE_ATTENTION_FLOOR_MS + k["decode_kv_s"] / layers * float(m[dec].sum()) * 1e3
            )
        return ms

    def times(self, batches: BatchSet) -> np.ndarray:
        """Step time in seconds of every batch in ``batches``."""
        t = self.tables
        layers = self.spec.num_hidden_layers
        feats = batches.features()
        tokens8 = (feats["num_tokens"] + 7) // 8 * 8
        token_ms = np.interp(tokens8, t.mlp_tokens, t.mlp_ms)
        if self.target.tp > 1:
            if t.allreduce_tokens is None or t.allreduce_ms is None:
                raise CostModelError(f"{self.target.name}: TP>1 needs an all-reduce table")
            ar = np.interp(tokens8, t.allreduce_tokens, t.allreduce_ms)
            token_ms = token_ms + 2.0 * (ar + NCCL_CPU_LAUNCH_OVERHEAD_MS)
        attn_ms = np.array(
            [self._attention_ms(*batches.items_of(b)) for b in range(batches.num_batches)]
        )
        return (token_ms + attn_ms) * layers * 1e-3


def fit_vidur_target(
    target: VidurTarget,
    vidur_dir: str | Path,
    num_batches: int = 2000,
    seed: int = 0,
    heldout_fraction: float = 0.2,
) -> tuple[FitResult, dict[str, object]]:
    """Compose Vidur step times for a designed batch set and fit a LinearCostModel to them.

    Args:
        target: which (model, GPU, TP) and which tables.
        vidur_dir: Vidur's ``data/profiling`` folder, or the project's gzipped subset.
        num_batches: size of the designed batch set.
        seed: seed of the design and of the train / held-out split.
        heldout_fraction: share of batches kept out of the fit.

    Returns:
        The fit, and a provenance dict (tables read, attention source, design domain, and the
        roofline's MAPE against the same Vidur step times, as a cross-check of the roofline).
    """
    tables = load_vidur_tables(vidur_dir, target)
    oracle = VidurStepTimes(tables, target)
    batches = design_batches(
        num_batches, seed, target.max_num_batched_tokens, target.max_num_seqs, target.max_model_len
    )
    y = oracle.times(batches)
    feats = batches.features()
    fit = fit_linear(feats, y, name=target.name, seed=seed, heldout_fraction=heldout_fraction)
    roof = oracle.roofline.step_times(*(feats[f] for f in FEATURES))
    roof_ape = np.abs(roof - y) / y * 100.0
    provenance: dict[str, object] = {
        "tables": list(tables.files),
        "attention_source": oracle.attention_source,
        "network": target.network if target.tp > 1 else None,
        "vidur_device": target.vidur_device,
        "design": {
            "num_batches": num_batches,
            "seed": seed,
            "max_num_batched_tokens": target.max_num_batched_tokens,
            "max_num_seqs": target.max_num_seqs,
            "max_model_len": target.max_model_len,
        },
        "roofline_vs_vidur_mape_pct": float(np.mean(roof_ape)),
        "vidur_step_ms_range": [float(y.min() * 1e3), float(y.max() * 1e3)],
    }
    return fit, provenance


def profile_document(
    target: VidurTarget,
    fit: FitResult,
    provenance: dict[str, object],
    created: str,
    script: str = "calibration/fit_vidur.py",
) -> dict[str, object]:
    """The YAML document of a fitted profile (see llmsched_gym/cost/profiles/vidur-*.yaml)."""
    attention = provenance["attention_source"]
    note = (
        "attention from Vidur's measured FlashAttention table (Llama-2-70B shapes, TP2, A100)"
        if attention == "vidur"
        else "no Vidur attention table for this configuration: attention terms from the roofline "
        "(llmsched_gym.cost.roofline defaults) plus a 12 us per-layer kernel floor"
    )
    return {
        "kind": "linear",
        "name": target.name,
        "model": target.model,
        "gpu": target.gpu,
        "tp": target.tp,
        "coefficients": fit.model.coefficients(),
        "units": "seconds; features as defined in llmsched_gym/cost/base.py",
        "fit": {
            "method": "relative-error non-negative least squares (Lawson-Hanson), seeded split",
            "seed": fit.seed,
            "heldout_fraction": fit.heldout_fraction,
            "train": _stats(fit.train),
            "heldout": _stats(fit.heldout),
        },
        "source": {
            "data": f"Vidur GPU operator profiling tables, {VIDUR_REPO} at commit {VIDUR_COMMIT} "
            "(attention table from commit e2d00e9afba96cec9f0e7ea560bbfc4a539fae6a), MIT licence",
            "composition": "Vidur's per-layer operator sum x layers (+2 all-reduces per layer at "
            "TP>1); embedding, LM head and CPU overheads not counted, as in Vidur",
            "attention": note,
            **provenance,
        },
        "created": created,
        "script": script,
    }


def _stats(s: object) -> dict[str, float]:
    return {
        "n": s.n,
        "mape_pct": round(float(s.mape_pct), 4),
        "p90_ape_pct": round(float(s.p90_ape_pct), 4),
        "max_ape_pct": round(float(s.max_ape_pct), 4),
    }


def targets_by_name(names: Sequence[str] | None) -> list[VidurTarget]:
    """The targets named (all when ``names`` is empty or None); unknown names raise."""
    if not names:
        return list(VIDUR_TARGETS.values())
    out = []
    for n in names:
        if n not in VIDUR_TARGETS:
            raise CostModelError(f"unknown Vidur target {n!r}; known: {', '.join(VIDUR_TARGETS)}")
        out.append(VIDUR_TARGETS[n])
    return out
