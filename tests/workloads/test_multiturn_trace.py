"""Multi-turn traces (``parent_request_id``): resolution, deterministic ids, errors, round trips."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import TraceError
from llmsched_gym.workloads import load_trace, save_trace
from llmsched_gym.workloads.multiturn import (
    GENERATED_VOCAB_SIZE,
    MAX_CONVERSATION_LEN,
    RESERVED_IDS,
    _mix_array,
    _stream,
    resolve_turns,
    splitmix64,
    token_ids,
)


def _trace(tmp_path: Path, records: list[dict]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


ROOT = {"request_id": "a", "arrival_time": 0.0, "prompt_token_ids": [5, 6, 7], "output_len": 4}


def test_token_ids_are_the_documented_function():
    ids = token_ids("req-1", 0, 50, seed=3)
    base = _stream("req-1", 3, "output")
    span = GENERATED_VOCAB_SIZE - RESERVED_IDS
    assert ids == tuple(RESERVED_IDS + splitmix64(base ^ p) % span for p in range(50))
    assert token_ids("req-1", 10, 20, seed=3) == ids[10:20]  # a function of the position
    assert token_ids("req-1", 0, 50, seed=4) != ids  # and of the seed
    assert token_ids("req-2", 0, 50, seed=3) != ids  # and of the request
    assert token_ids("req-1", 0, 50, seed=3, domain="prompt") != ids
    assert all(RESERVED_IDS <= t < GENERATED_VOCAB_SIZE for t in ids)
    assert set(token_ids("x", 0, 200, vocab_size=20)) <= {16, 17, 18, 19}
    x = np.arange(1000, dtype=np.uint64) * np.uint64(0x1234567891)
    assert _mix_array(x).tolist() == [splitmix64(int(v)) for v in x]
    with pytest.raises(ValueError, match="vocab_size"):
        token_ids("x", 0, 3, vocab_size=16)


def test_a_turn_holds_its_parents_prompt_and_generated_tokens(tmp_path: Path):
    records = [
        ROOT,
        {"request_id": "b", "arrival_time": 1.0, "prompt_token_ids": [9], "output_len": 2,
         "parent_request_id": "a"},
        {"request_id": "c", "arrival_time": 2.0, "prompt_len": 12, "output_len": 1,
         "parent_request_id": "b"},
        {"request_id": "z", "arrival_time": 0.5, "prompt_len": 4, "output_len": 1},
    ]  # fmt: skip
    a, z, b, c = load_trace(_trace(tmp_path, records))
    assert a.output_token_ids == token_ids("a", 0, 4)
    assert b.prompt_token_ids == (5, 6, 7, *a.output_token_ids, 9)
    assert b.prompt_len == 8 and b.parent_request_id == "a"
    assert b.output_token_ids == token_ids("b", 0, 2)  # b is a parent too
    # c gives its total: 8 + 2 tokens of history, 2 new ones with deterministic ids.
    assert c.prompt_len == 12
    assert c.prompt_token_ids == b.prompt_token_ids + b.output_token_ids + token_ids(
        "c", 10, 12, domain="prompt"
    )
    assert c.output_token_ids is None  # nobody continues c
    assert z == RequestSpec("z", 0.5, 4, 1, 1)  # outside every conversation: unchanged
    seeded = load_trace(_trace(tmp_path, records), seed=7)
    assert seeded[0].output_token_ids == token_ids("a", 0, 4, seed=7)


def test_a_turn_may_add_no_token_of_its_own(tmp_path: Path):
    turn = {"request_id": "b", "arrival_time": 1.0, "prompt_token_ids": [], "output_len": 2,
            "parent_request_id": "a"}  # fmt: skip
    a, b = load_trace(_trace(tmp_path, [ROOT, turn]))
    assert b.prompt_token_ids == a.prompt_token_ids + a.output_token_ids


def test_length_only_and_hashed_parents_get_deterministic_prompt_ids(tmp_path: Path):
    records = [
        {"request_id": "p", "arrival_time": 0.0, "prompt_len": 6, "output_len": 2},
        {"request_id": "q", "arrival_time": 0.0, "prompt_len": 6, "output_len": 2,
         "block_hashes": [11, 12], "hash_block_size": 4},
        {"request_id": "r", "arrival_time": 0.0, "prompt_len": 7, "output_len": 2,
         "block_hashes": [11, 13], "hash_block_size": 4},
        {"request_id": "p1", "arrival_time": 1.0, "prompt_len": 9, "output_len": 1,
         "parent_request_id": "p"},
        {"request_id": "q1", "arrival_time": 1.0, "prompt_len": 9, "output_len": 1,
         "parent_request_id": "q"},
        {"request_id": "r1", "arrival_time": 1.0, "prompt_len": 9, "output_len": 1,
         "parent_request_id": "r"},
    ]  # fmt: skip
    p, q, r, p1, q1, r1 = load_trace(_trace(tmp_path, records))
    assert p.prompt_token_ids == token_ids("p", 0, 6, domain="prompt")
    assert p1.prompt_token_ids[:8] == p.prompt_token_ids + p.output_token_ids
    # Ids from hashes: q and r share their first hash id, so their first 4 tokens.
    assert q.prompt_token_ids[:4] == r.prompt_token_ids[:4]
    assert q.prompt_token_ids[4:6] != r.prompt_token_ids[4:6]
    assert q.block_hashes is None and len(q.prompt_token_ids) == 6
    assert q1.prompt_token_ids[:8] == q.prompt_token_ids + q.output_token_ids


def test_save_and_load_round_trip(tmp_path: Path):
    records = [
        ROOT,
        {"request_id": "b", "arrival_time": 1.0, "prompt_token_ids": [9, 9], "output_len": 2,
         "parent_request_id": "a"},
        {"request_id": "c", "arrival_time": 3.0, "prompt_len": 15, "output_len": 1,
         "parent_request_id": "b"},
    ]  # fmt: skip
    specs = load_trace(_trace(tmp_path, records), seed=2)
    out = save_trace(specs, tmp_path / "saved.jsonl")
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[1]["prompt_token_ids"] == [9, 9]  # a turn lists its new tokens only
    assert load_trace(out, seed=2) == specs
    # Without its parent, a turn is written as a request of its own.
    alone = save_trace(specs[1:], tmp_path / "alone.jsonl")
    b, c = load_trace(alone, seed=2)
    assert b.parent_request_id is None and b.prompt_token_ids == specs[1].prompt_token_ids
    assert c.prompt_token_ids == specs[2].prompt_token_ids


def _turn(rid, parent, arrival=1.0, **fields):
    record = {"request_id": rid, "arrival_time": arrival, "output_len": 2}
    record.update(fields)
    if parent is not None:
        record["parent_request_id"] = parent
    return record


@pytest.mark.parametrize(
    ("records", "message"),
    [
        (
            [ROOT, _turn("b", "x", prompt_token_ids=[1])],
            r"trace\.jsonl:2: field 'parent_request_id' names 'x', which is not a request",
        ),
        (
            [{**ROOT, "arrival_time": 5.0}, _turn("b", "a", prompt_token_ids=[1])],
            r"trace\.jsonl:2: request 'b' arrives at 1\.0 s, before its parent 'a' "
            r"\(arrival_time 5\.0 s\)",
        ),
        (
            [_turn("a", "b", prompt_len=3), _turn("b", "a", prompt_len=3)],
            r"makes a cycle: 'a' -> 'b' -> 'a'",
        ),
        ([_turn("a", "a", prompt_len=3)], r"makes a cycle: 'a' -> 'a'"),
        (
            [ROOT, _turn("b", "a", prompt_len=6)],
            r"trace\.jsonl:2: request 'b' has prompt_len=6, shorter than its history: parent "
            r"'a''s prompt \(3 tokens\) plus its output \(4 tokens\) = 7",
        ),
        (
            [ROOT, _turn("b", "a", prompt_len=9, prompt_token_ids=[1, 2])],
            r"trace\.jsonl:2: a turn \(parent_request_id 'a'\) gives its new tokens as "
            r"'prompt_token_ids' or its total prompt length",
        ),
        (
            [ROOT, _turn("b", "a", prompt_len=1024, block_hashes=[1])],
            r"trace\.jsonl:2: request 'b' continues 'a' and gives 'block_hashes'",
        ),
        ([ROOT, _turn("b", "", prompt_len=9)], r"field 'parent_request_id' must be a non-empty"),
    ],
)
def test_bad_turns_name_the_request_and_the_problem(tmp_path, records, message):
    with pytest.raises(TraceError, match=message):
        load_trace(_trace(tmp_path, records))


def test_a_parent_cut_off_by_limit_says_so(tmp_path: Path):
    records = [_turn("b", "a", arrival=1.0, prompt_token_ids=[1]), ROOT]
    with pytest.raises(TraceError, match=r"not a request of the trace.*limit=1"):
        load_trace(_trace(tmp_path, records), limit=1)


def test_resolve_turns_leaves_traces_without_turns_alone():
    specs = [RequestSpec("a", 0.0, 3, 1, 1), RequestSpec("b", 0.0, 2, 1, 1, (1, 2))]
    assert resolve_turns(specs) == specs


_UNDER_MEMORY_LIMIT = """
import resource, sys
from llmsched_gym.errors import TraceError
from llmsched_gym.workloads import load_trace
vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + 256 * 2**20, resource.RLIM_INFINITY))
for path in sys.argv[1:]:
    try:
        load_trace(path)
    except TraceError as err:
        print("TraceError", err)
    except MemoryError:
        print("MemoryError", path)
"""


@pytest.mark.skipif(
    not Path("/proc/self/status").exists(), reason="reads the address-space size from /proc"
)
def test_an_oversize_conversation_is_refused_before_its_ids_are_built(tmp_path: Path):
    """A turn of 2**31 - 1 tokens, or a parent of 10**8 output tokens: refused, not allocated.

    Run under a 256 MiB address-space allowance: building either one's ids needs gigabytes.
    """
    big_turn = [ROOT, _turn("b", "a", prompt_len=2**31 - 1)]
    big_parent = [{**ROOT, "output_len": 10**8}, _turn("b", "a", prompt_token_ids=[1])]
    paths = []
    for name, records in (("turn", big_turn), ("parent", big_parent)):
        paths.append(tmp_path / f"{name}.jsonl")
        paths[-1].write_text("".join(json.dumps(r) + "\n" for r in records))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    run = subprocess.run(
        [sys.executable, "-c", _UNDER_MEMORY_LIMIT, *map(str, paths)],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )  # fmt: skip
    turn, parent = run.stdout.splitlines()
    assert turn.startswith("TraceError") and "turn.jsonl:2: request 'b'" in turn
    assert "2,147,483,649 tokens, above MAX_CONVERSATION_LEN = 16,777,216" in turn
    assert parent.startswith("TraceError") and "parent.jsonl:1: request 'a'" in parent
    assert "its prompt (3 tokens) plus its output_len (100,000,000)" in parent


def test_a_conversation_request_may_reach_max_conversation_len():
    a = RequestSpec("a", 0.0, 3, 4, 4, prompt_token_ids=(5, 6, 7))
    out = MAX_CONVERSATION_LEN - 8  # b's prompt: 3 + 4 tokens of history + 1 new one
    b = RequestSpec("b", 1.0, 1, out, out, prompt_token_ids=(1,), parent_request_id="a")
    assert resolve_turns([a, b])[1].prompt_len + out == MAX_CONVERSATION_LEN
    longer = dataclasses.replace(b, prompt_len=2, prompt_token_ids=(1, 2))
    with pytest.raises(TraceError, match=r"request 'b' of a conversation is too long: .* = "
                       r"16,777,217 tokens"):  # fmt: skip
        resolve_turns([a, longer])
