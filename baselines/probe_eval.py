"""Score trained submission folders on later *train* workloads: the yardstick between probes.

A probe (a short training run on one seed, ``train.py --no-eval``) must not be judged on test
workloads, or the recipe declared after it would be chosen by them. This script runs each
folder's policy deterministically, as the harness does, on ``--count`` train workloads taken
after the first ``--skip`` of the training cycle (a probe of N steps sees only the first few),
and prints each workload's ratio (the task's reference's metric over the policy's: vllm-v1's,
or round-robin's for Route) and their geometric mean.

    python baselines/probe_eval.py --task Select --scenario capped-overload --sources sharegpt \
        --skip 40 out/probes/sel-shaped/seed1 out/probes/sel-base/seed1
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train.py, beside this script


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    """Print and return each folder's ratios against the task's reference on train workloads."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", help="submission folders (train.py's seed folders)")
    ap.add_argument("--task", required=True, help="task, e.g. Select")
    ap.add_argument("--scenario", required=True, help="train scenario, e.g. capped-overload")
    ap.add_argument("--sources", required=True, help="comma-separated sources, e.g. sharegpt")
    ap.add_argument("--skip", type=int, default=40, help="train workloads to skip (default 40)")
    ap.add_argument("--count", type=int, default=6, help="workloads to score (default 6)")
    ap.add_argument("--suite", default="llmsched-v2")
    args = ap.parse_args(argv)
    if args.skip < 0 or args.count < 1:
        ap.error("--skip must be >= 0 and --count >= 1")

    from train import validation_ratios

    from llmsched_gym.errors import ConfigError
    from llmsched_gym.leaderboard.score import geometric_score
    from llmsched_gym.leaderboard.suite import load_suite
    from llmsched_gym.leaderboard.training import TrainWorkloads

    suite = load_suite(args.suite)
    train = TrainWorkloads(suite, args.task, [args.scenario], args.sources.split(","))
    workloads = list(itertools.islice(train.cycle(), args.skip, args.skip + args.count))
    try:
        out = validation_ratios(suite, args.task, args.folders, workloads)
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    for folder, ratios in out.items():
        geo = geometric_score(ratios).value
        print(f"{folder}: {' '.join(f'{x:.3f}' for x in ratios)}  geometric mean {geo:.3f}")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
