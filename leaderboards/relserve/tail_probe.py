"""Where a relQuery's core and tail running time go under vLLM (the paper's Fig. 5, Eq. 2).

For every relQuery, the step records are split at its Eq. 2 boundaries (first prefill start,
last prefill end, last completion). Each step that lies inside a period counts toward that
period, as a prefill step (any prompt tokens in the batch: under vLLM 0.6.6's prefill-first
schedule these are mostly other relQueries' prefills) or a decode step. Means over relQueries.

    .venv/bin/python leaderboards/relserve/tail_probe.py                       # Fig. 5's setting
    .venv/bin/python leaderboards/relserve/tail_probe.py --setting llama-amazon --rate 0.4
    .venv/bin/python leaderboards/relserve/tail_probe.py --workload authors
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reproduce as R  # noqa: E402

from llmsched_gym.cost.registry import load_cost_model  # noqa: E402
from llmsched_gym.scenarios.spec import load_scenario  # noqa: E402
from llmsched_gym.simulation import simulate  # noqa: E402


def breakdown(jobs: pd.DataFrame, steps: pd.DataFrame) -> dict[str, float]:
    """Mean seconds per relQuery of core / tail, each split into prefill and decode steps.

    A step belongs to a period when it starts at or after the period's start and ends at or
    before its end (1 µs slack for float sums); steps are disjoint in time, so the parts add up
    to the period up to the idle gaps.
    """
    start = steps["time_s"].to_numpy(float)
    end = start + steps["duration_s"].to_numpy(float)
    dur = steps["duration_s"].to_numpy(float)
    prefill = steps["num_prefill"].to_numpy() > 0
    eps = 1e-6
    rows = []
    for a, b, c in jobs[
        ["first_scheduled_time_s", "last_prefill_end_time_s", "finish_time_s"]
    ].itertuples(index=False):
        core = (start >= a - eps) & (end <= b + eps)
        tail = (start >= b - eps) & (end <= c + eps)
        rows.append(
            (
                b - a,
                dur[core & prefill].sum(),
                dur[core & ~prefill].sum(),
                c - b,
                dur[tail & prefill].sum(),
                dur[tail & ~prefill].sum(),
                (tail & ~prefill).sum(),
            )
        )
    m = np.asarray(rows, float).mean(axis=0)
    keys = (
        "core_s", "core_prefill_steps_s", "core_decode_steps_s",
        "tail_s", "tail_prefill_steps_s", "tail_decode_steps_s", "tail_decode_steps",
    )  # fmt: skip
    return dict(zip(keys, (float(x) for x in m), strict=True))


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run vLLM (``vllm-0.6``) on one setting and print the breakdown."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", default="opt-amazon", choices=list(R.SETTINGS))
    ap.add_argument("--rate", type=float, default=1.0, help="relQueries per second")
    ap.add_argument("--num-queries", type=int, default=100)
    ap.add_argument("--workload", choices=("scenario", "authors"), default="scenario")
    args = ap.parse_args(argv)
    sc = load_scenario(
        R.SETTINGS[args.setting][0],
        {"workload.rate_per_s": args.rate, "workload.num_queries": args.num_queries},
    )
    model = load_cost_model(sc.cost_model)
    jobs = (
        R.authors_jobs(sc, args.rate)
        if args.workload == "authors"
        else sc.build_workload(cost_model=model)
    )
    res = simulate(jobs, sc.engine_config(model), R._policy("vllm", None), model, record_steps=True)
    out = breakdown(res.jobs, res.steps)
    out["core_share"] = R._core_share(res.jobs)
    print(f"{args.setting} {args.workload} {args.rate} rQ/s, vLLM (vllm-0.6), means per relQuery:")
    print(
        f"  core {out['core_s']:.2f} s = prefill steps {out['core_prefill_steps_s']:.2f} s"
        f" + decode steps {out['core_decode_steps_s']:.2f} s"
    )
    print(
        f"  tail {out['tail_s']:.2f} s = prefill steps {out['tail_prefill_steps_s']:.2f} s"
        f" + decode steps {out['tail_decode_steps_s']:.2f} s"
        f" ({out['tail_decode_steps']:.1f} decode steps)"
    )
    print(f"  core share (mean of per-relQuery core / (core + tail)): {out['core_share']:.2f}")
    return out


if __name__ == "__main__":
    main()
