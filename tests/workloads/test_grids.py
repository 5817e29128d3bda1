"""InferMax offline grids: exact sizes and counts, all at t = 0."""

from __future__ import annotations

from collections import Counter

import pytest

from llmsched_gym.workloads import (
    INFERMAX_GROUPS,
    INFERMAX_MIXES,
    infermax_mix,
    offline_batch,
    offline_grid,
)


def test_offline_batch_exact() -> None:
    specs = offline_batch(32, input_len=512, output_len=1024)
    assert len(specs) == 32
    assert {(s.arrival_time, s.prompt_len, s.output_len, s.max_tokens) for s in specs} == {
        (0.0, 512, 1024, 1024)
    }
    assert [s.request_id for s in specs] == [f"grid-{i}" for i in range(32)]
    with pytest.raises(ValueError, match="input_len must be an int >= 1, got 0"):
        offline_batch(4, 0, 1)


def test_offline_grid_keys() -> None:
    grid = offline_grid([1, 1024], [32], [32, 1024])
    assert set(grid) == {(1, 32, 32), (1, 32, 1024), (1024, 32, 32), (1024, 32, 1024)}
    assert len(grid[(1024, 32, 1024)]) == 1024


def test_infermax_groups_match_the_paper() -> None:
    # InferMax §4.6: S = {8, 16}, L = {512, 1024}.
    assert INFERMAX_GROUPS["SISO"] == ((8, 16), (8, 16))
    assert INFERMAX_GROUPS["SILO"] == ((8, 16), (512, 1024))
    assert INFERMAX_GROUPS["LISO"] == ((512, 1024), (8, 16))
    assert INFERMAX_GROUPS["LILO"] == ((512, 1024), (512, 1024))
    assert len(INFERMAX_MIXES) == 6 and "SISO+LILO" in INFERMAX_MIXES


def test_infermax_mix_counts_exact_and_shuffled_deterministically() -> None:
    specs = infermax_mix("LILO+SISO", 64, seed=1)
    counts = Counter((s.prompt_len, s.output_len) for s in specs)
    assert counts == {
        (512, 512): 8, (512, 1024): 8, (1024, 512): 8, (1024, 1024): 8,
        (8, 8): 8, (8, 16): 8, (16, 8): 8, (16, 16): 8,
    }  # fmt: skip
    assert all(s.arrival_time == 0.0 for s in specs)
    assert specs == infermax_mix(["LILO", "SISO"], 64, seed=1)
    assert specs != infermax_mix("LILO+SISO", 64, seed=2)
    ordered = infermax_mix("LILO+SISO", 64, shuffle=False)
    assert [s.prompt_len for s in ordered[:32]] == [512] * 16 + [1024] * 16
    odd = infermax_mix("SILO+LISO", 17)
    assert sum(s.prompt_len in (8, 16) for s in odd) == 9  # remainder to the first group


def test_infermax_mix_errors() -> None:
    with pytest.raises(ValueError, match="unknown InferMax group 'XXL'"):
        infermax_mix("SISO+XXL", 8)
    with pytest.raises(ValueError, match="num_requests must be an int >= 1, got 0"):
        infermax_mix("SISO", 0)
