"""``llmsched-gym``: simulate, compare schedulers, benchmark the simulator, list what ships.

Every engine option uses vLLM's name and meaning; ``--help`` on each command explains them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from llmsched_gym.config import EngineConfig
from llmsched_gym.errors import ConfigError, LLMSchedError

DEFAULT_COST_MODEL = "vidur:llama-2-70b@h100-80gb/tp4"
COMPARE_BATCHED_TOKENS = 16384
DEFAULT_TRACE = "splitwise-conv"
DEFAULT_SCHEDULERS = ("vllm-v1", "vllm-v0", "sarathi", "static-priority:shortest-prompt")

ENGINE_HELP = {
    "max_num_batched_tokens": "token budget of one engine step: prompt, chunk and decode tokens "
    "computed in one batch (vLLM --max-num-batched-tokens; default 8192)",
    "max_num_seqs": "most requests in the running queue at once (vLLM --max-num-seqs; default 256)",
    "block_size": "tokens per KV-cache block (vLLM --block-size; default 16)",
    "num_gpu_blocks": "KV-cache blocks including vLLM's reserved null block 0; default: derived "
    "from the cost profile's GPU memory, weights and gpu_memory_utilization=0.9 as vLLM does, "
    "else 8192",
    "enable_prefix_caching": "reuse full KV blocks across requests by chain hash with an LRU free "
    "queue (vLLM --enable-prefix-caching / --no-enable-prefix-caching; default on)",
    "scheduling_policy": "waiting-queue order: fcfs (preempted requests return to the head) or "
    "priority (lower 'priority' first, then arrival; vLLM --scheduling-policy; default fcfs)",
    "long_prefill_token_threshold": "cap on one request's new tokens per step when more than one "
    "request is running or waiting; 0 disables (vLLM --long-prefill-token-threshold)",
    "async_scheduling": "schedule step N+1 before step N's output is known, as vLLM's "
    "AsyncScheduler (vLLM --async-scheduling, its GPU default); default off: vLLM's "
    "synchronous scheduler",
}


def _add_engine_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine (vLLM names; flags override --engine-config)")
    g.add_argument(
        "--engine-config",
        metavar="FILE",
        help="JSON or YAML file with exactly these keys: " + ", ".join(EngineConfig.keys()),
    )
    for key in EngineConfig.keys():
        flag = "--" + key.replace("_", "-")
        if key in ("enable_prefix_caching", "async_scheduling"):
            g.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=None, help=ENGINE_HELP[key]
            )
        elif key == "scheduling_policy":
            g.add_argument(flag, choices=("fcfs", "priority"), default=None, help=ENGINE_HELP[key])
        else:
            g.add_argument(flag, type=int, default=None, metavar="N", help=ENGINE_HELP[key])


def _engine_settings(args: argparse.Namespace) -> dict:
    """Settings from --engine-config, overridden by explicit flags (unset keys stay unset)."""
    data = EngineConfig.read_settings(args.engine_config) if args.engine_config else {}
    data.update({k: getattr(args, k) for k in EngineConfig.keys() if getattr(args, k) is not None})
    EngineConfig.from_dict(data, source="engine settings")
    return data


def _add_run_args(p: argparse.ArgumentParser, cost_default: str) -> None:
    p.add_argument(
        "--trace",
        default=None,
        metavar="FILE|NAME",
        help="a trace-contract JSONL file, or a shipped real trace by name (see 'llmsched-gym "
        f"list traces'); default {DEFAULT_TRACE} (Azure 2023 conversations, 19,366 requests)",
    )
    p.add_argument(
        "--scenario",
        default=None,
        metavar="NAME|FILE",
        help="a scenario spec instead of --trace: its workload, engine settings, cost model, "
        "scheduler and SLOs (see 'llmsched-gym workloads'); flags given here override them",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="N",
        help="seed of the scenario's workload generator (default: the scenario's own)",
    )
    p.add_argument(
        "--cost-model",
        default=None,
        metavar="PROFILE",
        help="step-time model: a profile name (see 'llmsched-gym list profiles'), "
        "roofline:<model>@<gpu>[/tp<N>], a profile YAML path, or constant:SECONDS (every step "
        f"costs SECONDS; for tests and oracles); default: the scenario's, else {cost_default}",
    )
    p.add_argument(
        "--num-requests",
        type=int,
        default=None,
        metavar="N",
        help="use only the first N requests of the trace",
    )
    p.add_argument(
        "--no-fast-forward",
        dest="fast_forward",
        action="store_false",
        help="step every iteration one by one (results are identical; slower)",
    )
    p.add_argument(
        "--no-progress", dest="progress", action="store_false", help="hide the progress bar"
    )
    _add_engine_args(p)


def _workload(args: argparse.Namespace) -> tuple[Any, dict, Any, str, str]:
    """(trace or items, engine settings, cost model, scheduler, label) from --trace/--scenario.

    Without a scenario the trace stays a name or path (``simulate`` reads it); with one, its
    workload is built here and explicit flags override its engine settings, model and scheduler.
    """
    scheduler = getattr(args, "scheduler", None)
    if args.scenario is None:
        if args.seed is not None:
            raise ConfigError("--seed seeds a scenario's workload; give --scenario too")
        trace = args.trace or DEFAULT_TRACE
        model = args.cost_model or DEFAULT_COST_MODEL
        return trace, _engine_settings(args), model, scheduler or "vllm-v1", str(trace)
    if args.trace is not None or args.num_requests is not None:
        raise ConfigError(
            "--scenario sets the workload: drop --trace and --num-requests (copy the scenario "
            "YAML and change its workload to vary it)"
        )
    from llmsched_gym.cost.registry import load_cost_model
    from llmsched_gym.scenarios import load_scenario

    scenario = load_scenario(args.scenario)
    model = load_cost_model(args.cost_model or scenario.cost_model)
    items = scenario.build_workload(args.seed, cost_model=model)
    settings = {**scenario.engine, **_engine_settings(args)}
    EngineConfig.from_dict(settings, source=f"scenario {scenario.name} with flags")
    return items, settings, model, scheduler or scenario.scheduler, scenario.name


def _cmd_simulate(args: argparse.Namespace) -> int:
    from llmsched_gym._gc import gc_paused

    with gc_paused():  # a short process building records of tens of thousands of requests
        return _simulate_and_write(args)


def _simulate_and_write(args: argparse.Namespace) -> int:
    from llmsched_gym.simulation import simulate

    if args.scenario is not None:
        from llmsched_gym.scenarios import load_scenario

        scenario = load_scenario(args.scenario)
        if scenario.cluster is not None:  # many instances: llmsched_gym.cluster
            return _simulate_cluster_and_write(args, scenario)
    workload, settings, model, scheduler, _ = _workload(args)
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    result = simulate(
        workload,
        settings,
        scheduler,
        model,
        fast_forward=args.fast_forward,
        schedule_log=args.schedule_log,
        record_steps=args.record_steps,
        limit=args.num_requests,
        progress=args.progress and sys.stderr.isatty(),
    )
    if out is not None:
        suffix = ".parquet" if args.format == "parquet" else ".csv"
        if suffix == ".csv":  # straight from the numpy columns: no pandas on this path
            from llmsched_gym.metrics.table import write_table

            write_table(result.request_table, out / "requests.csv")
        else:
            from llmsched_gym.metrics.io import write_frame

            write_frame(result.requests, out / f"requests{suffix}")
        if result.steps is not None:
            from llmsched_gym.metrics.io import write_frame

            write_frame(result.steps, out / f"steps{suffix}")
        if result.jobs is not None:
            from llmsched_gym.metrics.io import write_frame

            write_frame(result.jobs, out / f"jobs{suffix}")
        from llmsched_gym.metrics._atomic import atomic_output

        with atomic_output(out / "summary.json") as tmp:
            payload = {
                "scheduler": result.scheduler,
                "cost_model": result.cost_model,
                "engine_config": result.config.to_dict(),
                "summary": {k: _jsonable(v) for k, v in result.summary.items()},
            }
            tmp.write_text(json.dumps(payload, indent=2) + "\n")
    _print_summary(result)
    return 0


def _simulate_cluster_and_write(args: argparse.Namespace, scenario: Any) -> int:
    """``simulate --scenario`` for a scenario with a ``cluster`` section (issue 5).

    Writes requests, jobs, instances (per-instance table) and summary.json; engine flags apply
    to every instance. The cost model and schedule log are per instance, so those flags are
    refused.
    """
    from llmsched_gym.cluster import simulate_cluster
    from llmsched_gym.metrics.io import write_frame

    if args.trace is not None or args.num_requests is not None:
        raise ConfigError(
            "--scenario sets the workload: drop --trace and --num-requests (copy the scenario "
            "YAML and change its workload to vary it)"
        )
    if args.cost_model is not None or args.schedule_log is not None:
        raise ConfigError(
            f"scenario {scenario.name} is a cluster: each instance names its cost model and "
            "keeps its own engine; drop --cost-model and --schedule-log (edit the cluster "
            "section of a copy of the scenario instead)"
        )
    result = simulate_cluster(
        scenario,
        getattr(args, "scheduler", None),
        seed=args.seed,
        fast_forward=args.fast_forward,
        progress=args.progress and sys.stderr.isatty(),
        record_steps=args.record_steps,
        engine=_engine_settings(args),
    )
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        suffix = ".parquet" if args.format == "parquet" else ".csv"
        if suffix == ".csv":
            from llmsched_gym.metrics.table import write_table

            write_table(result.request_table, out / "requests.csv")
        else:
            write_frame(result.requests, out / f"requests{suffix}")
        if result.jobs is not None:
            write_frame(result.jobs, out / f"jobs{suffix}")
        write_frame(result.instances, out / f"instances{suffix}")
        if result.steps is not None:
            import pandas as pd

            steps = [f.assign(instance_id=i) for i, f in enumerate(result.steps)]
            write_frame(pd.concat(steps, ignore_index=True), out / f"steps{suffix}")
        from llmsched_gym.metrics._atomic import atomic_output

        with atomic_output(out / "summary.json") as tmp:
            payload = {
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
            tmp.write_text(json.dumps(payload, indent=2) + "\n")
    s = result.summary
    print(
        f"{scenario.name} | router {result.router} | {len(result.configs)} instances | "
        f"{s['num_requests']} requests | {result.num_steps} steps "
        f"({result.num_fast_forward_steps} fast-forwarded) | {result.wall_s:.2f} s wall"
    )
    _print_metrics(s)
    columns = ["name", "role", "gpu", "num_requests", "num_output_tokens", "busy_s",
               "utilization", "output_token_throughput"]  # fmt: skip
    print(result.instances[columns].to_string(index=False, float_format="{:,.4g}".format))
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


def _print_metrics(s: dict) -> None:
    keys = [k for k in _SUMMARY_KEYS if k in s and not (isinstance(s[k], float) and s[k] != s[k])]
    width = max(len(k) for k in keys)
    for k in keys:
        v = s[k]
        print(f"  {k:<{width}}  {v:.4g}" if isinstance(v, float) else f"  {k:<{width}}  {v}")


def _print_summary(result) -> None:
    s = result.summary
    cfg = result.config
    print(
        f"{result.scheduler} | {result.cost_model} | {s['num_requests']} requests | "
        f"{result.num_steps} steps ({result.num_fast_forward_steps} fast-forwarded) | "
        f"{result.wall_s:.2f} s wall | num_gpu_blocks={cfg.num_gpu_blocks}"
    )
    _print_metrics(s)


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
    "num_preemptions",
    "prefix_cache_hit_rate",
    "kv_cache_usage_mean",
)


def _cmd_compare(args: argparse.Namespace) -> int:
    from llmsched_gym.metrics.io import write_frame
    from llmsched_gym.metrics.plots import plot_comparison
    from llmsched_gym.metrics.summary import compare
    from llmsched_gym.simulation import simulate
    from llmsched_gym.workloads.stats import flatten_requests
    from llmsched_gym.workloads.trace import load_trace

    workload, settings, model, _, label = _workload(args)
    specs = load_trace(workload, limit=args.num_requests) if isinstance(workload, str) else workload
    if "max_num_batched_tokens" not in settings:
        # vllm-v0 cannot chunk a prefill: give every scheduler the same budget, large enough
        # for the longest prompt of the shipped traces (14,050 tokens), as vLLM V0 required.
        longest = max(s.prompt_len + s.output_len for s in flatten_requests(specs))
        settings["max_num_batched_tokens"] = max(COMPARE_BATCHED_TOKENS, longest)
    results = {}
    for name in args.schedulers.split(","):
        res = simulate(
            specs,
            settings,
            name.strip(),
            model,
            fast_forward=args.fast_forward,
            progress=args.progress and sys.stderr.isatty(),
        )
        print(
            f"  {res.scheduler}: {res.num_steps} steps in {res.wall_s:.2f} s wall", file=sys.stderr
        )
        results[res.scheduler] = res
    table = compare({k: r.summary for k, r in results.items()})
    table = table.dropna(axis=1, how="all")  # e.g. goodput when the trace sets no SLOs
    import pandas as pd

    with pd.option_context("display.width", 160, "display.max_columns", 20, "display.precision", 4):
        print(
            f"workload {label} ({sum(1 for _ in flatten_requests(specs))} requests), cost model "
            f"{next(iter(results.values())).cost_model}, "
            f"num_gpu_blocks={next(iter(results.values())).config.num_gpu_blocks}"
        )
        print(table.to_string())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_frame(table.reset_index(), out / "comparison.csv")
    plot_comparison({k: r.requests for k, r in results.items()}, out / "comparison.png")
    print(f"wrote {out / 'comparison.csv'} and {out / 'comparison.png'}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.envs:
        from llmsched_gym.envs.bench import main as bench_envs

        bench_envs(["--limit", "300" if args.quick else "2000"])
        return 0
    from llmsched_gym.bench import run_bench

    run_bench(quick=args.quick)
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    if args.what in ("schedulers", "all"):
        from llmsched_gym.policies.registry import list_policies

        print("schedulers:")
        for k, v in list_policies().items():
            print(f"  {k:<34} {v}")
    if args.what in ("traces", "all"):
        from llmsched_gym.workloads.catalog import list_traces

        print("traces:")
        for k, v in list_traces().items():
            print(f"  {k:<24} {v}")
    if args.what in ("profiles", "all"):
        from llmsched_gym.cost.registry import list_profiles

        print("cost profiles:")
        for k in list_profiles():
            print(f"  {k}")
    return 0


def _cmd_workloads(args: argparse.Namespace) -> int:
    if args.action == "show":
        return _show_workload(args)
    from llmsched_gym.scenarios import WORKLOAD_KINDS, list_scenarios, load_scenario
    from llmsched_gym.scenarios.spec import validate_workload
    from llmsched_gym.workloads.catalog import list_traces, trace_info

    validate_workload({"kind": "grid", "num_requests": 1, "mix": "SISO"}, "probe")  # load kinds
    print("generators (scenario workload kinds):")
    for name, kind in WORKLOAD_KINDS.items():
        print(f"  {name:<10} {kind.description}")
        print(f"  {'':<10} parameters: {', '.join(kind.params)}")
    print("\ntraces (name: requests, arrivals; 'llmsched-gym workloads show NAME' for statistics):")
    for name in list_traces():
        info = trace_info(name)
        print(f"  {name:<24} {info.num_requests:>6} requests  {info.description.split(':')[0]}")
    print("\nscenarios (llmsched-gym simulate --scenario NAME):")
    for name, desc in list_scenarios().items():
        paper = load_scenario(name).paper
        print(f"  {name:<32} [{paper or 'chat'}] {desc}")
    return 0


def _show_workload(args: argparse.Namespace) -> int:
    import pandas as pd

    from llmsched_gym.workloads.catalog import list_traces
    from llmsched_gym.workloads.stats import (
        flatten_requests,
        job_stats,
        plot_length_histogram,
        workload_stats,
    )

    if args.name is None:
        raise ConfigError("workloads show needs a NAME: a shipped trace, a scenario or a file")
    name = args.name
    if name in list_traces() or (name.endswith(".jsonl") and Path(name).is_file()):
        from llmsched_gym.workloads.trace import load_trace

        items, label = list(load_trace(name)), f"trace {name}"
    else:
        from llmsched_gym.scenarios import load_scenario

        scenario = load_scenario(name)
        items = scenario.build_workload(args.seed)
        label = (
            f"scenario {scenario.name} (seed {scenario.seed if args.seed is None else args.seed})"
        )
    specs = flatten_requests(items)
    if not specs:
        raise ConfigError(f"{label} has no requests")
    stats = {**workload_stats(specs), **job_stats(items)}
    print(label)
    with pd.option_context("display.float_format", "{:,.4g}".format):
        print(pd.Series(stats, dtype=object).to_string())
    if args.plot:
        path = plot_length_histogram(specs, args.plot, title=label)
        print(f"wrote {path}")
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    if args.backend == "vllm":
        from llmsched_gym.cli import live as live_cli

        return live_cli.run_calibrate_vllm(args)
    if args.backend != "torch":
        raise ConfigError(f"calibrate: unknown backend {args.backend!r}")
    from llmsched_gym.cost import torch_fit
    from llmsched_gym.cost.registry import profile_file_stem

    out = Path(args.out)
    if args.from_dir:
        folders = [Path(d) for d in args.from_dir]
    else:
        from llmsched_gym.cost import torch_profile

        torch = torch_profile._import_torch()
        folders = []
        for cfg in torch_profile.configs_from_args(args, torch.cuda.is_available()):
            print(f"measuring {cfg.model} on {cfg.device} ...", flush=True)
            folders.append(torch_profile.run_profile(cfg, out / cfg.model, progress=True))
    for folder in folders:
        meas = torch_fit.load_measurements(folder)
        tf = torch_fit.fit_measurements(meas, seed=args.seed)
        stem = profile_file_stem(torch_fit.profile_name(meas)[0])
        dest = out if args.from_dir else folder
        written = torch_fit.write_fit_outputs(
            tf,
            Path(args.profile_dir or dest) / f"{stem}.yaml",
            Path(args.report_dir or dest) / f"{stem}.md",
            vidur_dir=args.vidur_dir,
        )
        h, c = tf.fit.heldout, tf.composition
        print(
            f"{meas.meta['model']}: {meas.steps.num_batches} measured steps; held-out MAPE "
            f"{h.mape_pct:.2f}% (max {h.max_ape_pct:.1f}%), operator composition MAPE "
            f"{c.mape_pct:.2f}%"
        )
        for kind, path in written.items():
            print(f"  {kind}: {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser."""
    from llmsched_gym.policies.registry import list_policies

    parser = argparse.ArgumentParser(
        prog="llmsched-gym",
        description="A vLLM-exact discrete-event simulator and gym for LLM-serving scheduling.",
    )
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
    _add_run_args(p, DEFAULT_COST_MODEL)
    p.add_argument("--scheduler", default="vllm-v1", metavar="NAME", help=sched_help)
    p.add_argument(
        "--schedule-log", metavar="FILE", help="write the per-step schedule log (JSONL) here"
    )
    p.add_argument(
        "--out", metavar="DIR", help="write requests.csv, summary.json (and steps.csv) here"
    )
    p.add_argument(
        "--record-steps", action="store_true", help="also record per-step rows (KV usage over time)"
    )
    p.add_argument("--format", choices=("csv", "parquet"), default="csv", help="record file format")
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser(
        "compare",
        help="simulate one trace under several schedulers; print a table and write a plot",
        description="The main job: run the built-in schedulers on a real shipped trace, print a "
        "comparison table, and write comparison.csv and comparison.png. Unless set, "
        f"max_num_batched_tokens is {COMPARE_BATCHED_TOKENS} (or the longest request) for every "
        "scheduler, because vllm-v0 cannot chunk prefills.",
    )
    _add_run_args(p, DEFAULT_COST_MODEL)
    p.add_argument(
        "--schedulers", default=",".join(DEFAULT_SCHEDULERS), metavar="A,B,...", help=sched_help
    )
    p.add_argument(
        "--out", default="out/compare", metavar="DIR", help="output folder (default out/compare)"
    )
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser(
        "bench",
        help="simulator speed on fixed workloads, fast-forward on and off",
        description="Prints simulated requests and steps per wall-second on fixed workloads, with "
        "fast-forward on and off and their ratio (figures go into BENCHMARKS.md).",
    )
    p.add_argument("--quick", action="store_true", help="smaller workloads (a smoke test)")
    p.add_argument(
        "--envs",
        action="store_true",
        help="instead: Gymnasium environment steps per second for each task on the chat scenario "
        "(first 2,000 requests) with a vLLM-equivalent and a random agent",
    )
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser(
        "workloads",
        help="list workload generators, traces and scenarios; show one's statistics",
        description="Without arguments: every workload generator (scenario kind), shipped trace "
        "and scenario with a one-line description. 'show NAME': a statistics table (counts, "
        "rates, prompt/output length percentiles, prefix-sharing ratio, jobs) of a trace, "
        "scenario or trace file, and optionally a length histogram.",
    )
    p.add_argument("action", nargs="?", default="list", choices=("list", "show"))
    p.add_argument("name", nargs="?", default=None, metavar="NAME", help="trace or scenario")
    p.add_argument("--plot", metavar="FILE", help="write a prompt/output length histogram here")
    p.add_argument("--seed", type=int, default=None, help="seed of a scenario's generator")
    p.set_defaults(func=_cmd_workloads)

    p = sub.add_parser(
        "calibrate",
        help="measure a model's engine steps on this machine and fit a cost profile",
        description=(
            "--backend vllm: drive a live vLLM engine (see .ci/setup_vllm_venv.sh) through a "
            "designed grid of batch compositions and fit the profile from its measured steps "
            "(options --vllm-*). --backend torch: build a Llama-style model from its config with "
            "random weights, time its operators and whole engine steps over a designed grid "
            "(CUDA graphs and events on a GPU, perf_counter on a CPU), fit the linear cost "
            "profile on 80%% of the measured steps, and report the held-out error by batch kind "
            "and token range, with a plot. --from DIR refits existing measurements "
            "(operators.csv, steps.csv, meta.json) without torch."
        ),
    )
    p.add_argument("--backend", choices=("torch", "vllm"), default="torch", help="what to measure")
    from llmsched_gym.cli import live as live_cli
    from llmsched_gym.cost import torch_profile

    torch_profile.add_arguments(p)
    live_cli.add_calibrate_vllm_args(p)
    p.add_argument(
        "--from",
        dest="from_dir",
        action="append",
        metavar="DIR",
        help="fit these measurement folders instead of measuring (repeatable)",
    )
    p.add_argument("--out", default="out/calibrate", metavar="DIR", help="output folder")
    p.add_argument("--profile-dir", metavar="DIR", help="write the profile YAML here instead")
    p.add_argument("--report-dir", metavar="DIR", help="write the report and plot here instead")
    p.add_argument(
        "--vidur-dir",
        metavar="DIR",
        help="Vidur's data/profiling folder, to cross-check operator times in the report",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the train / held-out split")
    p.set_defaults(func=_cmd_calibrate)
    live_cli.add_validate_parser(sub)

    p = sub.add_parser("list", help="list shipped traces, schedulers and cost profiles")
    p.add_argument(
        "what", nargs="?", default="all", choices=("all", "traces", "schedulers", "profiles")
    )
    p.set_defaults(func=_cmd_list)

    from llmsched_gym.leaderboard import cli as leaderboard_cli

    leaderboard_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``llmsched-gym`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (LLMSchedError, FileNotFoundError) as exc:
        print(f"llmsched-gym {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
