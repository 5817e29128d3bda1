"""Workload statistics on hand-made traces, and the length plot."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.workloads import plot_length_histogram, prefix_sharing_ratio, workload_stats
from llmsched_gym.workloads.stats import stats_table


def test_counts_rate_and_percentiles_exact() -> None:
    specs = [RequestSpec(f"r{i}", 2.0 * i, 10 * (i + 1), i + 1, i + 1) for i in range(5)]
    st = workload_stats(specs)
    assert st["num_requests"] == 5 and st["num_clients"] == 0
    assert st["duration_s"] == 8.0 and st["mean_rate_per_s"] == 0.5
    assert st["prompt_len_mean"] == 30.0 and st["prompt_len_p50"] == 30.0
    assert st["prompt_len_p90"] == pytest.approx(46.0)  # 40 + 0.6 * 10
    assert st["prompt_len_p99"] == pytest.approx(49.6)
    assert st["output_len_max"] == 5 and st["total_prompt_tokens"] == 150
    assert st["prefix_sharing_ratio"] == 0.0
    single = workload_stats(specs[:1])
    assert single["duration_s"] == 0.0 and math.isnan(single["mean_rate_per_s"])


def test_prefix_sharing_from_token_ids() -> None:
    base = tuple(range(40))  # 2 full 16-token blocks + 8 tokens
    a = RequestSpec("a", 0.0, 40, 1, 1, prompt_token_ids=base)
    b = RequestSpec("b", 1.0, 40, 1, 1, prompt_token_ids=base[:16] + tuple(range(100, 124)))
    c = RequestSpec("c", 2.0, 40, 1, 1, prompt_token_ids=base)
    # b shares block 0 (16), c shares blocks 0 and 1 (32): 48 of 120 tokens.
    assert prefix_sharing_ratio([a, b, c]) == pytest.approx(48 / 120)
    # Arrival order decides who is "earlier", not list order.
    assert prefix_sharing_ratio([c, b, a]) == pytest.approx(48 / 120)
    # Same block content at a different position (different prefix) is not shared.
    d = RequestSpec("d", 3.0, 16, 1, 1, prompt_token_ids=base[16:32])
    assert prefix_sharing_ratio([a, d]) == 0.0


def test_prefix_sharing_from_block_hashes() -> None:
    a = RequestSpec("a", 0.0, 1100, 2, 2, block_hashes=(1, 2, 3), hash_block_size=512)
    b = RequestSpec("b", 1.0, 1300, 2, 2, block_hashes=(1, 2, 9), hash_block_size=512)
    assert prefix_sharing_ratio([a, b]) == pytest.approx(1024 / 2400)
    # A longer partial last block: c shares a's 3rd block up to a's last full 16-block (1088).
    c = RequestSpec("c", 2.0, 1200, 2, 2, block_hashes=(1, 2, 3), hash_block_size=512)
    assert prefix_sharing_ratio([a, c]) == pytest.approx(1088 / 2300)
    e = RequestSpec("e", 3.0, 1024, 2, 2, block_hashes=(5, 2), hash_block_size=512)
    assert prefix_sharing_ratio([a, e]) == 0.0  # same id after a different prefix
    with pytest.raises(ValueError, match="block_size must be an int >= 1, got 0"):
        prefix_sharing_ratio([a], block_size=0)


def test_stats_table_and_plot(tmp_path: Path) -> None:
    specs = [
        RequestSpec(f"r{i}", float(i), 1 + i * 37 % 500, 1 + i % 90, 1 + i % 90) for i in range(300)
    ]
    table = stats_table({"x": specs, "y": specs[:10]})
    assert list(table.index) == ["x", "y"] and table.loc["y", "num_requests"] == 10
    out = plot_length_histogram(specs, tmp_path / "lengths.png", title="t")
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert [p.name for p in tmp_path.iterdir()] == ["lengths.png"]  # no temp file left
    with pytest.raises(ValueError, match="specs is empty"):
        plot_length_histogram([], tmp_path / "x.png")
