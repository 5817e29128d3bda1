"""``llmsched-gym leaderboard``: list, evaluate, validate, show, reproduce."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``leaderboard`` command and its sub-commands to the top-level CLI."""
    p = sub.add_parser(
        "leaderboard",
        help="the benchmark: list tasks, evaluate a policy, validate or show submissions, "
        "reproduce a paper",
        description="The llmsched-v1 benchmark: tasks with train and held-out test workloads, "
        "scores against vllm-v1 with paired 95%% intervals, validated submissions under "
        "leaderboards/<task>/<method>/.",
    )
    lsub = p.add_subparsers(dest="leaderboard_command", required=True, metavar="ACTION")
    from llmsched_gym.leaderboard import reproduce

    reproduce.add_parser(lsub)
