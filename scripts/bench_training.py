r"""Benchmark: training throughput, in two modes.

``throughput`` (the default): PPO (stable-baselines3) with the permutation-invariant
``RowScorePolicy`` learns for a fixed number of environment steps on the overloaded chat
scenario, with the environments in this process (``DummyVecEnv``), in worker processes
(``SubprocVecEnv``, the recipe for a multi-core machine) or in the project's native vector env
behind ``SB3VecEnv`` (one policy forward for all of them), alternating the settings
``--repeats`` times; it prints environment steps per wall-second (learning included) and each
setting's ratio to one in-process environment.

    .venv/bin/python scripts/bench_training.py --steps 8192 --repeats 2

``recipes``: the CPU-seconds per 100k environment steps of recipes (``baselines/train.py
<config> --timesteps N --no-eval``, one process per run) in two checkouts, alternating them
(old, new, old, new, ...) so that both see the same machine load. The CPU time is the whole
child process's (user + system, from ``getrusage``: start-up and imports included) and, beside
it, the training's own (``train.json``'s ``cpu_s``: building the environments and
``model.learn``). Issue 40's comparison (the other checkout is a ``git worktree`` of the old
commit with its compiled core built):

    .venv/bin/python scripts/bench_training.py recipes --old /tmp/wt-old --steps 30720 \
        --repeats 2 ppo-priority-shaped maskable-ppo-select-shaped maskable-ppo-route-t2s

``snippet``: the README's PPO snippet (the recipe's settings on ``SB3VecEnv``, 8 envs) against
SB3's defaults on one environment, CPU-seconds per 100k steps (``--steps 8192``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

import llmsched_gym  # noqa: F401 - registers the ids (also in SubprocVecEnv's workers)
from llmsched_gym.envs.sb3_policies import RowScorePolicy
from llmsched_gym.envs.sb3_vec import SB3VecEnv

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "llmsched/Priority-ChatSharegptOverload-v0"
KW = {"scenario_overrides": {"workload.num_requests": 300}}
SETTINGS = (("dummy", 1), ("subproc", 2), ("subproc", 4), ("native", 4))


def rate(kind: str, n: int, steps: int) -> float:
    """Environment steps per wall-second of ``PPO.learn`` with ``n`` environments."""
    if kind == "native":
        venv = SB3VecEnv(gym.make_vec(ENV_ID, num_envs=n, **KW))
    else:
        cls = DummyVecEnv if kind == "dummy" else SubprocVecEnv
        venv = cls([functools.partial(gym.make, ENV_ID, **KW) for _ in range(n)])
    venv.seed(0)
    model = PPO(RowScorePolicy, venv, n_steps=2048 // n, batch_size=256, seed=0, device="cpu")
    t0 = time.perf_counter()
    model.learn(steps)
    wall = time.perf_counter() - t0
    venv.close()
    return steps / wall


def throughput(args: argparse.Namespace) -> None:
    """Print the vector-env table."""
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


def snippet(args: argparse.Namespace) -> None:
    """CPU-s per 100k steps of the README's PPO snippet, and of SB3's defaults on one env."""
    torch.set_num_threads(1)
    for mode in ("recipe", "defaults"):
        t0 = time.process_time()
        if mode == "defaults":
            model = PPO(RowScorePolicy, gym.make(ENV_ID), seed=0, device="cpu")
        else:
            venv = SB3VecEnv(gym.make_vec(ENV_ID, num_envs=8))
            model = PPO(
                RowScorePolicy, venv, n_steps=256, batch_size=256, gamma=1.0, use_sde=True,
                sde_sample_freq=-1, policy_kwargs={"log_std_init": -1.0}, seed=0, device="cpu",
            )  # fmt: skip
        model.learn(args.steps)
        cpu = time.process_time() - t0
        print(f"{mode}: {cpu * 100_000 / args.steps:.0f} CPU-s per 100k steps (set-up included)")


def run_recipe(tree: Path, config: Path, steps: int) -> tuple[float, float]:
    """(whole-process CPU-s, train.json's cpu_s) of one ``train.py`` run in checkout ``tree``."""
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        cmd = [sys.executable, "baselines/train.py", str(config), "--timesteps", str(steps)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(
            [*cmd, "--no-eval", "--out", out],
            cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        record = json.loads((Path(out) / "seed0" / "train.json").read_text())
    whole = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return whole, float(record["cpu_s"])


def recipes(args: argparse.Namespace) -> None:
    """Print CPU-s per 100k steps of each recipe in both checkouts, alternating them."""
    trees = {"old": Path(args.old).resolve(), "new": ROOT}
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    print(f"load average before: {os.getloadavg()}", flush=True)
    for rep in range(args.repeats):
        for name in args.recipe:
            config = ROOT / "baselines" / "configs" / f"{name}.yaml"
            for label, tree in trees.items():
                whole, train = run_recipe(tree, config, args.steps)
                runs.setdefault((name, label), []).append((whole, train))
                scale = 100_000 / args.steps
                print(
                    f"  repeat {rep} {name:28s} {label}: {whole * scale:7.1f} CPU-s/100k "
                    f"(train {train * scale:6.1f}); load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    scale = 100_000 / args.steps
    print(f"\n{args.steps} steps per run, median of {args.repeats}, CPU-s per 100k steps")
    print("| recipe | old (whole / train) | new (whole / train) | ratio whole | ratio train |")
    print("|---|---:|---:|---:|---:|")
    for name in args.recipe:
        old = [statistics.median(x) * scale for x in zip(*runs[(name, "old")], strict=True)]
        new = [statistics.median(x) * scale for x in zip(*runs[(name, "new")], strict=True)]
        print(
            f"| {name} | {old[0]:.1f} / {old[1]:.1f} | {new[0]:.1f} / {new[1]:.1f} | "
            f"{old[0] / new[0]:.2f}x | {old[1] / new[1]:.2f}x |"
        )
    print(f"load average after: {os.getloadavg()}")


def main() -> None:
    """Parse the arguments and run the chosen mode."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode")
    parser.add_argument("--steps", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=2)
    rec = sub.add_parser("recipes", help="CPU-s per 100k steps of recipes, old against new")
    rec.add_argument("recipe", nargs="+", help="config names under baselines/configs/")
    rec.add_argument("--old", required=True, help="the other checkout (its compiled core built)")
    rec.add_argument("--steps", type=int, default=30720)
    rec.add_argument("--repeats", type=int, default=2)
    snip = sub.add_parser("snippet", help="the README's PPO snippet against SB3's defaults")
    snip.add_argument("--steps", type=int, default=8192)
    args = parser.parse_args()
    if args.mode == "recipes":
        recipes(args)
    elif args.mode == "snippet":
        snippet(args)
    else:
        throughput(args)


if __name__ == "__main__":
    main()
