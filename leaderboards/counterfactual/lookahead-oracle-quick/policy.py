"""The lookahead oracle on Priority, for the quick-subset evaluation in this folder.

Every fork runs to the end of the episode (``llmsched_gym.leaderboard.oracle.lookahead``).
"""

from __future__ import annotations

from typing import Any

from llmsched_gym.leaderboard.oracle import lookahead


def lookahead_oracle(task: str, workload: Any) -> Any:
    """Priority: FCFS, shortest prompt, shortest total, shortest output tried; vLLM V1 after."""
    if task != "Priority":
        raise ValueError(f"this factory is for Priority, got {task!r}")
    return lookahead(task, workload, base="vllm-v1", horizon_s=None)
