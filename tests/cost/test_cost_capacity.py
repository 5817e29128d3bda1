"""KV capacity as vLLM computes it."""

from __future__ import annotations

import pytest

from llmsched_gym.cost import kv_capacity, load_cost_model, num_gpu_blocks
from llmsched_gym.cost.capacity import MemoryOverheads
from llmsched_gym.cost.hardware import get_model
from llmsched_gym.errors import CostModelError

GiB = 2**30


def test_llama2_7b_a100_80gb_block_count_is_plausible():
    blocks = num_gpu_blocks("llama-2-7b", "a100-80gb", 1, block_size=16, gpu_memory_utilization=0.9)
    # 0.9 x 79.15 GiB - 12.55 GiB weights - ~2.6 GiB overheads ~= 56 GiB of 8 MiB blocks.
    # vLLM reported 7351 blocks for this setup (PR #2031, older profiler).
    assert 6800 <= blocks <= 7500


def test_llama3_8b_h100_matches_vllm_log():
    # vLLM PR #10511 log (H100, 0.9, 8192 tokens): available_kv_cache_memory 53.29 GiB.
    cap = kv_capacity("llama-3-8b", "h100-80gb", 1, max_num_batched_tokens=8192)
    assert cap.available_kv_cache_bytes / GiB == pytest.approx(53.29, rel=0.02)


def test_formula_is_floor_of_available_over_block_bytes():
    cap = kv_capacity("llama-2-70b", "a100-80gb", 4)
    per_block = 16 * 2 * 80 * 2 * 128 * 2
    assert cap.bytes_per_block == per_block
    expected_available = (
        cap.requested_bytes
        - cap.weight_bytes
        - cap.activation_bytes
        - cap.non_torch_bytes
        - cap.cudagraph_bytes
    )
    assert cap.available_kv_cache_bytes == expected_available
    assert cap.num_gpu_blocks == expected_available // per_block
    assert cap.num_tokens == (cap.num_gpu_blocks - 1) * 16


def test_measured_available_memory_reproduces_vllm_exactly():
    # Given vLLM's "Available KV cache memory", only the division remains.
    per_block = 16 * get_model("llama-3-8b").kv_bytes_per_token(1)
    assert (
        num_gpu_blocks("llama-3-8b", "h100", 1, available_kv_cache_bytes=1000 * per_block + 5)
        == 1000
    )


def test_more_memory_means_more_blocks():
    counts = [
        num_gpu_blocks("qwen2-7b", "l40s", 1, gpu_memory_utilization=u) for u in (0.8, 0.9, 0.95)
    ]
    assert counts == sorted(counts) and counts[0] < counts[-1]
    assert (
        num_gpu_blocks("llama-2-13b", "a100-80gb", 1, block_size=32) * 2
        <= num_gpu_blocks("llama-2-13b", "a100-80gb", 1, block_size=16) + 1
    )


def test_70b_on_one_a100_40gb_raises_clear_error():
    with pytest.raises(CostModelError) as err:
        num_gpu_blocks("llama-2-70b", "a100-40gb", 1)
    msg = str(err.value)
    assert "does not fit" in msg and "a100-40gb" in msg and "weights take 128.48 GiB" in msg
    assert "tp>=" in msg


def test_bad_arguments_are_named():
    with pytest.raises(CostModelError, match="gpu_memory_utilization"):
        num_gpu_blocks("llama-2-7b", "a100", 1, gpu_memory_utilization=1.5)
    with pytest.raises(CostModelError, match="block_size"):
        num_gpu_blocks("llama-2-7b", "a100", 1, block_size=0)
    with pytest.raises(CostModelError, match="max_num_seqs"):
        num_gpu_blocks("llama-2-7b", "a100", 1, max_num_seqs=0)


def test_overheads_are_parameters():
    lean = MemoryOverheads(non_torch_bytes=0, nccl_bytes=0, cudagraph_bytes=0)
    assert num_gpu_blocks("llama-2-7b", "a100", 1, overheads=lean) > num_gpu_blocks(
        "llama-2-7b", "a100", 1
    )


def test_cost_models_expose_their_capacity():
    roof = load_cost_model("roofline:llama-2-7b@a100-80gb")
    assert roof.num_gpu_blocks(16, 0.9) == num_gpu_blocks("llama-2-7b", "a100-80gb", 1)
    fitted = load_cost_model("vidur:llama-2-70b@a100-80gb/tp2")
    assert fitted.num_gpu_blocks(16, 0.9) == num_gpu_blocks("llama-2-70b", "a100-80gb", 2)
