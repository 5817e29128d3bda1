"""``llmsched-gym``: simulate, compare schedulers, benchmark the simulator, list what ships.

Every engine option uses vLLM's name and meaning; ``--help`` on each command explains them.
This module is the entry point: the top-level parser (``build_parser``, which builds the
parsers of ``calibrate``, ``validate``, ``leaderboard`` and ``counterfactual`` only when they
are named or for ``--help``), error handling (``main``) and the ``simulate`` command. The other
commands live one module (or group) each beside it: ``compare``, ``bench``, ``catalog``
(``workloads``, ``envs``, ``list``), ``calibrate`` (with ``live``) and ``counterfactual``; the
run options ``simulate`` and ``compare`` share are in ``run_options``, and the conventions of
every command in ``common``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from llmsched_gym.cli import bench, catalog, common, compare, run_options
from llmsched_gym.errors import ConfigError, LLMSchedError

_PROCESS_ENTRY = False  # set by main(): True when this is the process's own command line


def _cmd_simulate(args: argparse.Namespace) -> int:
    from llmsched_gym._gc import gc_paused

    # A short run building records of tens of thousands of requests. As the console script's
    # command the collector is already off (``_main``) and stays off: the process ends next.
    with gc_paused():
        return _simulate_and_write(args)


def _simulate_and_write(args: argparse.Namespace) -> int:
    from llmsched_gym.simulation import simulate

    schedule_log = common.check_output_file(args.schedule_log, "--schedule-log")
    timeline = common.check_output_file(args.timeline, "--timeline")
    output = common.OutputSet(args.out) if args.out else None
    if args.scenario is not None:
        scenario = run_options.load_scenario(args)
        if scenario.cluster is not None:  # many instances: llmsched_gym.cluster
            return _simulate_cluster_and_write(args, scenario, output, timeline)
    workload, settings, model, scheduler, _ = run_options.workload(args)

    def run() -> Any:
        return simulate(
            workload,
            settings,
            scheduler,
            model,
            fast_forward=args.fast_forward,
            schedule_log=schedule_log,
            record_steps=args.record_steps,
            limit=args.num_requests,
            progress=args.progress and sys.stderr.isatty(),
            timeline=timeline is not None,
        )

    def summary(result: Any) -> dict:
        return {
            "scheduler": result.scheduler,
            "cost_model": result.cost_model,
            "engine_config": result.config.to_dict(),
            "summary": {k: _jsonable(v) for k, v in result.summary.items()},
        }

    result, payload, written = _run_and_write(output, run, summary, args.format)
    _write_timeline(result, timeline)
    if args.json:
        common.print_json({**payload, "out": str(written) if written else None})
        return 0
    _print_summary(result)
    if schedule_log is not None:
        print(f"wrote the schedule log {schedule_log}")
    if timeline is not None:
        print(f"wrote the timeline {timeline} (open it in https://ui.perfetto.dev)")
    if written is not None:
        print(f"wrote {', '.join(_manifest_files(written))} to {written}/")
    return 0


def _write_timeline(result: Any, path: Path | None) -> None:
    """Writes the run's schedule timeline (``--timeline``), atomically."""
    if path is not None:
        from llmsched_gym.metrics.timeline import write_trace

        write_trace(result.timeline, path)


def _write_records(output: common.OutputSet, result: Any, fmt: str) -> None:
    """Writes a run's request, job and step records (and a cluster's instances) into the set.

    CSV of one engine's run goes straight from its numpy columns (``write_table``), so a plain
    ``simulate --out`` never imports pandas; the other records go through DataFrames.
    """
    from llmsched_gym.metrics.table import write_table

    def frame(df: Any, name: str) -> None:
        from llmsched_gym.metrics.io import write_frame

        write_frame(df, output.path(name))

    suffix = ".parquet" if fmt == "parquet" else ".csv"
    if suffix == ".csv":
        write_table(result.request_table, output.path("requests.csv"))
    else:
        frame(result.requests, f"requests{suffix}")
    if result.jobs is not None:
        frame(result.jobs, f"jobs{suffix}")
    instances = getattr(result, "instances", None)
    if instances is not None:
        frame(instances, f"instances{suffix}")
    step_table = getattr(result, "step_table", None)
    if suffix == ".csv" and step_table is not None:
        write_table(step_table, output.path("steps.csv"))
    elif result.steps is not None:
        steps = result.steps
        if isinstance(steps, list):  # a cluster: one frame per instance
            import pandas as pd

            steps = pd.concat(
                [f.assign(instance_id=i) for i, f in enumerate(steps)], ignore_index=True
            )
        frame(steps, f"steps{suffix}")


def _run_and_write(
    output: common.OutputSet | None, run: Any, summary: Any, fmt: str
) -> tuple[Any, dict, Path | None]:
    """Checks ``--out``, runs, and writes the records and summary.json as one set.

    Returns the result, its summary payload and the folder written (None without ``--out``);
    on an error or Ctrl-C the earlier set in ``--out`` stays as it was.
    """
    try:
        if output is not None:
            output.prepare()  # before the run: a bad --out fails in a second, not after it
        result = run()
        payload = summary(result)
        if output is None:
            return result, payload, None
        _write_records(output, result, fmt)
        output.path("summary.json").write_text(json.dumps(payload, indent=2) + "\n")
        return result, payload, output.commit("simulate")
    finally:
        if output is not None:
            output.discard()


def _manifest_files(folder: Path) -> list[str]:
    return json.loads((folder / common.MANIFEST).read_text())["files"]


def _simulate_cluster_and_write(
    args: argparse.Namespace,
    scenario: Any,
    output: common.OutputSet | None,
    timeline: Path | None = None,
) -> int:
    """``simulate --scenario`` for a scenario with a ``cluster`` section (issue 5).

    Writes requests, jobs, instances (per-instance table) and summary.json; engine flags apply
    to every instance. The cost model and schedule log are per instance, so those flags are
    refused.
    """
    from llmsched_gym.cluster import simulate_cluster

    if args.trace is not None or args.num_requests is not None:
        raise ConfigError(
            "--scenario sets the workload: drop --trace and --num-requests (use --set "
            "workload.num_requests=N to vary it)"
        )
    if args.cost_model is not None or args.schedule_log is not None:
        raise ConfigError(
            f"scenario {scenario.name} is a cluster: each instance names its cost model and "
            "keeps its own engine; drop --cost-model and --schedule-log (edit the cluster "
            "section of a copy of the scenario, or use --set cluster.KEY=VALUE)"
        )
    engine = run_options.engine_settings(args)

    def run() -> Any:
        return simulate_cluster(
            scenario,
            getattr(args, "scheduler", None),
            seed=args.seed,
            fast_forward=args.fast_forward,
            progress=args.progress and sys.stderr.isatty(),
            record_steps=args.record_steps,
            router=args.router,
            engine=engine,
            timeline=timeline is not None,
        )

    def summary(result: Any) -> dict:
        return {
            "scenario": scenario.name,
            "router": result.router,
            "instances": [
                {"name": n, "scheduler": sch, "cost_model": cm, "engine_config": c.to_dict()}
                for n, sch, cm, c in zip(
                    result.instances["name"],
                    result.schedulers,
                    result.cost_models,
                    result.configs,
                    strict=True,
                )
            ],
            "summary": {k: _jsonable(v) for k, v in result.summary.items()},
        }

    result, payload, written = _run_and_write(output, run, summary, args.format)
    _write_timeline(result, timeline)
    if args.json:
        common.print_json({**payload, "out": str(written) if written else None})
        return 0
    s = result.summary
    print(
        f"{scenario.name} | router {result.router} | {len(result.configs)} instances | "
        f"{s['num_requests']} requests | {result.num_steps} steps "
        f"({result.num_fast_forward_steps} fast-forwarded) | {result.wall_s:.2f} s wall"
    )
    _print_metrics(s, result.jobs)
    columns = ["name", "role", "gpu", "num_requests", "num_output_tokens", "busy_s",
               "utilization", "output_token_throughput"]  # fmt: skip
    print(common.format_frame(result.instances[columns].set_index("name")))
    if timeline is not None:
        print(f"wrote the timeline {timeline} (open it in https://ui.perfetto.dev)")
    if written is not None:
        print(f"wrote {', '.join(_manifest_files(written))} to {written}/")
    return 0


def _jsonable(v):
    try:
        import numpy as np

        if isinstance(v, np.generic):
            v = v.item()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(v, float) and v != v:
        return None
    return v


def _print_metrics(s: dict, jobs: Any = None) -> None:
    """The summary's headline metrics, one per line, and the jobs' SLO outcome if they have SLOs."""
    keys = [k for k in _SUMMARY_KEYS if k in s and not (isinstance(s[k], float) and s[k] != s[k])]
    if s.get("num_jobs") == 0:
        keys = [k for k in keys if k != "num_jobs"]
    width = max(len(k) for k in keys)
    for k in keys:
        print(f"  {k:<{width}}  {common.format_value(k, s[k])}")
    met = run_options.job_slo_outcome(jobs)
    if met is not None:
        print(f"  {'job_slo_met':<{width}}  {met[0]} of {met[1]} jobs with an SLO")


def _print_summary(result: Any) -> None:
    s = result.summary
    cfg = result.config
    print(
        f"{result.scheduler} | {result.cost_model} | {s['num_requests']} requests | "
        f"{result.num_steps} steps ({result.num_fast_forward_steps} fast-forwarded) | "
        f"{result.wall_s:.2f} s wall | num_gpu_blocks={cfg.num_gpu_blocks}"
    )
    note = run_options.refused_note(s, cfg)
    if note:
        print(note)
    _print_metrics(s, result.jobs)


_SUMMARY_KEYS = (
    "num_requests",
    "duration_s",
    "request_throughput",
    "output_token_throughput",
    "ttft_s_mean",
    "ttft_s_p50",
    "ttft_s_p99",
    "tpot_s_mean",
    "tpot_s_p99",
    "itl_s_p99",
    "e2e_s_mean",
    "e2e_s_p99",
    "goodput",
    "slo_attainment",
    "num_jobs",
    "job_latency_s_mean",
    "job_latency_s_p99",
    "num_preemptions",
    "prefix_cache_hit_rate",
    "kv_cache_usage_mean",
)


COMMANDS = (
    "simulate", "compare", "bench", "workloads", "calibrate", "validate", "envs", "list",
    "leaderboard", "counterfactual",
)  # fmt: skip
"""The top-level commands, in ``--help`` order."""
_DEFERRED = ("calibrate", "validate", "leaderboard", "counterfactual")
"""Commands whose parsers import modules no other command needs (built only when named)."""


def _command_in(argv: list[str]) -> str | None:
    """The command ``argv`` names, if it is a known one that defers nothing else's parser."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
        if arg in ("-h", "--help", "--version"):
            return None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI's argument parser: every command, or with ``command`` that one's parser.

    The parsers of the other commands in ``_DEFERRED`` are then left out, so a ``simulate``
    does not import what ``calibrate`` or ``leaderboard`` need (start-up time).
    """
    full = command is None
    from llmsched_gym import __version__
    from llmsched_gym.policies.registry import list_policies

    parser = argparse.ArgumentParser(
        prog="llmsched-gym",
        description="A vLLM-exact discrete-event simulator and gym for LLM-serving scheduling.",
    )
    parser.add_argument("--version", action="version", version=f"llmsched-gym {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sched_help = (
        "local scheduler: "
        + "; ".join(f"{k} ({v})" for k, v in list_policies(include_reference=False).items())
        + "; and the reference agents' (infermax:*, proserve*, relserve*, vllm-sp, hexgen-*: "
        "see 'llmsched-gym list schedulers')"
    )

    p = sub.add_parser(
        "simulate",
        help="simulate one trace under one scheduler and print its summary",
        description="Simulate a trace on one engine instance. The schedule log has one JSON line "
        "per engine step (step, time, scheduled, new, resumed, preempted, finished, "
        "num_free_blocks, num_running, num_waiting).",
    )
    run_options.add_run_args(p, run_options.DEFAULT_COST_MODEL)
    p.add_argument(
        "--scheduler", default="vllm-v1", metavar="NAME", help=f"default vllm-v1; {sched_help}"
    )
    p.add_argument(
        "--schedule-log", metavar="FILE", help="write the per-step schedule log (JSONL) here"
    )
    p.add_argument(
        "--timeline",
        metavar="FILE",
        help="write the schedule timeline here: Chrome trace-event JSON (gzip if FILE ends in "
        ".gz) for https://ui.perfetto.dev or chrome://tracing, with a slice per engine step, "
        "each request's waiting, prefill chunks, decode and preempted spans, and KV-block and "
        "queue counters; one process per instance (docs/timeline.md); replaces FILE; not with "
        "--async-scheduling",
    )
    p.add_argument(
        "--out", metavar="DIR", help="write requests.csv, summary.json (and steps.csv) here"
    )
    p.add_argument(
        "--record-steps", action="store_true", help="also record per-step rows (KV usage over time)"
    )
    p.add_argument(
        "--format",
        choices=("csv", "parquet"),
        default="csv",
        help="record file format (default csv)",
    )
    p.set_defaults(func=_cmd_simulate)

    compare.add_parser(sub, sched_help)
    bench.add_parser(sub)
    catalog.add_workloads_parser(sub)
    if full or command in ("calibrate", "validate"):
        from llmsched_gym.cli import calibrate

        calibrate.add_parsers(sub)
    catalog.add_envs_parser(sub)
    catalog.add_list_parser(sub)
    if full or command == "leaderboard":
        from llmsched_gym.leaderboard import cli as leaderboard_cli

        leaderboard_cli.add_parser(sub)
    if full or command == "counterfactual":
        from llmsched_gym.cli import counterfactual

        counterfactual.add_parser(sub)
    return parser


_ONE_THREAD = ("simulate", "compare")
"""Commands that run the simulator on one thread: numpy's OpenBLAS need not start its pool."""


def _one_blas_thread(command: str | None) -> None:
    """Ask OpenBLAS for one thread (unless the user set it) before numpy is first imported.

    OpenBLAS starts a thread per core when numpy is imported, and those threads spin: on the
    19,366-request run of ``llmsched-gym bench --vs-vidur`` they cost ~0.1 s CPU of ~1.2 s.
    The simulator's only BLAS calls are the summary's two dot products (ITL and KV-usage
    means); with one thread their sums no longer depend on the machine's core count.
    """
    if command in _ONE_THREAD and "numpy" not in sys.modules:
        import os

        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``llmsched-gym`` console script (``argv`` None: the process's own).

    Called as the process's entry point, it freezes the cyclic collector's objects on the way
    out: the interpreter's shutdown collection would otherwise walk everything a run left
    behind (tens of milliseconds after a large one) just before the process ends; ``simulate``
    likewise leaves the collector off after its run.
    """
    global _PROCESS_ENTRY
    _PROCESS_ENTRY = argv is None
    try:
        return _main(argv)
    finally:
        if argv is None:
            import gc

            gc.freeze()


def _unrecognized(parser: argparse.ArgumentParser, args: Any, extra: list[str]) -> None:
    """Exit with the usage of the (sub)command the arguments were for, and a "did you mean".

    argparse hands arguments no subcommand knows up to the top-level parser, whose usage lists
    the commands; a mistyped option of ``simulate`` should show ``simulate``'s own.
    """
    import difflib

    while True:  # the deepest subcommand the arguments chose
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, subs[0].dest, None) if subs else None
        if chosen not in (subs[0].choices if subs else {}):
            break
        parser = subs[0].choices[chosen]
    options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    first = next((e.split("=", 1)[0] for e in extra if e.startswith("-")), None)
    close = difflib.get_close_matches(first, options, n=1) if first else []
    hint = f" (did you mean {close[0]}?)" if close else ""
    parser.error(f"unrecognized arguments: {' '.join(extra)}{hint}")


def _main(argv: list[str] | None) -> int:
    command = _command_in(sys.argv[1:] if argv is None else argv)
    _one_blas_thread(command)
    if _PROCESS_ENTRY and command == "simulate":
        import gc

        # One run, then the process ends: no collection from here on. Re-enabling the collector
        # after the run would start one over everything it allocated (30-60 ms on a
        # 20k-request trace) just before the exit frees it.
        gc.disable()
    parser = build_parser(command)
    args, extra = parser.parse_known_args(argv)
    if extra:
        _unrecognized(parser, args, extra)
    committed = len(common.COMMITTED)
    try:
        return args.func(args)
    except (LLMSchedError, FileNotFoundError) as exc:
        print(f"llmsched-gym {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. piped into head: the reader has gone, so say nothing more
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # e.g. the disk filled up while writing: say what and where, in a line
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"llmsched-gym {args.command}: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Output sets are swapped in only when complete (a Ctrl-C waits for a swap to end): an
        # interruption leaves the old set, or the new one whole if it came after the swap.
        written = common.COMMITTED[committed:]
        what = (
            f"wrote {', '.join(f'{p}/' for p in written)} (complete) before it"
            if written
            else "no output written"
        )
        print(f"llmsched-gym {args.command}: interrupted; {what}", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
