"""Multi-turn reuse: a later turn hits the blocks of its parent's prompt *and answer*.

Tiny engines (block_size 4) with block ids counted by hand, as in vLLM's test_prefix_caching.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from engine_helpers import tiny_engine

from llmsched_gym.core.request import Request, RequestSpec
from llmsched_gym.workloads.multiturn import resolve_turns

PARENT_PROMPT = tuple(range(1, 11))  # 10 tokens: blocks [1-4] [5-8] [9 10 o0 o1] ...


def _turns(child_arrival: float, parent_output: int = 7, turn=(91, 92, 93)):
    parent = RequestSpec("a", 0.0, 10, parent_output, parent_output, PARENT_PROMPT)
    child = RequestSpec(
        "b", child_arrival, len(turn), 2, 2, prompt_token_ids=tuple(turn), parent_request_id="a"
    )
    return resolve_turns([parent, child])


def _admissions(log: str, rid: str) -> list[tuple[int, int]]:
    lines = [json.loads(line) for line in log.splitlines()]
    return [(line["step"], line["new"][rid]) for line in lines if rid in line["new"]]


def test_turn_hits_exactly_the_parents_full_computed_blocks():
    eng, _ = tiny_engine(num_gpu_blocks=12)
    parent, child = _turns(child_arrival=20.0)
    # The child's prompt: parent prompt (10) + the parent's 7 generated ids + 3 new tokens.
    assert child.prompt_len == 20
    assert child.prompt_token_ids == PARENT_PROMPT + parent.output_token_ids + (91, 92, 93)
    eng.add_requests([parent, child])
    while not eng.finished:
        eng.step()
    assert eng.kv.pool.free_queue() == [5, 6, 7, 8, 9, 10, 11, 4, 3, 2, 1]
    eng.run()
    a, b = sorted(eng.finished, key=lambda r: r.seq)
    # The parent computed 10 prompt + 6 generated tokens (its 7th is sampled, never computed):
    # 16 tokens = 4 full blocks, blocks 1 2 3 4 (the last two hold generated tokens), all
    # registered. It freed them tail first to the back of the free queue: 5..11, 4, 3, 2, 1.
    # The child's first 4 blocks hold exactly those tokens: a hit of 16 tokens on blocks
    # 1 2 3 4 (its lookup is capped at floor(19 / 4) = 4 blocks anyway); block 5 is new.
    assert a.num_cached_tokens == 0 and b.num_cached_tokens == 16
    # A hit on the answer's blocks: 8 more tokens than the prompt's two full blocks.
    assert b.num_cached_tokens - (len(PARENT_PROMPT) // 4) * 4 == 8


def test_child_block_ids_are_the_parents():
    eng, _ = tiny_engine(num_gpu_blocks=12)
    parent, child = _turns(child_arrival=20.0)
    eng.add_requests([parent, child])
    held = {}
    while eng.step():
        for r in eng.running:
            held.setdefault(r.request_id, list(r.blocks))
    assert held["a"][:3] == [1, 2, 3]  # after its prefill step: 10 tokens in 3 blocks
    assert held["b"] == [1, 2, 3, 4, 5]  # hit 1 2 3 4, then the front of the queue


def test_turn_arriving_while_the_parent_decodes_hits_what_is_registered():
    # At t = 3 the parent has computed 12 tokens (prompt + 2 generated): blocks 1 2 3 are
    # full and registered; the answer's second block is not yet. The child hits 12 tokens.
    eng, log = tiny_engine(num_gpu_blocks=12, log=True)
    eng.add_requests(_turns(child_arrival=3.0))
    eng.run()
    assert _admissions(log.getvalue(), "b") == [(3, 12)]


def test_a_turn_of_a_cancelled_parent_holds_its_whole_answer_and_hits_what_was_computed():
    """Open-loop replay: the trace fixes the turn's prompt; the abort decides what it hits."""
    parent, child = _turns(child_arrival=20.0)
    parent = dataclasses.replace(parent, cancel_time=2.5)
    assert child.prompt_token_ids == PARENT_PROMPT + parent.output_token_ids + (91, 92, 93)
    eng, log = tiny_engine(num_gpu_blocks=12, log=True)
    eng.add_requests([parent, child])
    eng.run()
    # Steps at t = 0, 1, 2 computed 10 prompt + 2 generated tokens; the abort before the step
    # at t = 3 frees blocks 1 2 3 (full, cached): the child hits their 12 tokens, computes the
    # answer's other 5 tokens and its own 3 as prompt.
    assert [r.request_id for r in eng.aborted] == ["a"]
    assert eng.aborted[0].num_output_tokens == 3
    assert _admissions(log.getvalue(), "b") == [(3, 12)]  # step 3, at t = 20


@pytest.mark.parametrize(("filler_len", "hit"), [(40, 4), (44, 0)])
def test_hits_vanish_when_the_parents_blocks_were_evicted(filler_len, hit):
    # After the parent finishes, the free queue is 5..11, 4, 3, 2, 1 (11 usable blocks). A
    # filler of 40 tokens takes 10 blocks from the front, evicting the answer's blocks 4 and 3
    # and the prompt's block 2 (LRU: a chain's tail first): only block 1 is left to hit. One of
    # 44 tokens takes all 11 and the child hits nothing.
    eng, _ = tiny_engine(num_gpu_blocks=12)
    parent, child = _turns(child_arrival=30.0)
    filler = RequestSpec("f", 10.0, filler_len, 1, 1)
    eng.add_requests([parent, filler, child])
    eng.run()
    done = {r.request_id: r for r in eng.finished}
    assert done["b"].num_cached_tokens == hit


def test_generated_blocks_have_the_keys_of_the_prompt_that_holds_them():
    parent, child = _turns(child_arrival=20.0)
    a, b = Request(parent, 0, 4), Request(child, 1, 4)
    # Every full block of the parent's sequence (prompt + answer) has a key; the child's
    # first four equal them.
    assert a.num_shareable_blocks == (10 + 7) // 4 == 4
    assert a.content_keys(4, 4) == b.content_keys(4, 4)[:4]
    # A request whose generated ids are not fixed keeps prompt blocks only (as before).
    plain = Request(RequestSpec("p", 0.0, 10, 7, 7, PARENT_PROMPT), 2, 4)
    assert plain.num_shareable_blocks == 2


def test_without_reused_answers_only_the_prompt_is_hit():
    parent = RequestSpec("a", 0.0, 10, 7, 7, PARENT_PROMPT)
    child = RequestSpec("b", 20.0, 3, 2, 2, prompt_token_ids=(91, 92, 93), parent_request_id="a")
    eng, _ = tiny_engine(num_gpu_blocks=12)
    eng.add_requests(resolve_turns([parent, child], reuse_answers=False))
    eng.run()
    assert {r.request_id: r.num_cached_tokens for r in eng.finished} == {"a": 0, "b": 8}


@pytest.mark.parametrize(("usable", "parent_output", "other_prompt"), [(13, 20, 16), (13, 31, 4)])
def test_fast_forward_stops_before_a_waiting_turns_hit_grows(usable, parent_output, other_prompt):
    """A decode stretch ends before the parent registers a block the waiting turn holds.

    The turn waits (its blocks do not fit) while its parent decodes beside another request;
    the step in which the parent fills an answer block, the turn's hit grows by a block while
    free blocks do not shrink, and it is admitted. Stepping and fast-forward must agree.
    """
    parent = RequestSpec("a", 0.0, 8, parent_output, parent_output, tuple(range(1, 9)))
    other = RequestSpec("d", 0.0, other_prompt, 24, 24)
    child = RequestSpec("b", 1.0, 2, 2, 2, prompt_token_ids=(100, 101), parent_request_id="a")
    specs = resolve_turns([parent, other, child])
    logs = {}
    for ff in (False, True):
        eng, log = tiny_engine(log=True, ff=ff, num_gpu_blocks=usable + 1)
        eng.add_requests(specs)
        eng.run()
        logs[ff] = log.getvalue()
        if ff:
            assert eng.num_ff_steps > 0
    assert logs[True] == logs[False]
    # Admitted mid-answer, on a step where a block of the answer became full.
    [(step, hit)] = _admissions(logs[False], "b")
    assert 1 < step < parent_output and hit > 8
