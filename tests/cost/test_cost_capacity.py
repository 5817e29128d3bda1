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


# vLLM 0.6.6 (V0) capacity mode -------------------------------------------------------------------
RELSERVE_CAPACITY = [
    # (scenarios, model, gpu, tp, max_num_batched_tokens, vLLM 0.6.6 count + null block)
    (["relquery-amazon-v0", "relquery-beer-v0", "relquery-pdmx-v0", "relquery-rotten-v0"],
     "opt-13b", "a100-40gb", 1, 2048, 832),
    (["relserve-qwen-amazon-v0"], "qwen2.5-32b", "a100-40gb", 2, 8192, 455),
    (["relserve-llama-amazon-v0", "relserve-llama-pdmx-v0"], "llama-2-70b", "a100-40gb", 4, 4096,
     344),
]  # fmt: skip


@pytest.mark.parametrize("scenarios,model,gpu,tp,mnbt,want", RELSERVE_CAPACITY)
def test_vllm06_mode_reproduces_the_relserve_block_counts(scenarios, model, gpu, tp, mnbt, want):
    from llmsched_gym.scenarios.spec import load_scenario

    got = num_gpu_blocks(model, gpu, tp, max_num_batched_tokens=mnbt, mode="vllm-0.6")
    assert got == want
    for name in scenarios:  # the shipped specs hold exactly the derived count
        sc = load_scenario(name)
        assert sc.engine["num_gpu_blocks"] == got
        assert sc.engine["max_num_batched_tokens"] == mnbt
        assert sc.engine.get("block_size", 16) == 16 and sc.engine.get("max_num_seqs", 256) == 256


def test_vllm06_mode_drops_the_cuda_graph_term_and_adds_the_null_block():
    v1 = kv_capacity("opt-13b", "a100-40gb", 1, max_num_batched_tokens=2048)
    no_graphs = kv_capacity(
        "opt-13b", "a100-40gb", 1, max_num_batched_tokens=2048,
        overheads=MemoryOverheads(cudagraph_bytes=0),
    )  # fmt: skip
    v06 = kv_capacity("opt-13b", "a100-40gb", 1, max_num_batched_tokens=2048, mode="vllm-0.6")
    assert v06.cudagraph_bytes == 0 and v1.cudagraph_bytes > 0
    assert v06.available_kv_cache_bytes == no_graphs.available_kv_cache_bytes
    assert v06.num_gpu_blocks == no_graphs.num_gpu_blocks + 1
    assert v06.num_gpu_blocks > v1.num_gpu_blocks
    # a measured budget is divided the same way, plus V0's missing null block
    measured = kv_capacity(
        "opt-13b", "a100-40gb", available_kv_cache_bytes=100 * v1.bytes_per_block
    )
    measured06 = kv_capacity(
        "opt-13b", "a100-40gb", available_kv_cache_bytes=100 * v1.bytes_per_block, mode="vllm-0.6"
    )
    assert (measured.num_gpu_blocks, measured06.num_gpu_blocks) == (100, 101)


def test_unknown_capacity_mode_is_named():
    with pytest.raises(CostModelError, match="capacity mode.*'vllm-0.5'"):
        num_gpu_blocks("opt-13b", "a100-40gb", mode="vllm-0.5")


# resolve_config passes vLLM's profiling batch to the capacity derivation ---------------------------
def test_resolve_config_passes_the_profiling_batch_to_the_profile():
    from llmsched_gym.simulation import resolve_config

    model = load_cost_model("roofline:llama-3.1-70b@a100-80gb/tp8")
    default = resolve_config({}, model).num_gpu_blocks
    assert default == model.num_gpu_blocks(block_size=16)
    big = resolve_config({"max_num_batched_tokens": 16384}, model).num_gpu_blocks
    assert big == model.num_gpu_blocks(block_size=16, max_num_batched_tokens=16384) < default
    seqs = resolve_config({"max_num_seqs": 1024}, model).num_gpu_blocks
    assert seqs == model.num_gpu_blocks(block_size=16, max_num_seqs=1024) < default
    assert resolve_config({"num_gpu_blocks": 77}, model).num_gpu_blocks == 77


def test_resolve_config_hands_the_capacity_method_vllm_s_profiling_settings():
    from llmsched_gym.simulation import resolve_config

    calls = []

    class Model:
        def num_gpu_blocks(self, **kw):
            calls.append(kw)
            return 70

    cfg = {"block_size": 8, "max_num_batched_tokens": 512, "max_num_seqs": 4}
    assert resolve_config(dict(cfg), Model()).num_gpu_blocks == 70
    assert resolve_config({}, Model()).num_gpu_blocks == 70
    assert calls == [cfg, {"block_size": 16, "max_num_batched_tokens": 8192, "max_num_seqs": 256}]
