"""Leaderboard tables and plots from scored result rows (``evaluate`` and ``show``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llmsched_gym.leaderboard.score import geometric_score
from llmsched_gym.leaderboard.suite import LEVELS, Suite

__all__ = [
    "leaderboard_rows",
    "markdown_table",
    "per_workload_table",
    "plot_scores",
    "rank_labels",
    "row_notes",
    "task_spread",
]


def leaderboard_rows(
    task: Any,
    rows_by_method: Mapping[str, Sequence[Mapping[str, Any]]],
    declared_oracle: Mapping[str, bool],
    declared_kind: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One summary per method: score with interval, per-level scores, tail, failures, oracle, kind.

    Sorted: agents by score (best first), then reference-kind methods (whole schedulers), then
    oracles; failed methods last. A method is an oracle if it says so or the harness saw it
    read hidden truth on any workload; a reference if it says so or the harness ran it as one.
    """
    declared_kind = declared_kind or {}
    out = []
    for method, rows in rows_by_method.items():
        failed = [r for r in rows if r["status"] != "ok"]
        oracle = declared_oracle.get(method, False) or any(bool(r["oracle"]) for r in rows)
        reference_kind = declared_kind.get(method) == "reference" or any(
            r.get("kind") == "reference" for r in rows
        )
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
                "kind": "reference" if reference_kind else "agent",
                "identical_to_reference": bool(rows) and ref_same,
            }
        )

    def key(r: dict[str, Any]) -> tuple:
        value = r["score"].value
        finite = value if math.isfinite(value) else -1e9
        group = (r["num_failed"] > 0, r["oracle"], r["kind"] == "reference")
        return (*group, -finite, r["method"] != task.reference)

    return sorted(out, key=key)


def task_spread(board: Sequence[Mapping[str, Any]], reference: str, threshold: float) -> dict:
    """How much the decision matters: the best deployable agent's score over the reference's.

    ``flagged`` when no agent-kind, non-oracle, non-failed method beats the reference by
    ``threshold`` (whole schedulers, reference kind, do more than the decision can).
    """
    deployable = [
        r
        for r in board
        if not r["oracle"]
        and r.get("kind", "agent") == "agent"
        and r["num_failed"] == 0
        and r["method"] != reference
        and math.isfinite(r["score"].value)
    ]
    if not deployable:
        return {"best": None, "gain": math.nan, "flagged": True}
    best = max(deployable, key=lambda r: r["score"].value)
    gain = best["score"].value - 1.0
    return {"best": best["method"], "gain": gain, "flagged": gain < threshold}


def rank_labels(board: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each row's rank: agents 1, 2, ...; reference kind R1, R2, ...; oracles and failed "—"."""
    labels, rank, ref_rank = [], 0, 0
    for r in board:
        label = "—"
        if not r["oracle"] and not r["num_failed"]:
            if r["kind"] == "reference":
                ref_rank += 1
                label = f"R{ref_rank}"
            else:
                rank += 1
                label = str(rank)
        labels.append(label)
    return labels


def row_notes(r: Mapping[str, Any], reference: str) -> list[str]:
    """The notes of a board row: oracle, failures, identical to the reference, the reference."""
    notes = []
    if r["oracle"]:
        notes.append("oracle (read hidden truth; ranked apart)")
    if r["num_failed"]:
        notes.append(f"failed on {r['num_failed']}: {r['first_error'][:80]}")
    if r["identical_to_reference"] and r["method"] != reference:
        notes.append(f"identical to {reference} on every workload")
    if r["method"] == reference:
        notes.append("reference")
    return notes


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
            f"**Flagged, not scored:** no deployable agent beats {task.reference} by "
            f"{suite.tie_threshold:.0%} (best: {spread['best']}, {spread['gain']:+.1%}).",
            "",
        ]
    else:
        lines += [
            f"The decision matters: the best deployable agent ({spread['best']}) gains "
            f"{spread['gain']:+.1%} over {task.reference}.",
            "",
        ]
    lines += [
        "Agents (kind `agent`: act only through the task's decision) are ranked 1, 2, ...; "
        "whole schedulers that replace the engine's (kind `reference`) are ranked apart as "
        "R1, R2, ...; oracles (the harness saw them read hidden truth) are not ranked.",
        "",
    ]
    head = ["rank", "method", "kind", "score [95% CI]", *levels, "tail", "workloads", "notes"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append(
        "|"
        + "|".join(
            ["---:", "---", "---", "---:", *(["---:"] * len(levels)), "---:", "---:", "---"]
        )
        + "|"
    )
    for label, r in zip(rank_labels(board), board, strict=True):
        cells = [
            label,
            r["method"],
            r["kind"],
            r["score"].text(),
            *(f"{r['levels'][lvl].value:.3f}" if r["levels"][lvl].n else "—" for lvl in levels),
            f"{r['tail'].value:.3f}" if r["tail"].n else "—",
            str(r["num_workloads"]),
            "; ".join(row_notes(r, task.reference)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


_KIND_COLOURS = {"agent": "tab:blue", "reference": "tab:orange"}
_KIND_LABELS = {"agent": "", "reference": " (reference kind)"}


def per_workload_table(
    task: Any, rows_by_method: Mapping[str, Sequence[Mapping[str, Any]]], metric: str
) -> str:
    """Markdown: one line per test workload, each method's ratio to the reference (> 1 better).

    The reference's own metric value is the first numeric column, so a ratio reads against an
    absolute figure; a failed run shows ``failed``. Workloads in suite order (level, scenario,
    source, seed), methods in the order given.
    """
    methods = list(rows_by_method)
    by = {m: {r["workload"]: r for r in rows} for m, rows in rows_by_method.items()}
    order = list(dict.fromkeys(r["workload"] for rows in rows_by_method.values() for r in rows))
    reference = by.get(task.reference, {})
    head = ["workload", "level", f"{task.reference} {metric}", *methods]
    lines = [
        f"#### {task.name}: per workload (ratio of {task.reference}'s {metric} to the method's)",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * 2 + "---:|" * (len(head) - 2),
    ]
    for w in order:
        first = next(by[m][w] for m in methods if w in by[m])
        ref = reference.get(w)
        ref_value = f"{ref['value']:.4g}" if ref and ref["status"] == "ok" else "—"
        cells = []
        for m in methods:
            r = by[m].get(w)
            if r is None:
                cells.append("")
            elif r["status"] != "ok":
                cells.append("failed")
            else:
                ratio = r.get("ratio", math.nan)
                cells.append(f"{ratio:.3f}" if math.isfinite(ratio) else "—")
        lines.append(f"| {w} | {first['level']} | {ref_value} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_scores(
    suite: Suite,
    boards: Mapping[str, tuple[Any, Sequence[Mapping[str, Any]]]],
    path: str | Path,
    *,
    workloads: str = "held-out test workloads",
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
            color = "tab:gray" if r["oracle"] else _KIND_COLOURS[r["kind"]]
            lo = s.value - s.low if math.isfinite(s.low) else 0.0
            hi = s.high - s.value if math.isfinite(s.high) else 0.0
            ax.errorbar(s.value, y, xerr=[[lo], [hi]], fmt="o", color=color, capsize=3)
        ax.axvline(1.0, color="k", lw=0.8, ls="--")
        ax.set_yticks(ys)
        ax.set_yticklabels(
            [
                r["method"]
                + (" (oracle)" if r["oracle"] else _KIND_LABELS[r["kind"]])
                for r in rows
            ]
        )
        ax.set_title(f"{name}: {task.metric} vs {task.reference} (higher is better)", fontsize=10)
        ax.set_xlabel(f"{task.reference} {task.metric} / method's (geometric mean, 95% CI)")
    fig.suptitle(
        f"{suite.version} leaderboards ({workloads})\n"
        "blue: agents, orange: whole schedulers (reference kind), gray: oracles",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
