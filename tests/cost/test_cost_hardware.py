"""GPU and model specs: the YAML data, the derived counts and the name resolution."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from llmsched_gym.cost.hardware import get_gpu, get_model, list_gpus, list_models, resolve_gpu
from llmsched_gym.errors import CostModelError

REPO = Path(__file__).resolve().parents[2]
SUBSET = REPO / "calibration" / "data" / "vidur"

# Published parameter counts (model cards / safetensors metadata).
PUBLISHED = {
    "llama-2-7b": 6_738_415_616,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496,
    "qwen3-32b": 32_762_123_264,
}


def test_required_entries_exist():
    assert set(list_gpus()) == {
        "a100-40gb",
        "a100-80gb",
        "h100-80gb",
        "h200-141gb",
        "a6000-48gb",
        "l40s-48gb",
    }
    assert set(list_models()) == {
        "llama-2-7b",
        "llama-2-13b",
        "llama-2-70b",
        "opt-13b",
        "llama-3-8b",
        "llama-3-70b",
        "llama-3.1-70b",
        "qwen2-7b",
        "qwen2.5-32b",
        "qwen3-32b",
    }


@pytest.mark.parametrize("name", list_models())
def test_param_count_matches_yaml(name):
    m = get_model(name)
    assert m.param_count() == m.num_params
    if name in PUBLISHED:
        assert m.num_params == PUBLISHED[name]


def test_weight_bytes_match_vllm_logs():
    # vLLM logs "model weights take 14.96GiB" for Llama-3-8B (vllm-project/vllm PR #10511) and
    # "Loading model weights took 12.55 GB" for Llama-2-7B.
    assert get_model("llama-3-8b").weight_bytes_per_gpu(1) / 2**30 == pytest.approx(14.96, abs=0.01)
    assert get_model("llama-2-7b").weight_bytes_per_gpu(1) / 2**30 == pytest.approx(12.55, abs=0.01)
    # Sharding halves everything but the (tiny) norms.
    m = get_model("llama-2-70b")
    assert m.weight_bytes_per_gpu(2) == pytest.approx(m.weight_bytes_per_gpu(1) / 2, rel=1e-4)


def test_kv_bytes_per_token():
    # 2 (K,V) x layers x kv_heads/TP x head_dim x 2 bytes
    assert get_model("llama-2-7b").kv_bytes_per_token(1) == 2 * 32 * 32 * 128 * 2
    assert get_model("llama-2-70b").kv_bytes_per_token(2) == 2 * 80 * 4 * 128 * 2
    # TP beyond the KV heads replicates them: Llama-2-70B has 8 KV heads, 1 per GPU at TP 8.
    assert get_model("llama-2-70b").kv_bytes_per_token(8) == 2 * 80 * 1 * 128 * 2
    assert get_model("qwen3-32b").kv_bytes_per_token(1) == 2 * 64 * 8 * 128 * 2


def test_bad_tp_is_named():
    with pytest.raises(CostModelError, match="tp=3"):
        get_model("llama-2-7b").kv_bytes_per_token(3)
    with pytest.raises(CostModelError, match="tp must be"):
        get_model("llama-2-7b").check_tp(0)


def test_aliases_and_unknown_names():
    assert resolve_gpu("A100") == "a100-80gb"
    assert get_gpu("h100").name == "h100-80gb"
    assert get_model("meta-llama/Llama-2-70b-hf").name == "llama-2-70b"
    with pytest.raises(CostModelError, match="did you mean 'h100"):
        get_gpu("h10")
    with pytest.raises(CostModelError, match="Known models"):
        get_model("gpt-5")


def test_gpu_specs_are_sane():
    for name in list_gpus():
        g = get_gpu(name)
        assert 100 < g.dense_bf16_tflops < 1000
        assert 500 < g.memory_bandwidth_gbps < 5000
        assert (
            0.9 * g.memory_gb_datasheet * 1e9
            < g.memory_bytes_cuda
            < 1.1 * g.memory_gb_datasheet * 2**30
        )
        assert g.link_bytes_per_s(2) > 0
    # NVLink within the HGX baseboard, PCIe beyond an A6000 bridge pair and on the L40S.
    assert get_gpu("a100-80gb").link_bytes_per_s(8) == 300e9
    assert get_gpu("a6000").link_bytes_per_s(4) == 32e9
    assert get_gpu("l40s").link_bytes_per_s(2) == 32e9


@pytest.mark.parametrize(
    "folder,name", [("Llama-2-7b-hf", "llama-2-7b"), ("Llama-2-70b-hf", "llama-2-70b")]
)
def test_shapes_agree_with_vidur_tables(folder, name):
    df = pd.read_csv(SUBSET / f"compute/a100/meta-llama/{folder}/mlp.csv.gz")
    m = get_model(name)
    row = df.iloc[0]
    assert (row["n_head"], row["n_kv_head"], row["n_embd"], row["n_expanded_embd"]) == (
        m.num_attention_heads,
        m.num_key_value_heads,
        m.hidden_size,
        m.intermediate_size,
    )
    assert bool(row["use_gated_mlp"]) == m.gated_mlp
