"""Fit and validate linear cost profiles from the torch profiler's measurements.

The fitting half of ``llmsched-gym calibrate --backend torch`` (measuring:
:mod:`llmsched_gym.calibration.torch_profile`). It needs numpy, pandas and matplotlib, never
torch, so a GPU machine only has to measure and the fit can run anywhere.

From one measurement folder (``operators.csv``, ``steps.csv``, ``meta.json``):

1. **Fit.** The profile is fitted to the measured whole-step times by relative-error NNLS on a
   seeded 80% split; the other 20% are never used in the fit and give the held-out error. The
   shipped form (``form="extended"``, the default) is
   :class:`~llmsched_gym.cost.base.ExtendedLinearCostModel`: the six linear coefficients with the
   token term's GEMM knee fixed at :data:`TOKEN_KNEE` tokens (fixed a priori, not chosen on the
   held-out steps), plus the split-KV path indicator, the longest context and the cached tokens
   of short prefills (:func:`~llmsched_gym.calibration.linearfit.fit_extended`). The plain
   6-coefficient :class:`~llmsched_gym.cost.base.LinearCostModel` (``form="linear"``) is always
   fitted too, and a table of forms (:data:`FORMS`) gives each one's error on the same split,
   including an analysis-only term for PyTorch FlashAttention-2's GQA artefact of profiler
   version 1 (never shipped: vLLM's kernels do not have it).
2. **Composition (Vidur's method).** Step times are also composed from the operator tables --
   token-level operators interpolated at the batch's token count and summed per layer, prefill
   attention per request from the (chunk, context) grid, decode attention from the (batch, mean
   context) grid, times the number of layers, plus embedding, final norm, LM head and sampling --
   and compared with the measured steps. A second profile is fitted to composed times of a larger
   design (2000 batches) and evaluated on the same held-out measured steps, so one sees what
   fitting from operator tables alone (as from Vidur's tables) costs in accuracy.
3. **Where the linear model breaks down.** Errors per batch kind (decode-only, one prefill,
   several prefills, mixed) and per token-count range, as a table and a plot.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmsched_gym._markdown import markdown_table
from llmsched_gym.calibration.linearfit import (
    FEATURES,
    ITEM_TERMS,
    PREFILL_TERMS,
    BatchSet,
    FitResult,
    FitStats,
    design_batches,
    fit_columns,
    fit_extended,
    fit_linear,
    fit_piecewise,
    knee_tokens,
)
from llmsched_gym.calibration.torch_profile import (
    PROFILER_VERSION,
    SAMPLE_OPERATORS,
    STEP_OPERATORS,
    TOKEN_OPERATORS,
)
from llmsched_gym.calibration.vidur_fit import _median, _read_csv, _Rows2D, _stats
from llmsched_gym.cost.hardware import get_model
from llmsched_gym.errors import CostModelError

__all__ = [
    "Measurements",
    "OperatorComposer",
    "TorchFit",
    "batch_kinds",
    "fit_measurements",
    "load_measurements",
    "profile_document",
    "profiler_version",
    "vidur_crosscheck",
    "write_fit_outputs",
]

KINDS = ("decode-only", "one prefill", "several prefills", "mixed")
TOKEN_BINS = (0, 16, 128, 512, 2048, 1 << 30)
FIT_FORMS = ("extended", "piecewise", "linear")
"""Forms ``fit_measurements`` can ship (``calibrate --form``)."""
TOKEN_KNEE = 128
"""Knee of the extended form's token term: below it a step reads the weights once and is flat."""
PROFILER_VERSIONS = {
    1: "one attention call per batch (mixed batches: decode KV read once per query head by "
    "PyTorch's FlashAttention-2 for GQA models)",
    2: "a mixed batch's decode rows and prefill rows in separate attention calls",
}


def profiler_version(meta: dict[str, Any]) -> int:
    """The profiler version a measurement was taken with (1 when meta.json predates the field)."""
    return int(meta.get("profiler_version", 1))


def _form_columns(
    feats: dict[str, np.ndarray], terms: dict[str, np.ndarray], knee: int
) -> dict[str, list[np.ndarray]]:
    """Design columns (without the intercept) of every form of :data:`FORMS`."""
    knee_t = knee_tokens(feats["num_tokens"], knee)
    rest = [feats[f] for f in FEATURES[1:]]
    plain = [feats[f] for f in FEATURES]
    ext = [knee_t, *rest, *(terms[f] for f in ITEM_TERMS)]
    return {
        "linear": plain,
        "knee": [knee_t, *rest],
        "knee+split": [knee_t, *rest, terms["split_path"]],
        "extended": ext,
        "extended+gqa": [*ext, terms["decode_kv_short_prefill"]],
    }


FORMS = {
    "linear": 'linear, six coefficients (`form="linear"`)',
    "knee": "`num_tokens` -> `max(num_tokens, {knee})` (GEMM knee)",
    "knee+split": "+ split-KV path: some item with <= 128 new tokens over > 512 cached",
    "extended": "+ longest context, + cached tokens of short prefills (**shipped**, "
    '`form="extended"`)',
    "extended+gqa": "+ decode KV x [a prefill of <= 128 new tokens over > 512 cached] "
    "(analysis only: FlashAttention-2's GQA artefact, never shipped)",
}
"""Forms compared in every report (same split); only ``linear`` and ``extended`` are shipped."""


@dataclass
class Measurements:
    """One profiler run: operator table, measured steps and their metadata."""

    path: Path
    meta: dict[str, Any]
    operators: pd.DataFrame
    """Columns operator, x, y, time_s."""
    steps: BatchSet
    step_times_s: np.ndarray

    @property
    def num_layers(self) -> int:
        """Layers the measured steps ran (the composition multiplies per-layer times by it)."""
        return int(self.meta["num_layers_run"])


def load_measurements(path: str | Path) -> Measurements:
    """Read a profiler output folder; malformed files raise CostModelError naming the problem."""
    p = Path(path)
    for name in ("operators.csv", "steps.csv", "meta.json"):
        if not (p / name).is_file():
            raise CostModelError(f"measurement folder {str(p)!r} has no {name}")
    try:
        meta = json.loads((p / "meta.json").read_text())
    except json.JSONDecodeError as err:
        raise CostModelError(f"{p / 'meta.json'}: not valid JSON: {err}") from None
    for key in ("model", "num_layers_run", "hardware", "grid"):
        if key not in meta:
            raise CostModelError(f"{p / 'meta.json'}: missing key {key!r}")
    ops = pd.read_csv(p / "operators.csv")
    if list(ops.columns) != ["operator", "x", "y", "time_s"]:
        raise CostModelError(
            f"{p / 'operators.csv'}: columns must be operator,x,y,time_s, got {list(ops.columns)}"
        )
    needed = set(TOKEN_OPERATORS + STEP_OPERATORS + SAMPLE_OPERATORS) | {
        "attn_prefill",
        "attn_decode",
    }
    missing = needed - set(ops["operator"])
    if missing:
        raise CostModelError(f"{p / 'operators.csv'}: no rows for {sorted(missing)}")
    if not np.all(np.isfinite(ops["time_s"])) or (ops["time_s"] <= 0).any():
        raise CostModelError(f"{p / 'operators.csv'}: every time_s must be a finite number > 0")
    steps = pd.read_csv(p / "steps.csv")
    if list(steps.columns) != ["batch", "items", "time_s"]:
        raise CostModelError(
            f"{p / 'steps.csv'}: columns must be batch,items,time_s, got {list(steps.columns)}"
        )
    bs, cs, ms = [], [], []
    for row, items in enumerate(steps["items"]):
        try:
            pairs = [tuple(int(v) for v in it.split(":")) for it in str(items).split(";")]
            if any(len(pr) != 2 or pr[0] < 1 or pr[1] < 0 for pr in pairs):
                raise ValueError
        except ValueError:
            raise CostModelError(
                f"{p / 'steps.csv'} row {row + 2}: items must be 'c:m;c:m...' with c >= 1 and "
                f"m >= 0, got {items!r}"
            ) from None
        for c, m in pairs:
            bs.append(row)
            cs.append(c)
            ms.append(m)
    times = steps["time_s"].to_numpy(np.float64)
    if not np.all(np.isfinite(times)) or (times <= 0).any():
        raise CostModelError(f"{p / 'steps.csv'}: every time_s must be a finite number > 0")
    batches = BatchSet(
        batch=np.asarray(bs, np.int64),
        c=np.asarray(cs, np.int64),
        m=np.asarray(ms, np.int64),
        num_batches=len(steps),
    )
    return Measurements(p, meta, ops, batches, times)


def batch_kinds(batches: BatchSet) -> np.ndarray:
    """Kind of every batch: decode-only, one prefill, several prefills or mixed."""
    n = batches.num_batches
    pre = np.bincount(batches.batch, weights=batches.c > 1, minlength=n)
    dec = np.bincount(batches.batch, weights=batches.c == 1, minlength=n)
    out = np.where(pre == 0, KINDS[0], np.where(dec > 0, KINDS[3], KINDS[1]))
    return np.where((pre > 1) & (dec == 0), KINDS[2], out)


class OperatorComposer:
    """Step times composed from an operator table (Vidur's method, see the module docstring)."""

    def __init__(self, meas: Measurements) -> None:
        ops = meas.operators
        self.num_layers = meas.num_layers

        def curve(name: str) -> tuple[np.ndarray, np.ndarray]:
            g = ops[ops["operator"] == name].groupby("x")["time_s"].median()
            return g.index.to_numpy(np.float64), g.to_numpy(np.float64)

        layer_x, _ = curve("add")
        self.token_x = layer_x
        per_layer = np.zeros_like(layer_x)
        for name in TOKEN_OPERATORS:
            x, y = curve(name)
            per_layer += (2.0 if name == "add" else 1.0) * np.interp(layer_x, x, y)
        self.per_layer = per_layer
        self.step_curves = [curve(n) for n in STEP_OPERATORS]
        self.sample_curves = [curve(n) for n in SAMPLE_OPERATORS]
        pre = ops[ops["operator"] == "attn_prefill"]
        dec = ops[ops["operator"] == "attn_decode"]
        self.prefill = _Rows2D(
            pre["x"].to_numpy(), pre["y"].to_numpy(), pre["time_s"].to_numpy(), square_keys=False
        )
        self.decode = _Rows2D(
            dec["x"].to_numpy(), dec["y"].to_numpy(), dec["time_s"].to_numpy(), square_keys=False
        )

    def step_times(self, batches: BatchSet) -> np.ndarray:
        """Composed step time (seconds) of every batch."""
        out = np.empty(batches.num_batches)
        for b in range(batches.num_batches):
            c, m = batches.items_of(b)
            t = float(c.sum())
            attn = 0.0
            dec = c == 1
            if dec.any():
                attn += self.decode(float(dec.sum()), float(m[dec].mean()))
            for ci, mi in zip(c[~dec], m[~dec], strict=True):
                attn += self.prefill(float(ci), float(mi))
            layer = float(np.interp(t, self.token_x, self.per_layer)) + attn
            once = sum(float(np.interp(t, x, y)) for x, y in self.step_curves)
            once += sum(float(np.interp(len(c), x, y)) for x, y in self.sample_curves)
            out[b] = self.num_layers * layer + once
        return out


@dataclass
class TorchFit:
    """A profile fitted to measured steps, and how it and the composition compare with them."""

    meas: Measurements
    fit: FitResult
    """The profile of ``form``, fitted on the measured steps' train split."""
    linear_fit: FitResult
    """The plain six-coefficient profile, fitted on the same split."""
    form: str
    """``extended`` or ``linear``: which fit the profile ships."""
    forms: pd.DataFrame
    """Every form of :data:`FORMS` on the same split: train and held-out errors."""
    composed_fit: FitResult
    """Fitted on composed step times of a 2000-batch design."""
    composed_fit_heldout: FitStats
    """composed_fit evaluated on the measured held-out steps."""
    composition: FitStats
    """Composed vs measured step time, every measured step."""
    regions: pd.DataFrame
    """Error by batch kind and token range (see :func:`region_table`)."""
    predictions: pd.DataFrame
    """Per measured step: kind, num_tokens, measured, fitted, composed, heldout flag."""


def _ape(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    return np.abs(pred - true) / true * 100.0


def region_table(pred: pd.DataFrame) -> pd.DataFrame:
    """Errors per region: the fit (held-out, all), the plain linear fit, the composition."""
    rows = []
    tok_bins = pd.cut(pred["num_tokens"], TOKEN_BINS, right=False)
    groups: list[tuple[str, pd.Series]] = [("all", pd.Series(True, index=pred.index))]
    groups += [(f"kind: {k}", pred["kind"] == k) for k in KINDS]
    for iv in tok_bins.cat.categories:
        hi = "inf" if iv.right >= TOKEN_BINS[-1] else str(int(iv.right))
        groups.append((f"tokens: [{int(iv.left)}, {hi})", tok_bins == iv))
    for label, mask in groups:
        sub = pred[mask]
        if sub.empty:
            continue
        held = sub[sub["heldout"]]
        fit_ape = _ape(sub["fitted_s"].to_numpy(), sub["measured_s"].to_numpy())
        held_ape = _ape(held["fitted_s"].to_numpy(), held["measured_s"].to_numpy())
        lin_ape = _ape(held["linear_s"].to_numpy(), held["measured_s"].to_numpy())
        comp_ape = _ape(sub["composed_s"].to_numpy(), sub["measured_s"].to_numpy())
        rows.append(
            {
                "region": label,
                "n": len(sub),
                "n_heldout": len(held),
                "heldout_mape_pct": float(held_ape.mean()) if len(held) else np.nan,
                "heldout_max_pct": float(held_ape.max()) if len(held) else np.nan,
                "linear_heldout_mape_pct": float(lin_ape.mean()) if len(held) else np.nan,
                "fit_mape_pct": float(fit_ape.mean()),
                "fit_p90_pct": float(np.percentile(fit_ape, 90)),
                "fit_max_pct": float(fit_ape.max()),
                "composition_mape_pct": float(comp_ape.mean()),
                "composition_max_pct": float(comp_ape.max()),
            }
        )
    return pd.DataFrame(rows)


PROFILE_PREFIX = {"extended": "torch", "linear": "torch", "piecewise": "torch-pw"}
"""Name prefix of a fitted profile by form (``torch-pw:`` for :class:`PiecewiseCostModel`)."""


def profile_name(meas: Measurements, form: str = "extended") -> tuple[str, str | None, str | None]:
    """(profile name, model or None, gpu or None) for a measurement's hardware and a form."""
    gpu = gpu_of(meas.meta)
    model = meas.meta["model"]
    try:
        model_name: str | None = get_model(model).name
    except CostModelError:
        model_name = None
    return f"{PROFILE_PREFIX[form]}:{model}@{gpu or 'cpu'}/tp1", model_name, gpu


def gpu_of(meta: dict[str, Any]) -> str | None:
    """Our GPU name (profiles/gpus.yaml) for the measured device, or None on a CPU / unknown."""
    hw = meta.get("hardware", {})
    name = str(hw.get("gpu_name", "")).upper()
    mem = float(hw.get("gpu_memory_gib", 0))
    if not name:
        return None
    if "H200" in name:
        return "h200-141gb"
    if "H100" in name:
        return "h100-80gb"
    if "A100" in name:
        return "a100-80gb" if mem > 60 else "a100-40gb"
    if "L40S" in name:
        return "l40s-48gb"
    if "A6000" in name:
        return "a6000-48gb"
    return None


def _fit_form(
    form: str, batches: BatchSet, y: np.ndarray, name: str, seed: int, frac: float, knee: int
) -> FitResult:
    feats = batches.features()
    if form == "linear":
        return fit_linear(feats, y, name, seed=seed, heldout_fraction=frac)
    terms = batches.item_terms()
    if form == "piecewise":
        return fit_piecewise(feats, terms, y, name, seed=seed, heldout_fraction=frac)
    return fit_extended(feats, terms, y, name, token_knee=knee, seed=seed, heldout_fraction=frac)


def _predict(model: Any, batches: BatchSet) -> np.ndarray:
    feats = batches.features()
    if getattr(model, "item_priced", False):
        terms = batches.item_terms(model.short_max_new_tokens, model.long_min_cached)
        keys = (
            ITEM_TERMS + PREFILL_TERMS
            if getattr(model, "prefill_item_terms", False)
            else ITEM_TERMS
        )
        return model.step_times(*(feats[f] for f in FEATURES), *(terms[f] for f in keys))
    return model.step_times(*(feats[f] for f in FEATURES))


def forms_table(
    batches: BatchSet, y: np.ndarray, seed: int, heldout_fraction: float, knee: int
) -> pd.DataFrame:
    """Train and held-out errors of every form of :data:`FORMS` on the same seeded split."""
    cols = _form_columns(batches.features(), batches.item_terms(), knee)
    rows = []
    for key, label in FORMS.items():
        _, train, held = fit_columns(cols[key], y, seed=seed, heldout_fraction=heldout_fraction)
        rows.append(
            {
                "form": key,
                "description": label.format(knee=knee),
                "train_mape_pct": train.mape_pct,
                "heldout_mape_pct": held.mape_pct,
                "heldout_p90_pct": held.p90_ape_pct,
                "heldout_max_pct": held.max_ape_pct,
            }
        )
    return pd.DataFrame(rows)


def fit_measurements(
    meas: Measurements,
    seed: int = 0,
    heldout_fraction: float = 0.2,
    form: str = "extended",
    token_knee: int = TOKEN_KNEE,
) -> TorchFit:
    """Fit the profile on measured steps; compose from operators; tabulate errors by region.

    Args:
        meas: the measurements.
        seed: seed of the train / held-out split.
        heldout_fraction: share of measured steps kept out of the fit.
        form: ``extended`` (ExtendedLinearCostModel, the ``torch:`` profiles), ``piecewise``
            (PiecewiseCostModel, the ``torch-pw:`` profiles) or ``linear`` (six coefficients).
        token_knee: knee of the extended form's token term.
    """
    if form not in FIT_FORMS:
        raise CostModelError(f"fit form must be one of {list(FIT_FORMS)}, got {form!r}")
    name, _, _ = profile_name(meas, form)
    feats = meas.steps.features()
    y = meas.step_times_s
    fit = _fit_form(form, meas.steps, y, name, seed, heldout_fraction, token_knee)
    linear_fit = fit_linear(feats, y, name, seed=seed, heldout_fraction=heldout_fraction)
    held = np.zeros(len(y), dtype=bool)
    held[fit.heldout_index] = True
    composer = OperatorComposer(meas)
    composed = composer.step_times(meas.steps)
    g = meas.meta["grid"]
    design = design_batches(
        2000,
        seed=seed + 1,
        max_num_batched_tokens=int(g["max_num_batched_tokens"]),
        max_num_seqs=int(g["max_num_seqs"]),
        max_model_len=int(g["max_model_len"]),
    )
    composed_fit = _fit_form(
        form, design, composer.step_times(design), name + " (composed)", seed, 0.2, token_knee
    )
    fitted = _predict(fit.model, meas.steps)
    comp_pred = _predict(composed_fit.model, meas.steps)
    pred = pd.DataFrame(
        {
            "kind": batch_kinds(meas.steps),
            "num_tokens": feats["num_tokens"],
            "num_items": np.bincount(meas.steps.batch, minlength=meas.steps.num_batches),
            "measured_s": y,
            "fitted_s": fitted,
            "linear_s": _predict(linear_fit.model, meas.steps),
            "composed_s": composed,
            "composed_fit_s": comp_pred,
            "heldout": held,
        }
    )
    return TorchFit(
        meas=meas,
        fit=fit,
        linear_fit=linear_fit,
        form=form,
        forms=forms_table(meas.steps, y, seed, heldout_fraction, token_knee),
        composed_fit=composed_fit,
        composed_fit_heldout=FitStats.of(comp_pred[held], y[held]),
        composition=FitStats.of(composed, y),
        regions=region_table(pred),
        predictions=pred,
    )


def profile_document(tf: TorchFit, created: str | None = None) -> dict[str, Any]:
    """The YAML document of the fitted profile, with provenance."""
    name, model, gpu = profile_name(tf.meas, tf.form)
    meta = tf.meas.meta
    return {
        "kind": "piecewise" if tf.form == "piecewise" else "linear",
        "name": name,
        "model": model,
        "gpu": gpu,
        "tp": 1,
        "coefficients": tf.fit.model.coefficients(),
        **({"terms": tf.fit.model.terms()} if tf.form != "linear" else {}),
        "units": "seconds; features as defined in llmsched_gym/cost/base.py",
        "fit": {
            "method": "relative-error non-negative least squares (Lawson-Hanson), seeded split "
            "of measured whole steps",
            "form": tf.form,
            "seed": tf.fit.seed,
            "heldout_fraction": tf.fit.heldout_fraction,
            "train": _stats(tf.fit.train),
            "heldout": _stats(tf.fit.heldout),
            "linear_form_heldout": _stats(tf.linear_fit.heldout),
        },
        "source": {
            "data": "whole engine steps and operators measured with PyTorch by "
            "llmsched_gym.calibration.torch_profile (random weights, model built from its config)",
            "kernels": "cuBLAS GEMMs, FlashAttention varlen (aten), torch.compile-fused "
            "element-wise ops, CUDA-graph replay"
            if meta["config"].get("cuda_graphs")
            else "PyTorch CPU kernels, perf_counter timing",
            "not_counted": "CPU-side scheduling and input preparation; tensor parallelism",
            "profiler_version": profiler_version(meta),
            "hardware": meta["hardware"],
            "model_config": meta.get("model_config"),
            "dtype": meta.get("dtype"),
            "profiler": meta["config"],
            "grid": meta["grid"],
            "measured": meta.get("created"),
            "composition_vs_measured": _stats(tf.composition),
            "operator_composed_fit_heldout": _stats(tf.composed_fit_heldout),
        },
        "created": created or _dt.date.today().isoformat(),
        "script": "llmsched-gym calibrate --backend torch",
    }


def vidur_crosscheck(meas: Measurements, vidur_dir: str | Path) -> pd.DataFrame | None:
    """Our token-level operator times next to Vidur's (same model shapes, TP1) where they exist.

    Returns one row per (Vidur device, operator, token count) with both times in microseconds,
    or None when Vidur has no table for this model.
    """
    try:
        spec = get_model(meas.meta["model"])
    except CostModelError:
        return None
    base = Path(vidur_dir)
    if not base.is_dir():
        return None
    ours = meas.operators
    rows = []
    for device in ("h100", "a100"):
        folder = base / "compute" / device
        for mlp_path in sorted(folder.glob("*/*/mlp.csv*")):
            rel = str(mlp_path.relative_to(base)).removesuffix(".gz")
            df = _read_csv(base, rel)
            df = df[
                (df["n_head"] == spec.num_attention_heads)
                & (df["n_kv_head"] == spec.num_key_value_heads)
                & (df["n_embd"] == spec.hidden_size)
                & (df["n_expanded_embd"] == spec.intermediate_size)
                & (df["num_tensor_parallel_workers"] == 1)
            ]
            if df.empty:
                continue
            for op in ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"):
                col = f"time_stats.{op}.median"
                if col not in df.columns:
                    continue
                v = pd.DataFrame({"t": df["num_tokens"], "ms": _median(df, op)}).groupby("t")
                vt = v["ms"].median()
                o = ours[ours["operator"] == op].groupby("x")["time_s"].median()
                for t in (1, 16, 128, 512, 1024, 2048, 4096):
                    if t > o.index.max() or t > vt.index.max():
                        continue
                    us = float(np.interp(t, o.index.to_numpy(float), o.to_numpy(float))) * 1e6
                    vus = float(np.interp(t, vt.index.to_numpy(float), vt.to_numpy(float))) * 1e3
                    rows.append(
                        {
                            "vidur_device": device,
                            "vidur_table": rel,
                            "operator": op,
                            "num_tokens": t,
                            "ours_us": round(us, 2),
                            "vidur_us": round(vus, 2),
                            "vidur_over_ours": round(vus / us, 3),
                        }
                    )
    return pd.DataFrame(rows) if rows else None


def plot_fit(tf: TorchFit, path: str | Path) -> Path:
    """Two panels: fitted vs measured step time (log-log), and error vs tokens per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pred = tf.predictions
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    for kind in KINDS:
        sub = pred[pred["kind"] == kind]
        if sub.empty:
            continue
        axes[0].scatter(sub["measured_s"] * 1e3, sub["fitted_s"] * 1e3, s=10, label=kind)
        ape = _ape(sub["fitted_s"].to_numpy(), sub["measured_s"].to_numpy())
        axes[1].scatter(sub["num_tokens"], ape, s=10, label=kind)
    lo = float(pred["measured_s"].min() * 1e3)
    hi = float(pred["measured_s"].max() * 1e3)
    axes[0].plot([lo, hi], [lo, hi], color="k", lw=0.8)
    axes[0].set(xscale="log", yscale="log", xlabel="measured step (ms)", ylabel="fitted (ms)")
    axes[0].legend(fontsize=8)
    axes[1].set(
        xscale="log", xlabel="tokens in the step", ylabel="|fitted - measured| / measured (%)"
    )
    name, _, _ = profile_name(tf.meas, tf.form)
    fig.suptitle(f"{name}: {tf.form} profile vs measured steps")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def report_markdown(tf: TorchFit, cross: pd.DataFrame | None, plot_name: str | None) -> str:
    """The Markdown report of one fit."""
    name, _, _ = profile_name(tf.meas, tf.form)
    meta = tf.meas.meta
    hw = meta["hardware"]
    coef = tf.fit.model.coefficients()
    version = profiler_version(meta)
    current = (
        "the current version"
        if version == PROFILER_VERSION
        else f"current: {PROFILER_VERSION}, re-measure to update"
    )
    terms = ""
    if tf.form == "extended":
        terms = f" Terms (token knee and short / long thresholds): {tf.fit.model.terms()}."
    elif tf.form == "piecewise":
        terms = f" Terms (thresholds, token knots and slopes): {tf.fit.model.terms()}."
    lines = [
        f"# {name}: cost profile from measured steps",
        "",
        f"Measured {meta.get('created', '?')} on {hw.get('gpu_name') or hw.get('cpu_name')} "
        f"(torch {hw.get('torch')}, CUDA {hw.get('cuda', '-')}, driver {hw.get('driver', '-')}); "
        f"model {meta['model']} ({meta['num_layers_run']} layers, {meta.get('dtype')}, random "
        f"weights); {tf.meas.steps.num_batches} whole steps, "
        f"{len(tf.meas.operators)} operator points; profiler settings {meta['config']}.",
        "",
        f"Profiler version {version} ({current}): {PROFILER_VERSIONS.get(version, 'unknown')}.",
        "",
        f"## Fitted coefficients of the shipped {tf.form} form (seconds)",
        "",
        "| " + " | ".join(coef) + " |",
        "|" + "---|" * len(coef),
        "| " + " | ".join(f"{v:.4g}" for v in coef.values()) + " |",
        "",
        f"Features as defined in `llmsched_gym/cost/base.py`.{terms}",
        "",
        "## Accuracy",
        "",
        "| what | n | MAPE % | p90 % | max % |",
        "|---|---|---|---|---|",
    ]
    for label, s in (
        (f"{tf.form} fit, train split of measured steps", tf.fit.train),
        (f"**{tf.form} fit, held-out measured steps**", tf.fit.heldout),
        ("plain linear fit (six coefficients), held-out measured steps", tf.linear_fit.heldout),
        ("operator composition vs measured steps (all)", tf.composition),
        (
            "profile fitted on composed steps, on the held-out measured steps",
            tf.composed_fit_heldout,
        ),
    ):
        lines.append(
            f"| {label} | {s.n} | {s.mape_pct:.2f} | {s.p90_ape_pct:.2f} | {s.max_ape_pct:.2f} |"
        )
    forms = tf.forms.drop(columns="form").round(2)
    lines += [
        "",
        "## Forms compared on the same split",
        "",
        "Each form fitted on the same train split (relative-error NNLS), errors on the same "
        "held-out steps:",
        "",
        markdown_table(forms),
        "",
        "## Where the model breaks down",
        "",
        "Errors of the fitted profile (held-out and all measured steps), the plain linear "
        "form's held-out MAPE, and the operator composition's errors, by batch kind and by "
        "tokens per step:",
        "",
        markdown_table(tf.regions),
        "",
    ]
    if plot_name:
        lines += [f"![fit]({plot_name})", ""]
    if cross is not None and not cross.empty:
        lines += [
            "## Cross-check against Vidur's measured operator tables",
            "",
            "Same model shapes at TP1, median per-layer operator times (our GPU vs Vidur's):",
            "",
            markdown_table(cross),
            "",
        ]
    return "\n".join(lines)


def write_fit_outputs(
    tf: TorchFit,
    profile_path: str | Path,
    report_path: str | Path,
    vidur_dir: str | Path | None = None,
) -> dict[str, Path]:
    """Write the profile YAML, the Markdown report and its plot (beside the report)."""
    import yaml

    profile_path, report_path = Path(profile_path), Path(report_path)
    doc = profile_document(tf)
    header = (
        "# Fitted linear cost profile. Generated by `llmsched-gym calibrate --backend torch`; do "
        "not edit by hand.\n# step_time_s = c0 + c_tokens*num_tokens + c_prefill_attn*"
        "prefill_attn\n#             + c_decode_kv*decode_kv + c_prefill*num_prefill + "
        "c_decode*num_decode\n"
    )
    if tf.form == "extended":
        header = (
            "# Fitted extended linear cost profile (ExtendedLinearCostModel). Generated by "
            "`llmsched-gym calibrate --backend torch`; do not edit by hand.\n"
            "# step_time_s = c0 + c_tokens*max(num_tokens, token_knee) + c_prefill_attn*"
            "prefill_attn\n#             + c_decode_kv*decode_kv + c_prefill*num_prefill + "
            "c_decode*num_decode\n#             + c_split_path*split_path + c_longest_context*"
            "longest_context\n#             + c_short_prefill_kv*short_prefill_kv  "
            "(item-level features: llmsched_gym/cost/base.py)\n"
        )
    if tf.form == "piecewise":
        header = (
            "# Fitted piecewise cost profile (PiecewiseCostModel). Generated by `llmsched-gym "
            "calibrate --backend torch --form piecewise`; do not edit by hand.\n"
            "# step_time_s = c0 + tok(num_tokens) + (the extended form's other terms)\n"
            "#             + c_mixed*[prefills and decodes] + c_short_prefill_chunks*"
            "short_prefill_chunks\n#             + c_longest_prefill*longest_prefill  "
            "(tok: token_knots / token_slopes; llmsched_gym/cost/base.py)\n"
        )
    profile_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = profile_path.with_name(profile_path.name + ".tmp")
    tmp.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=100))
    tmp.replace(profile_path)
    plot_path = report_path.with_suffix(".png")
    plot_fit(tf, plot_path)
    cross = vidur_crosscheck(tf.meas, vidur_dir) if vidur_dir else None
    report_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = report_path.with_name(report_path.name + ".tmp")
    tmp.write_text(report_markdown(tf, cross, plot_path.name) + "\n")
    tmp.replace(report_path)
    return {"profile": profile_path, "report": report_path, "plot": plot_path}
