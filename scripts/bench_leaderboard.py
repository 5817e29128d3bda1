"""Benchmark: the leaderboard's evaluation serially and on a local Ray, in alternating runs.

Runs the job that regenerates every committed leaderboard (every task's baselines on its full
test split) with ``--workers 1`` and ``--workers 2``, alternating, ``--repeats`` times each, and
prints the wall times and the speed-up ratio of each pair. Also times ``evaluate vllm-v1 --suite
quick``. Figures go into BENCHMARKS.md.

    .venv/bin/python scripts/bench_leaderboard.py --repeats 2
"""

from __future__ import annotations

import argparse
import statistics
import time

from llmsched_gym.leaderboard.run import run_all
from llmsched_gym.leaderboard.suite import load_suite


def jobs(suite, quick: bool, policies: list[str] | None = None) -> list:
    """(policy, workload) pairs: every baseline of every task (or ``policies``)."""
    out = []
    for task in suite.tasks.values():
        names = task.baselines if policies is None else policies
        for w in suite.workloads("test", tasks=[task.name], quick=quick):
            for p in names:
                if policies is not None and task.interface == "router" and p == "vllm-v1":
                    continue
                out.append((p, w))
    return out


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="alternating pairs")
    parser.add_argument("--workers", type=int, default=2, help="Ray workers of the parallel run")
    args = parser.parse_args()
    suite = load_suite()
    quick = jobs(suite, True, ["vllm-v1"])
    t0 = time.perf_counter()
    run_all(suite, quick, progress=False)
    print(f"evaluate vllm-v1 --suite quick: {len(quick)} runs in {time.perf_counter() - t0:.1f} s")
    full = jobs(suite, False)
    ratios = []
    for i in range(args.repeats):
        t0 = time.perf_counter()
        serial = run_all(suite, full, progress=False)
        t_serial = time.perf_counter() - t0
        t0 = time.perf_counter()
        parallel = run_all(suite, full, workers=args.workers, progress=False)
        t_par = time.perf_counter() - t0
        assert [r["value"] for r in serial] == [r["value"] for r in parallel]
        ratios.append(t_serial / t_par)
        print(
            f"pair {i + 1}: {len(full)} runs (all baselines, full suite): serial {t_serial:.1f} s, "
            f"{args.workers} Ray workers {t_par:.1f} s (incl. Ray start), speed-up "
            f"{ratios[-1]:.2f}x"
        )
    print(f"median speed-up {statistics.median(ratios):.2f}x over {len(ratios)} pairs")


if __name__ == "__main__":
    main()
