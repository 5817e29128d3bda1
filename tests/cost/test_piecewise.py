"""PiecewiseCostModel: token term, prefill item terms, exact fast-forward, profiles, both cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from llmsched_gym.calibration import torch_fit
from llmsched_gym.config import EngineConfig
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import (
    PiecewiseCostModel,
    item_features,
    item_terms,
    items_step_time,
    prefill_item_terms,
)
from llmsched_gym.cost.registry import (
    ProfiledPiecewiseCostModel,
    list_profiles,
    load_cost_model,
    load_profile_file,
    profile_info,
)
from llmsched_gym.errors import CostModelError
from llmsched_gym.simulation import simulate

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "calibration/data/torch/h200-141gb"
KNOTS = (16, 128, 512, 2048)
SLOPES = (1e-6, 2e-5, 3e-5)
C0, CT, CA, CKV, CP, CD = 2e-3, 4e-5, 1e-9, 1e-7, 3e-4, 2e-5
EXTRA = {
    "c_split_path": 5e-4,
    "c_longest_context": 3e-7,
    "c_short_prefill_kv": 2e-7,
    "c_mixed": 7e-4,
    "c_short_prefill_chunks": 2e-4,
    "c_longest_prefill": 1e-6,
}


def _model(**extra: float) -> PiecewiseCostModel:
    return PiecewiseCostModel(
        C0, CT, CA, CKV, CP, CD, token_knots=KNOTS, token_slopes=SLOPES, **{**EXTRA, **extra}
    )


@pytest.mark.parametrize(
    "tokens,want",
    [
        (0, 0.0),
        (1, 0.0),
        (16, 0.0),  # flat up to the first knot
        (17, 1e-6 * 1),
        (128, 1e-6 * 112),
        (600, 1e-6 * 112 + 2e-5 * 384 + 3e-5 * 88),
        (3000, 1e-6 * 112 + 2e-5 * 384 + 3e-5 * 1536 + CT * 952),
    ],
)
def test_token_term_by_hand(tokens, want):
    assert _model().token_term(tokens) == pytest.approx(want, rel=1e-12)


def test_prefill_item_terms_by_hand():
    items = [(1, 700), (7, 900), (1, 20), (64, 1500), (200, 1000), (30, 100)]
    got = prefill_item_terms(items)
    assert got[:9] == item_terms(items)
    # Short prefills over > 512 cached: (7, 900) -> 2 chunks, (64, 1500) -> 3 chunks; the
    # longest other prefill span: (200, 1000) -> 1200 ((30, 100) is short but not long).
    assert got[9:] == (5, 1200)
    with pytest.raises(CostModelError, match="long_min_cached >= 1"):
        prefill_item_terms(items, long_min_cached=0)


def test_items_step_time_by_hand():
    cm = _model()
    items = [(1, 700), (7, 900), (200, 1000)]
    tokens, attn, dkv, npf, ndc, _ = item_features(items)
    want = (
        C0
        + cm.token_term(tokens)
        + CA * float(attn)
        + CKV * float(dkv)
        + CP * float(npf)
        + CD * float(ndc)
        + EXTRA["c_split_path"]
        + EXTRA["c_longest_context"] * 1000.0
        + EXTRA["c_short_prefill_kv"] * 900.0
        + EXTRA["c_mixed"]
        + EXTRA["c_short_prefill_chunks"] * 2.0
        + EXTRA["c_longest_prefill"] * 1200.0
    )
    assert items_step_time(cm, items) == want
    # One kind only: no mixed term.
    assert items_step_time(cm, [(1, 700), (1, 20)]) == cm.step_time(2, 0, 720, 0, 2, 1, 700)


def test_vectorised_equals_scalar_bit_for_bit():
    cm = _model()
    rng = np.random.default_rng(0)
    cols = [rng.integers(0, 5000, 300) for _ in range(10)]
    cols[0][:9] = [0, 1, 15, 16, 17, 128, 512, 2048, 2049]
    cols[3][:50] = 0  # decode-only and empty rows: no mixed term
    vec = cm.step_times(*cols)
    assert vec.tolist() == [cm.step_time(*map(int, row)) for row in zip(*cols, strict=True)]


@pytest.mark.parametrize("n,m0,longest", [(1, 500, 500), (7, 2000, 509), (128, 0, 0), (3, 9, 4)])
def test_decode_series_equals_step_time_bit_for_bit(n, m0, longest):
    cm = _model()
    durations, starts = cm.decode_series_longest(n, m0, longest, 40, 1.5, float("inf"))
    want = [
        cm.step_time(n, 0, m0 + j * n, 0, n, 1 if longest + j > 512 else 0, longest + j, 0)
        for j in range(40)
    ]
    assert durations == want and len(starts) == 41
    cut, _ = cm.decode_series_longest(n, m0, longest, 40, 0.0, want[0] + want[1] / 2)
    assert cut == want[:2]  # the step starting before stop is taken, the next is not


def _workload(n=24, seed=5):
    rng = np.random.default_rng(seed)
    return [
        RequestSpec(f"r{i}", 0.2 * i, int(rng.integers(300, 900)), int(rng.integers(50, 300)), 300)
        for i in range(n)
    ]


@pytest.mark.parametrize("spec", ["model", "torch-pw:llama-3-8b@h200-141gb/tp1"])
def test_decode_stretches_fast_forward_bit_identically(spec):
    """Contexts cross 512 inside stretches; the records equal the stepped run's."""
    cm = _model() if spec == "model" else load_cost_model(spec)
    cfg = EngineConfig(max_num_batched_tokens=1024, max_num_seqs=8, block_size=16,
                       num_gpu_blocks=600)  # fmt: skip
    a = simulate(_workload(), cfg, cost_model=cm, record_steps=True, fast_forward=True)
    assert a.num_fast_forward_steps > 0
    b = simulate(_workload(), cfg, cost_model=cm, record_steps=True, fast_forward=False)
    assert a.requests.equals(b.requests)
    assert a.steps["duration_s"].tolist() == b.steps["duration_s"].tolist()


def test_engine_prices_each_step_from_its_items():
    cm = _model()
    cfg = EngineConfig(max_num_batched_tokens=600, max_num_seqs=4, block_size=16,
                       num_gpu_blocks=64)  # fmt: skip
    res = simulate([RequestSpec("a", 0.0, 700, 3, 3)], cfg, cost_model=cm, record_steps=True)
    assert res.steps["duration_s"].tolist() == [
        items_step_time(cm, [(600, 0)]),
        items_step_time(cm, [(100, 600)]),
        items_step_time(cm, [(1, 700)]),
        items_step_time(cm, [(1, 701)]),
    ]
    assert items_step_time(cm, [(100, 600)]) == cm.step_time(
        100, 100 * 100 + 2 * 600 * 100, 0, 1, 0, 1, 600, 600, 2, 0
    )


SHIPPED_PW = ["llama-2-7b", "llama-3-8b", "qwen2-7b"]


@pytest.mark.parametrize("model", SHIPPED_PW)
def test_shipped_piecewise_profiles_load_and_refit_identically(model):
    name = f"torch-pw:{model}@h200-141gb/tp1"
    assert name in list_profiles()
    shipped = load_cost_model(name)
    assert type(shipped) is ProfiledPiecewiseCostModel and shipped.model == model
    assert profile_info(name).kind == "piecewise" and shipped.num_gpu_blocks() > 0
    meas = torch_fit.load_measurements(MEASURED / model)
    tf = torch_fit.fit_measurements(meas, form="piecewise")
    assert torch_fit.profile_name(meas, "piecewise")[0] == name
    assert shipped.coefficients() == pytest.approx(tf.fit.model.coefficients(), rel=1e-9)
    assert shipped.token_knots == KNOTS
    assert shipped.token_slopes == pytest.approx(tf.fit.model.token_slopes, rel=1e-9)
    assert shipped.fit["heldout"]["mape_pct"] == pytest.approx(tf.fit.heldout.mape_pct, abs=1e-3)


def _doc() -> dict:
    path = ROOT / "llmsched_gym/cost/profiles/torch-pw-llama-2-7b-h200-141gb-tp1.yaml"
    return yaml.safe_load(path.read_text())


def _edit(doc: dict, where: str, value) -> dict:
    keys = where.split(".")
    node = doc
    for k in keys[:-1]:
        node = node[k]
    if value is None:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return doc


@pytest.mark.parametrize(
    "where,value,match",
    [
        ("terms.token_knots", [16, 16, 512, 2048], "strictly increasing"),
        ("terms.token_knots", [0, 128, 512, 2048], "integers >= 1"),
        ("terms.token_knots", "16,128", "terms.token_knots must be a list"),
        ("terms.token_slopes", [1e-6, 2e-5], r"one slope per interval .*3 for knots"),
        ("terms.token_slopes", [1e-6, -2e-5, 3e-5], r"token_slopes\[1\] must be a finite number"),
        ("terms.token_slopes", [1e-6, ".2", 3e-5], r"token_slopes\[1\] must be a finite number"),
        ("terms.token_slopes", None, "needs terms with token_knots and token_slopes"),
        ("terms.token_knee", 128, "needs terms with token_knots and token_slopes"),
        ("terms.long_min_cached", 0, "long_min_cached .* must be >= 1"),
        ("coefficients.c_mixed", float("nan"), "c_mixed must be a number"),
        ("coefficients.c_mixed", "fast", "coefficients.c_mixed must be a number"),
        ("coefficients.c_bogus", 1.0, "coefficients must map"),
        ("coefficients.c0", 0.0, "c0 .* must be > 0"),
        ("coefficients.c_tokens", -1e-5, "c_tokens .* must be >= 0"),
        ("kind", "spline", "kind must be 'linear' or 'piecewise'"),
    ],
)
def test_bad_piecewise_profiles_are_clear_errors(tmp_path, where, value, match):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(_edit(_doc(), where, value)))
    with pytest.raises(CostModelError, match=match) as err:
        load_profile_file(path)
    assert str(path) in str(err.value)


def test_bad_piecewise_models_are_clear_errors():
    with pytest.raises(CostModelError, match="unknown coefficient .c_split."):
        PiecewiseCostModel(C0, c_split=1.0)
    with pytest.raises(CostModelError, match="unknown terms"):
        PiecewiseCostModel(C0)._init_terms({}, {"token_knee": 128})
    with pytest.raises(CostModelError, match="non-empty list"):
        PiecewiseCostModel(C0, token_knots=[])


PROBE = r"""
import json, numpy as np
from llmsched_gym.cost.base import items_step_time, PiecewiseCostModel
from llmsched_gym.cost.registry import load_cost_model
from llmsched_gym.config import EngineConfig
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.simulation import simulate
import llmsched_gym.cost.base as base
cm = load_cost_model("torch-pw:qwen2-7b@h200-141gb/tp1")
rng = np.random.default_rng(1)
out = {"compiled": base.__file__.endswith((".so", ".pyd")), "prices": [], "errors": []}
for _ in range(200):
    n = int(rng.integers(1, 9))
    items = [(int(rng.choice([1, 1, 5, 100, 300])), int(rng.integers(0, 3000))) for _ in range(n)]
    out["prices"].append(items_step_time(cm, items).hex())
cols = [rng.integers(0, 5000, 100) for _ in range(10)]
out["vector"] = [float(v).hex() for v in cm.step_times(*cols)]
out["vector"] += [float(v).hex() for v in cm.step_times(*cols[:8])]
for kw in ({"token_knots": [4, 2]}, {"token_slopes": [1.0]}, {"c_mixed": float("inf")},
           {"token_knots": [True, 8], "token_slopes": [0.0]}):
    try:
        PiecewiseCostModel(1e-3, **kw)
    except Exception as exc:
        out["errors"].append([type(exc).__name__, str(exc)])
for fn in (cm.step_time, cm.step_times):
    try:
        fn(1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0)
    except TypeError as exc:
        out["errors"].append([type(exc).__name__, str(exc)])
rng = np.random.default_rng(5)
work = [RequestSpec(f"r{i}", 0.2 * i, int(rng.integers(300, 900)), int(rng.integers(50, 300)),
                    300) for i in range(24)]
cfg = EngineConfig(max_num_batched_tokens=1024, max_num_seqs=8, block_size=16, num_gpu_blocks=600)
res = simulate(work, cfg, cost_model=cm, record_steps=True)
out["durations"] = [float(d).hex() for d in res.steps["duration_s"]]
print(json.dumps(out))
"""


def test_compiled_and_pure_cores_price_and_refuse_identically():
    runs = []
    for pure in ("0", "1"):
        env = {**os.environ, "LLMSCHED_PURE": pure}
        proc = subprocess.run(
            [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert not runs[1]["compiled"]
    assert len(runs[0]["errors"]) == 6
    for key in ("prices", "vector", "errors", "durations"):
        assert runs[0][key] == runs[1][key], key
