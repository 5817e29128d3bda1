"""Validation runs: one trace on the live vLLM engine and in the simulator, compared.

Both backends get the same requests (the live engine's synthesised token ids are handed to the
simulator, so prefix sharing is identical), the same engine settings (``max_num_batched_tokens``,
``max_num_seqs``, ``block_size``, ``num_gpu_blocks``, prefix caching, policy) and the simulator
uses the profile calibrated on the live engine. The live clock is the engine clock (measured step
times; idle time jumps to the next arrival), the simulator's clock is the cost model's, so the
comparison measures the cost model and the scheduling semantics, not the harness.

Reported: per-request TTFT, TPOT and e2e relative errors (mean, p50, p99 of |sim - live| / live),
the error of each metric's mean, the step-time error (the profile applied to every live step's
actual composition, against its measured time), and whether the per-step scheduled sets diverged
(the first step where they differ and the share of identical steps before it).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_gym.calibration.linearfit import FEATURES, BatchSet
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import ConfigError

__all__ = ["ValidationResult", "scale_trace", "validate", "write_validation"]

METRICS = ("ttft_s", "tpot_s", "e2e_s")


def scale_trace(
    specs: Sequence[RequestSpec],
    *,
    max_prompt: int,
    max_output: int,
    num_requests: int | None = None,
    arrival_scale: float = 1.0,
) -> list[RequestSpec]:
    """A trace shrunk to a small machine: lengths scaled into limits, arrivals stretched.

    Prompt and output lengths are scaled by one factor each so the trace's largest fits
    ``max_prompt`` / ``max_output`` (never above the original; at least 1 token), which keeps
    the length distribution's shape; arrival times are multiplied by ``arrival_scale``.
    Mooncake block hashes are kept with ``hash_block_size`` scaled by the prompt factor, so the
    same share of each prompt stays shared; token ids are dropped (they cannot be shortened
    without changing what is shared).
    """
    items = list(specs)[: num_requests or None]
    if not items:
        raise ConfigError("scale_trace: no requests")
    if max_prompt < 1 or max_output < 1 or not arrival_scale > 0:
        raise ConfigError("scale_trace: max_prompt, max_output and arrival_scale must be > 0")
    sp = min(1.0, max_prompt / max(s.prompt_len for s in items))
    so = min(1.0, max_output / max(min(s.output_len, s.max_tokens) for s in items))
    t0 = min(s.arrival_time for s in items)
    out = []
    for s in items:
        out_len = max(1, min(max_output, round(min(s.output_len, s.max_tokens) * so)))
        hbs = s.hash_block_size
        if s.block_hashes and sp < 1.0:
            hbs = max(1, round(hbs * sp))
        out.append(
            dataclasses.replace(
                s,
                arrival_time=(s.arrival_time - t0) * arrival_scale,
                prompt_len=max(1, min(max_prompt, round(s.prompt_len * sp))),
                output_len=out_len,
                max_tokens=out_len,
                prompt_token_ids=None,
                hash_block_size=hbs,
            )
        )
    return out


def load_to_arrival_scale(
    specs: Sequence[RequestSpec], config: Any, cost_model: Any, load: float
) -> float:
    """The arrival-time factor that offers ``load`` times the simulated capacity.

    Capacity: requests per second when all of them arrive at once (simulated with the profile).
    """
    from llmsched_gym.simulation import simulate

    burst = [dataclasses.replace(s, arrival_time=0.0) for s in specs]
    res = simulate(burst, config=config, cost_model=cost_model)
    capacity = len(specs) / float(np.nanmax(res.request_table["finish_time_s"]))
    span = max(s.arrival_time for s in specs) - min(s.arrival_time for s in specs)
    if span <= 0:
        return 1.0
    wanted_span = len(specs) / (load * capacity)
    return wanted_span / span


@dataclass
class ValidationResult:
    """Both runs and their comparison."""

    live: Any
    sim: Any
    table: Any
    """Per-metric errors (pandas DataFrame)."""
    requests: Any
    """Per-request live vs simulated values (pandas DataFrame)."""
    step_times: Any
    """Per live step: measured and predicted time (pandas DataFrame)."""
    divergence: dict[str, Any]
    info: dict[str, Any]
    inrun_table: Any = None
    """TTFT / TPOT / e2e errors of the simulator under a profile fitted on this live run's own
    steps (a diagnostic that removes machine-speed drift between calibration and run)."""

    @property
    def mean_e2e_error_pct(self) -> float:
        """(mean simulated e2e - mean live e2e) / mean live e2e, in percent (signed)."""
        row = self.table.set_index("metric").loc["e2e_s"]
        return float(row["mean_error_pct"])


def _relerr(sim: np.ndarray, live: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (sim - live) / live * 100.0


def _latency_rows(lv: Any, sv: Any, per_req: Any) -> list[dict[str, Any]]:
    """Per-metric error rows (and per-request columns into ``per_req`` when given)."""
    rows = []
    for metric in METRICS:
        a = lv[metric].to_numpy(np.float64)
        b = sv[metric].to_numpy(np.float64)
        err = _relerr(b, a)
        if per_req is not None:
            per_req[f"live_{metric}"] = a
            per_req[f"sim_{metric}"] = b
            per_req[f"{metric}_error_pct"] = err
        ok = np.isfinite(err)
        ae = np.abs(err[ok])
        live_mean = float(np.nanmean(a))
        sim_mean = float(np.nanmean(b))
        rows.append(
            {
                "metric": metric,
                "live_mean": live_mean,
                "sim_mean": sim_mean,
                "mean_error_pct": (sim_mean - live_mean) / live_mean * 100.0,
                "abs_error_pct_mean": float(ae.mean()) if ae.size else math.nan,
                "abs_error_pct_p50": float(np.percentile(ae, 50)) if ae.size else math.nan,
                "abs_error_pct_p99": float(np.percentile(ae, 99)) if ae.size else math.nan,
                "signed_error_pct_mean": float(err[ok].mean()) if ae.size else math.nan,
                "signed_error_pct_p50": float(np.percentile(err[ok], 50)) if ae.size else math.nan,
                "signed_error_pct_p99": float(np.percentile(err[ok], 99)) if ae.size else math.nan,
                "n": int(ok.sum()),
            }
        )
    return rows


def compare_schedules(live_log: Sequence[dict], sim_log: Sequence[dict]) -> dict[str, Any]:
    """Where the per-step scheduled sets of two schedule logs first differ."""
    n = min(len(live_log), len(sim_log))
    first = None
    for i in range(n):
        if live_log[i]["scheduled"] != sim_log[i]["scheduled"]:
            first = i
            break
    same_sets = sum(
        set(a["scheduled"]) == set(b["scheduled"]) for a, b in zip(live_log, sim_log, strict=False)
    )
    same_length = len(live_log) == len(sim_log)
    return {
        "live_steps": len(live_log),
        "sim_steps": len(sim_log),
        "diverged": first is not None or not same_length,
        "first_divergent_step": first if first is not None else (None if same_length else n),
        "identical_prefix_steps": first if first is not None else n,
        "same_request_set_share": same_sets / max(1, max(len(live_log), len(sim_log))),
        "live_preemptions": sum(len(x["preempted"]) for x in live_log),
        "sim_preemptions": sum(len(x["preempted"]) for x in sim_log),
    }  # fmt: skip


def step_features(steps: Sequence[Any]) -> dict[str, np.ndarray]:
    """The cost-model features of live steps' actual compositions."""
    batch, cs, ms = [], [], []
    for b, s in enumerate(steps):
        for _, c, m in s.items:
            batch.append(b)
            cs.append(c)
            ms.append(m)
    return BatchSet(
        np.asarray(batch, dtype=np.int64),
        np.asarray(cs, dtype=np.int64),
        np.asarray(ms, dtype=np.int64),
        len(steps),
    ).features()


def validate(
    engine: Any,
    specs: Sequence[RequestSpec],
    cost_model: Any,
    *,
    scheduler: str = "vllm-v1",
    name: str = "validation",
    timer: str = "wall",
    live: Any = None,
) -> ValidationResult:
    """Run ``specs`` on the live ``engine`` and in the simulator with ``cost_model``; compare.

    Args:
        engine: a ``LiveEngine``; its ``config.engine`` is the simulator's engine config too.
        specs: the requests (lengths, or token ids; ids are synthesised as the live engine does).
        cost_model: the calibrated profile (a spec string, a path, or a cost model).
        scheduler: the simulator's policy; live, the engine's own ``scheduler_cls`` runs (vLLM's,
            or this policy inside vLLM when the engine was built with it: ``run_validation``).
        name: label of the run.
        timer: the live run's step timer (``wall`` or ``cpu``, see ``LiveRun``); use the one the
            profile was calibrated with.
        live: a ``LiveResult`` of these ``specs`` already run on ``engine`` (then it is not run
            again; see ``run_validation``'s interleaved protocol).
    """
    import pandas as pd

    from llmsched_gym.backends.vllm.tokens import with_token_ids
    from llmsched_gym.cost.registry import as_cost_model
    from llmsched_gym.simulation import simulate

    model = as_cost_model(cost_model)
    cfg = engine.config
    vocab = cfg.tiny.vocab_size if cfg.model is None else 30000
    reqs = with_token_ids(specs, vocab)
    if live is None:
        engine.warmup()
        live = engine.run(reqs, timer=timer)
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "sim.jsonl"
        sim = simulate(
            reqs,
            config=cfg.engine,
            scheduler=scheduler,
            cost_model=model,
            schedule_log=log_path,
            record_steps=True,
            fast_forward=True,
        )
        sim_log = [json.loads(x) for x in log_path.read_text().splitlines() if x.strip()]
    lv = live.requests.set_index("request_id")
    per_req = pd.DataFrame({"request_id": lv.index})
    rows = _latency_rows(lv, sim.requests.set_index("request_id").loc[lv.index], per_req)
    per_req["prompt_len"] = lv["num_prompt_tokens"].to_numpy()
    per_req["output_len"] = lv["num_output_tokens"].to_numpy()
    feats = step_features(live.step_records)
    pred = model.step_times(*(feats[f] for f in FEATURES))
    meas = np.asarray([s.duration_s for s in live.step_records])
    steps = pd.DataFrame(
        {
            "step": np.arange(len(meas)),
            "time_s": [s.time_s for s in live.step_records],
            "measured_s": meas,
            "predicted_s": pred,
            **feats,
        }
    )
    ape = np.abs(pred - meas) / meas * 100.0
    rows.append(
        {
            "metric": "step_time_s",
            "live_mean": float(meas.mean()),
            "sim_mean": float(pred.mean()),
            "mean_error_pct": (pred.sum() - meas.sum()) / meas.sum() * 100.0,
            "abs_error_pct_mean": float(ape.mean()),
            "abs_error_pct_p50": float(np.percentile(ape, 50)),
            "abs_error_pct_p99": float(np.percentile(ape, 99)),
            "signed_error_pct_mean": float(((pred - meas) / meas * 100).mean()),
            "signed_error_pct_p50": float(np.percentile((pred - meas) / meas * 100, 50)),
            "signed_error_pct_p99": float(np.percentile((pred - meas) / meas * 100, 99)),
            "n": len(meas),
        }
    )
    for key in ("duration_s", "num_steps", "num_preemptions", "prefix_cache_hit_rate"):
        lval = float(live.summary[key])
        sval = float(sim.summary[key])
        rows.append(
            {
                "metric": key,
                "live_mean": lval,
                "sim_mean": sval,
                "mean_error_pct": (sval - lval) / lval * 100.0 if lval else math.nan,
                "n": 1,
            }
        )
    table = pd.DataFrame(rows)
    # Diagnostic: the simulator with a profile fitted on this run's own steps. On a machine whose
    # speed drifts between runs it separates the cost model's drift from the simulator's
    # semantics (the headline numbers above use the calibrated profile).
    inrun_table = None
    if len(meas) >= 20 and np.all(meas > 0):
        from llmsched_gym.calibration.linearfit import fit_linear

        inrun = fit_linear(feats, meas, "in-run fit", seed=0)
        sim_inrun = simulate(reqs, config=cfg.engine, scheduler=scheduler, cost_model=inrun.model)
        inrun_rows = _latency_rows(
            lv, sim_inrun.requests.set_index("request_id").loc[lv.index], None
        )
        inrun_table = pd.DataFrame(inrun_rows)
    div = compare_schedules(live.schedule_log(), sim_log)
    info = {
        "name": name,
        "requests": len(reqs),
        "engine": cfg.describe(),
        "versions": engine.versions,
        "cost_model": getattr(model, "name", str(cost_model)),
        "scheduler": scheduler,
        "timer": timer,
        "live_wall_s": live.wall_s,
    }
    return ValidationResult(live, sim, table, per_req, steps, div, info, inrun_table)


def write_validation(result: ValidationResult, out_dir: str | Path) -> dict[str, Path]:
    """Write ``report.md``, ``errors.csv``, ``requests.csv``, ``steps.csv`` and plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "errors": out / "errors.csv",
        "requests": out / "requests.csv",
        "steps": out / "steps.csv",
        "report": out / "report.md",
        "latency_plot": out / "latency.png",
        "step_plot": out / "step_times.png",
    }
    result.table.to_csv(paths["errors"], index=False, float_format="%.6g")
    result.requests.to_csv(paths["requests"], index=False, float_format="%.6g")
    result.step_times.to_csv(paths["steps"], index=False, float_format="%.6g")
    if result.inrun_table is not None:
        paths["errors_inrun"] = out / "errors_inrun_profile.csv"
        result.inrun_table.to_csv(paths["errors_inrun"], index=False, float_format="%.6g")

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, metric in zip(axes, METRICS, strict=True):
        a = np.sort(result.requests[f"live_{metric}"].dropna().to_numpy())
        b = np.sort(result.requests[f"sim_{metric}"].dropna().to_numpy())
        ax.plot(a, np.linspace(0, 1, len(a)), label="live vLLM")
        ax.plot(b, np.linspace(0, 1, len(b)), "--", label="simulator")
        ax.set_xlabel(f"{metric.removesuffix('_s').upper()} (s)")
        ax.set_ylabel("CDF")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"{result.info['name']}: per-request latency, live vs simulated")
    fig.tight_layout()
    fig.savefig(paths["latency_plot"], dpi=80)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    st = result.step_times
    axes[0].plot(st["time_s"], st["measured_s"] * 1e3, ".", ms=3, label="measured")
    axes[0].plot(st["time_s"], st["predicted_s"] * 1e3, ".", ms=3, label="profile")
    axes[0].set_xlabel("live clock (s)")
    axes[0].set_ylabel("step time (ms)")
    axes[0].legend()
    lim = float(max(st["measured_s"].max(), st["predicted_s"].max()) * 1e3)
    axes[1].plot(st["measured_s"] * 1e3, st["predicted_s"] * 1e3, ".", ms=3)
    axes[1].plot([0, lim], [0, lim], "k-", lw=0.5)
    axes[1].set_xlabel("measured step time (ms)")
    axes[1].set_ylabel("predicted (ms)")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(paths["step_plot"], dpi=80)
    plt.close(fig)
    paths["report"].write_text(_report(result), "utf-8")
    return paths


def _md_table(t: Any) -> str:  # errors are signed: (sim - live) / live
    def f(x: Any, fmt: str = ".4g") -> str:
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return ""
        return format(x, fmt)

    lines = [
        "| metric | live mean | sim mean | error of mean % | abs err % mean | p50 | p99 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in t.to_dict("records"):
        lines.append(
            f"| {r['metric']} | {f(r['live_mean'])} | {f(r['sim_mean'])} | "
            f"{f(r['mean_error_pct'], '.2f')} | {f(r.get('abs_error_pct_mean'), '.2f')} | "
            f"{f(r.get('abs_error_pct_p50'), '.2f')} | {f(r.get('abs_error_pct_p99'), '.2f')} |"
        )
    return "\n".join(lines)


def _report(result: ValidationResult) -> str:
    lines = [_md_table(result.table)]
    inrun = ""
    if result.inrun_table is not None:
        inrun = (
            "\n\nDiagnostic: the simulator under a profile fitted on this live run's own steps "
            "(removes the machine's speed drift between calibration and this run; the semantics "
            "and the linear form remain):\n\n" + _md_table(result.inrun_table)
        )
    d = result.divergence
    info = result.info
    e = info["engine"]
    decisions = (
        "identical step for step"
        if not d["diverged"]
        else f"first divergent step {d['first_divergent_step']} (the first "
        f"{d['identical_prefix_steps']} steps scheduled the same requests with the same token "
        f"counts); {d['same_request_set_share']:.0%} of step indices scheduled the same set"
    )
    setup = ""
    if "trace" in info:
        setup = (
            f"\nTrace `{info['trace']}`: first {info['num_requests']} requests, prompts scaled to "
            f"<= {info['max_prompt']} tokens and outputs to <= {info['max_output']}, arrivals "
            f"x{info['arrival_scale']:.4g} (offered load {info['load']} of the profile's "
            f"simulated capacity). Live runs: {len(info['runs'])}, mean e2e error of each "
            f"{info['runs']} % (the median run is shown). The live runs' own mean e2e "
            f"latencies were {info['live_e2e_means']} s: identical runs of the live engine "
            f"differ by up to {info['live_spread_pct']:.1f}% on this machine (load average "
            f"{info.get('load_average_before')} before, {info.get('load_average_after')} after, "
            f"on {os.cpu_count()} CPUs)."
        )
        if info.get("noise_verdict"):
            setup += f" **No timing verdict**: {info['noise_verdict']}."
        if len(info["runs"]) > 1:
            setup += (
                f" Against the live engine's mean over the {len(info['runs'])} runs "
                f"({info['live_e2e_mean_of_runs']:.4g} s, 95% interval "
                f"±{info['live_mean_ci95_pct']:.1f}%), the simulator's mean e2e "
                f"({info['sim_e2e_mean']:.4g} s) is off by "
                f"**{info['pooled_e2e_error_pct']:+.1f}%**: the estimate of the simulator's "
                "error (a single run's error adds that run's draw from the machine's spread)."
            )
        if info.get("interleaved"):
            setup += (
                " The profile was calibrated on the same engine in parts interleaved with the "
                "live runs (one part before each run, one fit on all parts; held-out MAPE "
                f"{info['calibration_heldout_mape_pct']:.2f}%; files in `calibration/`)."
            )
        elif info.get("calibrated_here"):
            setup += (
                " The profile was calibrated on the same engine right before the run (held-out "
                f"MAPE {info['calibration_heldout_mape_pct']:.2f}%; files in `calibration/`)."
            )
    return f"""# Validation: `{info["name"]}` — live vLLM vs simulator

* Live: vLLM {info["versions"].get("vllm")} ({info["versions"].get("vllm_build")}), model
  `{e["model"]}` ({e["load_format"]} weights, {e["dtype"]}), engine {e["engine"]},
  max_model_len {e["max_model_len"]}; engine clock (measured step times, idle jumps to the next
  arrival); {info["requests"]} requests; {info["live_wall_s"]:.1f} s wall.
* Simulator: scheduler `{info["scheduler"]}`, cost model `{info["cost_model"]}`, same engine
  settings and the same prompt token ids; step timer `{info.get("timer", "wall")}`.
{setup}

Errors are (sim - live) / live per request; "error of mean" compares the two means.

{chr(10).join(lines)}{inrun}

Scheduling decisions: {d["live_steps"]} live steps, {d["sim_steps"]} simulated; {decisions};
preemptions live {d["live_preemptions"]}, simulated {d["sim_preemptions"]}. Divergence after the
first steps is expected: an arrival that lands just before a step boundary in one clock and just
after it in the other joins one step earlier or later, and the schedules part from there (the
decisions themselves are the same semantics: the differential test checks them with equal
clocks).

Plots: `latency.png` (per-request CDFs), `step_times.png` (measured vs predicted step times).
"""


def _loadavg() -> list[float] | None:
    """The machine's 1/5/15-minute load averages (a shared machine's noise is in the report)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086)  # fmt: skip
"""Student's t 97.5% quantiles for 1..20 degrees of freedom (two-sided 95% intervals)."""


NOISE_CV_PCT = 10.0
"""Above this coefficient of variation of the live runs' mean e2e latencies, the machine's
run-to-run spread swamps the simulator's error: no timing verdict is given."""


def live_cv_pct(live_means: Sequence[float]) -> float:
    """Coefficient of variation (sample std / mean) of the live runs' mean e2e, in percent."""
    live = np.asarray(live_means, dtype=np.float64)
    if live.size < 2 or not live.mean() > 0:
        return math.nan
    return float(live.std(ddof=1) / live.mean() * 100.0)


def noise_verdict(live_means: Sequence[float]) -> str | None:
    """A sentence when the live runs vary too much for a timing verdict, else None."""
    cv = live_cv_pct(live_means)
    if not cv > NOISE_CV_PCT:
        return None
    return (
        f"the live runs' mean e2e latencies vary by {cv:.1f}% (coefficient of variation, over "
        f"{NOISE_CV_PCT:.0f}%): this machine is too noisy for a timing verdict; rerun on a quiet "
        "machine, or with --calibrate (calibration interleaved with the live runs, one fit on "
        "all parts)"
    )


def pooled_error(sim_means: Sequence[float], live_means: Sequence[float]) -> dict[str, Any]:
    """The simulator's mean e2e against the live engine's mean over repeated runs.

    One live run is one draw from the machine's run-to-run spread (on a shared machine, identical
    runs differ by 5-15%); the simulator is deterministic. So the estimate of "sim vs live engine"
    is the error against the mean over runs, with a 95% confidence interval (Student's t) of that
    mean from the runs' spread; a single run's error mixes the simulator's error with that run's
    draw. Returns ``pooled_e2e_error_pct`` (signed, (sim - live) / live) and
    ``live_mean_ci95_pct`` (half-width, relative to the mean; NaN for one run).
    """
    live = np.asarray(live_means, dtype=np.float64)
    sim = float(np.mean(sim_means))
    mean = float(live.mean())
    n = live.size
    if n > 1:
        t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
        half = t * float(live.std(ddof=1)) / math.sqrt(n) / mean * 100.0
    else:
        half = math.nan
    return {
        "pooled_e2e_error_pct": (sim - mean) / mean * 100.0,
        "live_mean_ci95_pct": half,
        "sim_e2e_mean": sim,
        "live_e2e_mean_of_runs": mean,
    }


def run_validation(
    trace: str | Path,
    *,
    engine: Any = None,
    config: Any = None,
    cost_model: Any = None,
    calibrate_first: bool = False,
    calibration_repeats: int = 3,
    num_requests: int = 150,
    load: float = 0.5,
    max_prompt: int | None = None,
    max_output: int = 96,
    timer: str = "wall",
    runs: int = 1,
    interleave: bool = True,
    out_dir: str | Path | None = None,
    name: str | None = None,
    scheduler: str = "vllm-v1",
) -> tuple[ValidationResult, dict[str, Path]]:
    """Validate the simulator on a shipped trace (or a trace file) scaled to this machine.

    The first ``num_requests`` requests are scaled into the live engine's limits
    (``scale_trace``: prompts up to ``max_prompt``, default ``max_model_len * 5 // 8``, outputs up
    to ``max_output``) and their arrivals stretched so the offered load is ``load`` times the
    simulated capacity of the profile. ``calibrate_first`` fits the profile on the same engine
    right before the live run (on a shared machine, speed drifts between separate runs); else
    ``cost_model`` is used. ``runs > 1`` repeats the live run and reports the one whose mean e2e
    error is the median of the runs (every run's error is listed in ``info["runs"]``). With
    ``calibrate_first`` and ``interleave`` (the default), a calibration part of
    ``calibration_repeats`` repeats precedes every live run and the profile is fitted on all
    parts (``merge_calibrations``).

    ``scheduler`` other than ``vllm-v1`` runs that project policy inside vLLM (its
    ``schedule`` builds every live step, ``backends.vllm.stepctx``; its estimators see
    ``cost_model``) and in the simulator; it needs a given profile (not ``calibrate_first``:
    the calibration probes assume vLLM's own scheduler) and an engine built here.

    Returns:
        The result and, when ``out_dir`` is given, the written files.
    """
    from llmsched_gym.backends.vllm.engine import LiveEngine, LiveEngineConfig
    from llmsched_gym.cost.registry import as_cost_model
    from llmsched_gym.workloads.trace import load_trace

    own = engine is None
    cost_model = as_cost_model(cost_model)
    if scheduler != "vllm-v1":
        import dataclasses

        from llmsched_gym.backends.vllm.scheduler import policy_scheduler_cls
        from llmsched_gym.policies.registry import make_policy

        if calibrate_first or not own or cost_model is None:
            raise ConfigError(
                f"scheduler={scheduler!r} runs inside vLLM with a given profile on an engine "
                "built here: pass cost_model, no engine, and no calibrate_first (the "
                "calibration probes assume vLLM's own scheduler)"
            )
        policy = make_policy(scheduler)
        base_cfg = config or LiveEngineConfig()
        queue = policy.queue_policy(base_cfg.engine)
        config = dataclasses.replace(
            base_cfg,
            engine=dataclasses.replace(base_cfg.engine, scheduling_policy=queue),
            scheduler_cls=policy_scheduler_cls(policy, cost_model=cost_model),
        )
    engine = engine or LiveEngine(config or LiveEngineConfig())
    load_before = _loadavg()
    try:
        cal = None
        if calibrate_first:
            from llmsched_gym.backends.vllm.calibrate import calibrate

            cal = calibrate(engine, repeats=calibration_repeats, timer=timer)
            model = cal.fit.model
            cal_parts = [cal]
        elif cost_model is None:
            raise ConfigError("validation needs a cost model (a profile) or calibrate_first=True")
        else:
            model = cost_model
        cfg = engine.config
        mp = max_prompt or (cfg.max_model_len * 5) // 8
        mp = min(mp, cfg.max_model_len - max_output)
        label = name or (Path(str(trace)).stem if Path(str(trace)).suffix else str(trace))
        base = scale_trace(
            load_trace(trace, limit=num_requests), max_prompt=mp, max_output=max_output
        )
        factor = load_to_arrival_scale(base, cfg.engine, model, load)
        specs = scale_trace(base, max_prompt=mp, max_output=max_output, arrival_scale=factor)
        if calibrate_first and interleave:
            # Session protocol for a machine whose speed drifts: calibration parts and live runs
            # alternate, and one profile is fitted on all parts, so the profile and the live runs
            # see the same stretch of the machine's history.
            from llmsched_gym.backends.vllm.calibrate import calibrate, merge_calibrations
            from llmsched_gym.backends.vllm.tokens import with_token_ids

            vocab = cfg.tiny.vocab_size if cfg.model is None else 30000
            reqs = with_token_ids(specs, vocab)
            lives = []
            for i in range(runs):
                if i:
                    cal_parts.append(calibrate(engine, repeats=calibration_repeats, timer=timer))
                engine.warmup()
                lives.append(engine.run(reqs, timer=timer))
            cal = merge_calibrations(cal_parts)
            model = cal.fit.model
            results = [
                validate(engine, specs, model, name=label, timer=timer, live=lv) for lv in lives
            ]
        else:
            results = [
                validate(engine, specs, model, scheduler=scheduler, name=label, timer=timer)
                for _ in range(runs)
            ]
        errs = [r.mean_e2e_error_pct for r in results]
        live_means = [float(r.table.set_index("metric").loc["e2e_s", "live_mean"]) for r in results]
        sim_means = [float(r.table.set_index("metric").loc["e2e_s", "sim_mean"]) for r in results]
        pooled = pooled_error(sim_means, live_means)
        chosen = results[int(np.argsort(np.abs(errs))[len(errs) // 2])]
        chosen.info.update(
            trace=str(trace),
            num_requests=len(specs),
            load=load,
            arrival_scale=factor,
            max_prompt=mp,
            max_output=max_output,
            runs=[round(e, 3) for e in errs],
            live_e2e_means=[round(x, 5) for x in live_means],
            live_spread_pct=(max(live_means) / min(live_means) - 1.0) * 100.0,
            live_cv_pct=live_cv_pct(live_means),
            noise_verdict=noise_verdict(live_means),
            **pooled,
            load_average_before=load_before,
            load_average_after=_loadavg(),
            calibrated_here=cal is not None,
            interleaved=bool(calibrate_first and interleave and runs > 1),
            calibration_heldout_mape_pct=None if cal is None else cal.heldout_mape_pct,
        )
        paths: dict[str, Path] = {}
        if out_dir is not None:
            paths = write_validation(chosen, out_dir)
            if cal is not None:
                from llmsched_gym.backends.vllm.calibrate import write_calibration

                cal_paths = write_calibration(cal, Path(out_dir) / "calibration")
                paths.update({f"calibration_{k}": v for k, v in cal_paths.items()})
        return chosen, paths
    finally:
        if own:
            engine.close()
