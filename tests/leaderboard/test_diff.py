"""``leaderboard diff``: two submissions paired by workload, from their results alone."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.diff import diff_rows, diff_submissions
from llmsched_gym.leaderboard.score import geometric_score
from llmsched_gym.leaderboard.submission import read_results

ROOT = Path(__file__).resolve().parents[2] / "leaderboards"
A, B = ROOT / "priority" / "cem-linear", ROOT / "priority" / "rule-shortest-prompt"


def test_the_paired_ratio_is_the_quotient_of_the_two_scores(tmp_path) -> None:
    """Both scores share the reference's values, so A-vs-B is score(A) / score(B) exactly."""
    text = diff_submissions(A, B, tmp_path)
    rows = pd.read_csv(tmp_path / "diff.csv").to_dict("records")
    ra, rb = read_results(A / "results.csv"), read_results(B / "results.csv")
    want = geometric_score(r["ratio"] for r in ra).value / geometric_score(
        r["ratio"] for r in rb
    ).value
    got = geometric_score(r["ratio"] for r in rows).value
    assert got == pytest.approx(want, rel=1e-12)
    assert f"| all | {geometric_score(r['ratio'] for r in rows).text()} | 21 |" in text
    # > 1 means A is better: on each workload, B's latency over A's
    for r in rows:
        assert r["ratio"] == pytest.approx(r["value_b"] / r["value_a"], rel=1e-15)


def test_a_failed_workload_has_no_ratio_and_says_which_side() -> None:
    a = read_results(A / "results.csv")
    b = [dict(r) for r in read_results(B / "results.csv")]
    b[0].update(status="failed", value=math.nan)
    rows = diff_rows(a, b)
    assert math.isnan(rows[0]["ratio"]) and rows[0]["failed"] == "B"
    assert all(r["failed"] == "" for r in rows[1:])


def test_submissions_of_different_tasks_are_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="one task and suite"):
        diff_submissions(A, ROOT / "select" / "random", tmp_path)


def test_no_shared_workload_is_an_error(tmp_path) -> None:
    other = tmp_path / "b"
    shutil.copytree(B, other)
    frame = pd.read_csv(other / "results.csv")
    frame["workload"] = frame["workload"] + "-other"
    frame.to_csv(other / "results.csv", index=False)
    with pytest.raises(ConfigError, match="share no workload"):
        diff_submissions(A, other, tmp_path / "out")
