"""``llmsched-gym bench``: how fast the simulator runs, alone and beside Vidur.

The command line of ``llmsched_gym.bench`` (requests and steps per wall-second with
fast-forward on and off; ``--envs``: Gymnasium steps per second; ``--vs-vidur``: whole
``simulate`` processes against Vidur's). It is a module of its own because its options (the
Vidur comparison's group) have nothing in common with the other commands'.
"""

from __future__ import annotations

import argparse
from typing import Any

from llmsched_gym.cli import common


def add_parser(sub: Any) -> None:
    """The ``bench`` command of the top-level CLI."""
    p = sub.add_parser(
        "bench",
        help="simulator speed on fixed workloads, fast-forward on and off",
        description="Prints simulated requests and steps per wall-second on fixed workloads, with "
        "fast-forward on and off and their ratio (figures go into BENCHMARKS.md).",
    )
    p.add_argument("--quick", action="store_true", help="smaller workloads (a smoke test)")
    p.add_argument(
        "--envs",
        action="store_true",
        help="instead: Gymnasium environment steps per second for each task on the chat scenario "
        "(first 2,000 requests) with a vLLM-equivalent and a random agent",
    )
    g = p.add_argument_group(
        "side by side with Vidur (--vs-vidur)",
        "whole 'llmsched-gym simulate' processes on the Azure 2023 conversation trace clipped "
        "as Vidur clips it, one Llama-2-70B TP2 A100 instance with Vidur's vLLM settings "
        "(4,096-token batches, 128 sequences, 3,328 KV blocks, no prefix caching), vllm-v0 and "
        "vllm-v1, records off and written; CPU seconds (median of --pairs rounds after "
        "--warm-up rounds), steps and requests. With --vidur-dir, Vidur's own runs alternate with "
        "ours and the ratio is printed",
    )
    g.add_argument("--vs-vidur", action="store_true", help="run this comparison instead")
    g.add_argument(
        "--pairs", type=common.positive_int, default=3, metavar="N", help="rounds (default 3)"
    )
    g.add_argument(
        "--warm-up",
        type=int,
        default=1,
        metavar="N",
        help="uncounted rounds first (default 1; Vidur's first run trains its predictor, and "
        "the first runs write both systems' bytecode caches)",
    )
    g.add_argument(
        "--vidur-dir", metavar="DIR", help="a checkout of microsoft/vidur at 7d47513 to run too"
    )
    g.add_argument(
        "--vidur-python",
        default="python",
        metavar="PY",
        help="the Python that has Vidur's requirements (default python)",
    )
    g.add_argument(
        "--vidur-predictor",
        action="append",
        choices=("random_forrest", "linear_regression"),
        help="Vidur's execution-time predictor, repeatable (default random_forrest)",
    )
    g.add_argument(
        "--out",
        default="out/bench/vs-vidur",
        metavar="DIR",
        help="the clipped trace, records and runs.json go here (default out/bench/vs-vidur)",
    )
    p.set_defaults(func=_cmd_bench)


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.vs_vidur:
        from llmsched_gym.bench import run_vs_vidur

        run_vs_vidur(
            pairs=args.pairs,
            out=args.out,
            vidur_dir=args.vidur_dir,
            vidur_python=args.vidur_python,
            predictors=tuple(args.vidur_predictor or ["random_forrest"]),
            warm_up=args.warm_up,
        )
        return 0
    if args.envs:
        from llmsched_gym.envs.bench import main as bench_envs

        bench_envs(["--limit", "300" if args.quick else "2000"])
        return 0
    from llmsched_gym.bench import run_bench

    run_bench(quick=args.quick)
    return 0
