"""The cost-form comparison: every form, model and split, regenerated as committed."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from llmsched_gym.calibration import forms

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "calibration/reports/cost-forms"


def test_committed_comparison_regenerates_whole(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    lines: list[str] = []
    assert forms.main(["--out", str(tmp_path)], print_fn=lines.append) == 0
    splits = pd.read_csv(tmp_path / "splits.csv")
    # Declared: every form, every model, every seed (nothing picked).
    assert len(splits) == len(forms.FORMS) * len(forms.MODELS) * len(forms.SEEDS)
    assert set(splits["form"]) == {f.key for f in forms.FORMS}
    traj = pd.read_csv(tmp_path / "trajectories.csv")
    assert set(traj["model"]) == {"llama-3-8b", "qwen2-7b"}  # llama-2-7b: none measured
    assert len(traj) == len(forms.FORMS) * 2 * len(forms.SEEDS) * 2
    for name in ("splits.csv", "trajectories.csv", "regions.csv"):
        new, old = pd.read_csv(tmp_path / name), pd.read_csv(COMMITTED / name)
        pd.testing.assert_frame_equal(new, old, atol=0.01, check_exact=False)
    assert (tmp_path / "report.md").read_text() == (COMMITTED / "report.md").read_text()
    assert lines[-1].startswith("wrote ")


def test_the_shipped_piecewise_fit_is_the_forms_seed_0_row():
    """``torch-pw:*`` profiles are the ``piecewise`` form fitted on seed 0 (same columns)."""
    from llmsched_gym.cost.registry import load_cost_model

    splits = pd.read_csv(COMMITTED / "splits.csv")
    for model in forms.MODELS:
        cm = load_cost_model(f"torch-pw:{model}@h200-141gb/tp1")
        row = splits[(splits.model == model) & (splits.form == "piecewise") & (splits.seed == 0)]
        assert abs(float(row["heldout_mape_pct"].iloc[0]) - cm.fit["heldout"]["mape_pct"]) < 0.01


def _has_avx512() -> bool:
    """Whether this CPU runs OpenBLAS's SkylakeX kernels (AVX-512F; they crash without it)."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx512f" in line for line in f)
    except OSError:
        return False


@pytest.mark.parametrize("core", ["Haswell", "SkylakeX", "Sandybridge"])
def test_the_comparison_regenerates_under_other_blas_kernels(tmp_path, core):
    """Kernels differ in the last bits of the linear fits; the stump splits must not amplify it
    (near-ties keep the first split, ``forms.GAIN_TIE``), so any x86 CPU regenerates the files.
    SkylakeX runs where the CPU has AVX-512 (an AMD EPYC of the Zen 2/3 kind has not)."""
    import os
    import subprocess
    import sys

    if core == "SkylakeX" and not _has_avx512():
        pytest.skip("OpenBLAS's SkylakeX kernels need AVX-512F, which this CPU lacks")

    env = {**os.environ, "OPENBLAS_CORETYPE": core}
    cmd = [sys.executable, "-m", "llmsched_gym.calibration.forms", "--out", str(tmp_path)]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    for name in ("splits.csv", "trajectories.csv", "regions.csv"):
        new, old = pd.read_csv(tmp_path / name), pd.read_csv(COMMITTED / name)
        pd.testing.assert_frame_equal(new, old, atol=0.01, check_exact=False)
    assert (tmp_path / "report.md").read_text() == (COMMITTED / "report.md").read_text()
