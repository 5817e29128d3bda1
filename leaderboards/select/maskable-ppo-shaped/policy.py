"""The maskable-ppo-shaped submission: an SB3 MaskablePPO policy for the Select task.

MaskablePPO: PPO with invalid-action masking, Huang and Ontañón, 2020, arXiv:2006.14171.
``make`` loads ``model.zip`` next to this file (written by
``python baselines/train.py baselines/configs/maskable-ppo-select-shaped.yaml --seeds 0``)
on the CPU. The harness calls the model's ``predict`` with ``deterministic=True`` (and the
action masks where the task has them), wrapped as ``AgentPolicy(<the Select env>, model)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def make(task: str = "Select") -> Any:
    """The trained MaskablePPO model for the Select task (the only task it was trained for)."""
    if task != "Select":
        raise ValueError(f"maskable-ppo-shaped is a Select agent; got task {task!r}")
    import torch  # optional heavy dependencies (the [rl] extra)
    from sb3_contrib import MaskablePPO

    torch.set_num_threads(1)
    from llmsched_gym.envs.select_v0 import WorkConservingAgent

    # trained with work_conserving=True: the same masks on the default task
    return WorkConservingAgent(
        MaskablePPO.load(Path(__file__).with_name("model.zip"), device="cpu")
    )
