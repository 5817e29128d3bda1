"""The maskable-ppo-t2s-restarts submission: an SB3 MaskablePPO policy for the Route task.

MaskablePPO: PPO with invalid-action masking, Huang and Ontañón, 2020, arXiv:2006.14171.
``make`` loads ``model.zip`` next to this file (written by
``python baselines/train.py baselines/configs/maskable-ppo-route-t2s-restarts.yaml --seeds 0``)
on the CPU. The harness calls the model's ``predict`` with ``deterministic=True`` (and the
action masks where the task has them), wrapped as ``AgentPolicy(<the Route env>, model)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def make(task: str = "Route") -> Any:
    """The trained MaskablePPO model for the Route task (the only task it was trained for)."""
    if task != "Route":
        raise ValueError(f"maskable-ppo-t2s-restarts is a Route agent; got task {task!r}")
    import torch  # optional heavy dependencies (the [rl] extra)
    from sb3_contrib import MaskablePPO

    torch.set_num_threads(1)
    return MaskablePPO.load(Path(__file__).with_name("model.zip"), device="cpu")
