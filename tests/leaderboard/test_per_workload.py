"""``leaderboard evaluate --per-workload``: each workload's ratios printed and in summary.md
(issue 42 item 7: the breakdown was only in results.csv)."""

from __future__ import annotations

import csv

from llmsched_gym.cli.main import main
from llmsched_gym.leaderboard.suite import load_suite
from llmsched_gym.leaderboard.tables import per_workload_table


def test_evaluate_prints_every_workloads_ratio(tmp_path, capsys) -> None:
    out = tmp_path / "o"
    argv = ["leaderboard", "evaluate", "rule:shortest-prompt", "--suite", "quick"]
    code = main([*argv, "--task", "Priority", "--per-workload", "--out", str(out), "--quiet"])
    assert code == 0
    text = capsys.readouterr().out
    rows = list(csv.DictReader(open(out / "results.csv")))
    mine = [r for r in rows if r["policy"] == "rule:shortest-prompt"]
    head = "| workload | level | vllm-v1 e2e_s_mean | vllm-v1 | rule:shortest-prompt |"
    assert mine and head in text
    for r in mine:
        line = next(x for x in text.splitlines() if x.startswith(f"| {r['workload']} |"))
        assert line.rstrip(" |").endswith(f"{float(r['ratio']):.3f}")
    assert "per workload" in (out / "summary.md").read_text()


def test_the_table_marks_failures_and_missing_runs() -> None:
    task = load_suite().task("Priority")
    base = {"level": "knee", "status": "ok"}
    rows = {
        "vllm-v1": [
            {**base, "workload": "w1", "value": 2.0, "ratio": 1.0},
            {**base, "workload": "w2", "value": 3.0, "ratio": 1.0},
        ],
        "mine": [{**base, "workload": "w1", "status": "failed", "value": float("nan")}],
    }
    text = per_workload_table(task, rows, "e2e_s_mean")
    assert "| w1 | knee | 2 | 1.000 | failed |" in text
    assert "| w2 | knee | 3 | 1.000 |  |" in text
