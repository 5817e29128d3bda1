"""Trajectory validation: a cost profile's step times along real simulated schedules, on a device.

A profile's held-out error is measured on a designed grid of batches; what a user needs is its
error on the batches a real schedule produces. ``validate_trajectory``:

1. simulates a trace and reads its schedule log, tracking for every executed step the items
   ``(c, m)`` of the scheduled requests: ``c`` new tokens on top of ``m`` tokens already in the
   KV cache, where ``m`` starts at the request's prefix hit when it is admitted (or resumed) and
   grows by what it is scheduled, and a preemption resets it (``sample_steps``);
2. draws ``N`` of those steps uniformly (seeded) and times each whole step on the device with the
   profiler's own kernels (``torch_profile.time_batches``: every layer, CUDA graphs on a GPU);
3. prices the same items with the profile under test and reports the per-step MAPE, the total
   time error (sum of predicted over sum of measured, minus one: an estimate of the error of a
   whole run's simulated time), a region table (decode-only / mixed / prefill-only; tokens per
   step) and a plot (``analyse``, ``write_report``).

Step 3 runs on its own from measured files (``--from-measured``): the H200 trajectories of
2026-11-27 ship in ``calibration/data/torch/h200-141gb/trajectory/`` and their report (the
shipped profiles re-priced on them) in ``calibration/reports/trajectory-h200/report.md``:

    python -m llmsched_gym.calibration.trajectory \
        --from-measured calibration/data/torch/h200-141gb/trajectory \
        --cost-model torch:llama-3-8b@h200-141gb/tp1 --cost-model torch:qwen2-7b@h200-141gb/tp1 \
        --out calibration/reports/trajectory-h200

The same from the command line: ``llmsched-gym validate --backend torch [--from-measured DIR]``.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_gym.errors import ConfigError

__all__ = [
    "SampledStep",
    "TrajectoryReport",
    "analyse",
    "load_measured",
    "price_items",
    "sample_steps",
    "validate_trajectory",
    "write_report",
]


@dataclass(frozen=True)
class SampledStep:
    """One executed engine step: its index, items ``[(c, m), ...]`` and simulated duration."""

    trace: str
    step: int
    items: tuple[tuple[int, int], ...]
    pred_s: float

    @property
    def kind(self) -> str:
        """``decode`` (every item computes one token), ``prefill`` (none does) or ``mixed``."""
        decodes = sum(1 for c, _ in self.items if c == 1)
        if decodes == len(self.items):
            return "decode"
        return "prefill" if decodes == 0 else "mixed"

    @property
    def num_tokens(self) -> int:
        """Tokens computed in the step."""
        return sum(c for c, _ in self.items)


def _steps_from_log(lines: Sequence[dict[str, Any]], trace: str) -> list[SampledStep]:
    """Every step of a schedule log with its items (``m`` tracked as the module docstring says)."""
    cached: dict[str, int] = {}
    out = []
    for i, rec in enumerate(lines):
        for rid in rec["preempted"]:
            cached.pop(rid, None)
        for key in ("new", "resumed"):
            for rid, hit in rec[key].items():
                cached[rid] = int(hit)
        items = []
        for rid, c in rec["scheduled"].items():
            m = cached.get(rid, 0)
            items.append((int(c), m))
            cached[rid] = m + int(c)
        for rid in rec["finished"]:
            cached.pop(rid, None)
        nxt = lines[i + 1]["time"] if i + 1 < len(lines) else math.nan
        if items:
            out.append(SampledStep(trace, int(rec["step"]), tuple(items), float(nxt - rec["time"])))
    return out


def sample_steps(
    trace: Any,
    config: Any,
    cost_model: Any,
    *,
    num_steps: int = 120,
    seed: int = 0,
    scheduler: str = "vllm-v1",
    name: str = "trace",
) -> list[SampledStep]:
    """Simulate ``trace`` and draw ``num_steps`` executed steps uniformly (seeded, step order).

    ``pred_s`` is the simulated step's duration: the next step's start minus this one's (the
    last step's is NaN; ``price_items`` re-prices any step).
    """
    from llmsched_gym.simulation import simulate

    if num_steps < 1:
        raise ConfigError(f"--steps must be >= 1, got {num_steps}")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "schedule.jsonl"
        simulate(trace, config, scheduler, cost_model, schedule_log=log, fast_forward=False)
        lines = [json.loads(x) for x in log.read_text().splitlines()]
    steps = _steps_from_log(lines, name)
    if len(steps) <= num_steps:
        return steps
    pick = np.sort(np.random.default_rng(seed).choice(len(steps), num_steps, replace=False))
    return [steps[i] for i in pick]


def _batch_set(steps: Sequence[SampledStep]) -> Any:
    from llmsched_gym.calibration.linearfit import BatchSet

    batch = [b for b, s in enumerate(steps) for _ in s.items]
    c = [c for s in steps for c, _ in s.items]
    m = [m for s in steps for _, m in s.items]
    return BatchSet(
        batch=np.asarray(batch, dtype=np.int64),
        c=np.asarray(c, dtype=np.int64),
        m=np.asarray(m, dtype=np.int64),
        num_batches=len(steps),
    )


def price_items(steps: Sequence[SampledStep], cost_model: Any) -> np.ndarray:
    """The profile's step time of every step, from its items (as the engine prices them)."""
    from llmsched_gym.calibration.torch_fit import _predict
    from llmsched_gym.cost.registry import as_cost_model

    model = as_cost_model(cost_model)
    return np.asarray(_predict(model, _batch_set(steps)), dtype=np.float64)


@dataclass
class TrajectoryReport:
    """Predicted and measured step times along sampled trajectories, with their errors."""

    table: Any
    """Per step: trace, step, kind, num_items, num_tokens, pred_s, meas_s, ape_pct."""
    profile: str
    device: str

    def summary(self) -> Any:
        """Per trace (and all): steps, MAPE %, p90 %, max %, total-time error %."""
        import pandas as pd

        rows = []
        groups = [*self.table.groupby("trace", sort=False), ("all", self.table)]
        for name, g in groups:
            rows.append(
                {
                    "trace": name,
                    "steps": len(g),
                    "mape_pct": g["ape_pct"].mean(),
                    "p90_pct": g["ape_pct"].quantile(0.9),
                    "max_pct": g["ape_pct"].max(),
                    "total_error_pct": 100.0 * (g["pred_s"].sum() / g["meas_s"].sum() - 1.0),
                }
            )
        return pd.DataFrame(rows)

    def regions(self) -> Any:
        """Errors by batch kind and by tokens per step."""
        import pandas as pd

        t = self.table
        bins = [0, 1, 16, 128, 512, 2048, np.inf]
        labels = ["1", "2-16", "17-128", "129-512", "513-2048", ">2048"]
        size = pd.cut(t["num_tokens"], bins=bins, labels=labels)
        rows = []
        for what, key in (("kind", t["kind"]), ("tokens", size)):
            for name, g in t.groupby(key, sort=True, observed=True):
                rows.append(
                    {
                        "region": f"{what}={name}",
                        "steps": len(g),
                        "mape_pct": g["ape_pct"].mean(),
                        "max_pct": g["ape_pct"].max(),
                        "total_error_pct": 100.0 * (g["pred_s"].sum() / g["meas_s"].sum() - 1.0),
                    }
                )
        return pd.DataFrame(rows)


def analyse(
    steps: Sequence[SampledStep], measured_s: Sequence[float], cost_model: Any, device: str = ""
) -> TrajectoryReport:
    """Price ``steps`` with ``cost_model`` and compare with the measured times."""
    import pandas as pd

    meas = np.asarray(measured_s, dtype=np.float64)
    if len(meas) != len(steps) or not np.all(np.isfinite(meas)) or np.any(meas <= 0):
        raise ConfigError(
            f"measured times: need {len(steps)} finite positive values, got {len(meas)}"
        )
    pred = price_items(steps, cost_model)
    table = pd.DataFrame(
        {
            "trace": [s.trace for s in steps],
            "step": [s.step for s in steps],
            "kind": [s.kind for s in steps],
            "num_items": [len(s.items) for s in steps],
            "num_tokens": [s.num_tokens for s in steps],
            "pred_s": pred,
            "meas_s": meas,
            "ape_pct": 100.0 * np.abs(pred - meas) / meas,
        }
    )
    name = cost_model if isinstance(cost_model, str) else getattr(cost_model, "name", "?")
    return TrajectoryReport(table, str(name), device)


def load_measured(folder: str | Path, model: str) -> tuple[list[SampledStep], np.ndarray]:
    """Sampled steps and measured times from ``sampled_steps.json`` and ``traj-<model>.csv``.

    The CSV names a subset of the sampled steps (``trace``, ``step``) with ``meas_s``; only
    those are returned, in the CSV's order.
    """
    import pandas as pd

    folder = Path(folder)
    path = folder / "sampled_steps.json"
    csv = folder / f"traj-{model}.csv"
    for p in (path, csv):
        if not p.is_file():
            raise ConfigError(f"trajectory data: no file {p}")
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping trace -> list of steps")
    by_key = {}
    for trace, rows in data.items():
        for r in rows:
            items = tuple((int(c), int(m)) for c, m in r["items"])
            by_key[(trace, int(r["step"]))] = SampledStep(
                trace, int(r["step"]), items, float(r["pred_s"])
            )
    frame = pd.read_csv(csv)
    missing = [c for c in ("trace", "step", "meas_s") if c not in frame.columns]
    if missing:
        raise ConfigError(f"{csv}: missing column(s) {missing}")
    steps = []
    for trace, step in zip(frame["trace"], frame["step"], strict=True):
        key = (str(trace), int(step))
        if key not in by_key:
            raise ConfigError(f"{csv}: step {key} is not in {path.name}")
        steps.append(by_key[key])
    return steps, frame["meas_s"].to_numpy(np.float64)


def write_report(reports: Sequence[TrajectoryReport], out: str | Path, title: str) -> Path:
    """``report.md``, ``steps.csv`` and ``trajectory.png`` under ``out`` (returns the md path)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from llmsched_gym._markdown import markdown_table

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", ""]
    lines += [
        "Step time of the cost profile along real simulated schedules against the same steps "
        "measured on the device (`llmsched_gym.calibration.trajectory`). MAPE: mean absolute "
        "percentage error over steps; total error: sum of predicted over sum of measured - 1.",
        "",
    ]
    frames = []
    for rep in reports:
        lines += [f"## {rep.profile} ({rep.device})", ""]
        lines += [markdown_table(rep.summary()), ""]
        lines += ["By region:", "", markdown_table(rep.regions()), ""]
        frames.append(rep.table.assign(profile=rep.profile))
    pd.concat(frames).to_csv(out / "steps.csv", index=False)
    fig, axes = plt.subplots(1, len(reports), figsize=(5 * len(reports), 4.2), squeeze=False)
    for ax, rep in zip(axes[0], reports, strict=True):
        t = rep.table
        for kind, g in t.groupby("kind"):
            ax.scatter(g["meas_s"] * 1e3, g["pred_s"] * 1e3, s=10, label=kind)
        hi = float(max(t["meas_s"].max(), t["pred_s"].max()) * 1e3)
        ax.plot([0, hi], [0, hi], color="k", lw=0.8)
        ax.set_xlabel("measured step time (ms)")
        ax.set_ylabel("predicted step time (ms)")
        mape = t["ape_pct"].mean()
        ax.set_title(f"{rep.profile}\n{rep.device}: MAPE {mape:.1f}%", fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "trajectory.png", dpi=110)
    plt.close(fig)
    lines += ["![predicted vs measured](trajectory.png)", ""]
    md = out / "report.md"
    md.write_text("\n".join(lines))
    return md


def validate_trajectory(
    trace: Any,
    cost_model: str,
    *,
    config: Any = None,
    num_steps: int = 120,
    model: str = "tiny-llama",
    device: str = "cpu",
    seed: int = 0,
    small: bool = True,
    name: str = "trace",
) -> TrajectoryReport:
    """Simulate, sample, time the steps on ``device`` with ``model``, and compare (steps 1-3)."""
    from llmsched_gym.calibration import torch_profile as tp

    steps = sample_steps(trace, config, cost_model, num_steps=num_steps, seed=seed, name=name)
    cfg = tp.default_config(model, device, small=small)
    times, hw = tp.time_batches(cfg, _batch_set(steps))
    return analyse(steps, times, cost_model, device=f"{model} on {hw.get('gpu_name') or device}")


def add_arguments(p: Any) -> None:
    """The options of trajectory validation (argparse)."""
    p.add_argument("--trace", default="splitwise-conv", help="shipped trace or trace file")
    p.add_argument("--limit", type=int, default=1500, help="first N requests of the trace")
    p.add_argument(
        "--cost-model",
        action="append",
        metavar="PROFILE",
        help="profile(s) to validate (repeatable; default torch:llama-3-8b@h200-141gb/tp1)",
    )
    p.add_argument("--max-num-batched-tokens", type=int, default=4096, help="engine token budget")
    p.add_argument("--max-num-seqs", type=int, default=128, help="engine sequence cap")
    p.add_argument(
        "--num-gpu-blocks",
        type=int,
        default=None,
        help="KV blocks (default: derived from the profile's model and GPU)",
    )
    p.add_argument("--steps", type=int, default=120, help="steps sampled from the schedule")
    p.add_argument("--device", default="cpu", help="cpu or cuda (where the steps are timed)")
    p.add_argument(
        "--model",
        default=None,
        help="model timed on the device (default: tiny-llama on cpu, the profile's on cuda)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the step sample")
    p.add_argument(
        "--from-measured",
        metavar="DIR",
        help="analysis only: sampled_steps.json and traj-<model>.csv in DIR (e.g. "
        "calibration/data/torch/h200-141gb/trajectory), re-priced with --cost-model",
    )
    p.add_argument("--out", default="out/validate/trajectory", metavar="DIR", help="report folder")


def run(args: Any) -> int:
    """Run trajectory validation from parsed arguments; print the summary and where it wrote."""
    profiles = args.cost_model or ["torch:llama-3-8b@h200-141gb/tp1"]
    reports = []
    if args.from_measured:
        for prof in profiles:
            model = prof.split(":", 1)[1].split("@", 1)[0]
            steps, meas = load_measured(args.from_measured, model)
            reports.append(analyse(steps, meas, prof, device=f"{model}, measured"))
        title = f"Trajectory validation from {args.from_measured}"
    else:
        config = {
            "max_num_batched_tokens": args.max_num_batched_tokens,
            "max_num_seqs": args.max_num_seqs,
        }
        if args.num_gpu_blocks is not None:
            config["num_gpu_blocks"] = args.num_gpu_blocks
        from llmsched_gym.workloads.trace import load_trace

        trace = load_trace(args.trace, limit=args.limit)
        for prof in profiles:
            model = args.model or (
                prof.split(":", 1)[1].split("@", 1)[0] if args.device != "cpu" else "tiny-llama"
            )
            reports.append(
                validate_trajectory(
                    trace,
                    prof,
                    config=config,
                    num_steps=args.steps,
                    model=model,
                    device=args.device,
                    seed=args.seed,
                    small=args.device == "cpu",
                    name=args.trace,
                )
            )
        title = f"Trajectory validation: {args.trace} (first {args.limit}) on {args.device}"
    for rep in reports:
        print(f"{rep.profile} ({rep.device})")
        print(rep.summary().to_string(index=False, float_format=lambda x: f"{x:.2f}"))
        print(rep.regions().to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    md = write_report(reports, args.out, title)
    print(f"wrote {md}, {md.parent / 'steps.csv'}, {md.parent / 'trajectory.png'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m llmsched_gym.calibration.trajectory``."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m llmsched_gym.calibration.trajectory", description=__doc__.splitlines()[0]
    )
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return run(args)
    except ConfigError as exc:
        print(f"error: {exc}")
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
