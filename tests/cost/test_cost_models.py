"""Every cost model: scalar == vectorised bit for bit, and the roofline's physics."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched_gym.cost import (
    ConstantCostModel,
    LinearCostModel,
    RooflineCostModel,
    RooflineParams,
    list_profiles,
    load_cost_model,
)
from llmsched_gym.cost.hardware import list_gpus, list_models
from llmsched_gym.errors import CostModelError

ROOFLINES = [
    RooflineCostModel("llama-2-7b", "a100-80gb", 1),
    RooflineCostModel("llama-2-70b", "a100-80gb", 2),
    RooflineCostModel("llama-3-70b", "h100", 8),
    RooflineCostModel("opt-13b", "a6000", 4),
    RooflineCostModel("qwen3-32b", "h200", 1),
    RooflineCostModel("qwen2-7b", "l40s", 2),
]
MODELS = [
    ConstantCostModel(0.02),
    LinearCostModel(0.01, 1e-4, 1e-9, 1e-7, 2e-5, 3e-6),
    *ROOFLINES,
    *(load_cost_model(name) for name in list_profiles()),
]
IDS = [m.name for m in MODELS]


def random_features(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Batches with zeros, decode-only, prefill-only and mixed features."""
    tokens = rng.integers(0, 16384, n)
    tokens[: n // 8] = 0
    num_decode = np.minimum(tokens, rng.integers(0, 512, n))
    num_prefill = np.where(tokens > num_decode, rng.integers(1, 8, n), 0)
    prefill_attn = np.where(num_prefill > 0, rng.integers(0, 10**9, n), 0)
    decode_kv = num_decode * rng.integers(0, 8192, n)
    return [tokens, prefill_attn, decode_kv, num_prefill, num_decode]


@pytest.mark.parametrize("model", MODELS, ids=IDS)
def test_scalar_equals_vector_bit_for_bit(model):
    feats = random_features(np.random.default_rng(0), 500)
    vec = model.step_times(*feats)
    scal = np.array([model.step_time(*(int(f[i]) for f in feats)) for i in range(500)])
    assert vec.dtype == np.float64 and vec.shape == (500,)
    assert np.array_equal(vec, scal)  # exact, not approx


@pytest.mark.parametrize("model", ROOFLINES, ids=[m.name for m in ROOFLINES])
@pytest.mark.parametrize(("n", "m0"), [(1, 0), (1, 137), (7, 3001), (256, 10**6)])
def test_roofline_decode_series_equals_stepping_bit_for_bit(model, n, m0):
    """The stretch pricing (issue 29) sums the constant terms once: same floats as stepping."""
    durations, starts = model.decode_series(n, m0, 50, 2.5, float("inf"))
    want = [model.step_time(n, 0, m0 + j * n, 0, n) for j in range(50)]
    assert durations == want  # exact
    t = 2.5
    for j, d in enumerate(want):
        assert starts[j] == t
        t = t + d
    assert starts[50] == t
    cut, cut_starts = model.decode_series(n, m0, 50, 2.5, starts[20])
    assert cut == want[:20] and cut_starts == starts[:21]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 1 << 20),
    st.integers(0, 1 << 40),
    st.integers(0, 1 << 30),
    st.integers(0, 1024),
    st.integers(0, 4096),
    st.sampled_from(range(len(MODELS))),
)
def test_scalar_equals_vector_hypothesis(t, pa, dkv, npf, ndc, which):
    model = MODELS[which]
    one = model.step_time(t, pa, dkv, npf, ndc)
    arr = model.step_times(
        np.array([t]), np.array([pa]), np.array([dkv]), np.array([npf]), np.array([ndc])
    )
    assert one == arr[0]
    assert isinstance(one, float) and one > 0


def test_llama2_7b_decode_batch1_on_a100_is_plausible():
    model = RooflineCostModel("llama-2-7b", "a100-80gb", 1)
    t = model.step_time(1, 0, 512, 0, 1)
    assert 5e-3 <= t <= 20e-3  # 12.6 GiB of weights at ~1.6 TB/s plus overheads: ~10 ms
    assert model.breakdown(1, 0, 512, 0, 1)["gemm_bound"] == 0.0  # memory-bound
    assert model.breakdown(4096, 4096**2, 0, 1, 0)["gemm_bound"] == 1.0  # compute-bound


def test_breakdown_sums_to_step_time():
    model = ROOFLINES[1]
    feats = (600, 512**2 + 2 * 512 * 1024, 88 * 1500, 1, 88)
    parts = model.breakdown(*feats)
    total = sum(v for k, v in parts.items() if k != "gemm_bound")
    assert total == pytest.approx(model.step_time(*feats), rel=1e-12)


@pytest.mark.parametrize("model", ROOFLINES, ids=[m.name for m in ROOFLINES])
def test_roofline_is_monotone_in_every_feature(model):
    base = np.array([256, 128**2, 100 * 1000, 1, 100])
    t0 = model.step_time(*base)
    for i in range(5):
        for step in (1, 10, 1000):
            bumped = base.copy()
            bumped[i] += step
            assert model.step_time(*bumped) >= t0
    # and along a decode sweep
    times = model.step_times(
        np.arange(0, 512), np.zeros(512), np.arange(0, 512) * 1000, np.zeros(512), np.arange(0, 512)
    )
    assert np.all(np.diff(times) >= 0)


def test_tensor_parallelism_speeds_up_70b():
    for gpu in ("a100-80gb", "h100-80gb"):
        tp1, tp2, tp4 = (RooflineCostModel("llama-2-70b", gpu, tp) for tp in (1, 2, 4))
        for feats in ((1, 0, 1024, 0, 1), (64, 0, 64 * 2048, 0, 64), (2048, 2048**2, 0, 1, 0)):
            assert tp2.step_time(*feats) < tp1.step_time(*feats)
            assert tp4.step_time(*feats) < tp2.step_time(*feats)


def test_faster_gpu_is_faster():
    feats = (32, 0, 32 * 1024, 0, 32)
    a100 = RooflineCostModel("llama-3-8b", "a100-80gb").step_time(*feats)
    h100 = RooflineCostModel("llama-3-8b", "h100-80gb").step_time(*feats)
    h200 = RooflineCostModel("llama-3-8b", "h200").step_time(*feats)
    assert h200 < h100 < a100


def test_empty_batch_costs_only_the_step_overhead():
    model = RooflineCostModel("llama-2-7b", "a100-80gb", 1)
    assert model.step_time(0, 0, 0, 0, 0) == model.params.step_overhead_s


def test_every_model_gpu_tp_combination_builds():
    for m, g, tp in itertools.product(list_models(), list_gpus(), (1, 2, 4, 8)):
        try:
            model = RooflineCostModel(m, g, tp)
        except CostModelError:
            continue  # heads not divisible
        assert 0 < model.step_time(1, 0, 100, 0, 1) < model.step_time(4096, 4096**2, 0, 1, 0)


def test_roofline_params_are_validated():
    with pytest.raises(CostModelError, match="gemm_mfu"):
        RooflineParams(gemm_mfu=1.5)
    with pytest.raises(CostModelError, match="layer_floor_s"):
        RooflineParams(layer_floor_s=-1.0)
    slow = RooflineCostModel("llama-2-7b", "a100", params=RooflineParams(hbm_bw_efficiency=0.4))
    assert slow.step_time(1, 0, 100, 0, 1) > RooflineCostModel("llama-2-7b", "a100").step_time(
        1, 0, 100, 0, 1
    )


def test_items_step_time_prices_c_m_items_as_the_engine_accumulates_them():
    from llmsched_gym.cost.base import LinearCostModel, item_features, items_step_time
    from llmsched_gym.cost.infermax import InferMaxCostModel

    items = [(1, 100), (64, 32), (1, 7), (3, 0)]
    assert item_features(items) == (69, 64 * 64 + 2 * 32 * 64 + 9, 107, 2, 2, 32)
    lin = LinearCostModel(0.01, 1e-4, 1e-8, 1e-6, 1e-3, 2e-4)
    assert items_step_time(lin, items) == lin.step_time(69, 64 * 64 + 2 * 32 * 64 + 9, 107, 2, 2)
    im = InferMaxCostModel()  # uses_prefill_kv: gets the prefill items' m too
    assert items_step_time(im, items) == im.step_time(
        69, 64 * 64 + 2 * 32 * 64 + 9, 107, 2, 2, prefill_kv=32
    )
    assert items_step_time(im, items) != im.step_time(69, 64 * 64 + 2 * 32 * 64 + 9, 107, 2, 2)


def test_items_step_time_classes_items_by_phase_for_phase_models_only():
    from llmsched_gym.cost.base import LinearCostModel, item_features, items_step_time
    from llmsched_gym.cost.infermax import InferMaxCostModel

    # The first one-token item is a prompt (prefill phase), the second a decode.
    items, phases = [(1, 100), (64, 32), (1, 7)], [True, True, False]
    assert item_features(items, phases) == (66, 1 + 200 + 64 * 64 + 2 * 32 * 64, 7, 2, 1, 132)
    im = InferMaxCostModel()  # phase_items
    assert items_step_time(im, items, phases) == im.step_time(
        66, 1 + 200 + 64 * 64 + 2 * 32 * 64, 7, 2, 1, prefill_kv=132
    )
    assert items_step_time(im, items, phases) != items_step_time(im, items)
    lin = LinearCostModel(0.01, 1e-4, 1e-8, 1e-6, 1e-3, 2e-4)  # prices by size: phases ignored
    assert items_step_time(lin, items, phases) == items_step_time(lin, items)
    with pytest.raises(ValueError):
        item_features(items, [True])
