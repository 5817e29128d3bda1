"""Workload statistics (counts, rate, length percentiles, prefix sharing) and a length plot.

Definitions (``workload_stats``):

* ``duration_s`` = last arrival − first arrival; ``mean_rate_per_s`` = ``(N − 1) / duration_s``,
  one over the mean inter-arrival gap (NaN when all requests arrive at once), the rate
  ``rescale_to_rate`` targets.
* Length percentiles use linear interpolation between order statistics (numpy's default).
* ``prefix_sharing_ratio``: the share of all prompt tokens that lie in full ``block_size``-token
  blocks (16 by default, vLLM's block) whose whole prefix, up to the block's end, an *earlier*
  request of the trace (arrival order, ties by list order) already had. This is the hit rate
  of an infinite prefix cache, an upper bound on what any engine's cache can reuse, and is
  computed from the trace alone: from ``prompt_token_ids`` when given, else from
  ``block_hashes`` (a block is keyed by the chain of hash ids up to the hash block holding its
  last token, plus its end position), else the prompt is unique (no sharing).

>>> from llmsched_gym.workloads import load_trace, workload_stats
>>> workload_stats(load_trace("mooncake-synthetic"))["prefix_sharing_ratio"]   # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.metrics._atomic import atomic_output

__all__ = [
    "PERCENTILES",
    "plot_length_histogram",
    "prefix_sharing_ratio",
    "stats_table",
    "workload_stats",
]

PERCENTILES: tuple[int, ...] = (50, 90, 99)
"""Length percentiles reported by ``workload_stats``."""


class _PrefixIndex:
    """Every full block seen so far, keyed by its whole prefix (an infinite prefix cache)."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.blocks: dict[tuple, int] = {}
        """(parent block id, block's token ids) -> block id, for token-id prompts."""
        self.chains: dict[tuple[int, int], int] = {}
        """(parent chain id, hash id) -> chain id: a prefix of hash ids, interned."""
        self.max_end: dict[int, int] = {}
        """Chain id -> largest end (tokens) of a full block seen inside its last hash block."""

    def shared_tokens(self, spec: RequestSpec) -> int:
        """Tokens of ``spec`` in full blocks seen before; registers its blocks."""
        bs = self.block_size
        if spec.prompt_token_ids is not None:
            shared, parent, tokens, blocks = 0, -1, spec.prompt_token_ids, self.blocks
            for end in range(bs, spec.prompt_len + 1, bs):
                key = (parent, tokens[end - bs : end])
                block = blocks.get(key)
                if block is None:
                    block = blocks[key] = len(blocks)
                else:
                    shared += bs
                parent = block
            return shared
        if not spec.block_hashes:
            return 0
        # A block ending at token ``end`` is keyed by the hash ids up to the hash block holding
        # its last token, (end - 1) // size, and by ``end``: it was seen iff an earlier request
        # had the same hash-id prefix and a full block ending at or after ``end`` in that hash
        # block. One dict lookup per hash block instead of one per token block.
        hashes, size = spec.block_hashes, spec.hash_block_size
        last_end = min(spec.prompt_len, len(hashes) * size) // bs * bs
        shared, chain, k = 0, -1, 0
        while k * size < last_end:
            chain = self.chains.setdefault((chain, hashes[k]), len(self.chains))
            lo = -(-(k * size + 1) // bs) * bs  # first block end inside hash block k
            hi = min((k + 1) * size, last_end)  # last one
            if lo <= hi:
                seen = self.max_end.get(chain, 0)
                if seen >= lo:
                    shared += (min(seen, hi) - lo) // bs * bs + bs
                if hi > seen:
                    self.max_end[chain] = hi
            k += 1
        return shared


def prefix_sharing_ratio(specs: Sequence[RequestSpec], block_size: int = 16) -> float:
    """Share of prompt tokens in full blocks an earlier request already had (see module doc).

    Args:
        specs: The trace (any order; processed in arrival order, ties by list order).
        block_size: Tokens per block (>= 1).

    Returns:
        A number in [0, 1]; NaN for an empty trace.
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
    ordered = sorted(specs, key=lambda s: s.arrival_time)
    total = sum(s.prompt_len for s in ordered)
    if not total:
        return math.nan
    index = _PrefixIndex(block_size)
    shared = sum(index.shared_tokens(s) for s in ordered)
    return shared / total


def workload_stats(specs: Sequence[RequestSpec], *, block_size: int = 16) -> dict[str, float]:
    """Summary statistics of a trace (definitions in the module docstring).

    Returns:
        An ordered dict: ``num_requests``, ``num_clients``, ``duration_s``, ``mean_rate_per_s``,
        ``prompt_len_{mean,p50,p90,p99,max}``, ``output_len_{...}``, ``total_prompt_tokens``,
        ``total_output_tokens``, ``prefix_sharing_ratio``.
    """
    n = len(specs)
    stats: dict[str, float] = {"num_requests": n}
    stats["num_clients"] = len({s.client_id for s in specs if s.client_id is not None})
    arrivals = np.fromiter((s.arrival_time for s in specs), dtype=np.float64, count=n)
    duration = float(arrivals.max() - arrivals.min()) if n else math.nan
    stats["duration_s"] = duration
    stats["mean_rate_per_s"] = (n - 1) / duration if n > 1 and duration > 0 else math.nan
    for name in ("prompt_len", "output_len"):
        values = np.fromiter((getattr(s, name) for s in specs), dtype=np.int64, count=n)
        stats[f"{name}_mean"] = float(values.mean()) if n else math.nan
        for q in PERCENTILES:
            stats[f"{name}_p{q}"] = float(np.percentile(values, q)) if n else math.nan
        stats[f"{name}_max"] = int(values.max()) if n else 0
        stats[f"total_{name.split('_')[0]}_tokens"] = int(values.sum())
    stats["prefix_sharing_ratio"] = prefix_sharing_ratio(specs, block_size)
    return stats


def flatten_requests(items: Sequence[Any]) -> list[RequestSpec]:
    """The requests of a workload of requests and jobs, for statistics.

    A job's fixed-stage requests count with ``arrival_time`` = job arrival + release offset (when
    later stages are released depends on the run); stages built at release are not counted.
    """
    from llmsched_gym.core.job import Job

    out: list[RequestSpec] = []
    for item in items:
        if isinstance(item, Job):
            for stage in item.stages:
                out.extend(
                    dataclasses.replace(
                        r, arrival_time=item.arrival_time + r.arrival_time, job_id=item.job_id,
                        stage=stage.name,
                    )
                    for r in stage.requests
                )  # fmt: skip
        else:
            out.append(item)
    return out


def job_stats(items: Sequence[Any]) -> dict[str, float]:
    """Counts of a workload's jobs: ``num_jobs``, job rate, requests and stages per job."""
    from llmsched_gym.core.job import Job

    jobs = [j for j in items if isinstance(j, Job)]
    n = len(jobs)
    if not n:
        return {"num_jobs": 0}
    arrivals = np.array([j.arrival_time for j in jobs], dtype=np.float64)
    span = float(arrivals.max() - arrivals.min())
    reqs = np.array([j.num_requests for j in jobs], dtype=np.float64)
    stages = np.array([len(j.stages) for j in jobs], dtype=np.float64)
    return {
        "num_jobs": n,
        "job_rate_per_s": (n - 1) / span if n > 1 and span > 0 else math.nan,
        "requests_per_job_mean": float(reqs.mean()),
        "requests_per_job_max": int(reqs.max()),
        "stages_per_job_mean": float(stages.mean()),
        "stages_per_job_max": int(stages.max()),
    }


def stats_table(traces: Mapping[str, Sequence[RequestSpec]], *, block_size: int = 16) -> Any:
    """``workload_stats`` of several traces as a pandas DataFrame, one row per trace."""
    import pandas as pd

    rows = {name: workload_stats(specs, block_size=block_size) for name, specs in traces.items()}
    return pd.DataFrame.from_dict(rows, orient="index")


def plot_length_histogram(
    specs: Sequence[RequestSpec],
    path: str | os.PathLike[str],
    *,
    bins: int = 60,
    title: str | None = None,
) -> Path:
    """Writes histograms of prompt and output lengths (log-spaced bins) to an image, atomically.

    Args:
        specs: The trace (non-empty).
        path: Output file; the format follows the suffix (``.png``, ``.pdf``, ``.svg``).
        bins: Number of bins per panel (>= 1).
        title: Figure title.

    Returns:
        The path written.
    """
    if not specs:
        raise ValueError("plot_length_histogram: specs is empty")
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ValueError(f"bins must be an int >= 1, got {bins!r}")
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    target = Path(path)
    fig = Figure(figsize=(9, 3.5), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, name, label in (
        (axes[0], "prompt_len", "prompt tokens"),
        (axes[1], "output_len", "output tokens"),
    ):
        values = np.array([getattr(s, name) for s in specs], dtype=np.float64)
        edges = np.geomspace(values.min(), max(values.max(), values.min() + 1), bins + 1)
        ax.hist(values, bins=edges, color="tab:blue" if name == "prompt_len" else "tab:orange")
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("requests")
        ax.set_title(
            f"mean {values.mean():.0f}, p50 {np.percentile(values, 50):.0f}, "
            f"p99 {np.percentile(values, 99):.0f}",
            fontsize=9,
        )
    if title:
        fig.suptitle(title)
    fmt = target.suffix.lstrip(".") or "png"
    with atomic_output(target) as tmp:
        fig.savefig(tmp, format=fmt)
    return target
