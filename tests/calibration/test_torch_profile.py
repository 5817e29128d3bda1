"""The torch profiler and its fit: split-KV exactness, CPU end-to-end run, shipped H200 fits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch profiler needs PyTorch (scripts/setup.sh)")

from llmsched_gym.calibration import torch_fit, torch_profile  # noqa: E402
from llmsched_gym.calibration.torch_profile import (  # noqa: E402
    PROFILER_VERSION,
    TINY_LLAMA,
    ProfileGrid,
    ProfilerConfig,
    attention_groups,
    combine_partials,
    reference_varlen,
    run_profile,
    split_kv_attention,
    split_plan,
)
from llmsched_gym.cli.main import main as cli_main  # noqa: E402
from llmsched_gym.cost.registry import load_cost_model, load_profile_file  # noqa: E402
from llmsched_gym.errors import CostModelError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "calibration" / "data" / "torch"


@pytest.mark.parametrize(
    "c,m,hq,hkv",
    [
        ([1, 1, 1], [700, 40, 1500], 4, 4),
        ([1, 7, 300, 1], [2000, 900, 600, 0], 8, 2),
        ([5], [1030], 4, 1),
    ],
)
def test_split_kv_attention_equals_unsplit(c, m, hq, hkv):
    """Chunked cached KV merged by log-sum-exp gives the unsplit causal attention."""
    gen = torch.Generator().manual_seed(0)
    d = 16
    total_k = sum(c) + sum(m)
    q = torch.randn(sum(c), hq, d, generator=gen)
    k = torch.randn(total_k, hkv, d, generator=gen)
    v = torch.randn(total_k, hkv, d, generator=gen)
    cu_q = np.concatenate([[0], np.cumsum(c)])
    cu_k = np.concatenate([[0], np.cumsum(np.add(c, m))])
    want, _ = reference_varlen(q, k, v, cu_q, cu_k, None, max(c), 0, True)
    plan = split_plan(c, m, chunk=256)
    assert plan is not None
    assert plan.num_rows == sum(c)
    got = split_kv_attention(
        torch, reference_varlen, q, k, v, plan.to_device(torch, "cpu"), combine_partials
    )
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)


def test_split_plan_skips_short_contexts_and_long_chunks():
    assert split_plan([1, 1], [100, 200], chunk=512) is None
    assert split_plan([1000], [5000], chunk=512) is None
    plan = split_plan([1, 1000], [1300, 5000], chunk=512)
    # Only the decode is split: ceil(1300 / 512) = 3 chunks of one row each.
    assert list(plan.a_used_k) == [512, 512, 276]
    assert list(plan.b_used_k) == [1, 6000]


def test_attention_groups_split_mixed_batches_only():
    assert [g.tolist() for g in attention_groups([1, 7, 1, 300])] == [[0, 2], [1, 3]]
    assert [g.tolist() for g in attention_groups([1, 1])] == [[0, 1]]
    assert [g.tolist() for g in attention_groups([5, 9])] == [[0, 1]]
    assert [g.tolist() for g in attention_groups([1, 7], separate_decodes=False)] == [[0, 1]]


MIXED_C, MIXED_M = [1, 7, 1, 300, 1], [700, 900, 40, 600, 0]


def _tiny_model(flash: bool, separate: bool, monkeypatch):
    """A CPU tiny-llama; ``flash``: the GPU code path with the reference varlen kernel."""
    cfg = ProfilerConfig(
        model="tiny-llama", device="cpu", dtype="float32", grid=ProfileGrid.small(),
        kv_split_tokens=64, separate_decode_attention=separate,
    )  # fmt: skip
    model = torch_profile._Model(torch, TINY_LLAMA, cfg, 4096)
    if flash:
        monkeypatch.setattr(torch_profile, "_flash_varlen", torch_profile.reference_varlen)
        model.flash = True
    calls = []
    attend = model.attend

    def spy(q, g):
        calls.append((g.rows.tolist(), q.shape[0], g.max_q))
        return attend(q, g)

    model.attend = spy
    return model, calls


@pytest.mark.parametrize("flash", [False, True], ids=["cpu-path", "gpu-path"])
def test_mixed_batch_runs_decodes_and_prefills_in_two_attention_calls(flash, monkeypatch):
    """Version 2: decode rows in their own call (max_seqlen_q 1), prefill rows in another."""
    q = torch.randn(sum(MIXED_C), 4, 64, generator=torch.Generator().manual_seed(1))
    outs = []
    for separate in (True, False):
        model, calls = _tiny_model(flash, separate, monkeypatch)
        batch = model.batch_inputs(MIXED_C, MIXED_M)
        outs.append(model.attention(q, batch))
        if separate:
            # Rows: decodes are items 0, 2, 4 (rows 0, 8, 309); prefills items 1 (1-7), 3.
            assert calls == [
                ([0, 8, 309], 3, 1),
                (list(range(1, 8)) + list(range(9, 309)), 307, 300),
            ]
            if flash:
                assert all(g.split is not None for g in batch.groups)
        else:
            assert calls == [(list(range(310)), 310, 300)]
    # Same attention output either way (the rows go back in batch order).
    assert torch.allclose(outs[0], outs[1], atol=1e-5, rtol=1e-4)


def test_gpu_and_cpu_attention_paths_agree_on_a_mixed_batch(monkeypatch):
    q = torch.randn(sum(MIXED_C), 4, 64, generator=torch.Generator().manual_seed(2))
    cpu, _ = _tiny_model(False, True, monkeypatch)
    gpu, _ = _tiny_model(True, True, monkeypatch)
    want = cpu.attention(q, cpu.batch_inputs(MIXED_C, MIXED_M))
    got = gpu.attention(q, gpu.batch_inputs(MIXED_C, MIXED_M))
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4)


def test_one_kind_batches_keep_one_call(monkeypatch):
    for c, m in (([1, 1, 1], [5, 700, 30]), ([9, 300], [0, 700])):
        model, calls = _tiny_model(True, True, monkeypatch)
        batch = model.batch_inputs(c, m)
        model.attention(torch.randn(sum(c), 4, 64), batch)
        assert len(calls) == 1 and batch.groups[0].whole and batch.unpermute is None


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("torchprof")
    grid = ProfileGrid.small()
    cfg = ProfilerConfig(
        model="tiny-llama", device="cpu", dtype="float32", grid=grid, warmup=1, repeats=2
    )
    return run_profile(cfg, out / "tiny-llama", progress=False)


def test_cpu_profile_writes_measurements(cpu_run):
    meas = torch_fit.load_measurements(cpu_run)
    assert meas.steps.num_batches == ProfileGrid.small().num_steps
    assert set(meas.operators["operator"]) >= {"attn_prefill", "attn_decode", "mlp_up_proj"}
    assert (meas.step_times_s > 0).all()
    meta = json.loads((cpu_run / "meta.json").read_text())
    assert meta["hardware"]["device"] == "cpu" and meta["num_layers_run"] == 2
    assert meta["profiler_version"] == PROFILER_VERSION == 2
    assert meta["config"]["mixed_batch_attention"].startswith("decode rows and prefill rows")
    assert torch_fit.profiler_version(meta) == 2
    assert not list(cpu_run.glob("*.tmp"))


def test_cpu_fit_writes_loadable_profile_and_report(cpu_run, tmp_path):
    meas = torch_fit.load_measurements(cpu_run)
    tf = torch_fit.fit_measurements(meas)
    assert tf.fit.heldout.n == round(0.2 * meas.steps.num_batches)
    assert set(tf.predictions["kind"]) == set(torch_fit.KINDS)
    out = torch_fit.write_fit_outputs(tf, tmp_path / "p.yaml", tmp_path / "r.md")
    prof = load_profile_file(out["profile"])
    assert prof.name == "torch:tiny-llama@cpu/tp1"
    assert prof.coefficients() == pytest.approx(tf.fit.model.coefficients())
    text = out["report"].read_text()
    assert "held-out measured steps" in text and "kind: decode-only" in text
    assert out["plot"].stat().st_size > 0


def test_fit_forms_table_and_profiler_version(cpu_run, tmp_path):
    meas = torch_fit.load_measurements(cpu_run)
    tf = torch_fit.fit_measurements(meas, form="linear")
    assert tf.form == "linear" and not getattr(tf.fit.model, "item_priced", False)
    assert tf.fit.model.coefficients() == tf.linear_fit.model.coefficients()
    assert list(tf.forms["form"]) == list(torch_fit.FORMS)
    lin = tf.forms.set_index("form").loc["linear", "heldout_mape_pct"]
    assert lin == pytest.approx(tf.linear_fit.heldout.mape_pct)
    out = torch_fit.write_fit_outputs(tf, tmp_path / "p.yaml", tmp_path / "r.md")
    assert type(load_profile_file(out["profile"])).__name__ == "ProfiledLinearCostModel"
    text = out["report"].read_text()
    assert "Profiler version 2 (the current version)" in text and "analysis only" in text
    with pytest.raises(CostModelError, match="fit form"):
        torch_fit.fit_measurements(meas, form="quadratic")
    old = dict(meas.meta)
    old.pop("profiler_version")
    assert torch_fit.profiler_version(old) == 1


def test_calibrate_cli_refits_from_folder(cpu_run, tmp_path, capsys):
    assert cli_main(["calibrate", "--from", str(cpu_run), "--out", str(tmp_path)]) == 0
    assert "held-out MAPE" in capsys.readouterr().out
    assert (tmp_path / "torch-tiny-llama-cpu-tp1.yaml").is_file()


def test_calibrate_cli_measures_on_cpu(tmp_path, capsys):
    rc = cli_main(
        ["calibrate", "--device", "cpu", "--small", "--steps", "20", "--out", str(tmp_path)]
    )
    assert rc == 0
    assert (tmp_path / "tiny-llama" / "steps.csv").is_file()
    assert (tmp_path / "tiny-llama" / "torch-tiny-llama-cpu-tp1.yaml").is_file()


def test_malformed_measurements_are_named(cpu_run, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(cpu_run, bad)
    lines = (bad / "steps.csv").read_text().splitlines()
    lines[3] = "2,1:x;4:5,0.1"
    (bad / "steps.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(CostModelError, match=r"steps.csv row 4: items"):
        torch_fit.load_measurements(bad)
    (bad / "meta.json").unlink()
    with pytest.raises(CostModelError, match="no meta.json"):
        torch_fit.load_measurements(bad)


def test_bad_profiler_settings_raise():
    with pytest.raises(CostModelError, match="repeats"):
        ProfilerConfig(repeats=0).validate()
    with pytest.raises(CostModelError, match="num_steps"):
        ProfilerConfig(grid=ProfileGrid(num_steps=1)).validate()
    with pytest.raises(CostModelError, match="Llama-style"):
        run_profile(ProfilerConfig(model="opt-13b", device="cpu"), "/nonexistent/never")


def test_gpu_names_map_to_catalogue():
    assert torch_fit.gpu_of({"hardware": {"gpu_name": "NVIDIA H200"}}) == "h200-141gb"
    a100 = {"gpu_name": "NVIDIA A100-SXM4-40GB", "gpu_memory_gib": 39.4}
    assert torch_fit.gpu_of({"hardware": a100}) == "a100-40gb"
    assert torch_fit.gpu_of({"hardware": {"device": "cpu"}}) is None


SHIPPED_RUNS = sorted(p.parent for p in SHIPPED.glob("*/*/meta.json"))


@pytest.mark.parametrize("folder", SHIPPED_RUNS, ids=[p.name for p in SHIPPED_RUNS])
def test_shipped_gpu_profiles_refit_identically(folder):
    """The shipped H200 profiles are exactly what a refit of the shipped measurements gives."""
    meas = torch_fit.load_measurements(folder)
    tf = torch_fit.fit_measurements(meas)
    name = torch_fit.profile_name(meas)[0]
    shipped = load_cost_model(name)
    assert shipped.coefficients() == pytest.approx(tf.fit.model.coefficients(), rel=1e-9)
    assert shipped.fit["heldout"]["mape_pct"] == pytest.approx(tf.fit.heldout.mape_pct, abs=1e-3)
    assert shipped.terms() == tf.fit.model.terms()
    assert shipped.source["profiler_version"] == torch_fit.profiler_version(meas.meta)


def test_shipped_gpu_runs_exist():
    assert len(SHIPPED_RUNS) >= 2, "at least two measured GPU model configurations are shipped"
