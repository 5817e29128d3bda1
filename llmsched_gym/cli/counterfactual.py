"""``llmsched-gym counterfactual``: the regret of a policy's decisions.

The command line of ``llmsched_gym.counterfactual``.
"""

from __future__ import annotations

from typing import Any

from llmsched_gym.cli.common import add_set_argument, parse_overrides, positive_int
from llmsched_gym.counterfactual import DECISIONS, counterfactual, write_outputs


def add_parser(sub: Any) -> None:
    """The ``counterfactual`` command of the top-level CLI."""
    p = sub.add_parser(
        "counterfactual",
        help="regret of a policy's decisions: fork at sampled decisions, try every alternative",
        description="Runs POLICY through the environment of DECISION on SCENARIO; at sampled "
        "decision points it forks the run once per alternative action, takes the alternative, "
        "lets the policy decide everything after it, and compares the returns. Regret of the "
        "policy's choice = best alternative's return - its own, in request-seconds of latency "
        "(0: no alternative did better). Writes regret.csv, summary.md and regret.png.",
    )
    p.add_argument("--scenario", required=True, help="a shipped scenario (a cluster for route)")
    p.add_argument(
        "--policy", required=True, help="router (route) or scheduler whose choices are judged"
    )
    p.add_argument("--decision", required=True, choices=sorted(DECISIONS), help="which decision")
    p.add_argument("--num-requests", type=positive_int, default=None, help="shorten the workload")
    add_set_argument(p)
    p.add_argument("--points", type=int, default=20, help="decision points examined (default 20)")
    p.add_argument(
        "--alternatives",
        type=int,
        default=None,
        metavar="K",
        help="K sampled alternatives (default: all)",
    )
    p.add_argument(
        "--horizon", type=int, default=None, help="decisions per fork (default: to the episode end)"
    )
    p.add_argument("--seed", type=int, default=0, help="workload and sampling seed (default 0)")
    p.add_argument(
        "--out",
        default="out/counterfactual",
        metavar="DIR",
        help="output folder (default out/counterfactual)",
    )
    p.set_defaults(func=_cmd)


def _cmd(args: Any) -> int:
    overrides = parse_overrides(args.overrides)
    if args.num_requests is not None:
        overrides["workload.num_requests"] = args.num_requests
    result = counterfactual(
        args.scenario,
        args.policy,
        args.decision,
        overrides=overrides,
        points=args.points,
        alternatives=args.alternatives,
        horizon=args.horizon,
        seed=args.seed,
        progress=True,
    )
    for k, v in result.summary().items():
        print(f"{k:>24}: {v:.4g}")
    paths = write_outputs(result, args.out)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
