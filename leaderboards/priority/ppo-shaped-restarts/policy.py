"""The ppo-shaped-restarts submission: an SB3 PPO policy for the Priority task.

PPO: Schulman et al., 2017, arXiv:1707.06347.
``make`` loads ``model.zip`` next to this file (written by
``python baselines/train.py baselines/configs/ppo-priority-shaped-restarts.yaml --seeds 0``)
on the CPU. The harness calls the model's ``predict`` with ``deterministic=True`` (and the
action masks where the task has them), wrapped as ``AgentPolicy(<the Priority env>, model)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def make(task: str = "Priority") -> Any:
    """The trained PPO model for the Priority task (the only task it was trained for)."""
    if task != "Priority":
        raise ValueError(f"ppo-shaped-restarts is a Priority agent; got task {task!r}")
    import torch  # optional heavy dependencies (the [rl] extra)
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    return PPO.load(Path(__file__).with_name("model.zip"), device="cpu")
