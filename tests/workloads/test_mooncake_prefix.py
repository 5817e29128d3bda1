"""Mooncake ``hash_ids`` (512-token blocks) give prefix hits under the engine's own block size."""

from __future__ import annotations

import pytest

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.simulation import simulate
from llmsched_gym.workloads import load_trace, prefix_sharing_ratio


@pytest.mark.parametrize("block_size", [16, 32])
def test_shared_leading_hash_ids_hit_the_prefix_cache(block_size: int) -> None:
    a = RequestSpec("a", 0.0, 1100, 2, 2, block_hashes=(1, 2, 3), hash_block_size=512)
    b = RequestSpec("b", 100.0, 1300, 2, 2, block_hashes=(1, 2, 9), hash_block_size=512)
    c = RequestSpec("c", 200.0, 900, 2, 2, block_hashes=(4, 2), hash_block_size=512)
    result = simulate([a, b, c], {"num_gpu_blocks": 1000, "block_size": block_size})
    cached = dict(
        zip(result.requests["request_id"], result.requests["num_cached_tokens"], strict=True)
    )
    assert cached == {"a": 0, "b": 1024, "c": 0}  # c's block 2 follows a different prefix
    assert prefix_sharing_ratio([a, b, c]) == pytest.approx(1024 / 3300)


def test_mooncake_trace_requests_share_real_prefixes() -> None:
    specs = load_trace("mooncake-conversation", limit=200)
    first, second = specs[0], specs[1]
    assert first.block_hashes[0] == second.block_hashes[0] == 0  # shared system prompt block
    result = simulate([first, second], {"num_gpu_blocks": 4000, "block_size": 16})
    cached = dict(
        zip(result.requests["request_id"], result.requests["num_cached_tokens"], strict=True)
    )
    assert cached[second.request_id] >= 512
