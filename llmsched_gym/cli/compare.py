"""``llmsched-gym compare``: one workload under several schedulers, as a table, a line and a plot.

The command runs every named scheduler on the same workload (by default an overloaded chat
scenario, where their choices change latency; a cluster scenario runs as a cluster), then
writes comparison.csv and comparison.png and prints a table, which rows are the same schedule
(``same_as``), and one line on which measured part of the latency (waiting, prompt, decoding,
KV transfer) makes the rows differ, where one part clearly does (``_comparison_story``). It is
apart from ``main`` because it is its own command with its own table and story; the run options
it shares with ``simulate`` are in ``run_options``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from llmsched_gym.cli import common, run_options
from llmsched_gym.errors import ConfigError

COMPARE_BATCHED_TOKENS = 16384
COMPARE_SCENARIO = "chat-sharegpt-overload-v0"
"""``compare``'s default: an overloaded instance, where the schedulers' choices change latency."""
DEFAULT_SCHEDULERS = ("vllm-v1", "vllm-v0", "sarathi", "static-priority:shortest-prompt")


def add_parser(sub: Any, sched_help: str) -> None:
    """The ``compare`` command of the top-level CLI (``sched_help``: the schedulers' help)."""
    p = sub.add_parser(
        "compare",
        help="run one workload under several schedulers; print a table and write a plot",
        description=f"The main job: run the built-in schedulers on {COMPARE_SCENARIO} (1,000 "
        "ShareGPT conversations at 2.5x the instance's capacity, where the schedulers' choices "
        "change latency), print a comparison table with a line on what part of the latency "
        "makes the rows differ (where one part clearly does), and write comparison.csv and "
        "comparison.png. --trace splitwise-conv runs the Azure 2023 "
        "conversation trace instead (below capacity: three schedulers give one schedule, and "
        "vllm-v0 decodes slower). Cluster scenarios run as clusters (--router picks the router).",
    )
    run_options.add_run_args(
        p,
        run_options.DEFAULT_COST_MODEL,
        default_scenario=COMPARE_SCENARIO,
        budget_help="token budget of one engine step, the same for every scheduler (vLLM "
        "--max-num-batched-tokens); default: the scenario's, else "
        f"{COMPARE_BATCHED_TOKENS} or the longest request, because vllm-v0 cannot chunk prefills",
    )
    p.add_argument(
        "--schedulers",
        default=",".join(DEFAULT_SCHEDULERS),
        metavar="A,B,...",
        help=f"comma-separated schedulers (default {','.join(DEFAULT_SCHEDULERS)}); {sched_help}",
    )
    p.add_argument(
        "--out", default="out/compare", metavar="DIR", help="output folder (default out/compare)"
    )
    p.set_defaults(func=_cmd_compare)


def _cmd_compare(args: argparse.Namespace) -> int:
    from llmsched_gym.metrics.plots import plot_comparison
    from llmsched_gym.simulation import simulate
    from llmsched_gym.workloads.stats import flatten_requests
    from llmsched_gym.workloads.trace import load_trace

    if args.scenario is None and args.trace is None:
        args.scenario = COMPARE_SCENARIO
        if args.num_requests is not None:  # the default scenario's workload, shortened
            args.overrides = [*args.overrides, f"workload.num_requests={args.num_requests}"]
            args.num_requests = None
    names = [n.strip() for n in args.schedulers.split(",") if n.strip()]
    if not names:
        raise ConfigError("--schedulers: give at least one scheduler name, e.g. vllm-v1,sarathi")
    from llmsched_gym.policies.registry import make_policy

    for name in names:  # unknown names fail now, not after the first runs
        make_policy(name)
    output = common.OutputSet(args.out)
    scenario = run_options.load_scenario(args) if args.scenario is not None else None
    results: dict[str, Any] = {}
    try:
        if scenario is not None and scenario.cluster is not None:
            from llmsched_gym.cluster import simulate_cluster

            if args.trace is not None or args.num_requests is not None or args.cost_model:
                raise ConfigError(
                    f"scenario {scenario.name} is a cluster: drop --trace, --num-requests and "
                    "--cost-model (use --set to change its workload or instances)"
                )
            output.prepare()
            engine = run_options.engine_settings(args)
            for name in names:
                res = simulate_cluster(
                    scenario, name, seed=args.seed, fast_forward=args.fast_forward,
                    router=args.router, engine=engine,
                    progress=args.progress and sys.stderr.isatty(),
                )  # fmt: skip
                results[name] = res
            first = next(iter(results.values()))
            gpus = sorted(set(first.instances["gpu"]))
            setting = f"{len(first.configs)} instances ({', '.join(gpus)}), router {first.router}"
            num_requests = first.summary["num_requests"]
            label = scenario.name
        else:
            if scenario is not None and args.router is not None:
                raise ConfigError(f"--router: scenario {scenario.name} has no cluster section")
            workload, settings, model, _, label = run_options.workload(args)
            specs = (
                load_trace(workload, limit=args.num_requests)
                if isinstance(workload, str)
                else workload
            )
            if "max_num_batched_tokens" not in settings:
                # vllm-v0 cannot chunk a prefill: give every scheduler the same budget, large
                # enough for the longest request, as vLLM V0 required.
                longest = max(s.prompt_len + s.output_len for s in flatten_requests(specs))
                settings["max_num_batched_tokens"] = max(COMPARE_BATCHED_TOKENS, longest)
            output.prepare()
            for name in names:
                res = simulate(
                    specs, settings, name, model, fast_forward=args.fast_forward,
                    progress=args.progress and sys.stderr.isatty(),
                )  # fmt: skip
                if not args.json:
                    print(
                        f"  {res.scheduler}: {res.num_steps} steps in {res.wall_s:.2f} s wall",
                        file=sys.stderr,
                    )
                results[res.scheduler] = res
            first = next(iter(results.values()))
            cfg = first.config
            setting = (
                f"{first.cost_model}, max_num_batched_tokens={cfg.max_num_batched_tokens}, "
                f"num_gpu_blocks={cfg.num_gpu_blocks}"
            )
            num_requests = first.summary["num_requests"]
            refused = run_options.refused_note(first.summary, cfg)
            if refused:
                print(refused, file=sys.stderr)
        paper = scenario.paper if scenario is not None else None
        table = _comparison_table(results, paper)
        story = _comparison_story(table)
        slo_note = _slo_note(table, first)
        title = f"{label} ({num_requests:,} requests) on {setting}"
        table.reset_index().to_csv(output.path("comparison.csv"), index=False)
        import textwrap

        plot_comparison(
            {  # identical runs share a curve: the legend says so
                (f"{k} (= {table.loc[k, 'same_as']})" if table.loc[k, "same_as"] else k): r.requests
                for k, r in results.items()
            },
            output.path("comparison.png"),
            title="\n".join(textwrap.wrap(title, 110) + textwrap.wrap(story or "", 110)),
        )
        written = output.commit("compare")
    finally:
        output.discard()
    if args.json:
        common.print_json(
            {
                "workload": label,
                "setting": setting,
                "story": story,
                "slo_note": slo_note,
                "out": str(written),
                "rows": table.reset_index().to_dict(orient="records"),
            }  # fmt: skip
        )
        return 0
    print(title)
    shown = [
        c
        for c in table.columns
        if c not in _CSV_ONLY and not (c == "prefix_cache_hit_rate" and not table[c].any())
    ]
    print(common.format_frame(table[shown].rename_axis(None)))
    if slo_note:
        print(slo_note)
    if story:
        print(story)
    print(f"wrote {written / 'comparison.csv'} and {written / 'comparison.png'}")
    return 0


_COMPARE_KEYS = (
    "request_throughput",
    "output_token_throughput",
    "ttft_s_mean",
    "ttft_s_p99",
    "tpot_s_mean",
    "tpot_s_p99",
    "e2e_s_mean",
    "e2e_s_p99",
    "goodput",
    "slo_attainment",
    "num_preemptions",
    "prefix_cache_hit_rate",
)

_CSV_ONLY = (
    "output_token_throughput",
    "ttft_s_p50",
    "tpot_s_p99",
    "goodput",
    "queue_s_mean",
    "prefill_s_mean",
    "decode_s_mean",
    "kv_transfer_s_mean",
)
"""Columns kept in comparison.csv but left out of the console table (to fit 160 columns)."""

_PAPER_METRICS = {
    "relserve": ("job_latency_s_mean", "job_latency_s_p99"),
    "hexgen-text2sql": ("job_latency_s_mean", "job_slo_attainment"),
    "proserve": ("tdg_ratio",),
    "infermax": ("duration_s",),
}
"""Each paper's own headline metric, shown beside the default columns (RelServe: relQuery
latency; HexGen-Text2SQL: workflow SLO attainment; ProServe: token-level TDG ratio;
InferMax: the makespan of an offline batch)."""


def _comparison_table(results: dict[str, Any], paper: str | None) -> Any:
    """One row per scheduler: the default metrics, the scenario's own, and ``same_as``."""
    import numpy as np
    import pandas as pd

    from llmsched_gym.metrics.tdg import tdg_uniform

    rows = {}
    for name, res in results.items():
        row = {k: res.summary.get(k) for k in _COMPARE_KEYS}
        row.update(latency_parts(res.request_table))
        for key in _PAPER_METRICS.get(paper, ()):
            if key == "tdg_ratio":
                gain, ideal = tdg_uniform(res.request_table)
                total = float(np.nansum(ideal))
                row[key] = float(np.nansum(gain)) / total if total > 0 else float("nan")
            elif key == "job_slo_attainment":
                met = run_options.job_slo_outcome(res.jobs)
                row[key] = met[0] / met[1] if met else float("nan")
            else:
                row[key] = res.summary.get(key)
        rows[name] = row
    table = pd.DataFrame.from_dict(rows, orient="index").dropna(axis=1, how="all")
    table.index.name = "scheduler"
    # Identical rows (vllm-v1 and sarathi are both Sarathi-style chunked schedulers) are marked,
    # so that equal numbers read as a finding rather than as a bug.
    signatures = {
        name: tuple(np.round(np.asarray(r.request_table["e2e_s"], dtype=float), 9).tolist())
        for name, r in results.items()
    }
    same = []
    for i, name in enumerate(results):
        twin = next((o for o in list(results)[:i] if signatures[o] == signatures[name]), "")
        same.append(twin)
    table["same_as"] = same
    return table


def _slo_note(table: Any, base: Any) -> str | None:
    """One line on what ``slo_attainment`` counts and which bound the first row's requests miss.

    Without it a column of 0.009 in every row reads as a bug: the main job's SLO (TTFT < 1 s,
    TPOT < 0.05 s) is missed by nearly every request of a load 2.5x what the instance serves.
    """
    import numpy as np

    if "slo_attainment" not in table.columns or table["slo_attainment"].isna().all():
        return None
    rt = base.request_table
    finished = ~np.isnan(np.asarray(rt["finish_time_s"], dtype=float))
    parts, bounds = [], []
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT")):
        value = np.asarray(rt[key], dtype=float)
        slo = np.asarray(rt[f"slo_{key}"], dtype=float)
        has = ~np.isnan(slo)
        if not has.any():
            continue
        levels = np.unique(slo[has])
        bounds.append(f"{label} < {levels[0]:g} s" if len(levels) == 1 else f"{label} < its SLO")
        ok = finished & ((value < slo) | (np.isnan(value) & (key == "tpot_s")))
        median = np.nanmedian(value[finished]) if finished.any() else float("nan")
        parts.append(f"{ok[has].mean():.1%} meet the {label} bound (median {label} {median:.3g} s)")
    if not bounds:
        return None
    name = table.index[0]
    share = table.loc[name, "slo_attainment"]
    note = (
        f"slo_attainment: the share of requests with {' and '.join(bounds)}; under {name}, "
        f"{', '.join(parts)}, and {share:.1%} meet every bound"
    )
    if share < 0.5:
        note += ": this load is beyond what the setting serves within the SLO"
    return note + "."


_PARTS = (
    ("queue_s_mean", "waiting for a first step (arrival to first schedule)"),
    ("prefill_s_mean", "the prompt's steps (first schedule to first token)"),
    ("decode_s_mean", "decoding (first token to finish)"),
    ("kv_transfer_s_mean", "moving the KV cache from prefill to decode instance"),
)
"""The parts of a request's end-to-end latency, as its records measure them; they sum to it."""

STORY_MAJORITY = 2 / 3
"""The share of the latency change one part must carry for the story to name it as the cause."""


def latency_parts(request_table: Any) -> dict[str, float]:
    """Mean end-to-end latency of the finished requests, split into the ``_PARTS`` (seconds).

    Queueing is arrival to first schedule, prefill first schedule to first token, decode first
    token to finish less any KV transfer; time spent preempted lands in the part it interrupts.
    Empty when the records lack a column (a cluster run that keeps no request records).
    """
    import numpy as np

    need = ("arrival_time_s", "first_scheduled_time_s", "first_token_time_s", "finish_time_s")
    if not request_table or any(k not in request_table for k in need):
        return {}
    arrival, scheduled, first, finish = (np.asarray(request_table[k], dtype=float) for k in need)
    done = ~np.isnan(finish)
    if not done.any():
        return {}
    kv = np.asarray(request_table.get("kv_transfer_s", np.zeros_like(finish)), dtype=float)
    kv = np.nan_to_num(kv[done])
    parts = {
        "queue_s_mean": float(np.mean(scheduled[done] - arrival[done])),
        "prefill_s_mean": float(np.mean(first[done] - scheduled[done])),
        "decode_s_mean": float(np.mean(finish[done] - first[done] - kv)),
    }
    if kv.any():
        parts["kv_transfer_s_mean"] = float(np.mean(kv))
    return parts


def _comparison_story(table: Any) -> str | None:
    """One line on why the rows differ, from measured latency parts; None where none is clear.

    Identical schedules are said to be so. Otherwise the row whose mean e2e latency differs
    most from the first row's is split into ``_PARTS`` (columns of ``table``): the line names the
    part that carries at least ``STORY_MAJORITY`` of the change, in the change's direction, with
    its figures. No such part, or parts missing or not summing to the mean: no line.
    """
    import math

    names = list(table.index)
    base = names[0]
    distinct = [n for n in names[1:] if not table.loc[n, "same_as"]]

    def get(name: str, key: str) -> float:
        value = table.loc[name, key] if key in table.columns else math.nan
        return float(value) if value is not None else math.nan

    if not distinct:
        wait = get(base, "queue_s_mean")
        measured = f" (a request waits {wait:.3g} s on average for its first step)"
        return (
            "Every scheduler gives the same schedule: each request's latency is identical under "
            f"all {len(names)}{measured if math.isfinite(wait) else ''}; try --scenario "
            f"{COMPARE_SCENARIO}, where a queue builds."
        )
    b_mean = get(base, "e2e_s_mean")
    star = max(distinct, key=lambda n: abs(get(n, "e2e_s_mean") - b_mean))
    s_mean = get(star, "e2e_s_mean")
    keys = [k for k, _ in _PARTS if k in table.columns]

    def part(name: str, key: str) -> float:  # a run without KV transfers moved nothing
        value = get(name, key)
        return 0.0 if key == "kv_transfer_s_mean" and math.isnan(value) else value

    deltas = {k: part(star, k) - part(base, k) for k in keys}
    change = s_mean - b_mean
    if not deltas or not all(math.isfinite(d) for d in deltas.values()) or change == 0:
        return None
    for name in (base, star):  # the parts must add up to the mean they explain
        total = sum(part(name, k) for k in keys)
        if not abs(total - get(name, "e2e_s_mean")) <= 1e-6 * max(1.0, abs(total)):
            return None
    top = max(deltas, key=lambda k: abs(deltas[k]))
    spread = sum(abs(d) for d in deltas.values())
    if deltas[top] * change <= 0 or abs(deltas[top]) < STORY_MAJORITY * spread:
        return None
    digits = max(2, 2 - math.floor(math.log10(abs(change))))  # 3 significant digits of it
    p99 = get(star, "e2e_s_p99") / get(base, "e2e_s_p99") - 1
    line = (
        f"{star} changes mean e2e latency by {change / b_mean:+.0%} ({s_mean:.3g} s against "
        f"{b_mean:.3g} s under {base})" + (f" and p99 by {p99:+.0%}" if math.isfinite(p99) else "")
        + f"; {dict(_PARTS)[top]} accounts for {deltas[top]:+.{digits}f} s of the "
        f"{change:+.{digits}f} s: {part(star, top):.3g} s against {part(base, top):.3g} s on "
        "average"
    )
    tpot = get(star, "tpot_s_mean"), get(base, "tpot_s_mean")
    if top == "decode_s_mean" and all(math.isfinite(t) for t in tpot):
        line += f", mean TPOT {tpot[0] * 1e3:.1f} ms against {tpot[1] * 1e3:.1f} ms"
    return line + "."
