"""Benchmark: async scheduling against sync in engine steps per CPU-second (``bench_async``'s runs).

``llmsched-gym bench`` (``bench_async``) times each run by its wall clock, which a loaded shared
machine stretches by up to 2x at random. This times the same runs (the ``vllm-v1`` scheduler on
``bench_async``'s workloads: sync and async, fast-forward on and off) by the CPU time of
``Engine.run`` alone, the best of a few runs, and prints the async/sync ratios per round and
their medians. To compare two checkouts, alternate them in one shell loop (BENCHMARKS.md,
issue 26)::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python scripts/bench_async_cpu.py --rounds 3

(On a small machine OpenBLAS's idle worker threads, woken by the numpy calls that build a
run's records, spin and take CPU from the engine's thread: ``simulate`` on 2 cores then runs up
to 1.8x slower at random. One BLAS thread removes that noise.)
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path

from llmsched_gym.bench import (
    DECODE_PROFILE,
    REFERENCE_PROFILE,
    decode_heavy_trace,
    offline_decode_batch,
)

MODES = (("sync ff", True, False), ("async ff", True, True), ("sync", False, False),
         ("async", False, True))  # fmt: skip
"""(label, fast_forward, async_scheduling), as ``llmsched_gym.bench._ASYNC_MODES``."""


def workloads() -> list[tuple[str, list, str, int]]:
    """(label, requests, cost profile, runs per mode: the best counts) of ``bench_async``."""
    from llmsched_gym.workloads.trace import load_trace

    return [
        ("splitwise-conv", load_trace("splitwise-conv"), REFERENCE_PROFILE, 2),
        ("decode-heavy online", decode_heavy_trace(600), DECODE_PROFILE, 5),
        ("decode-heavy offline", offline_decode_batch(), DECODE_PROFILE, 20),
    ]


def cpu_run(specs: list, profile, fast_forward: bool, async_scheduling: bool) -> tuple:
    """(CPU seconds of ``Engine.run``, engine steps) of one run of ``specs``."""
    from llmsched_gym.core.engine import Engine
    from llmsched_gym.policies.registry import make_policy
    from llmsched_gym.simulation import resolve_config

    config = resolve_config({"max_model_len": None, "async_scheduling": async_scheduling}, profile)
    engine = Engine(config, make_policy("vllm-v1"), profile, fast_forward=fast_forward)
    engine.add_requests(specs)
    gc.disable()  # as ``simulate`` runs it (``llmsched_gym._gc.gc_paused``)
    try:
        t0 = time.process_time()
        engine.run()
        cpu = time.process_time() - t0
    finally:
        gc.enable()
    return cpu, engine.num_steps


def main(argv: list[str] | None = None) -> None:
    """Print per-round ratios and their medians."""
    from llmsched_gym import _native
    from llmsched_gym.cost.registry import load_cost_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every run")
    args = parser.parse_args(argv)
    where = Path(_native.__file__).parent.parent
    print(f"core: {', '.join(sorted(set(_native.status().values())))} ({where})")
    models = {p: load_cost_model(p) for p in (REFERENCE_PROFILE, DECODE_PROFILE)}
    loads = workloads()
    ratios: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for label, specs, profile, repeats in loads:
            rate = {}
            for mode, ff, asy in MODES:
                runs = [cpu_run(specs, models[profile], ff, asy) for _ in range(repeats)]
                rate[mode] = runs[0][1] / min(cpu for cpu, _ in runs)
            ff_ratio = rate["async ff"] / rate["sync ff"]
            stepped = rate["async"] / rate["sync"]
            ratios.setdefault((label, "fast-forward"), []).append(ff_ratio)
            ratios.setdefault((label, "stepped"), []).append(stepped)
            print(
                f"round {r} {label:<21} steps/CPU-s: sync ff {rate['sync ff']:>8.0f} "
                f"async ff {rate['async ff']:>8.0f} ({ff_ratio:.3f}x) | sync {rate['sync']:>8.0f}"
                f" async {rate['async']:>8.0f} ({stepped:.3f}x)",
                flush=True,
            )
    for (label, mode), values in ratios.items():
        rounds = ", ".join(f"{v:.3f}" for v in values)
        print(f"median async/sync {label} {mode}: {statistics.median(values):.3f} ({rounds})")


if __name__ == "__main__":
    main()
