"""The cem-linear submission: a linear row scorer learned by noisy cross-entropy.

``make`` loads ``weights.json`` next to this file, written by
``python baselines/cem_priority.py --suite llmsched-v1`` (Szita & Lőrincz, 2006, "Learning Tetris
using the noisy cross-entropy method", Neural Computation 18(12)). The scorer is a plain numpy
callable, observation -> action, which the harness wraps as ``AgentPolicy(PriorityEnv, agent)``.
"""

from __future__ import annotations

from pathlib import Path

from llmsched_gym.leaderboard.agents import LinearRowScorer


def make(task: str = "Priority") -> LinearRowScorer:
    """The trained scorer for the Priority task (the only task it was trained for)."""
    if task != "Priority":
        raise ValueError(f"cem-linear is a Priority agent; got task {task!r}")
    return LinearRowScorer.load(Path(__file__).with_name("weights.json"))
