"""``llmsched-gym workloads``, ``envs`` and ``list``: what ships with the package.

Workload generators, traces and scenarios (with one's statistics and length histogram), the
registered Gymnasium environments with their spaces, and the schedulers and cost profiles by
name. They are read-only listings, apart from ``main`` so that the entry point holds only the
parser and ``simulate``; each imports what it lists only when it runs (``envs`` imports
Gymnasium, which no other command needs).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from llmsched_gym.cli import common
from llmsched_gym.errors import ConfigError


def add_workloads_parser(sub: Any) -> None:
    """The ``workloads`` command: list the workloads, or show one's statistics."""
    p = sub.add_parser(
        "workloads",
        help="list workload generators, traces and scenarios; show one's statistics",
        description="Without arguments: every workload generator (scenario kind), shipped trace "
        "and scenario with a one-line description. 'show NAME': a statistics table (counts, "
        "rates, prompt/output length percentiles, prefix-sharing ratio, jobs) of a trace, "
        "scenario or trace file, and optionally a length histogram.",
    )
    p.add_argument(
        "action",
        nargs="?",
        default="list",
        choices=("list", "show"),
        help="list everything, or show one NAME's statistics (default list)",
    )
    p.add_argument("name", nargs="?", default=None, metavar="NAME", help="trace or scenario")
    p.add_argument("--plot", metavar="FILE", help="write a prompt/output length histogram here")
    p.add_argument(
        "--seed", type=int, default=None, help="seed of a scenario's generator (default: its own)"
    )
    common.add_set_argument(p)
    p.set_defaults(func=_cmd_workloads)


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
    from llmsched_gym.workloads.catalog import list_traces
    from llmsched_gym.workloads.stats import (
        flatten_requests,
        job_stats,
        plot_length_histogram,
        workload_stats,
    )

    if args.name is None:
        raise ConfigError("workloads show needs a NAME: a shipped trace, a scenario or a file")
    common.check_output_file(args.plot, "--plot")
    name = args.name
    if name in list_traces() or (name.endswith(".jsonl") and Path(name).is_file()):
        from llmsched_gym.workloads.trace import load_trace

        if args.overrides:
            raise ConfigError(f"--set overrides a scenario's fields; {name} is a trace")
        items, label = list(load_trace(name)), f"trace {name}"
    else:
        from llmsched_gym.scenarios import load_scenario

        scenario = load_scenario(name, common.parse_overrides(args.overrides))
        items = scenario.build_workload(args.seed)
        label = (
            f"scenario {scenario.name} (seed {scenario.seed if args.seed is None else args.seed})"
        )
    specs = flatten_requests(items)
    if not specs:
        raise ConfigError(f"{label} has no requests")
    stats = {**workload_stats(specs), **job_stats(items)}
    print(label)
    width = max(len(k) for k in stats)
    for key, value in stats.items():
        print(f"{key:<{width}}  {common.format_value(key, value):>14}")
    if args.plot:
        path = plot_length_histogram(specs, args.plot, title=label)
        print(f"wrote {path}")
    return 0


def add_envs_parser(sub: Any) -> None:
    """The ``envs`` command: the registered Gymnasium ids."""
    p = sub.add_parser(
        "envs",
        help="list the registered Gymnasium environment ids with task, scenario and spaces",
    )
    common.add_json_argument(p)
    p.set_defaults(func=_cmd_envs)


def _cmd_envs(args: argparse.Namespace) -> int:
    """Lists the registered Gymnasium ids with their task, scenario and spaces."""
    import gymnasium as gym

    import llmsched_gym  # noqa: F401 - registers the ids
    from llmsched_gym.envs.registration import _pairs, env_id

    rows = []
    for task, scenario, _ in _pairs():
        eid = env_id(task, scenario)
        env = gym.make(eid)
        try:
            rows.append(
                {
                    "id": eid,
                    "task": task,
                    "scenario": scenario,
                    "observation_space": _space_text(env.observation_space),
                    "action_space": _space_text(env.action_space),
                }
            )
        finally:
            env.close()
    if args.json:
        common.print_json(rows)
        return 0
    print(f"{len(rows)} environments (gym.make(ID); 'import llmsched_gym' registers them):")
    width = max(len(r["id"]) for r in rows)
    for r in rows:
        print(f"  {r['id']:<{width}}  {r['task']:<9} {r['scenario']}")
        print(f"  {'':<{width}}  observation {r['observation_space']}; action {r['action_space']}")
    return 0


def _space_text(space: Any) -> str:
    """A one-line summary of a Gymnasium space: kind and shape, sub-spaces by name."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return "Dict(" + ", ".join(f"{k}: {_space_text(v)}" for k, v in space.items()) + ")"
    if isinstance(space, spaces.Discrete):
        return f"Discrete({space.n})"
    if isinstance(space, spaces.MultiBinary):
        return f"MultiBinary({space.n})"
    shape = "x".join(str(d) for d in getattr(space, "shape", ()) or ())
    return f"{type(space).__name__}({shape})"


def add_list_parser(sub: Any) -> None:
    """The ``list`` command: shipped traces, schedulers and cost profiles."""
    p = sub.add_parser("list", help="list shipped traces, schedulers and cost profiles")
    p.add_argument(
        "what",
        nargs="?",
        default="all",
        choices=("all", "traces", "schedulers", "profiles"),
        help="what to list (default all)",
    )
    p.set_defaults(func=_cmd_list)


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
        from llmsched_gym.cost.hardware import list_gpus, list_models
        from llmsched_gym.cost.registry import list_profiles

        print(
            "cost profiles (--cost-model NAME): fitted linear models of one engine step's time "
            "over batch features, from real operator timings (vidur:*) or from "
            "'llmsched-gym calibrate' (torch:*):"
        )
        for k in list_profiles():
            print(f"  {k}")
        print(
            "roofline profiles (--cost-model roofline:<model>@<gpu>[/tp<N>]): analytic, from "
            "datasheet FLOPs and memory bandwidth, for any pair of"
        )
        print(f"  models: {', '.join(list_models())}")
        print(f"  GPUs:   {', '.join(list_gpus())}")
        print("constant:SECONDS: every step costs SECONDS (for tests and oracles)")
    return 0
