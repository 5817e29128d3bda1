"""Benchmark: PPO training throughput on the Priority task with 1, 2 and 4 environments.

PPO (stable-baselines3) with the permutation-invariant ``RowScorePolicy`` learns for a fixed
number of environment steps on the overloaded chat scenario, with the environments in this
process (``DummyVecEnv``) or in worker processes (``SubprocVecEnv``, the recipe for a multi-core
machine), alternating the settings ``--repeats`` times; it prints environment steps per
wall-second (learning included) and each setting's ratio to one in-process environment.

    .venv/bin/python scripts/bench_training.py --steps 8192 --repeats 2
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import gymnasium as gym
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

import llmsched_gym  # noqa: F401 - registers the ids
from llmsched_gym.envs.sb3_policies import RowScorePolicy

ENV_ID = "llmsched/Priority-ChatSharegptOverload-v0"
KW = {"scenario_overrides": {"workload.num_requests": 300}}
SETTINGS = (("dummy", 1), ("subproc", 2), ("subproc", 4))


def rate(kind: str, n: int, steps: int) -> float:
    """Environment steps per wall-second of ``PPO.learn`` with ``n`` environments."""
    cls = DummyVecEnv if kind == "dummy" else SubprocVecEnv
    venv = cls([functools.partial(gym.make, ENV_ID, **KW) for _ in range(n)])
    venv.seed(0)
    model = PPO(RowScorePolicy, venv, n_steps=2048 // n, batch_size=256, seed=0, device="cpu")
    t0 = time.perf_counter()
    model.learn(steps)
    wall = time.perf_counter() - t0
    venv.close()
    return steps / wall


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[tuple[str, int], list[float]] = {s: [] for s in SETTINGS}
    for _ in range(args.repeats):
        for kind, n in SETTINGS:
            results[(kind, n)].append(rate(kind, n, args.steps))
    base = statistics.median(results[SETTINGS[0]])
    print(f"PPO + RowScorePolicy on {ENV_ID}, {args.steps} steps, median of {args.repeats}")
    for (kind, n), values in results.items():
        med = statistics.median(values)
        print(f"  {kind:>8} x{n}: {med:7.0f} env steps/s  ({med / base:.2f}x of dummy x1)")


if __name__ == "__main__":
    main()
