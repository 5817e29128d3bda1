"""Cost models that price items by phase (``phase_items``, Vidur's rule for InferMax §3.2)."""

from __future__ import annotations

import pytest

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.infermax import InferMaxCostModel
from llmsched_gym.policies.vllm_v1 import VllmV1Policy
from llmsched_gym.simulation import simulate


class _PreemptOnce(VllmV1Policy):
    """vLLM V1, except that step 2 preempts the running request and schedules nothing."""

    def schedule(self, ctx):
        if ctx.step == 2 and ctx.running:
            ctx.preempt(ctx.running[0])
            return
        super().schedule(ctx)


def _steps(specs, policy="vllm-v1", budget=64, fast_forward=False):
    cm = InferMaxCostModel("7b")
    cfg = EngineConfig(max_num_batched_tokens=budget, max_num_seqs=4, block_size=16,
                       num_gpu_blocks=64)  # fmt: skip
    res = simulate(specs, cfg, scheduler=policy, cost_model=cm, record_steps=True,
                   fast_forward=fast_forward)  # fmt: skip
    return cm, res


def test_a_one_token_prompt_is_priced_as_a_prefill_then_decodes():
    cm, res = _steps([RequestSpec("a", 0.0, 1, 3, 3)])
    d = res.steps["duration_s"].tolist()
    assert d[0] == cm.step_time(1, 1, 0, 1, 0, prefill_kv=0)  # prompt token: prefill
    assert d[1] == cm.step_time(1, 0, 1, 0, 1, prefill_kv=0)  # then decodes on 1 cached token
    assert d[0] > d[1]


def test_the_last_one_token_chunk_of_a_refill_is_priced_as_a_prefill():
    # Prompt 4, budget 5: a prefill and a decode, then preempted at step 2 with 6 tokens; the
    # refill is a 5-token chunk, then a 1-token chunk on 5 computed tokens that samples: to
    # vLLM's kernels a decode, to Vidur a prefill.
    cm, res = _steps([RequestSpec("a", 0.0, 4, 6, 6)], policy=_PreemptOnce(), budget=5)
    s = res.steps
    assert s["num_preempted"].tolist()[2] == 1
    assert s["num_scheduled_tokens"].tolist()[3:5] == [5, 1]
    refill_last = 4
    assert s.loc[refill_last, "duration_s"] == cm.step_time(1, 1 + 2 * 5, 0, 1, 0, prefill_kv=5)
    after = s.loc[refill_last + 1, "duration_s"]
    assert after == cm.step_time(1, 0, 6, 0, 1, prefill_kv=0)  # it decodes again


@pytest.mark.parametrize("prompt", [1, 2, 40])
def test_fast_forward_stays_identical_under_phase_pricing(prompt):
    specs = [RequestSpec(f"r{i}", 0.1 * i, prompt + i, 20 + 3 * i, 40) for i in range(6)]
    _, a = _steps(specs, fast_forward=True)
    _, b = _steps(specs, fast_forward=False)
    assert a.requests.equals(b.requests)
