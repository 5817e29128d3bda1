"""vllm-v0's decode step in one pass per run (``schedule_in_order``) equals its per-request loop."""

from __future__ import annotations

import random

import pytest

from llmsched_gym.policies.heuristics import VllmV0Policy
from tests.core.engine_helpers import spec, tiny_engine


class _PerRequest(VllmV0Policy):
    """The same policy made to take its per-request decode loop (an overridden decode)."""

    def decode_or_preempt(self, ctx, req, victim=None):
        return super().decode_or_preempt(ctx, req, victim)


def _run(policy, specs, ff):
    eng, log = tiny_engine(
        policy, log=True, ff=ff, max_num_batched_tokens=48, max_num_seqs=6, num_gpu_blocks=14
    )
    eng.add_requests(specs)
    eng.run()
    return log.getvalue(), eng.num_preemptions


def _specs(seed):
    rng = random.Random(seed)
    return [
        spec(f"r{i}", rng.randint(1, 20), rng.randint(1, 24), arrival=rng.uniform(0, 6))
        for i in range(rng.randint(4, 16))
    ]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("ff", [False, True])
def test_bulk_decode_equals_the_per_request_loop(seed, ff):
    bulk, _ = _run(VllmV0Policy(), _specs(seed), ff)
    loop, _ = _run(_PerRequest(), _specs(seed), ff)
    assert bulk == loop


def test_the_workloads_preempt():
    """The comparison above covers decodes whose blocks run out (preempting the newest)."""
    assert sum(_run(VllmV0Policy(), _specs(seed), False)[1] for seed in range(12)) > 20
