#!/usr/bin/env python
"""Compare generated CHESS Text-to-SQL workflows with the HexGen-Flow traces they derive from.

For each trace prints, per step: calls per query in the source trace and in the generated jobs,
the source and generated mean input/output lengths, and the ratios generated / source. The source
numbers are the shipped derived statistics (``hexgen_flow_stats.json``). With
``--prompt-source templates`` the input lengths come from the filled CHESS templates instead
(expected to differ: BIRD value examples and column descriptions are not in the shipped schemas).

Usage::

    .venv/bin/python scripts/text2sql_report.py [--queries 5000] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llmsched_gym.workloads import text2sql as t2s  # noqa: E402


def report(trace: str, num_queries: int, seed: int, prompt_source: str) -> tuple[str, float]:
    """The comparison table of one trace and its largest relative error (calls and means)."""
    src = t2s.load_hexgen_stats()["traces"][trace]
    jobs = t2s.text2sql_jobs(
        trace, num_queries, 1.0, seed=seed, slo_base_s=1.0, prompt_source=prompt_source
    )
    calls: dict[str, int] = defaultdict(int)
    ins: dict[str, int] = defaultdict(int)
    outs: dict[str, int] = defaultdict(int)
    for job in jobs:
        for stage in job.stages:
            abbr = stage.name.rstrip("0123456789")
            for r in stage.requests:
                calls[abbr] += 1
                ins[abbr] += r.prompt_len
                outs[abbr] += r.output_len
    head = (
        f"{'step':<4} {'src c/q':>8} {'gen c/q':>8} {'ratio':>6} | {'src in':>8} {'gen in':>8} "
        f"{'ratio':>6} | {'src out':>7} {'gen out':>7} {'ratio':>6}"
    )
    lines = [f"== {trace} ({src['num_queries']} source queries, {num_queries} generated)", head]
    worst = 0.0
    for abbr in t2s.STEP_NAMES:
        if abbr not in src["steps"]:
            continue
        s = src["steps"][abbr]
        cq_src = src["calls_per_query_by_step"][abbr]
        cq_gen = calls[abbr] / num_queries
        in_gen = ins[abbr] / max(1, calls[abbr])
        out_gen = outs[abbr] / max(1, calls[abbr])
        ratios = (cq_gen / cq_src, in_gen / s["input"]["mean"], out_gen / s["output"]["mean"])
        checked = ratios if prompt_source == "trace" else (ratios[0], ratios[2])
        worst = max(worst, *(abs(x - 1) for x in checked))
        lines.append(
            f"{abbr:<4} {cq_src:>8.3f} {cq_gen:>8.3f} {ratios[0]:>6.3f} | "
            f"{s['input']['mean']:>8.1f} {in_gen:>8.1f} {ratios[1]:>6.3f} | "
            f"{s['output']['mean']:>7.1f} {out_gen:>7.1f} {ratios[2]:>6.3f}"
        )
    return "\n".join(lines), worst


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; exit status 1 when a checked ratio is off by more than 10%."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=5000, help="generated queries per trace")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompt-source", choices=t2s.PROMPT_SOURCES, default="trace")
    parser.add_argument("--traces", nargs="*", default=list(t2s.TRACES))
    args = parser.parse_args(argv)
    worst_all = 0.0
    for trace in args.traces:
        table, worst = report(trace, args.queries, args.seed, args.prompt_source)
        print(table)
        print(f"   largest relative error: {worst:.2%}\n")
        worst_all = max(worst_all, worst)
    checked = (
        "calls/query, mean input and output"
        if args.prompt_source == "trace"
        else ("calls/query and mean output (inputs come from the templates)")
    )
    print(f"largest relative error over all traces ({checked}): {worst_all:.2%}")
    return 0 if worst_all <= 0.10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
