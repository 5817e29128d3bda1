"""Trajectory validation: items tracked from the schedule, the analysis path, the CPU run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmsched_gym.calibration import trajectory as tj
from llmsched_gym.errors import ConfigError
from llmsched_gym.workloads.trace import load_trace

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "calibration/data/torch/h200-141gb/trajectory"
PROFILE = "torch:llama-3-8b@h200-141gb/tp1"
CONFIG = {"max_num_batched_tokens": 512, "max_num_seqs": 32}


def test_item_prices_equal_the_engines_step_durations():
    steps = tj.sample_steps(load_trace("splitwise-conv", limit=60), CONFIG, PROFILE, num_steps=50)
    assert len(steps) == 50 and [s.step for s in steps] == sorted(s.step for s in steps)
    priced = tj.price_items(steps, PROFILE)
    durations = np.array([s.pred_s for s in steps])
    ok = np.isfinite(durations) & (durations < 1.0)  # not across an idle gap
    assert ok.sum() > 30
    np.testing.assert_allclose(priced[ok], durations[ok], rtol=1e-9)


def test_cached_context_tracks_hits_chunks_and_preemption():
    log = [
        {
            "step": 0,
            "time": 0.0,
            "scheduled": {"a": 4},
            "new": {"a": 16},
            "resumed": {},
            "preempted": [],
            "finished": [],
        },
        {
            "step": 1,
            "time": 1.0,
            "scheduled": {"a": 1, "b": 8},
            "new": {"b": 0},
            "resumed": {},
            "preempted": [],
            "finished": ["a"],
        },
        {
            "step": 2,
            "time": 2.0,
            "scheduled": {"b": 8},
            "new": {},
            "resumed": {},
            "preempted": [],
            "finished": [],
        },
        {
            "step": 3,
            "time": 3.0,
            "scheduled": {"c": 2},
            "new": {"c": 0},
            "resumed": {},
            "preempted": ["b"],
            "finished": [],
        },
        {
            "step": 4,
            "time": 4.0,
            "scheduled": {"b": 17},
            "new": {},
            "resumed": {"b": 16},
            "preempted": [],
            "finished": [],
        },
    ]
    steps = tj._steps_from_log(log, "t")
    assert [s.items for s in steps] == [
        ((4, 16),),
        ((1, 20), (8, 0)),
        ((8, 8),),
        ((2, 0),),
        ((17, 16),),
    ]
    assert [s.kind for s in steps] == ["prefill", "mixed", "prefill", "prefill", "prefill"]


def test_committed_h200_report_regenerates_from_the_measured_steps():
    steps, meas = tj.load_measured(MEASURED, "llama-3-8b")
    rep = tj.analyse(steps, meas, PROFILE, device="H200")
    s = rep.summary().set_index("trace")
    committed = (ROOT / "calibration/reports/trajectory-h200/report.md").read_text()
    for trace in ("conv", "sharegpt", "all"):
        row = s.loc[trace]
        line = f"| {trace} | {int(row['steps'])} | {row['mape_pct']:.2f} |"
        assert line in committed, line


def test_bad_measured_folders_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="no file .*sampled_steps.json"):
        tj.load_measured(tmp_path, "llama-3-8b")
    (tmp_path / "sampled_steps.json").write_text(
        json.dumps({"conv": [{"step": 1, "items": [[1, 2]], "pred_s": 0.1}]})
    )
    (tmp_path / "traj-m.csv").write_text("trace,step,meas_s\nconv,2,0.1\n")
    with pytest.raises(ConfigError, match=r"step \('conv', 2\) is not in sampled_steps.json"):
        tj.load_measured(tmp_path, "m")
    steps, _ = tj.load_measured(MEASURED, "qwen2-7b")
    with pytest.raises(ConfigError, match="need 240 finite positive values"):
        tj.analyse(steps, np.zeros(240), PROFILE)


@pytest.mark.slow
def test_cpu_run_with_the_tiny_model(tmp_path):
    pytest.importorskip("torch", reason="torch (installed by scripts/setup.sh) is absent")
    rc = tj.main(
        ["--limit", "60", "--steps", "8", "--max-num-batched-tokens", "256", "--out", str(tmp_path)]
    )
    assert rc == 0
    text = (tmp_path / "report.md").read_text()
    assert "tiny-llama on cpu" in text and (tmp_path / "trajectory.png").is_file()


@pytest.mark.slow
def test_gpu_session_script_rehearses_on_the_cpu(tmp_path):
    import subprocess

    pytest.importorskip("torch", reason="torch (installed by scripts/setup.sh) is absent")
    out = subprocess.run(
        ["bash", str(ROOT / "scripts/gpu_session.sh"), str(tmp_path), "--cpu"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "PY": __import__("sys").executable},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "cal/tiny-llama/steps.csv").is_file()
    for trace in ("splitwise-conv", "sharegpt"):
        assert (tmp_path / f"trajectory/tiny-llama/{trace}/report.md").is_file()
