"""Environment throughput: env steps per wall second for each task (not a test).

    python -m llmsched_gym.envs.bench [--scenario chat-azure-conv-v0] [--limit 2000]

Each task runs one episode with a heuristic agent (``PolicyAgent(vllm-v1)``, which makes every
episode equal to ``simulate``) and one with random valid actions, after a warm-up reset (the
workload is cached). For scale it also times the bare engine on the same workload
(``simulate``, decision steps per second): the environment cannot be faster than the engine
underneath it.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from llmsched_gym.envs.adapters import PolicyAgent
from llmsched_gym.envs.registration import TASKS
from llmsched_gym.policies.registry import make_policy
from llmsched_gym.scenarios.spec import load_scenario


def _episode(env: Any, agent: str, seed: int) -> tuple[int, float]:
    obs, _ = env.reset(seed=seed)
    heuristic = PolicyAgent(make_policy("vllm-v1"))
    rng = np.random.default_rng(seed)
    env.action_space.seed(seed)
    masks = getattr(env, "action_masks", None)
    steps = 0
    t0 = time.perf_counter()
    done = False
    while not done:
        if agent == "heuristic":
            action = heuristic.act(env)
        elif masks is not None:
            action = int(rng.choice(np.flatnonzero(masks())))
        else:
            action = env.action_space.sample()
        _, _, term, trunc, _ = env.step(action)
        steps += 1
        done = term or trunc
    return steps, time.perf_counter() - t0


def bench(
    scenario: str = "chat-azure-conv-v0", limit: int = 2000, tasks: list[str] | None = None
) -> list[dict[str, Any]]:
    """Steps per second of each task's environment; one row per (task, agent)."""
    import importlib

    overrides = {"workload.limit": limit}
    rows = []
    sc = load_scenario(scenario, overrides)
    sim = sc.simulate(seed=0)
    rows.append(
        {
            "task": "engine (simulate, vllm-v1)",
            "agent": "-",
            "steps": sim.num_steps - sim.num_fast_forward_steps,
            "steps_per_s": (sim.num_steps - sim.num_fast_forward_steps) / sim.wall_s,
        }
    )
    for task in tasks or list(TASKS):
        module, cls = TASKS[task].split(":")
        env_class = getattr(importlib.import_module(module), cls)
        env = env_class(scenario, scenario_overrides=overrides)
        env.reset(seed=0)  # warm the workload cache
        for agent in ("heuristic", "random"):
            steps, wall = _episode(env, agent, 0)
            rows.append({"task": task, "agent": agent, "steps": steps, "steps_per_s": steps / wall})
    return rows


def main(argv: list[str] | None = None) -> None:
    """Print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="chat-azure-conv-v0")
    p.add_argument("--limit", type=int, default=2000, help="first N requests of the trace")
    p.add_argument("--task", action="append", choices=list(TASKS), help="(repeatable)")
    args = p.parse_args(argv)
    print(f"{'task':28s} {'agent':10s} {'env steps':>10s} {'steps/s':>10s}")
    for row in bench(args.scenario, args.limit, args.task):
        print(f"{row['task']:28s} {row['agent']:10s} {row['steps']:10d} {row['steps_per_s']:10.0f}")


if __name__ == "__main__":
    main()
