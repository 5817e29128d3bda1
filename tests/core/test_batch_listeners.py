"""``Engine.batch_listeners``: every policy-built step, before its finishers leave; no stretch."""

from __future__ import annotations

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine
from llmsched_gym.core.request import RequestSpec, RequestStatus
from llmsched_gym.cost.base import ConstantCostModel
from llmsched_gym.policies.registry import make_policy


def _engine(ff: bool) -> Engine:
    cfg = EngineConfig(max_num_batched_tokens=16, max_num_seqs=4, block_size=4, num_gpu_blocks=40)
    eng = Engine(cfg, make_policy("vllm-v1"), ConstantCostModel(0.5), fast_forward=ff)
    eng.add_requests([RequestSpec("a", 0.0, 20, 30, 64), RequestSpec("b", 0.2, 6, 2, 64)])
    return eng


def test_a_batch_listener_hears_each_policy_step_with_its_batch_and_finishers() -> None:
    for ff in (False, True):
        eng = _engine(ff)
        heard = []

        def listen(ctx, end, finished, eng=eng, heard=heard) -> None:
            assert end == ctx.now + 0.5 and ctx.step == eng.num_steps  # before the clock moves
            # Finishers are still running: their blocks are not freed yet.
            assert all(r.status is RequestStatus.RUNNING and r.blocks for r in finished)
            heard.append(
                (ctx.step, {r.request_id: n for r, n in ctx.scheduled.items()},
                 [r.request_id for r, _ in ctx.new], [r.request_id for r in finished])
            )  # fmt: skip

        eng.batch_listeners.append(listen)
        eng.run()
        assert len(heard) == eng.num_steps - eng.num_ff_steps
        assert heard[0] == (0, {"a": 16}, ["a"], [])
        assert heard[1] == (1, {"a": 4, "b": 6}, ["b"], [])
        assert heard[2][3] == ["b"]  # b's second token ends it in step 2
        if ff:
            assert eng.num_ff_steps > 0  # a's decode was fast-forwarded, without a call
        else:
            assert heard[-1][3] == ["a"] and len(heard) == eng.num_steps
