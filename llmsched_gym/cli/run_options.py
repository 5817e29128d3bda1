"""Run options that ``simulate`` and ``compare`` share: workload, cost model, vLLM engine settings.

Both commands take the same arguments (``add_run_args``: ``--trace`` or ``--scenario``, ``--seed``,
``--cost-model``, ``--set`` and every vLLM engine flag) and read them the same way
(``workload``): a scenario's settings overridden by the flags given, vLLM's limits checked before
anything runs. They live here, apart from ``main``, so that each command's module uses them
without importing the entry point, and nothing here imports more than the parser needs.
"""

from __future__ import annotations

import argparse
from typing import Any

from llmsched_gym.cli import common
from llmsched_gym.config import CLI_COST_MODEL, EngineConfig
from llmsched_gym.errors import ConfigError

DEFAULT_COST_MODEL = CLI_COST_MODEL
DEFAULT_TRACE = "splitwise-conv"

VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128)
"""The ``--block-size`` choices of vLLM's own command line."""

ENGINE_HELP = {
    "max_num_batched_tokens": "token budget of one engine step: prompt, chunk and decode tokens "
    "computed in one batch (vLLM --max-num-batched-tokens; default "
    f"{EngineConfig.max_num_batched_tokens})",
    "max_num_seqs": "most requests in the running queue at once (vLLM --max-num-seqs; default "
    f"{EngineConfig.max_num_seqs})",
    "block_size": "tokens per KV-cache block, one of vLLM's sizes 1, 8, 16, 32, 64, 128 (vLLM "
    "--block-size; default 16; an --engine-config file may set any size, e.g. for tiny test "
    "engines)",
    "num_gpu_blocks": "KV-cache blocks including vLLM's reserved null block 0; default: derived "
    "from the cost profile's GPU memory, weights and gpu_memory_utilization=0.9 as vLLM does, "
    f"else {EngineConfig.num_gpu_blocks}",
    "enable_prefix_caching": "reuse full KV blocks across requests by chain hash with an LRU free "
    "queue (vLLM --enable-prefix-caching / --no-enable-prefix-caching; default on)",
    "scheduling_policy": "waiting-queue order: fcfs (preempted requests return to the head) or "
    "priority (lower 'priority' first, then arrival; vLLM --scheduling-policy; default fcfs)",
    "long_prefill_token_threshold": "cap on one request's new tokens per step when more than one "
    "request is running or waiting; 0 disables (vLLM --long-prefill-token-threshold; default 0)",
    "max_model_len": "longest request in tokens, prompt + max_tokens (vLLM --max-model-len); a "
    "longer request is refused with vLLM's message and the others are served; 'none' sets no "
    "limit; default: the cost profile's model's context length, as vLLM derives it (e.g. 4096 "
    "for Llama-2), else no limit",
    "long_prefill_token_threshold_adaptive": "raise long_prefill_token_threshold to "
    "max_num_batched_tokens // (running + waiting requests) when that is larger (vLLM "
    "--long-prefill-token-threshold-adaptive; default off; vllm-v1 scheduler only)",
    "enable_chunked_prefill": "split prompts into chunks that fill the step's token budget "
    "(vLLM --enable-chunked-prefill / --no-enable-chunked-prefill; default on); off: a waiting "
    "request is admitted only whole (vllm-v1 scheduler only)",
    "async_scheduling": "schedule step N+1 before step N's output is known, as vLLM's "
    "AsyncScheduler (vLLM --async-scheduling, its GPU default); default off: vLLM's "
    "synchronous scheduler",
}


def _add_engine_args(p: argparse.ArgumentParser, budget_help: str | None = None) -> None:
    g = p.add_argument_group("engine (vLLM names; flags override --engine-config)")
    g.add_argument(
        "--engine-config",
        metavar="FILE",
        help="JSON or YAML file with exactly these keys: " + ", ".join(EngineConfig.keys()),
    )
    for key in EngineConfig.keys():
        flag = "--" + key.replace("_", "-")
        if key in (
            "enable_prefix_caching",
            "async_scheduling",
            "enable_chunked_prefill",
            "long_prefill_token_threshold_adaptive",
        ):
            g.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=None, help=ENGINE_HELP[key]
            )
        elif key == "scheduling_policy":
            g.add_argument(flag, choices=("fcfs", "priority"), default=None, help=ENGINE_HELP[key])
        elif key == "max_model_len":
            g.add_argument(flag, type=_max_model_len, default=None, metavar="N|none",
                           help=ENGINE_HELP[key])  # fmt: skip
        elif key == "block_size":  # vLLM's CLI offers these sizes only
            g.add_argument(
                flag, type=int, choices=VLLM_BLOCK_SIZES, default=None, metavar="N",
                help=ENGINE_HELP[key],
            )  # fmt: skip
        else:
            text = budget_help if key == "max_num_batched_tokens" and budget_help else None
            g.add_argument(flag, type=int, default=None, metavar="N", help=text or ENGINE_HELP[key])


def _max_model_len(text: str) -> int | str:
    """``--max-model-len``: a positive integer, or ``none`` for no limit."""
    if text.strip().lower() in ("none", "null"):
        return "none"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer or 'none', got {text!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer or 'none', got {value}")
    return value


def engine_settings(args: argparse.Namespace) -> dict:
    """Settings from --engine-config, overridden by explicit flags (unset keys stay unset)."""
    data = EngineConfig.read_settings(args.engine_config) if args.engine_config else {}
    data.update({k: getattr(args, k) for k in EngineConfig.keys() if getattr(args, k) is not None})
    if data.get("max_model_len") == "none":  # explicitly no limit (not derived)
        data["max_model_len"] = None
    EngineConfig.from_dict(data, source="engine settings")
    return data


def add_run_args(
    p: argparse.ArgumentParser,
    cost_default: str,
    *,
    default_scenario: str | None = None,
    budget_help: str | None = None,
) -> None:
    """Adds the run arguments (workload, cost model, ``--set``, ``--json``, engine flags).

    ``default_scenario`` (``compare``'s) replaces the default trace in the help, and
    ``budget_help`` the help of ``--max-num-batched-tokens``.
    """
    trace_default = (
        f"default: the scenario {default_scenario}"
        if default_scenario
        else f"default {DEFAULT_TRACE} (Azure 2023 conversations, 19,366 requests)"
    )
    p.add_argument(
        "--trace",
        default=None,
        metavar="FILE|NAME",
        help="a trace-contract JSONL file, or a shipped real trace by name (see 'llmsched-gym "
        f"list traces'); {trace_default}",
    )
    p.add_argument(
        "--scenario",
        default=None,
        metavar="NAME|FILE",
        help="a scenario spec instead of --trace: its workload, engine settings, cost model, "
        "scheduler and SLOs (see 'llmsched-gym workloads'); flags given here override them"
        + (f"; default {default_scenario}" if default_scenario else "; default: none"),
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
        type=common.positive_int,
        default=None,
        metavar="N",
        help="use only the first N requests of the trace (default: all)",
    )
    common.add_set_argument(p)
    common.add_json_argument(p)
    p.add_argument(
        "--no-fast-forward",
        dest="fast_forward",
        action="store_false",
        help="step every iteration one by one (results are identical; slower; default: "
        "fast-forward on)",
    )
    p.add_argument(
        "--router",
        default=None,
        metavar="NAME",
        help="router of a cluster scenario's instances (e.g. round-robin, least-load:backlog; "
        "default: the scenario's)",
    )
    p.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="hide the progress bar (default: shown on a terminal)",
    )
    _add_engine_args(p, budget_help)


def workload(args: argparse.Namespace) -> tuple[Any, dict, Any, str, str]:
    """(trace or items, engine settings, cost model, scheduler, label) from --trace/--scenario.

    Without a scenario the trace stays a name or path (``simulate`` reads it); with one, its
    workload is built here and explicit flags override its engine settings, model and scheduler.
    """
    scheduler = getattr(args, "scheduler", None)
    if args.scenario is None:
        _no_scenario_flags(args)
        trace = args.trace or DEFAULT_TRACE
        model = args.cost_model or DEFAULT_COST_MODEL
        settings = engine_settings(args)
        EngineConfig.from_dict(settings).verify_vllm_limits()
        return trace, settings, model, scheduler or "vllm-v1", str(trace)
    if args.trace is not None or args.num_requests is not None:
        raise ConfigError(
            "--scenario sets the workload: drop --trace and --num-requests (copy the scenario "
            "YAML and change its workload to vary it)"
        )
    from llmsched_gym.cost.registry import load_cost_model

    scenario = load_scenario(args)
    if getattr(args, "router", None) is not None and scenario.cluster is None:
        raise ConfigError(
            f"--router: scenario {scenario.name} has no cluster section (one instance, nothing "
            "to route); drop --router"
        )
    model = load_cost_model(args.cost_model or scenario.cost_model)
    items = scenario.build_workload(args.seed, cost_model=model)
    settings = {**scenario.engine, **engine_settings(args)}
    source = f"scenario {scenario.name} with flags"
    EngineConfig.from_dict(settings, source=source).verify_vllm_limits(source)
    return items, settings, model, scheduler or scenario.scheduler, scenario.name


def _no_scenario_flags(args: argparse.Namespace) -> None:
    """Refuses the flags that only a scenario gives meaning to."""
    if args.seed is not None:
        raise ConfigError("--seed seeds a scenario's workload; give --scenario too")
    if getattr(args, "overrides", None):
        raise ConfigError("--set overrides a scenario's fields; give --scenario too")
    if getattr(args, "router", None) is not None:
        raise ConfigError("--router routes a cluster scenario's requests; give --scenario too")


def load_scenario(args: argparse.Namespace) -> Any:
    """The scenario of ``--scenario`` with the ``--set`` overrides applied."""
    from llmsched_gym.scenarios import load_scenario

    return load_scenario(args.scenario, common.parse_overrides(getattr(args, "overrides", [])))


def job_slo_outcome(jobs: Any) -> tuple[int, int] | None:
    """(jobs that met their end-to-end SLO, jobs with one), or None without job SLOs."""
    if jobs is None or "slo_met" not in getattr(jobs, "columns", ()):
        return None
    met = jobs["slo_met"].dropna()
    return (int(met.astype(bool).sum()), len(met)) if len(met) else None


def refused_note(summary: dict, cfg: Any) -> str:
    """One sentence on the requests refused as longer than ``max_model_len``; "" when none."""
    n = summary.get("num_refused", 0)
    if not n:
        return ""
    return (
        f"refused {n:,} requests longer than max_model_len={cfg.max_model_len:,} (prompt + "
        "max_tokens), as vLLM's server would (HTTP 400); --max-model-len N raises the limit, "
        "--max-model-len none lifts it"
    )
