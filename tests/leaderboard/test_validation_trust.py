"""Validation that cannot be fooled: tampered rows fail ``--quick``, ``show`` recomputes ratios."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from llmsched_gym.leaderboard.suite import load_suite
from llmsched_gym.leaderboard.validate import (
    check_rows,
    collect_submissions,
    rescored_results,
    validate_submission,
)

ROOT = Path(__file__).resolve().parents[2] / "leaderboards"
METHOD = "static-priority-shortest-prompt"


@pytest.fixture()
def board(tmp_path: Path) -> Path:
    """The Priority task's reference and one method, copied (the repository is never touched)."""
    for name in ("vllm-v1", METHOD):
        shutil.copytree(ROOT / "priority" / name, tmp_path / "priority" / name)
    return tmp_path / "priority"


def _non_quick_row(folder: Path) -> int:
    frame = pd.read_csv(folder / "results.csv")
    suite = load_suite(frame["suite"][0])
    quick = {w.id for w in suite.workloads("test", tasks=["Priority"], quick=True)}
    return next(i for i, w in enumerate(frame["workload"]) if w not in quick)


def _tamper(folder: Path, **changes) -> str:
    path = folder / "results.csv"
    frame = pd.read_csv(path)
    i = _non_quick_row(folder)
    for col, fn in changes.items():
        frame.loc[i, col] = fn(frame.loc[i, col])
    frame.to_csv(path, index=False)
    return frame["workload"][i]


def _seed_missing(folder: Path, workload: str) -> int:
    """A --seed whose drawn sample leaves ``workload`` out (so only consistency can catch it)."""
    import random

    frame = pd.read_csv(folder / "results.csv")
    suite = load_suite(frame["suite"][0])
    quick = {w.id for w in suite.workloads("test", tasks=["Priority"], quick=True)}
    others = sorted(w for w in frame["workload"] if w not in quick)
    return next(s for s in range(100) if workload not in random.Random(s).sample(others, 2))


def test_quick_fails_a_tampered_row_it_does_not_rerun(board: Path) -> None:
    folder = board / METHOD
    wid = _tamper(folder, value=lambda v: v / 2, ratio=lambda r: r * 2)
    report: list[str] = []
    problems = validate_submission(
        folder, quick=True, seed=_seed_missing(folder, wid), report=report
    )
    assert any(p.startswith(f"{wid}:") for p in problems), problems
    assert "consistency only, not re-run" in report[-1]


def test_quick_fails_a_nan_value(board: Path) -> None:
    folder = board / METHOD
    wid = _tamper(folder, value=lambda v: math.nan)
    problems = validate_submission(folder, quick=True, seed=_seed_missing(folder, wid))
    assert any(p.startswith(f"{wid}:") for p in problems), problems


def test_an_honest_copy_is_valid_and_says_what_it_reran(board: Path) -> None:
    report: list[str] = []
    assert validate_submission(board / METHOD, quick=True, seed=0, report=report) == []
    assert report and "re-ran" in report[0] and "drawn with --seed 0" in report[0]


def test_consistency_catches_every_column_a_tamperer_edits(board: Path) -> None:
    folder = board / METHOD
    rows = pd.read_csv(folder / "results.csv").to_dict("records")
    task = load_suite(rows[0]["suite"]).task("Priority")
    refs = {r["workload"]: (r["value"], r["tail_value"]) for r in pd.read_csv(
        board / "vllm-v1" / "results.csv").to_dict("records")}
    assert check_rows(rows, task, rows[0]["policy"], refs) == []
    for col, fn in [
        ("value", lambda v: v * 0.9),
        ("ratio", lambda v: v * 1.1),
        ("tail_ratio", lambda v: v * 1.1),
        ("reference_value", lambda v: v * 2),
        ("e2e_s_mean", lambda v: v * 0.5),
    ]:
        bad = [dict(r) for r in rows]
        bad[3][col] = fn(bad[3][col])
        problems = check_rows(bad, task, rows[0]["policy"], refs)
        assert problems and problems[0].startswith(bad[3]["workload"]), col


def test_show_recomputes_ratios_from_values(board: Path, capsys) -> None:
    folder = board / METHOD
    before = rescored_results(
        load_suite(pd.read_csv(folder / "results.csv")["suite"][0]).task("Priority"),
        collect_submissions(board.parent)["Priority"],
    )[pd.read_csv(folder / "results.csv")["policy"][0]]
    wid = _tamper(folder, ratio=lambda r: r * 9)
    subs = collect_submissions(board.parent)["Priority"]
    task = load_suite(subs[0].suite).task("Priority")
    after = rescored_results(task, subs)[before[0]["policy"]]
    assert [r["ratio"] for r in after] == [r["ratio"] for r in before]
    assert wid in capsys.readouterr().err
