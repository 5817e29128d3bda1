"""``llmsched-gym bench``: simulator speed on fixed workloads, fast-forward on and off.

Figures are simulated requests and engine steps per wall-second of the engine loop, plus the
whole-process wall time of the reference run (Azure 2023 conversations on one Llama-2-70B TP2
A100 instance at the trace's own timestamps, records written). Ratios compare runs made in the
same invocation, so they hold on a noisy shared machine; absolute times do not.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from llmsched_gym.core.request import RequestSpec

REFERENCE_PROFILE = "vidur:llama-2-70b@a100-80gb/tp2"
DECODE_PROFILE = "roofline:llama-2-7b@a100-80gb"


def decode_heavy_trace(num_requests: int = 600, seed: int = 0) -> list[RequestSpec]:
    """Short prompts, long outputs, Poisson arrivals at 2 req/s: long steady decode stretches."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(0.5, num_requests))
    prompts = rng.integers(32, 513, num_requests)
    outputs = rng.integers(256, 2049, num_requests)
    return [
        RequestSpec(
            f"decode-{i}", float(arrivals[i]), int(prompts[i]), int(outputs[i]), int(outputs[i])
        )
        for i in range(num_requests)
    ]


def offline_decode_batch(
    num_requests: int = 64, seed: int = 0, max_output: int = 2048
) -> list[RequestSpec]:
    """An offline batch (all at t=0, as InferMax's Sec. 4): short prompts, long outputs.

    64 requests with outputs up to 2048 fit one A100's KV cache for Llama-2-7B, so the run is
    long steady decode stretches broken only by completions.
    """
    rng = np.random.default_rng(seed)
    prompts = rng.integers(32, 513, num_requests)
    outputs = rng.integers(512, max_output + 1, num_requests)
    return [
        RequestSpec(f"offline-{i}", 0.0, int(prompts[i]), int(outputs[i]), int(outputs[i]))
        for i in range(num_requests)
    ]


def _run(
    specs, profile: str, fast_forward: bool, async_scheduling: bool = False
) -> tuple[float, int, int]:
    from llmsched_gym.simulation import simulate

    # No max_model_len: every request of the trace is served, as in the recorded figures (Azure
    # prompts outgrow Llama-2's 4,096-token context, which would refuse 8% of them).
    config = {"max_model_len": None, "async_scheduling": async_scheduling}
    res = simulate(specs, config, "vllm-v1", profile, fast_forward=fast_forward)
    return res.wall_s, res.num_steps, len(res.requests)


def _best_wall(specs, profile: str, fast_forward: bool, async_scheduling: bool) -> tuple:
    """``_run``, best of three walls when a run is under a second (a shared machine's noise)."""
    wall, steps, nreq = _run(specs, profile, fast_forward, async_scheduling)
    if wall < 1.0:
        again = [_run(specs, profile, fast_forward, async_scheduling)[0] for _ in range(2)]
        wall = min([wall, *again])
    return wall, steps, nreq


_ASYNC_MODES = (
    ("sync ff", True, False),
    ("async ff", True, True),
    ("sync", False, False),
    ("async", False, True),
)
"""(label, fast_forward, async_scheduling) of the runs ``bench_async`` compares."""


def bench_async(workloads: list[tuple[str, list, str]]) -> dict[str, float]:
    """Engine steps/s of async scheduling against sync, in this invocation (ratios).

    Both with fast-forward (as they run by default) and both stepped (``ff off``).
    """
    figures: dict[str, float] = {}
    title = "async scheduling vs sync (vllm-v1)"
    print(f"\n{title:<66} {'mode':>10} {'wall s':>8} {'steps/s':>10}")
    for label, specs, profile in workloads:
        rates = {}
        for mode, ff, asy in _ASYNC_MODES:
            wall, steps, _ = _best_wall(specs, profile, ff, asy)
            rates[mode] = steps / wall
            print(f"{label:<66} {mode:>10} {wall:>8.3f} {rates[mode]:>10.0f}")
        vs_stepped = rates["async"] / rates["sync"]
        vs_default = rates["async ff"] / rates["sync ff"]
        print(
            f"{'':<66} async/sync step rate: {vs_default:.2f}x (fast-forward), "
            f"{vs_stepped:.2f}x (stepped)"
        )
        key = " ".join(label.split(" ")[:2])
        figures[f"{key}.async_vs_sync_steps"] = vs_stepped
        figures[f"{key}.async_vs_sync_ff_steps"] = vs_default
    return figures


def _whole_process(trace: str, profile: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable, "-m", "llmsched_gym", "simulate", "--trace", trace,
            "--cost-model", profile, "--max-model-len", "none", "--out", tmp, "--no-progress",
        ]  # fmt: skip
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        if not (Path(tmp) / "requests.csv").exists():  # pragma: no cover - run failed loudly above
            raise RuntimeError("simulate wrote no records")
    return wall


def run_bench(quick: bool = False) -> dict[str, float]:
    """Run the fixed workloads and print a table; returns the figures by name."""
    from llmsched_gym.workloads.trace import load_trace

    figures: dict[str, float] = {}
    limit = 2000 if quick else None
    azure = load_trace("splitwise-conv", limit=limit)
    n_online, n_memory = (150, 64) if quick else (600, 256)
    workloads = [  # (label, requests, cost profile)
        ("splitwise-conv (Azure conv 2023) on Llama-2-70B TP2 A100", azure, REFERENCE_PROFILE),
        (
            f"decode-heavy online ({n_online} req, 2 req/s) on Llama-2-7B A100",
            decode_heavy_trace(n_online),
            DECODE_PROFILE,
        ),
        (
            "decode-heavy offline (64 req at t=0, fits KV) on Llama-2-7B A100",
            offline_decode_batch(),
            DECODE_PROFILE,
        ),
        (
            f"memory-bound offline ({n_memory} req, outputs to 4096) on Llama-2-7B A100",
            offline_decode_batch(n_memory, max_output=4096),
            DECODE_PROFILE,
        ),
    ]
    print(f"{'workload':<66} {'ff':>4} {'wall s':>8} {'req/s':>10} {'steps/s':>10} {'steps':>8}")
    for label, specs, profile in workloads:
        per = {}
        for ff in (True, False):
            wall, steps, nreq = _run(specs, profile, ff)
            if wall < 1.0:  # short runs: best of three, to damp a shared machine's noise
                wall = min([wall] + [_run(specs, profile, ff)[0] for _ in range(2)])
            per[ff] = (wall, steps)
            mode = "on" if ff else "off"
            rates = f"{nreq / wall:>10.0f} {steps / wall:>10.0f}"
            print(f"{label:<66} {mode:>4} {wall:>8.3f} {rates} {steps:>8}")
        ratio = (per[True][1] / per[True][0]) / (per[False][1] / per[False][0])
        print(f"{'':<66} fast-forward step-rate gain: {ratio:.2f}x")
        key = " ".join(label.split(" ")[:2])
        figures[f"{key}.wall_ff_on_s"] = per[True][0]
        figures[f"{key}.wall_ff_off_s"] = per[False][0]
        figures[f"{key}.ff_gain"] = ratio
    figures.update(bench_async(workloads[:2]))
    if not quick:
        # Best of three: one process start is at the mercy of a shared machine's noise.
        runs = [_whole_process("splitwise-conv", REFERENCE_PROFILE) for _ in range(3)]
        whole = min(runs)
        figures["splitwise-conv.whole_process_s"] = whole
        print(
            f"whole process: llmsched-gym simulate --trace splitwise-conv --cost-model "
            f"{REFERENCE_PROFILE} --max-model-len none --out DIR  ->  {whole:.2f} s wall, best of "
            f"{', '.join(f'{r:.2f}' for r in runs)} (target <= 2 s; Vidur: 48 s)"
        )
    return figures
