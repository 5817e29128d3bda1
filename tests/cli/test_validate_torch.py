"""``llmsched-gym validate --backend torch``: trajectory validation from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmsched_gym.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
MEASURED = "calibration/data/torch/h200-141gb/trajectory"
COMMITTED = ROOT / "calibration/reports/trajectory-h200"


def test_from_measured_reproduces_the_committed_h200_report(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # the report's title names the folder as given
    rc = main(
        ["validate", "--backend", "torch", "--from-measured", MEASURED,
         "--cost-model", "torch:llama-3-8b@h200-141gb/tp1",
         "--cost-model", "torch:qwen2-7b@h200-141gb/tp1", "--out", str(tmp_path)]
    )  # fmt: skip
    assert rc == 0
    for name in ("report.md", "steps.csv"):
        assert (tmp_path / name).read_text() == (COMMITTED / name).read_text(), name
    assert (tmp_path / "trajectory.png").is_file()
    out = capsys.readouterr().out
    assert "total_error_pct" in out and "kind=mixed" in out and "tokens=17-128" in out


def test_defaults_write_under_out_and_keep_the_vllm_backend(tmp_path, monkeypatch):
    import llmsched_gym.calibration.trajectory as tj

    seen = {}
    monkeypatch.setattr(tj, "run", lambda args: seen.setdefault("args", args) and 0)
    assert main(["validate", "--backend", "torch", "--trace", "sharegpt"]) == 0
    args = seen["args"]
    assert args.out == "out/validate/torch-sharegpt" and args.device == "cpu"
    assert (args.limit, args.steps, args.seed) == (1500, 120, 0)
    assert (args.max_num_batched_tokens, args.max_num_seqs, args.num_gpu_blocks) == (
        4096,
        128,
        None,
    )
    assert args.cost_model == ["torch:llama-3-8b@h200-141gb/tp1"]
    vllm = build_parser().parse_args(["validate"])
    assert vllm.backend == "vllm" and vllm.out is None


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--backend", "torch", "--calibrate"], "--calibrate only apply to --backend vllm"),
        (["--backend", "torch", "--scheduler", "sarathi"], "--scheduler only apply"),
        (["--steps", "5"], "--steps only apply to --backend torch"),
        (["--from-measured", "x"], "--from-measured only apply to --backend torch"),
        (["--backend", "torch", "--device", "tpu"], "--device must be cpu or cuda"),
        (["--cost-model", "a", "--cost-model", "b"], "give one --cost-model"),
    ],
)
def test_options_of_the_other_backend_are_refused(argv, message, capsys):
    assert main(["validate", *argv]) == 2
    assert message in capsys.readouterr().err


def test_cpu_run_with_the_tiny_model(tmp_path, capsys):
    """About 4 s of CPU (11 s wall on a loaded 2-core machine): in the default run."""
    pytest.importorskip("torch", reason="torch (installed by scripts/setup.sh) is absent")
    rc = main(
        ["validate", "--backend", "torch", "--trace", "splitwise-conv", "--num-requests", "40",
         "--steps", "6", "--max-num-batched-tokens", "256", "--cost-model",
         "torch-pw:llama-3-8b@h200-141gb/tp1", "--out", str(tmp_path)]
    )  # fmt: skip
    assert rc == 0
    text = (tmp_path / "report.md").read_text()
    assert "tiny-llama on cpu" in text and "By region" in text
    assert (tmp_path / "trajectory.png").is_file() and (tmp_path / "steps.csv").is_file()
    assert "mape_pct" in capsys.readouterr().out
