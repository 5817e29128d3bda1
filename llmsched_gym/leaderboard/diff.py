"""Two submissions side by side, from their committed results alone (``leaderboard diff``).

Per workload the ratio is B's metric over A's where lower is better (A's over B's where higher
is), so above 1 means A is better, as a leaderboard score against a reference. Per level and
overall: the geometric mean with its paired 95% interval (``score.geometric_score``): the
pairing is the shared workload, so the interval is narrower than either score's own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llmsched_gym.errors import ConfigError

__all__ = ["diff_rows", "diff_markdown", "diff_submissions"]


def diff_rows(
    a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One row per workload both ran: level, both values and the ratio (> 1: A better).

    A workload failed on either side has no ratio (NaN) and says which side failed.
    """
    import math

    from llmsched_gym.leaderboard.score import ratio

    theirs = {r["workload"]: r for r in b}
    out = []
    for r in a:
        o = theirs.get(r["workload"])
        if o is None:
            continue
        ok = r["status"] == "ok" and o["status"] == "ok"
        failed = [side for side, row in (("A", r), ("B", o)) if row["status"] != "ok"]
        out.append(
            {
                "workload": r["workload"],
                "level": r["level"],
                "metric": r["metric"],
                "value_a": float(r["value"]) if r["status"] == "ok" else math.nan,
                "value_b": float(o["value"]) if o["status"] == "ok" else math.nan,
                "ratio": ratio(float(r["value"]), float(o["value"]), r["metric"])
                if ok
                else math.nan,
                "failed": "/".join(failed),
            }
        )
    return out


def diff_markdown(name_a: str, name_b: str, task: Any, rows: Sequence[Mapping[str, Any]]) -> str:
    """A titled table per level and overall, then every workload."""
    from llmsched_gym.leaderboard.score import geometric_score
    from llmsched_gym.leaderboard.suite import LEVELS

    levels = [lvl for lvl in LEVELS if any(r["level"] == lvl for r in rows)]
    lines = [
        f"### {task.name}: {name_a} (A) vs {name_b} (B)",
        "",
        f"Ratio per workload: B's {task.metric} / A's (> 1: A is better); geometric means with "
        "paired 95% intervals over the workloads both ran.",
        "",
        "| level | A vs B [95% CI] | workloads |",
        "|---|---:|---:|",
    ]
    for lvl in [*levels, "all"]:
        sel = [r for r in rows if lvl in ("all", r["level"])]
        s = geometric_score(r["ratio"] for r in sel)
        lines.append(f"| {lvl} | {s.text()} | {s.n} |")
    lines += ["", "| workload | A | B | B / A | failed |", "|---|---:|---:|---:|---|"]
    for r in rows:
        cells = [f"{r[k]:.4g}" for k in ("value_a", "value_b", "ratio")]
        lines.append(f"| {r['workload']} | {' | '.join(cells)} | {r['failed']} |")
    return "\n".join(lines) + "\n"


def diff_submissions(folder_a: str | Path, folder_b: str | Path, out: str | Path) -> str:
    """Compare two submission folders of one task and suite; write diff.csv and diff.md."""
    import pandas as pd

    from llmsched_gym.leaderboard.policy import load_submission
    from llmsched_gym.leaderboard.submission import read_results
    from llmsched_gym.leaderboard.suite import load_suite

    a, b = load_submission(folder_a), load_submission(folder_b)
    if (a.suite, a.task) != (b.suite, b.task):
        raise ConfigError(
            f"{folder_a} is {a.task} on {a.suite}, {folder_b} is {b.task} on {b.suite}: "
            "compare two submissions of one task and suite"
        )
    rows = diff_rows(read_results(a.results_path), read_results(b.results_path))
    if not any(r["failed"] == "" for r in rows):
        raise ConfigError(f"{folder_a} and {folder_b} share no workload both ran")
    text = diff_markdown(a.method, b.method, load_suite(a.suite).task(a.task), rows)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out / "diff.csv", index=False)
    (out / "diff.md").write_text(text)
    return text
