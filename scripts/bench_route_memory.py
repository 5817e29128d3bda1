"""Benchmark: the Route environment's memory over many steps (issue 29: it must stay flat).

Steps ``llmsched/Route-ChatAzureConv4x-v0`` (four instances, the scenario's whole workload an
episode by default) with random valid actions, resetting at every episode end with a fresh
seed (so every episode builds a new workload: the worst case for the workload cache), and
prints the process's current RSS every ``--every`` steps, then the growth from the first sample
after warm-up to the last.

    .venv/bin/python scripts/bench_route_memory.py --steps 1000000
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import gymnasium as gym
import numpy as np

import llmsched_gym  # noqa: F401 - registers the ids

ENV_ID = "llmsched/Route-ChatAzureConv4x-v0"


def rss_mb() -> float:
    """The process's resident set size now, MiB (``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def main(argv: list[str] | None = None) -> list[tuple[int, float]]:
    """Step the environment, sampling RSS; returns (steps, MiB) samples."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--every", type=int, default=50_000, help="sample RSS every N steps")
    ap.add_argument(
        "--max-requests", type=int, default=0, help="requests per episode (0: the whole workload)"
    )
    ap.add_argument("--env", default=ENV_ID)
    args = ap.parse_args(argv)

    env = gym.make(args.env, max_requests=args.max_requests or None).unwrapped
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    samples = [(0, rss_mb())]
    episodes = 1
    t0 = time.perf_counter()
    print(f"{'steps':>9} {'episodes':>9} {'RSS MiB':>8} {'steps/s':>8}")
    for step in range(1, args.steps + 1):
        allowed = np.flatnonzero(env.action_masks())
        action = int(allowed[rng.integers(len(allowed))]) if len(allowed) else 0
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()  # a fresh seed: a new workload every episode
            episodes += 1
        if step % args.every == 0:
            samples.append((step, rss_mb()))
            rate = step / (time.perf_counter() - t0)
            print(f"{step:>9} {episodes:>9} {samples[-1][1]:>8.1f} {rate:>8.0f}", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    base = samples[1][1] if len(samples) > 2 else samples[0][1]
    print(
        f"RSS {samples[0][1]:.1f} MiB after the first reset, {base:.1f} at {samples[1][0]:,} "
        f"steps, {samples[-1][1]:.1f} at {samples[-1][0]:,} (growth after warm-up "
        f"{samples[-1][1] - base:+.1f} MiB); peak {peak:.1f} MiB"
    )
    return samples


if __name__ == "__main__":
    main(sys.argv[1:])
