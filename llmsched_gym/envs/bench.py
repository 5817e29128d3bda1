"""Environment throughput: env steps per wall second for each task (not a test).

    python -m llmsched_gym.envs.bench [--scenario chat-azure-conv-v0]
        [--route-scenario chat-azure-conv-4x-v0] [--limit 2000] [--task Priority ...]

Each task runs one episode with a heuristic agent (``PolicyAgent(vllm-v1)``, which makes every
episode equal to ``simulate``; Route: ``RouterAgent`` with the scenario's router, equal to
``simulate_cluster``), one with random valid actions drawn per step (``action_space.sample()``,
or a uniform choice among ``action_masks()``), and one, ``random-presampled``, whose random
numbers are drawn in batches of 1,024 steps up front (as EnvPool-style throughput benchmarks
do), so the row times the environment rather than the sampler; each after a warm-up reset (the
workload is cached). For scale it also times the bare engine on the same workload
(``simulate``, decision steps per second) and, for Route, the bare cluster
(``simulate_cluster``, routing decisions per second): an environment cannot be faster than the
simulator underneath it.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from gymnasium.spaces import Box, Discrete

from llmsched_gym.envs.adapters import PolicyAgent, RouterAgent
from llmsched_gym.envs.registration import CLUSTER_TASKS, TASKS
from llmsched_gym.tasks import task_spec
from llmsched_gym.policies.registry import make_policy
from llmsched_gym.scenarios.spec import load_scenario

_CHUNK = 1024
"""Steps per batch of pre-drawn random numbers (``random-presampled``)."""


def _episode(env: Any, agent: str, seed: int) -> tuple[int, float]:
    """One episode: (env steps, wall seconds of the stepping loop, agent included)."""
    obs, _ = env.reset(seed=seed)
    if getattr(env, "cluster_task", False):
        heuristic: Any = RouterAgent(env.scenario.cluster["router"])
    else:
        heuristic = PolicyAgent(make_policy("vllm-v1"))
    rng = np.random.default_rng(seed)
    env.action_space.seed(seed)
    masks = getattr(env, "action_masks", None)
    space = env.action_space
    presampled = agent == "random-presampled"
    draws: Any = None
    steps = 0
    t0 = time.perf_counter()
    done = False
    while not done:
        if presampled and steps % _CHUNK == 0:
            # Draws for the next _CHUNK steps in one call (timed too): uniform in [0, 1).
            shape = (_CHUNK, *space.shape) if isinstance(space, Box) else (_CHUNK,)
            draws = rng.random(shape).tolist()
        if agent == "heuristic":
            action = heuristic.act(env)
        elif presampled:
            u = draws[steps % _CHUNK]
            if masks is not None:  # a uniform valid choice among the candidates
                valid = np.flatnonzero(masks())
                action = int(valid[int(u * len(valid))])
            elif isinstance(space, Discrete):
                action = int(space.start) + int(u * int(space.n))
            elif isinstance(space, Box):  # uniform between its (finite) bounds
                action = space.low + (space.high - space.low) * np.asarray(u, space.dtype)
            else:
                action = space.sample()
        elif masks is not None:
            action = int(rng.choice(np.flatnonzero(masks())))
        else:
            action = env.action_space.sample()
        _, _, term, trunc, _ = env.step(action)
        steps += 1
        done = term or trunc
    return steps, time.perf_counter() - t0


AGENTS = ("heuristic", "random", "random-presampled")
"""Agents of every task's rows (see the module docstring)."""


def bench(
    scenario: str = "chat-azure-conv-v0",
    limit: int = 2000,
    tasks: list[str] | None = None,
    route_scenario: str = "chat-azure-conv-4x-v0",
) -> list[dict[str, Any]]:
    """Steps per second of each task's environment; one row per (task, agent)."""

    overrides = {"workload.limit": limit}
    chosen = tasks or [*TASKS, *CLUSTER_TASKS]
    rows = []
    if any(t in TASKS for t in chosen):
        sim = load_scenario(scenario, overrides).simulate(seed=0)
        n = sim.num_steps - sim.num_fast_forward_steps
        rows.append(
            {"task": "engine (simulate, vllm-v1)", "agent": "-", "steps": n,
             "steps_per_s": n / sim.wall_s}
        )  # fmt: skip
    if any(t in CLUSTER_TASKS for t in chosen):
        sc = load_scenario(route_scenario, overrides)
        sim = sc.simulate(seed=0)
        n = len(sim.request_table["request_id"])
        rows.append(
            {"task": f"cluster ({sc.cluster['router']})", "agent": "-", "steps": n,
             "steps_per_s": n / sim.wall_s}
        )  # fmt: skip
    for task in chosen:
        env_class = task_spec(task).env_class()
        env = env_class(
            route_scenario if task in CLUSTER_TASKS else scenario, scenario_overrides=overrides
        )
        env.reset(seed=0)  # warm the workload cache
        for agent in AGENTS:
            steps, wall = _episode(env, agent, 0)
            rows.append({"task": task, "agent": agent, "steps": steps, "steps_per_s": steps / wall})
    return rows


def main(argv: list[str] | None = None) -> None:
    """Print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="chat-azure-conv-v0")
    p.add_argument("--route-scenario", default="chat-azure-conv-4x-v0", help="Route's cluster")
    p.add_argument("--limit", type=int, default=2000, help="first N requests of the trace")
    p.add_argument("--task", action="append", choices=[*TASKS, *CLUSTER_TASKS], help="(repeatable)")
    args = p.parse_args(argv)
    rows = bench(args.scenario, args.limit, args.task, args.route_scenario)
    from llmsched_gym import _native

    print(f"core: {_native.core()} (python -m llmsched_gym.build_native status)")
    print(f"{'task':28s} {'agent':18s} {'env steps':>10s} {'steps/s':>10s}")
    for row in rows:
        print(f"{row['task']:28s} {row['agent']:18s} {row['steps']:10d} {row['steps_per_s']:10.0f}")


if __name__ == "__main__":
    main()
