"""The lookahead-oracle submission on Preempt: every victim tried out, vLLM V1 continuing.

At each victim decision ``llmsched_gym.lookahead.LookaheadAgent`` forks the run once per running
request, preempts that request in the fork, lets vLLM V1 schedule the rest of the episode, and
keeps the victim whose fork ends with the least total latency (the rollout algorithm of
Bertsekas, Tsitsiklis & Wu, 1997, Journal of Heuristics 3(3)). It sees the future, so it is an
oracle reference, never worse than vLLM V1 on a workload.
"""

from __future__ import annotations

from typing import Any

from llmsched_gym.leaderboard.oracle import lookahead


def make(task: str, workload: Any) -> Any:
    """The planner for one workload of the Preempt task."""
    return lookahead(task, workload, base="vllm-v1", horizon_s=None)
