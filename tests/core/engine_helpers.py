"""Helpers for the tiny-engine tests: requests by id and prompt, and a small engine."""

from __future__ import annotations

import io

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import ConstantCostModel
from llmsched_gym.policies.registry import make_policy


def spec(rid, prompt, output_len=1, arrival=0.0, priority=0, max_tokens=None):
    """A request with token ids (list) or a length (int)."""
    if isinstance(prompt, int):
        return RequestSpec(
            rid, arrival, prompt, output_len, max_tokens or output_len, priority=priority
        )
    return RequestSpec(
        rid, arrival, len(prompt), output_len, max_tokens or output_len,
        prompt_token_ids=tuple(prompt), priority=priority,
    )  # fmt: skip


def tiny_engine(policy="vllm-v1", log=False, ff=False, **cfg):
    base = dict(max_num_batched_tokens=64, max_num_seqs=8, block_size=4, num_gpu_blocks=10)
    base.update(cfg)
    pol = make_policy(policy) if isinstance(policy, str) else policy
    buf = io.StringIO() if log else None
    eng = Engine(
        EngineConfig(**base), pol, ConstantCostModel(1.0), fast_forward=ff, schedule_log=buf
    )
    return eng, buf
