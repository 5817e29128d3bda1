"""Plots of run records (matplotlib, drawn off-screen with Agg; files written atomically).

No pyplot state is touched: figures are built with ``matplotlib.figure.Figure`` on an Agg canvas,
so the functions work on headless machines, in threads and inside notebooks alike. The file format
follows the file name (``.png``, ``.pdf``, ``.svg``, ...).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from llmsched_gym.metrics._atomic import atomic_output
from llmsched_gym.metrics.columns import RequestColumn, StepColumn

__all__ = ["plot_comparison", "plot_kv_usage"]

_MAX_STEP_POINTS = 20_000
"""Step series longer than this are thinned (every k-th step) before drawing."""


def _save(fig: Figure, path: str | os.PathLike[str]) -> Path:
    """Saves ``fig`` to ``path`` atomically, in the format its suffix names."""
    target = Path(path)
    canvas = FigureCanvasAgg(fig)
    fmt = target.suffix.lower().lstrip(".")
    supported = canvas.get_supported_filetypes()
    if fmt not in supported:
        raise ValueError(
            f"cannot tell the image format of {str(target)!r}; use a name ending in one of "
            f"{', '.join('.' + s for s in sorted(supported))}"
        )
    with atomic_output(target) as tmp:
        fig.savefig(tmp, format=fmt, dpi=120, bbox_inches="tight")
    return target


def _values(df: pd.DataFrame, column: RequestColumn, name: str) -> np.ndarray:
    """Finite values of a request column, or ValueError naming the run and column."""
    if column.value not in df.columns:
        raise ValueError(
            f"plot_comparison: records of {name!r} have no column {column.value!r}; pass frames "
            "from requests_frame"
        )
    values = pd.to_numeric(df[column.value], errors="coerce").to_numpy(np.float64)
    return values[np.isfinite(values)]


def _cdf(ax: Axes, samples: Mapping[str, np.ndarray], label: str) -> None:
    """Draws one empirical CDF per run; log x when the values span over two decades."""
    positive = [s[s > 0] for s in samples.values() if s.size]
    for name, values in samples.items():
        if values.size:
            ordered = np.sort(values)
            fraction = np.arange(1, ordered.size + 1) / ordered.size
            ax.step(ordered, fraction, where="post", label=name)
    if positive and all(p.size for p in positive):
        low = min(float(p.min()) for p in positive)
        high = max(float(p.max()) for p in positive)
        if high > 100 * low:
            ax.set_xscale("log")
    ax.set_xlabel(label)
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")


def _mean_p99_bars(ax: Axes, samples: Mapping[str, np.ndarray], label: str) -> None:
    """Grouped bars of the mean and p99 per run."""
    names = list(samples)
    x = np.arange(len(names))
    means = [float(v.mean()) if v.size else np.nan for v in samples.values()]
    p99s = [float(np.percentile(v, 99)) if v.size else np.nan for v in samples.values()]
    width = 0.38
    ax.bar(x - width / 2, means, width, label="mean")
    ax.bar(x + width / 2, p99s, width, label="p99")
    ax.set_xticks(x, names, rotation=20, ha="right")
    ax.set_ylabel(label)
    tallest = np.nanmax([*means, *p99s, 0.0])
    if tallest > 0:
        ax.set_ylim(0, tallest * 1.15)  # headroom for the legend
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", ncols=2)


def plot_comparison(
    results: Mapping[str, pd.DataFrame],
    path: str | os.PathLike[str],
    *,
    title: str | None = None,
) -> Path:
    """Compares runs: CDFs of TTFT and end-to-end latency, and bars of their mean and p99.

    Args:
        results: Per-request records (``requests_frame``) by scheduler name, in legend order.
        path: Image file to write (``.png``, ``.pdf``, ``.svg``, ...).
        title: Figure title.

    Returns:
        The path written.

    Raises:
        ValueError: If ``results`` is empty, a frame lacks ``ttft_s`` or ``e2e_s``, or the image
            format is unknown.
    """
    if not results:
        raise ValueError("plot_comparison: no results given; pass {scheduler name: requests_df}")
    ttft = {name: _values(df, RequestColumn.TTFT_S, name) for name, df in results.items()}
    e2e = {name: _values(df, RequestColumn.E2E_S, name) for name, df in results.items()}
    fig = Figure(figsize=(11, 8), layout="constrained")
    axes = fig.subplots(2, 2)
    _cdf(axes[0, 0], ttft, "TTFT (s)")
    _cdf(axes[0, 1], e2e, "end-to-end latency (s)")
    _mean_p99_bars(axes[1, 0], ttft, "TTFT (s)")
    _mean_p99_bars(axes[1, 1], e2e, "end-to-end latency (s)")
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def plot_kv_usage(
    steps_df: pd.DataFrame,
    path: str | os.PathLike[str],
    *,
    title: str | None = None,
) -> Path:
    """Plots KV cache usage, and running and waiting queue lengths, over simulated time.

    Args:
        steps_df: Per-step records (``steps_frame``). Runs longer than 20,000 steps are thinned
            to every k-th step for drawing.
        path: Image file to write (``.png``, ``.pdf``, ``.svg``, ...).
        title: Figure title.

    Returns:
        The path written.

    Raises:
        ValueError: If a needed column is missing, or the image format is unknown.
    """
    needed = (
        StepColumn.TIME_S,
        StepColumn.DURATION_S,
        StepColumn.KV_CACHE_USAGE,
        StepColumn.NUM_RUNNING,
        StepColumn.NUM_WAITING,
    )
    missing = [c.value for c in needed if c.value not in steps_df.columns]
    if missing:
        raise ValueError(
            f"plot_kv_usage: the step records lack column(s) {', '.join(missing)}; pass a frame "
            "from steps_frame (simulate with record_steps=True)"
        )
    stride = max(1, -(-len(steps_df) // _MAX_STEP_POINTS))
    shown = steps_df.iloc[::stride]
    time_s = shown[StepColumn.TIME_S.value].to_numpy(np.float64)
    usage = steps_df[StepColumn.KV_CACHE_USAGE.value].to_numpy(np.float64)
    durations = steps_df[StepColumn.DURATION_S.value].to_numpy(np.float64)
    fig = Figure(figsize=(11, 6), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.step(time_s, shown[StepColumn.KV_CACHE_USAGE.value], where="post", label="KV cache usage")
    if len(steps_df) and durations.sum() > 0:
        mean = float(np.dot(usage, durations) / durations.sum())
        top.axhline(mean, color="C3", linestyle="--", label=f"time-weighted mean {mean:.2f}")
    top.set_ylabel("KV cache usage")
    top.set_ylim(0, 1.02)
    top.grid(True, alpha=0.3)
    top.legend(fontsize="small", loc="lower right")
    bottom.step(time_s, shown[StepColumn.NUM_RUNNING.value], where="post", label="running")
    bottom.step(time_s, shown[StepColumn.NUM_WAITING.value], where="post", label="waiting")
    bottom.set_xlabel("simulated time (s)")
    bottom.set_ylabel("requests")
    bottom.grid(True, alpha=0.3)
    bottom.legend(fontsize="small")
    if title:
        fig.suptitle(title)
    return _save(fig, path)
