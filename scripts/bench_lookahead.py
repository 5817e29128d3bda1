"""Benchmark: what the lookahead oracle costs per decision, and what it gains over its base.

Runs ``llmsched_gym.lookahead.LookaheadAgent`` in the task's environment on llmsched-v1 test
workloads (the quick subset's first ``--workloads`` of each task), and the base policy alone on
the same workload, and prints one Markdown row per run: decisions, forks, wall and CPU seconds,
decisions and forks per CPU second, and the base's total latency over the agent's (the
leaderboard's ratio when the base is the task's reference).

    .venv/bin/python scripts/bench_lookahead.py --task Preempt --task Priority --workloads 2
    .venv/bin/python scripts/bench_lookahead.py --task Route --horizon 2 --workloads 1
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import time

from llmsched_gym.envs.adapters import rollout
from llmsched_gym.leaderboard.suite import TASK_ENVS, load_suite
from llmsched_gym.lookahead import TASKS, LookaheadAgent


def run(task: str, workload: object, horizon_s: float | None) -> dict:
    """One workload: the base alone, then the agent; their returns and the agent's cost."""
    module, _, cls = TASK_ENVS[task].partition(":")
    env_class = getattr(importlib.import_module(module), cls)
    env = env_class(scenario=dataclasses.replace(workload.scenario(), seed=0))
    agent = LookaheadAgent(task, horizon_s=horizon_s)
    base = rollout(env, agent.base_agent(), seed=workload.seed)
    wall, cpu = time.perf_counter(), time.process_time()
    mine = rollout(env, agent, seed=workload.seed)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "workload": workload.id,
        "base": agent.base,
        "horizon_s": "end" if horizon_s is None else f"{horizon_s:g}",
        **agent.stats,
        "wall_s": wall,
        "cpu_s": cpu,
        "decisions_per_cpu_s": agent.stats["decisions"] / cpu,
        "forks_per_cpu_s": agent.stats["forks"] / cpu,
        "base_over_agent": base["return"] / mine["return"],
    }


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the benchmark; print and return the rows."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", action="append", choices=TASKS, required=True)
    ap.add_argument("--horizon", type=float, default=None, help="seconds (default: the end)")
    ap.add_argument("--workloads", type=int, default=1, help="quick-subset workloads per task")
    args = ap.parse_args(argv)
    suite = load_suite("llmsched-v1")
    keys = ["workload", "base", "horizon_s", "decisions", "forks", "left_base", "wall_s",
            "cpu_s", "decisions_per_cpu_s", "forks_per_cpu_s", "base_over_agent"]  # fmt: skip
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    rows = []
    for task in args.task:
        for w in suite.workloads("test", tasks=[task], quick=True)[: args.workloads]:
            row = run(task, w, args.horizon)
            rows.append(row)
            cells = [f"{row[k]:.4g}" if isinstance(row[k], float) else str(row[k]) for k in keys]
            print("| " + " | ".join(cells) + " |", flush=True)
    return rows


if __name__ == "__main__":
    main()
