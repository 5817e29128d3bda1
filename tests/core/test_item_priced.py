"""Cost models priced from each step's items (``item_priced``: the extended linear form)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import (
    ExtendedLinearCostModel,
    LinearCostModel,
    item_features,
    item_terms,
    items_step_time,
)
from llmsched_gym.cost.registry import ProfiledLinearCostModel, list_profiles, load_cost_model
from llmsched_gym.simulation import simulate

C0, CT, CA, CKV, CP, CD = 2e-3, 1e-5, 1e-9, 1e-7, 3e-4, 2e-5
CS, CL, CSP = 5e-4, 3e-7, 2e-7


def _model(knee=128, split=CS, longest=CL, spkv=CSP) -> ExtendedLinearCostModel:
    return ExtendedLinearCostModel(
        C0, CT, CA, CKV, CP, CD, c_split_path=split, c_longest_context=longest,
        c_short_prefill_kv=spkv, token_knee=knee,
    )  # fmt: skip


def _base(t, attn, dkv, npf, ndc):
    return C0 + CT * float(t) + CA * float(attn) + CKV * float(dkv) + CP * float(npf) + CD * ndc


def test_knee_term_by_hand():
    cm = _model(split=0.0, longest=0.0, spkv=0.0)
    # Ten decodes on 100 cached tokens each: 10 tokens priced as the knee's 128.
    items = [(1, 100)] * 10
    assert items_step_time(cm, items) == _base(128, 0, 1000, 0, 10)
    assert items_step_time(cm, [(200, 0)]) == _base(200, 200 * 200, 0, 1, 0)
    assert cm.step_time(0, 0, 0, 0, 0) == C0  # an empty step gets no knee
    assert _model(knee=0).step_time(10, 0, 0, 0, 10) == _base(10, 0, 0, 0, 10)


@pytest.mark.parametrize(
    "items,split",
    [
        ([(1, 513)], 1),  # a decode over a long context takes the split path
        ([(1, 512)], 0),
        ([(128, 600)], 1),  # a short chunk over a long context
        ([(129, 600)], 0),  # a long chunk: many query tiles, no split
        ([(300, 0), (7, 900)], 1),
        ([(300, 0), (7, 100)], 0),
    ],
)
def test_split_path_term_by_hand(items, split):
    cm = _model(knee=0, longest=0.0, spkv=0.0)
    t, attn, dkv, npf, ndc, _ = item_features(items)
    assert item_terms(items)[6] == split
    assert items_step_time(cm, items) == _base(t, attn, dkv, npf, ndc) + CS * float(split)


def test_longest_context_and_short_prefill_kv_by_hand():
    items = [(1, 700), (7, 900), (1, 20), (64, 300), (2000, 1000)]
    tokens, attn, dkv, npf, ndc, pkv, split, longest, spkv = item_terms(items)
    assert (tokens, dkv, npf, ndc, pkv) == (2073, 720, 3, 2, 2200)
    assert (split, longest, spkv) == (1, 1000, 900)  # (64, 300): short but not long
    cm = _model(knee=0, split=0.0, spkv=0.0)
    assert items_step_time(cm, items) == _base(tokens, attn, dkv, npf, ndc) + CL * 1000.0
    cm = _model(knee=0, split=0.0, longest=0.0)
    assert items_step_time(cm, items) == _base(tokens, attn, dkv, npf, ndc) + CSP * 900.0
    # Thresholds are the model's own.
    cm = ExtendedLinearCostModel(C0, c_split_path=1.0, short_max_new_tokens=4, long_min_cached=10)
    assert items_step_time(cm, [(5, 900)]) == C0 and items_step_time(cm, [(4, 11)]) == C0 + 1.0


def test_vectorised_equals_scalar_bit_for_bit():
    cm = _model()
    rng = np.random.default_rng(0)
    cols = [rng.integers(0, 5000, 200) for _ in range(8)]
    cols[0][:5] = [0, 1, 127, 128, 129]
    vec = cm.step_times(*cols)
    assert vec.tolist() == [cm.step_time(*map(int, row)) for row in zip(*cols, strict=True)]
    assert cm.step_times(*cols[:5]).tolist() == [
        cm.step_time(*map(int, row)) for row in zip(*cols[:5], strict=True)
    ]


def test_engine_prices_each_step_from_its_items():
    """Prompt 700 with a 600-token budget: a chunk, a short chunk over 600 cached, decodes."""
    cm = _model()
    cfg = EngineConfig(max_num_batched_tokens=600, max_num_seqs=4, block_size=16,
                       num_gpu_blocks=64)  # fmt: skip
    res = simulate([RequestSpec("a", 0.0, 700, 4, 4)], cfg, cost_model=cm, record_steps=True)
    got = res.steps["duration_s"].tolist()
    want = [
        _base(600, 600 * 600, 0, 1, 0),
        # 100 new tokens (knee 128) on 600 cached: split path, longest 600, short-prefill KV 600.
        _base(128, 100 * 100 + 2 * 600 * 100, 0, 1, 0) + CS + CL * 600.0 + CSP * 600.0,
        _base(128, 0, 700, 0, 1) + CS + CL * 700.0,
        _base(128, 0, 701, 0, 1) + CS + CL * 701.0,
        _base(128, 0, 702, 0, 1) + CS + CL * 702.0,
    ]
    assert got == want


def _workload(n=12):
    rng = np.random.default_rng(3)
    return [
        RequestSpec(f"r{i}", 0.05 * i, int(rng.integers(1, 900)), int(rng.integers(2, 60)), 60)
        for i in range(n)
    ]


@pytest.mark.parametrize(
    "cm",
    [_model(), _model(split=0.0, longest=0.0), _model(split=0.0, longest=0.0, knee=0)],
    ids=["all-terms", "knee+short-prefill-kv", "short-prefill-kv"],
)
def test_fast_forward_on_and_off_give_identical_runs(cm):
    cfg = EngineConfig(max_num_batched_tokens=256, max_num_seqs=8, block_size=16,
                       num_gpu_blocks=400)  # fmt: skip
    a = simulate(_workload(), cfg, cost_model=cm, record_steps=True, fast_forward=True)
    b = simulate(_workload(), cfg, cost_model=cm, record_steps=True, fast_forward=False)
    assert a.requests.equals(b.requests)
    assert a.steps["duration_s"].tolist() == b.steps["duration_s"].tolist()


def test_models_whose_decodes_need_items_fast_forward_exactly():
    """Decode stretches are priced with the longest context growing by one a step.

    Contexts cross ``long_min_cached`` (512) inside stretches here (prompts up to 900 tokens,
    outputs up to 300), so the split-path term switches on mid-stretch; the records must equal
    the stepped run's, and stretches must happen.
    """
    rng = np.random.default_rng(5)
    work = [
        RequestSpec(f"r{i}", 0.2 * i, int(rng.integers(300, 900)), int(rng.integers(50, 300)), 300)
        for i in range(24)
    ]
    cfg = EngineConfig(max_num_batched_tokens=1024, max_num_seqs=8, block_size=16,
                       num_gpu_blocks=600)  # fmt: skip
    for cm in (_model(), load_cost_model("torch:llama-3-8b@h200-141gb/tp1")):
        a = simulate(work, cfg, cost_model=cm, record_steps=True, fast_forward=True)
        assert a.num_fast_forward_steps > 0  # stretches happened
        b = simulate(work, cfg, cost_model=cm, record_steps=True, fast_forward=False)
        assert a.requests.equals(b.requests)
        assert a.steps["duration_s"].tolist() == b.steps["duration_s"].tolist()


def test_plain_profiles_are_unchanged():
    """Profiles without extra terms load and price exactly as the six-coefficient model."""
    rng = np.random.default_rng(1)
    cols = [rng.integers(0, 5000, 50) for _ in range(5)]
    for name in list_profiles():
        cm = load_cost_model(name)
        if name.startswith(("torch:", "torch-pw:")):
            continue
        assert type(cm) is ProfiledLinearCostModel and not getattr(cm, "item_priced", False)
        plain = LinearCostModel(**cm.coefficients())
        for row in zip(*cols, strict=True):
            assert cm.step_time(*row) == plain.step_time(*row)
            items = [(int(row[0]) or 1, 7)]
            assert items_step_time(cm, items) == cm.step_time(*item_features(items)[:5])


# Step durations of _workload() under the engine before item pricing existed (sha256 of the
# float64 durations, first 16 hex digits; fast-forward on and off alike).
GOLDEN = {
    "vidur:llama-2-7b@a100-80gb/tp1": (73, "ca4c5e3172e83f6f"),
    "roofline:llama-2-7b@a100-80gb/tp1": (76, "74d57b68bc6b662e"),
    "infermax:llama-2-7b": (104, "04b4ff15b42d29f1"),
}


@pytest.mark.parametrize("spec", sorted(GOLDEN))
@pytest.mark.parametrize("ff", [True, False])
def test_existing_models_step_times_are_bit_identical(spec, ff):
    cfg = EngineConfig(max_num_batched_tokens=256, max_num_seqs=8, block_size=16,
                       num_gpu_blocks=400)  # fmt: skip
    res = simulate(_workload(), cfg, cost_model=spec, record_steps=True, fast_forward=ff)
    d = np.asarray(res.steps["duration_s"].tolist(), dtype=np.float64)
    assert (len(d), hashlib.sha256(d.tobytes()).hexdigest()[:16]) == GOLDEN[spec]
