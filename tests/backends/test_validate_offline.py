"""``validate`` without vLLM: where it writes, signed errors, and the noise verdict (issue 23)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from llmsched_gym.backends.vllm.validate import _latency_rows, live_cv_pct, noise_verdict
from llmsched_gym.cli.live import default_validate_dir, validate_table_text
from llmsched_gym.cli.main import build_parser

REPO = Path(__file__).resolve().parents[2]


def test_validate_never_writes_into_the_repository_by_default() -> None:
    args = build_parser().parse_args(["validate"])
    assert args.out is None
    out = default_validate_dir(args.trace, args.scheduler)
    assert out == "out/validate/vllm-splitwise-conv"
    assert default_validate_dir("t.jsonl", "infermax:evict-short") == (
        "out/validate/vllm-t-infermax-evict-short"
    )
    calibrate = build_parser().parse_args(["calibrate", "--backend", "vllm"])
    assert calibrate.vllm_out.startswith("out/")


def test_errors_are_signed() -> None:
    live = pd.DataFrame({"ttft_s": [1.0, 1.0], "tpot_s": [0.1, 0.1], "e2e_s": [10.0, 10.0]})
    sim = pd.DataFrame({"ttft_s": [0.5, 0.5], "tpot_s": [0.1, 0.1], "e2e_s": [12.0, 12.0]})
    rows = {r["metric"]: r for r in _latency_rows(live, sim, None)}
    assert math.isclose(rows["ttft_s"]["mean_error_pct"], -50.0)
    assert math.isclose(rows["e2e_s"]["mean_error_pct"], 20.0)
    assert math.isclose(rows["ttft_s"]["signed_error_pct_p50"], -50.0)
    text = validate_table_text(pd.DataFrame(list(rows.values())))
    assert "-50.00" in text and "+20.00" in text and "(sim - live) / live" in text


def test_noisy_live_runs_get_no_timing_verdict() -> None:
    assert noise_verdict([10.0]) is None  # one run: no spread to judge
    assert noise_verdict([10.0, 10.5, 9.8]) is None
    quiet = live_cv_pct([10.0, 10.5, 9.8])
    assert 0 < quiet < 10
    verdict = noise_verdict([10.0, 14.0, 8.0])
    assert verdict is not None
    assert "too noisy for a timing verdict" in verdict and "--calibrate" in verdict
