"""Leaderboard tables and plots from scored result rows (``evaluate`` and ``show``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llmsched_gym.leaderboard.score import geometric_score
from llmsched_gym.leaderboard.suite import LEVELS, Suite

__all__ = ["leaderboard_rows", "markdown_table", "plot_scores", "task_spread"]


def leaderboard_rows(
    task: Any,
    rows_by_method: Mapping[str, Sequence[Mapping[str, Any]]],
    declared_oracle: Mapping[str, bool],
) -> list[dict[str, Any]]:
    """One summary per method: score with interval, per-level scores, tail, failures, oracle.

    Sorted: non-oracle methods by score (best first), then oracle methods; failed methods last.
    """
    out = []
    for method, rows in rows_by_method.items():
        failed = [r for r in rows if r["status"] != "ok"]
        oracle = declared_oracle.get(method, False) or any(bool(r["oracle"]) for r in rows)
        score = geometric_score(r["ratio"] for r in rows)
        tail = geometric_score(r["tail_ratio"] for r in rows)
        levels = {
            lvl: geometric_score(r["ratio"] for r in rows if r["level"] == lvl) for lvl in LEVELS
        }
        ref_same = all(
            r["status"] == "ok" and float(r["value"]) == float(r["reference_value"]) for r in rows
        )
        out.append(
            {
                "method": method,
                "score": score,
                "tail": tail,
                "levels": levels,
                "num_workloads": len(rows),
                "num_failed": len(failed),
                "first_error": failed[0]["error"] if failed else "",
                "oracle": oracle,
                "identical_to_reference": bool(rows) and ref_same,
            }
        )

    def key(r: dict[str, Any]) -> tuple:
        value = r["score"].value
        finite = value if math.isfinite(value) else -1e9
        return (r["num_failed"] > 0, r["oracle"], -finite, r["method"] != task.reference)

    return sorted(out, key=key)


def task_spread(board: Sequence[Mapping[str, Any]], reference: str, threshold: float) -> dict:
    """How much the decision matters: the best deployable method's score over the reference's.

    ``flagged`` when no non-oracle, non-failed method beats the reference by ``threshold``.
    """
    deployable = [
        r
        for r in board
        if not r["oracle"]
        and r["num_failed"] == 0
        and r["method"] != reference
        and math.isfinite(r["score"].value)
    ]
    if not deployable:
        return {"best": None, "gain": math.nan, "flagged": True}
    best = max(deployable, key=lambda r: r["score"].value)
    gain = best["score"].value - 1.0
    return {"best": best["method"], "gain": gain, "flagged": gain < threshold}


def markdown_table(
    suite: Suite, task: Any, board: Sequence[Mapping[str, Any]], *, spread_line: bool = True
) -> str:
    """The task's leaderboard as Markdown: rank, method, score, per level, tail, notes.

    ``spread_line``: say whether the decision matters (the task's baselines are all on the
    board) or flag the task when every deployable baseline ties with the reference.
    """
    spread = task_spread(board, task.reference, suite.tie_threshold)
    metric = task.metric
    levels = [lvl for lvl in LEVELS if any(sc.level == lvl for sc in task.scenarios)]
    lines = [
        f"### {task.name} ({suite.version})",
        "",
        task.decision,
        "",
        f"Score: geometric mean over the held-out test workloads of {task.reference}'s "
        f"{metric} / the method's (higher is better; 1 = {task.reference}), with a paired 95% "
        f"interval. Tail: the same for {task.tail_metric}.",
        "",
    ]
    if not task.scored:
        lines += [f"**Unscored in {suite.version}:** {task.unscored_reason}", ""]
    elif not spread_line:
        pass
    elif spread["flagged"]:
        lines += [
            f"**Flagged, not scored:** no deployable baseline beats {task.reference} by "
            f"{suite.tie_threshold:.0%} (best: {spread['best']}, {spread['gain']:+.1%}).",
            "",
        ]
    else:
        lines += [
            f"The decision matters: the best deployable baseline ({spread['best']}) gains "
            f"{spread['gain']:+.1%} over {task.reference}.",
            "",
        ]
    head = ["rank", "method", "score [95% CI]", *levels, "tail", "workloads", "notes"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append(
        "|"
        + "|".join(["---:", "---", "---:", *(["---:"] * len(levels)), "---:", "---:", "---"])
        + "|"
    )
    rank = 0
    for r in board:
        notes = []
        if r["oracle"]:
            notes.append("oracle (reads true output lengths; ranked apart)")
        if r["num_failed"]:
            notes.append(f"failed on {r['num_failed']}: {r['first_error'][:80]}")
        if r["identical_to_reference"] and r["method"] != task.reference:
            notes.append(f"identical to {task.reference} on every workload")
        if r["method"] == task.reference:
            notes.append("reference")
        ranked = not r["oracle"] and not r["num_failed"]
        if ranked:
            rank += 1
        cells = [
            str(rank) if ranked else "—",
            r["method"],
            r["score"].text(),
            *(f"{r['levels'][lvl].value:.3f}" if r["levels"][lvl].n else "—" for lvl in levels),
            f"{r['tail'].value:.3f}" if r["tail"].n else "—",
            str(r["num_workloads"]),
            "; ".join(notes),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_scores(
    suite: Suite, boards: Mapping[str, tuple[Any, Sequence[Mapping[str, Any]]]], path: str | Path
) -> None:
    """One panel per task: each method's score with its 95% interval (a forest plot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(boards)
    fig, axes = plt.subplots(
        n,
        1,
        figsize=(8, 1.2 + 0.32 * sum(len(b) for _, b in boards.values()) + 0.6 * n),
        squeeze=False,
    )
    for ax, (name, (task, board)) in zip(axes[:, 0], boards.items(), strict=True):
        rows = [r for r in board if math.isfinite(r["score"].value)]
        ys = list(range(len(rows)))[::-1]
        for y, r in zip(ys, rows, strict=True):
            s = r["score"]
            color = "tab:gray" if r["oracle"] else "tab:blue"
            lo = s.value - s.low if math.isfinite(s.low) else 0.0
            hi = s.high - s.value if math.isfinite(s.high) else 0.0
            ax.errorbar(s.value, y, xerr=[[lo], [hi]], fmt="o", color=color, capsize=3)
        ax.axvline(1.0, color="k", lw=0.8, ls="--")
        ax.set_yticks(ys)
        ax.set_yticklabels([r["method"] + (" (oracle)" if r["oracle"] else "") for r in rows])
        ax.set_title(f"{name}: {task.metric}, score vs {task.reference} (higher is better)")
        ax.set_xlabel(f"{task.reference} {task.metric} / method's (geometric mean, 95% CI)")
    fig.suptitle(f"{suite.version} leaderboards (held-out test workloads)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
