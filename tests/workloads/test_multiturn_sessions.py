"""Conversations of the Mooncake conversation trace (kind ``multiturn``, ``chat-multiturn-v0``)."""

from __future__ import annotations

import pytest

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import TraceError
from llmsched_gym.scenarios import load_scenario
from llmsched_gym.workloads.multiturn import mooncake_parents, mooncake_sessions


def _mc(rid: str, t: float, prompt_len: int, output_len: int, hashes: list[int]) -> RequestSpec:
    return RequestSpec(rid, t, prompt_len, output_len, output_len, None, tuple(hashes), 512)


def test_turns_are_found_from_repeated_hash_blocks():
    specs = [
        _mc("a", 0.0, 1100, 50, [0, 1, 2]),  # 2 full blocks: 0 1
        _mc("b", 5.0, 1200, 10, [0, 1, 3]),  # repeats a's 2 blocks, holds a's prompt + answer
        _mc("c", 6.0, 1120, 10, [0, 1, 4]),  # repeats them but is shorter than a's 1150
        _mc("d", 7.0, 900, 10, [0, 5]),  # only the block every request starts with
        _mc("e", 9.0, 1700, 10, [0, 1, 7, 6]),  # (0, 1) again: the latest such request is c
        _mc("f", 9.5, 2100, 10, [0, 1, 7, 8, 9]),  # e's 3 full blocks: e
    ]
    assert mooncake_parents(specs) == {"b": "a", "e": "c", "f": "e"}


def test_sessions_are_jobs_whose_turns_wait_for_the_answer():
    specs = [
        _mc("a", 10.0, 1100, 50, [0, 1, 2]),
        _mc("b", 40.0, 1200, 10, [0, 1, 3]),
        _mc("z", 20.0, 600, 5, [0, 9]),
    ]
    jobs = mooncake_sessions(specs, think_time_scale=0.5)
    assert [(j.job_id, j.arrival_time, len(j.stages)) for j in jobs] == [
        ("session-a", 10.0, 2),
        ("session-z", 20.0, 1),
    ]
    first, turn = (stage.requests[0] for stage in jobs[0].stages)
    assert jobs[0].stages[1].after == ("a",) and jobs[0].kind == "session"
    assert turn.arrival_time == (40.0 - 10.0) * 0.5  # think time after a's answer
    assert turn.prompt_len == 1200
    assert turn.prompt_token_ids[:1150] == first.prompt_token_ids + first.output_token_ids
    # Every prompt becomes ids, from the hashes: z and a share their first 512 tokens.
    z = jobs[1].stages[0].requests[0]
    assert z.block_hashes is None and len(z.prompt_token_ids) == 600
    assert z.prompt_token_ids[:512] == first.prompt_token_ids[:512]
    assert z.prompt_token_ids[512:600] != first.prompt_token_ids[512:600]
    rescaled = mooncake_sessions(specs, rate_per_s=0.05)  # 2 starts 10 s apart: 0.1/s now
    assert [j.arrival_time for j in rescaled] == [20.0, 40.0]
    assert rescaled[0].stages[1].requests[0].arrival_time == 30.0  # think times kept
    with pytest.raises(ValueError, match="think_time_scale"):
        mooncake_sessions(specs, think_time_scale=-1.0)


def test_chat_multiturn_scenario_hits_earlier_answers():
    """Turns hit the blocks of their parents' answers; without reused answers they cannot."""
    from llmsched_gym.cost.registry import load_cost_model
    from llmsched_gym.simulation import simulate

    rates = {}
    for reuse in (True, False):
        scenario = load_scenario(
            "chat-multiturn-v0", {"workload.limit": 800, "workload.reuse_answers": reuse}
        )
        model = load_cost_model(scenario.cost_model)
        jobs = scenario.build_workload(cost_model=model)
        result = simulate(jobs, scenario.engine_config(model), scenario.scheduler, model)
        specs = {st.requests[0].request_id: st.requests[0] for j in jobs for st in j.stages}
        cached = dict(zip(result.requests["request_id"], result.requests["num_cached_tokens"]))
        answer_hits = 0
        for rid, spec in specs.items():
            if spec.parent_request_id is not None:  # hit tokens inside the parent's answer
                parent = specs[spec.parent_request_id]
                end = min(cached[rid], parent.prompt_len + parent.output_len)
                answer_hits += max(0, end - parent.prompt_len)
        rates[reuse] = (result.summary["prefix_cache_hit_rate"], answer_hits)
    assert rates[True][1] > 5_000 and rates[False][1] == 0
    assert rates[True][0] > rates[False][0] > 0.1


def test_an_oversize_request_outside_conversations_is_refused_before_its_ids_are_built():
    specs = [_mc("a", 0.0, 1100, 50, [0, 1, 2]), _mc("z", 1.0, 2**31 - 1, 5, [0, 9])]
    with pytest.raises(TraceError, match=r"request 'z' of a conversation is too long: its prompt "
                       r"\(2,147,483,647 tokens\)"):  # fmt: skip
        mooncake_sessions(specs)
