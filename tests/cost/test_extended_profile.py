"""The extended linear form: item-level features, its fit, and profiles that carry it."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from llmsched_gym.calibration.linearfit import (
    FEATURES,
    ITEM_TERMS,
    design_batches,
    fit_extended,
    fit_linear,
)
from llmsched_gym.cost.base import ExtendedLinearCostModel, item_terms, items_step_time
from llmsched_gym.cost.registry import (
    ProfiledExtendedCostModel,
    list_profiles,
    load_cost_model,
    load_profile_file,
)
from llmsched_gym.errors import CostModelError

TRUE = dict(
    c0=2e-3, c_tokens=3e-5, c_prefill_attn=1e-9, c_decode_kv=5e-8, c_prefill=4e-4, c_decode=6e-5,
    c_split_path=7e-4, c_longest_context=4e-7, c_short_prefill_kv=2e-7,
)  # fmt: skip


def test_batchset_item_terms_match_the_engine_pricer():
    """The fit's vectorised features equal item_terms of each batch (the engine's pricer)."""
    bs = design_batches(300, seed=4, max_num_batched_tokens=2048, max_num_seqs=64)
    feats, terms = bs.features(), bs.item_terms()
    for b in range(bs.num_batches):
        c, m = bs.items_of(b)
        got = item_terms(zip(c.tolist(), m.tolist(), strict=True))
        assert got[:5] == tuple(int(feats[f][b]) for f in FEATURES)
        assert got[6:] == tuple(int(terms[f][b]) for f in ITEM_TERMS)
        short_prefill = ((c > 1) & (c <= 128) & (m > 512)).any()
        want = int(m[c == 1].sum()) if short_prefill else 0
        assert terms["decode_kv_short_prefill"][b] == want


def test_fit_extended_recovers_an_extended_model():
    bs = design_batches(400, seed=1)
    truth = ExtendedLinearCostModel(**TRUE, token_knee=128)
    feats, terms = bs.features(), bs.item_terms()
    y = truth.step_times(*(feats[f] for f in FEATURES), *(terms[f] for f in ITEM_TERMS))
    for b in range(0, bs.num_batches, 37):  # the engine's item pricer agrees
        c, m = bs.items_of(b)
        assert items_step_time(truth, list(zip(c.tolist(), m.tolist(), strict=True))) == y[b]
    fit = fit_extended(feats, terms, y, "x", token_knee=128)
    assert fit.heldout.mape_pct < 1e-6
    assert fit.model.coefficients() == pytest.approx(TRUE, rel=1e-5)
    assert fit.model.terms() == {"token_knee": 128, "short_max_new_tokens": 128,
                                 "long_min_cached": 512}  # fmt: skip
    plain = fit_linear(feats, y, "plain")
    assert plain.heldout.mape_pct > 1.0  # the linear form cannot express the knee and terms
    assert np.array_equal(plain.heldout_index, fit.heldout_index)  # same split


def _write(tmp_path, coefficients, terms=None):
    doc = {"kind": "linear", "name": "x", "coefficients": coefficients}
    if terms is not None:
        doc["terms"] = terms
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_profile_files_with_extra_terms_load_as_extended(tmp_path):
    cm = load_profile_file(_write(tmp_path, TRUE, {"token_knee": 64}))
    assert isinstance(cm, ProfiledExtendedCostModel) and cm.item_priced
    assert cm.coefficients() == TRUE and cm.token_knee == 64 and cm.long_min_cached == 512
    assert not cm.decode_priced_by_sums
    base = {k: v for k, v in TRUE.items() if k.startswith("c_") and "split" not in k}
    base = {k: v for k, v in base.items() if k not in ("c_longest_context", "c_short_prefill_kv")}
    only_knee = load_profile_file(_write(tmp_path, {"c0": 1e-3, **base}, {"token_knee": 128}))
    assert isinstance(only_knee, ProfiledExtendedCostModel) and only_knee.decode_priced_by_sums
    with pytest.raises(CostModelError, match="coefficients must map exactly"):
        load_profile_file(_write(tmp_path, {**TRUE, "c_gqa": 1.0}))
    with pytest.raises(CostModelError, match="terms must map"):
        load_profile_file(_write(tmp_path, TRUE, {"knee": 1}))
    with pytest.raises(CostModelError, match="token_knee must be an integer"):
        load_profile_file(_write(tmp_path, TRUE, {"token_knee": -1}))
    with pytest.raises(CostModelError, match="c_split_path must be a number"):
        load_profile_file(_write(tmp_path, {**TRUE, "c_split_path": "x"}))


def test_shipped_torch_profiles_are_extended_and_item_priced():
    names = [n for n in list_profiles() if n.startswith("torch:")]
    assert len(names) >= 3
    for name in names:
        cm = load_cost_model(name)
        assert isinstance(cm, ProfiledExtendedCostModel) and cm.item_priced
        assert cm.fit["form"] == "extended"
        assert cm.fit["heldout"]["mape_pct"] < cm.fit["linear_form_heldout"]["mape_pct"]
        assert cm.token_knee == 128 and cm.num_gpu_blocks() > 0
