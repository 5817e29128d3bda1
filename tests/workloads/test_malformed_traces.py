"""Malformed trace files found by fuzzing: each is one clear error naming file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmsched_gym.errors import ConfigError, TraceError
from llmsched_gym.simulation import simulate
from llmsched_gym.workloads.trace import load_trace

GOOD = {"request_id": "r0", "arrival_time": 0.0, "prompt_len": 8, "output_len": 2}


def test_duplicate_key_in_a_json_object(tmp_path: Path) -> None:
    path = tmp_path / "dup.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD)[:-1] + ', "output_len": 9}\n')
    with pytest.raises(TraceError, match=r"dup\.jsonl:2: field 'output_len' appears twice"):
        load_trace(path)


@pytest.mark.parametrize("field", ["prompt_len", "output_len", "max_tokens", "hash_block_size"])
def test_huge_integers_are_range_errors(tmp_path: Path, field: str) -> None:
    path = tmp_path / "huge.jsonl"
    path.write_text(json.dumps({**GOOD, field: 10**30}) + "\n")
    with pytest.raises(TraceError, match=rf"huge\.jsonl:1: field '{field}' must be an int <= "):
        load_trace(path)


def test_huge_integer_in_an_azure_csv(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 10:00:00,{10**30},1\n")
    with pytest.raises(TraceError, match=r"a\.csv:2: field 'ContextTokens' must be an int <="):
        load_trace(path, trace_format="azure")


def test_json_message_says_at_once(tmp_path: Path) -> None:
    path = tmp_path / "ctrl.jsonl"
    path.write_text('{"request_id": "a\x01"}\n')
    with pytest.raises(TraceError, match="invalid JSON") as err:
        load_trace(path)
    assert "at at" not in str(err.value)


def test_empty_trace_names_its_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    with pytest.raises(ConfigError, match=r"trace .*empty\.jsonl holds no requests"):
        simulate(str(path), cost_model="constant:0.01")


def test_limit_message_names_the_cli_flag(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    with pytest.raises(TraceError, match="--num-requests"):
        load_trace(path, limit=0)
