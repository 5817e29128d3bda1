"""The held-step API (``Engine.hold_step``), the bulk running phase and the token counters."""

from __future__ import annotations

import json

import pytest
from engine_helpers import spec, tiny_engine

from llmsched_gym.core.engine import SchedulingPolicy, StepContext
from llmsched_gym.errors import PolicyError


class Recorder(SchedulingPolicy):
    """Schedules nothing itself; records the contexts it is called with."""

    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[int, dict]] = []

    def schedule(self, ctx: StepContext) -> None:
        self.calls.append((ctx.step, dict(ctx.scheduled)))


def _log(buf) -> list[dict]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_held_step_executes_what_the_caller_scheduled() -> None:
    pol = Recorder()
    eng, buf = tiny_engine(pol, log=True, num_gpu_blocks=20)
    eng.add_requests([spec("a", [1, 2, 3, 4, 5], 2), spec("b", [6, 7, 8], 1)])
    assert eng.advance_to_decision()
    ctx = eng.hold_step()
    assert ctx is eng.ctx and ctx.held
    assert ctx.step == eng.num_steps == 0 and ctx.now == eng.now
    assert ctx.token_budget == eng.config.max_num_batched_tokens
    # Picks made over several calls, as an environment makes them, land in one step.
    req_a = ctx.waiting.peek()
    assert ctx.admit(req_a, 3) == 3
    req_b = ctx.waiting.peek()
    assert ctx.admit(req_b) == 3
    assert eng.step()
    assert not ctx.held
    # The policy still ran, on the held context with the caller's picks in it.
    assert pol.calls == [(0, {req_a: 3, req_b: 3})]
    (line,) = _log(buf)
    assert line["scheduled"] == {"a": 3, "b": 3} and line["finished"] == ["b"]
    # The next step is begun afresh by the engine (nothing held): the recorder schedules none.
    assert eng.step()
    assert pol.calls[-1] == (1, {})
    assert _log(buf)[-1]["scheduled"] == {}


def test_unheld_step_begins_a_fresh_context() -> None:
    eng, buf = tiny_engine("vllm-v1", log=True)
    eng.add_requests([spec("a", [1, 2, 3], 2)])
    assert not eng.ctx.held
    assert eng.step()
    assert not eng.ctx.held
    assert _log(buf)[0]["scheduled"] == {"a": 3}


def test_hold_then_policy_fills_the_rest() -> None:
    """A held step whose caller scheduled nothing is the policy's step, as without holding."""
    eng_a, buf_a = tiny_engine("vllm-v1", log=True, num_gpu_blocks=30)
    eng_b, buf_b = tiny_engine("vllm-v1", log=True, num_gpu_blocks=30)
    reqs = [spec(f"r{i}", list(range(1, 6 + i)), 3 + i, arrival=0.5 * i) for i in range(5)]
    eng_a.add_requests(reqs)
    eng_b.add_requests(reqs)
    eng_a.run()
    while eng_b.advance_to_decision():
        eng_b.hold_step()
        assert eng_b.step()
    assert buf_a.getvalue() == buf_b.getvalue()


class InOrder(SchedulingPolicy):
    """vLLM-v1's running phase through ``schedule_in_order`` (victim: the newest running)."""

    name = "in-order"

    def __init__(self, bulk: bool, reverse: bool) -> None:
        self.bulk = bulk
        self.reverse = reverse

    def schedule(self, ctx: StepContext) -> None:
        threshold = 3 if ctx.num_eligible > 1 else 0
        order = list(ctx.running)[:: -1 if self.reverse else 1]
        if self.bulk:
            i = 0
            while (i := ctx.schedule_in_order(order, i, threshold=threshold, reserve=2)) >= 0:
                req = order[i]
                n = min(req.num_tokens - req.num_computed_tokens, threshold or 1 << 30)
                n = min(n, ctx.token_budget - 2)
                while not ctx.schedule_running(req, n):
                    ctx.preempt(ctx.running[-1])
                    if req.status.name != "RUNNING":
                        break
                if req.status.name != "RUNNING":
                    break
                i += 1
        else:
            for req in order:
                if ctx.token_budget - 2 <= 0:
                    break
                if req.status.name != "RUNNING":
                    continue
                n = min(req.num_tokens - req.num_computed_tokens, threshold or 1 << 30)
                n = min(n, ctx.token_budget - 2)
                while not ctx.schedule_running(req, n):
                    ctx.preempt(ctx.running[-1])
                    if req.status.name != "RUNNING":
                        break
                if req.status.name != "RUNNING":
                    break
        if not ctx.preempted:
            while ctx.waiting and len(ctx.running) < ctx.max_num_seqs and ctx.token_budget > 0:
                if ctx.admit(ctx.waiting.peek()) is None:
                    break


@pytest.mark.parametrize("reverse", [False, True])
def test_schedule_in_order_equals_a_schedule_running_loop(reverse: bool) -> None:
    logs = []
    for bulk in (False, True):
        eng, buf = tiny_engine(
            InOrder(bulk, reverse), log=True, num_gpu_blocks=14, max_num_batched_tokens=12
        )
        eng.add_requests(
            [spec(f"r{i}", list(range(1, 4 + 3 * (i % 4))), 2 + 5 * (i % 3), 0.3 * i)
             for i in range(10)]
        )  # fmt: skip
        eng.run()
        assert len(eng.finished) == 10
        logs.append(buf.getvalue())
    assert logs[0] == logs[1]
    assert '"preempted": ["' in logs[0]  # the workload exercises the shortage path


def test_schedule_in_order_rejects_a_request_scheduled_twice() -> None:
    class Twice(SchedulingPolicy):
        name = "twice"

        def schedule(self, ctx: StepContext) -> None:
            if ctx.running:
                ctx.schedule_in_order(ctx.running)
                ctx.schedule_in_order(ctx.running, threshold=0, prefill=True)
            elif ctx.waiting:
                ctx.admit(ctx.waiting.peek(), 1)

    eng, _ = tiny_engine(Twice())
    eng.add_requests([spec("a", [1, 2, 3, 4], 3)])
    eng.step()
    with pytest.raises(PolicyError, match="already scheduled"):
        eng.step()


def test_token_counters_follow_every_change() -> None:
    """The engine's token counters equal the recomputed sums after every step."""
    eng, _ = tiny_engine(
        "vllm-v1", num_gpu_blocks=12, max_num_batched_tokens=10, long_prefill_token_threshold=4
    )
    eng.add_requests(
        [spec(f"r{i}", list(range(1, 5 + 2 * i)), 3 + 4 * (i % 3), 0.5 * i) for i in range(8)]
    )
    preempted = 0
    while eng.step():
        assert eng.waiting_tokens == sum(r.num_tokens - r.num_computed_tokens for r in eng.waiting)
        assert eng.running_tokens == sum(r.num_tokens - r.num_computed_tokens for r in eng.running)
        assert eng.running_prefills == sum(
            1 for r in eng.running if r.num_tokens - r.num_computed_tokens > 1
        )
        preempted += len(eng.ctx.preempted)
    assert preempted > 0
    assert eng.waiting_tokens == eng.running_tokens == 0
