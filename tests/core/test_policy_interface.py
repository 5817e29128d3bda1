"""The policy interface carries the reference agents' decisions (DESIGN.md, "Policies").

A test policy makes prefill-only and decode-only steps (RelServe's ABA), sets a per-request
chunk size (ProServe's GETMAXCHUNK), picks its own preemption victim (InferMax's evict-short),
and reserves KV for future decode tokens at admission (InferMax EF, RelServe's NFT).
"""

from __future__ import annotations

import json

import pytest
from engine_helpers import spec, tiny_engine

from llmsched_gym.core.engine import SchedulingPolicy, StepContext
from llmsched_gym.errors import PolicyError
from llmsched_gym.kv.manager import cdiv

CHUNK = {"a": 3, "b": 5, "c": 2, "d": 4}


class ReferenceLikePolicy(SchedulingPolicy):
    name = "test-reference-like"

    def __init__(self, reserve: bool) -> None:
        self.reserve = reserve
        self.victims: list[tuple[str, str]] = []  # (own choice, vLLM's running[-1])
        self.kinds: list[str] = []
        self.outputs_in_prefill_steps: list[int] = []

    def schedule(self, ctx: StepContext) -> None:
        prefilling = [r for r in ctx.running if r.num_tokens - r.num_computed_tokens > 1]
        if ctx.waiting or prefilling:
            self._prefill(ctx, prefilling)
            if ctx.scheduled or ctx.preempted:
                self.kinds.append("prefill")
                return
        self.kinds.append("decode")
        for r in list(ctx.running):
            if r in ctx.running:
                self._schedule_or_evict(ctx, r, 1)

    def _prefill(self, ctx, prefilling) -> None:
        for r in prefilling:  # continue running chunks at the request's own chunk size
            n = min(CHUNK[r.request_id], r.num_tokens - r.num_computed_tokens, ctx.token_budget)
            if r in ctx.running and n and not self._schedule_or_evict(ctx, r, n):
                return
        while ctx.waiting and len(ctx.running) < ctx.max_num_seqs and ctx.token_budget:
            r = ctx.waiting.peek()
            hit = ctx.lookup(r)
            n = min(CHUNK[r.request_id], r.num_tokens - hit[1])
            # Slots for the rest of the prompt and every future decode token: I + O - 1.
            ahead = (r.num_tokens - hit[1] - n) + r.max_tokens - 1 if self.reserve else 0
            if ctx.admit(r, n, num_lookahead_tokens=ahead, hit=hit) is None:
                break
        self.outputs_in_prefill_steps.extend(r.num_output_tokens for r in ctx.scheduled)

    def _schedule_or_evict(self, ctx, r, n) -> bool:
        while not ctx.schedule_running(r, n):
            # Evict the request that has processed the fewest tokens (not vLLM's newest).
            victim = min(ctx.running, key=lambda x: (x.num_computed_tokens, x.seq))
            self.victims.append((victim.request_id, ctx.running[-1].request_id))
            ctx.preempt(victim)
            if victim is r:
                return False
        return True


def _run(reserve: bool, num_gpu_blocks: int):
    pol = ReferenceLikePolicy(reserve)
    eng, log = tiny_engine(
        pol, log=True, num_gpu_blocks=num_gpu_blocks, block_size=4, max_num_seqs=4
    )
    eng.add_requests([spec("a", 9, 6), spec("b", 11, 5), spec("c", 7, 9), spec("d", 6, 7)])
    admitted_blocks = {}
    while eng.step():
        for r in eng.running:
            admitted_blocks.setdefault(r.request_id, len(r.blocks))
    return pol, eng, [json.loads(line) for line in log.getvalue().splitlines()], admitted_blocks


def test_prefill_only_and_decode_only_steps_with_per_request_chunks():
    pol, eng, log, _ = _run(reserve=False, num_gpu_blocks=40)
    assert sorted(r.request_id for r in eng.finished) == ["a", "b", "c", "d"]
    assert "prefill" in pol.kinds and "decode" in pol.kinds
    first = log[0]["scheduled"]
    assert first == {"a": 3, "b": 5, "c": 2, "d": 4}  # each request's own chunk size
    for line, kind in zip(log, pol.kinds):
        if kind == "decode":
            assert set(line["scheduled"].values()) == {1} and not line["new"]
    # No request that already generated tokens takes part in a prefill step.
    assert pol.outputs_in_prefill_steps and set(pol.outputs_in_prefill_steps) == {0}
    decode_steps = [line for line, kind in zip(log, pol.kinds) if kind == "decode"]
    assert decode_steps and all(
        len(s["scheduled"]) == s["num_running"] + len(s["finished"]) for s in decode_steps
    )


def test_kv_reserved_for_future_decode_tokens():
    pol, eng, log, admitted_blocks = _run(reserve=True, num_gpu_blocks=40)
    for s in eng.finished:
        want = cdiv(s.num_prompt_tokens + s.max_tokens - 1, 4)
        assert admitted_blocks[s.request_id] == want
    assert not any(line["preempted"] for line in log)


def test_policy_picks_its_own_preemption_victim():
    pol, eng, log, _ = _run(reserve=False, num_gpu_blocks=12)
    assert sorted(r.request_id for r in eng.finished) == ["a", "b", "c", "d"]
    preempted = [rid for line in log for rid in line["preempted"]]
    assert preempted and preempted == [own for own, _ in pol.victims]
    assert any(own != vllm for own, vllm in pol.victims)  # differs from vLLM's rule


def test_engine_enforces_budget_and_state():
    class Greedy(SchedulingPolicy):
        name = "greedy"

        def schedule(self, ctx):
            r = ctx.waiting.peek()
            ctx.admit(r, ctx.token_budget + 1)

    eng, _ = tiny_engine(Greedy(), num_gpu_blocks=80)
    eng.add_requests([spec("a", 200, 1)])
    with pytest.raises(PolicyError, match="token budget"):
        eng.run()


def test_deadlocked_policy_is_an_error_not_a_hang():
    class Idle(SchedulingPolicy):
        name = "idle"

        def schedule(self, ctx):
            pass

    eng, _ = tiny_engine(Idle())
    eng.add_requests([spec("a", 8, 3)])
    with pytest.raises(PolicyError, match="scheduled nothing"):
        while eng.step():
            pass


def test_livelocked_policy_is_an_error_not_a_hang():
    """A policy that keeps preempting and re-admitting without a token ever being sampled
    resets the 'scheduled nothing' guard every step; the livelock guard names it instead."""

    class Churn(SchedulingPolicy):
        name = "churn"

        def schedule(self, ctx):
            if ctx.running:  # preempt whatever runs, so its prefill never completes
                ctx.preempt(ctx.running[0])
                return
            ctx.admit(ctx.waiting.peek(), 2)

    eng, _ = tiny_engine(Churn())
    eng.add_requests([spec("a", 8, 3)])
    with pytest.raises(PolicyError, match="livelock.*'a' was preempted"):
        for _ in range(20_000):  # bounded: without the guard the test fails instead of hanging
            eng.step()
    assert eng.num_steps > 10_000 and eng.num_preemptions >= 100


def test_true_output_length_needs_oracle_flag():
    class Peek(SchedulingPolicy):
        name = "peek"

        def schedule(self, ctx):
            ctx.true_output_len(ctx.waiting.peek())

    eng, _ = tiny_engine(Peek())
    eng.add_requests([spec("a", 8, 3)])
    with pytest.raises(PolicyError, match="oracle"):
        eng.run()
