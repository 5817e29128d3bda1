"""Benchmark: random-policy env steps per CPU-second of every step task on its training scenario.

Each task's ``TrainWorkloadEnv`` (suite ``llmsched-v2``, the train groups its recipe or, without
one, its overloaded scenario uses) runs ``--steps`` steps with uniformly random valid actions,
resets included (the workloads it cycles through are built on the way, as in training). CPU time
is ``time.process_time``; the reset share is printed beside.

    python scripts/bench_step_tasks.py --steps 5000 [--task Route-t2s ...] [--suite llmsched-v1]

It imports only what older checkouts have too, so ``PYTHONPATH=<old checkout>`` times those.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from gymnasium.spaces import Box

import llmsched_gym  # noqa: F401 - registers the ids
from llmsched_gym.leaderboard.suite import load_suite
from llmsched_gym.leaderboard.training import TrainWorkloadEnv, TrainWorkloads

ROWS_V1 = {
    "Priority": ("Priority", ["chat-overload"], ["sharegpt", "azure-conv"]),
    "Select": ("Select", ["capped-overload"], ["sharegpt"]),
    "Preempt": ("Preempt", ["kv-overload"], ["sharegpt"]),
    "BatchType": ("BatchType", ["relquery-knee"], ["relq-rotten"]),
    "Knob": ("Knob", ["arxiv-knee"], ["arxiv-train"]),
    "Route-chat": ("Route", ["chat4x-overload"], ["azure-conv-4x"]),
    "Route-t2s": ("Route", ["text2sql-knee"], ["t2s-trace3"]),
}
"""The same rows on ``llmsched-v1`` (the recipes' suite; Preempt's scenario is ``kv-*`` there)."""

ROWS = {
    "Priority": ("Priority", ["chat-overload"], ["sharegpt", "azure-conv"]),
    "Select": ("Select", ["capped-overload"], ["sharegpt"]),
    "Preempt": ("Preempt", ["kv513-overload"], ["sharegpt-8k"]),
    "BatchType": ("BatchType", ["relquery-knee"], ["relq-rotten"]),
    "Knob": ("Knob", ["arxiv-knee"], ["arxiv-train"]),
    "Route-chat": ("Route", ["chat4x-overload"], ["azure-conv-4x"]),
    "Route-t2s": ("Route", ["text2sql-knee"], ["t2s-trace3"]),
}
"""Row name: (task, train scenarios, train sources), as the recipes in baselines/configs."""


def run(name: str, steps: int, suite: str = "llmsched-v2", seed: int = 0) -> dict[str, float]:
    """CPU seconds of ``steps`` random steps (and of the resets among them) on row ``name``."""
    task, scenarios, sources = (ROWS if suite == "llmsched-v2" else ROWS_V1)[name]
    t0 = time.process_time()
    env = TrainWorkloadEnv(TrainWorkloads(load_suite(suite), task, scenarios, sources))
    build = time.process_time() - t0
    rng = np.random.default_rng(seed)
    space = env.action_space
    masks = getattr(env.env, "action_masks", None)
    reset_s = 0.0
    t0 = time.process_time()
    env.reset(seed=seed)
    reset_s += time.process_time() - t0
    episodes = 0
    start = time.process_time()
    for _ in range(steps):
        if masks is not None:
            action: object = int(rng.choice(np.flatnonzero(env.action_masks())))
        elif isinstance(space, Box):
            action = rng.uniform(space.low, space.high).astype(space.dtype)
        else:
            action = int(rng.integers(space.n))
        _, _, term, trunc, _ = env.step(action)
        if term or trunc:
            episodes += 1
            t1 = time.process_time()
            env.reset()
            reset_s += time.process_time() - t1
    cpu = time.process_time() - start
    return {"cpu_s": cpu, "reset_s": reset_s, "episodes": episodes, "build_s": build}


def main() -> None:
    """Print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--task", action="append", choices=list(ROWS), help="(repeatable)")
    p.add_argument("--suite", default="llmsched-v2", choices=["llmsched-v2", "llmsched-v1"])
    args = p.parse_args()
    print(f"{'row':12s} {'steps':>6s} {'episodes':>8s} {'CPU s':>7s} {'resets s':>8s} "
          f"{'steps/CPU-s':>11s} {'excl. resets':>12s}")  # fmt: skip
    for name in args.task or list(ROWS):
        r = run(name, args.steps, args.suite)
        step_s = max(r["cpu_s"] - r["reset_s"], 1e-9)
        print(
            f"{name:12s} {args.steps:6d} {r['episodes']:8d} {r['cpu_s']:7.2f} {r['reset_s']:8.2f} "
            f"{args.steps / r['cpu_s']:11.0f} {args.steps / step_s:12.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
