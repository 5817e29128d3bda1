"""Validate submissions (re-run, compare exactly) and render the committed leaderboards."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llmsched_gym.errors import ConfigError

__all__ = ["collect_submissions", "show_leaderboards", "validate_submission"]


def validate_submission(
    folder: str | Path,
    *,
    quick: bool = False,
    workers: int = 1,
    address: str | None = None,
    progress: bool = False,
    trust_pickle: bool = False,
) -> list[str]:
    """Problems found re-running ``folder``'s submission (empty: valid).

    Checks, in order: ``submission.yaml`` (fields, suite version, task); ``results.csv`` (its
    columns, one row per test workload of the task, nothing else); the policy resolves through
    the policy / router / agent interfaces; the oracle declaration matches what the policy says
    of itself; and a re-run of the policy and of the reference reproduces every column but wall
    time exactly (``quick``: only the quick subset's workloads are re-run). The submission's code
    runs sandboxed (``llmsched_gym.leaderboard.sandbox``); ``trust_pickle`` lets it unpickle.
    """
    from llmsched_gym.leaderboard.policy import resolve_policy
    from llmsched_gym.leaderboard.run import VALIDATED_COLUMNS, run_all
    from llmsched_gym.leaderboard.score import score_rows
    from llmsched_gym.leaderboard.submission import (
        SCORED_COLUMNS,
        compare_results,
        load_submission,
        read_results,
    )
    from llmsched_gym.leaderboard.suite import load_suite

    sub = load_submission(folder)
    suite = load_suite(sub.suite)
    task = suite.task(sub.task)
    committed = read_results(sub.results_path)
    problems: list[str] = []
    expected = {w.id: w for w in suite.workloads("test", tasks=[task.name])}
    seen = [r["workload"] for r in committed]
    for wid in sorted(set(expected) - set(seen)):
        problems.append(f"results.csv: no row for test workload {wid}")
    for wid in sorted(set(seen) - set(expected)):
        problems.append(f"results.csv: row for {wid}, which is not a test workload of {task.name}")
    if len(seen) != len(set(seen)):
        problems.append("results.csv: a workload has more than one row")
    for r in committed:
        if r["suite"] != suite.version:
            problems.append(f"results.csv: {r['workload']} was produced on suite {r['suite']!r}")
            break
    ref = resolve_policy(str(sub.folder), task)
    rows = [r for r in committed if r["workload"] in expected]
    if quick:
        keep = {w.id for w in suite.workloads("test", tasks=[task.name], quick=True)}
        rows = [r for r in rows if r["workload"] in keep]
    workloads = [expected[r["workload"]] for r in rows]
    jobs = [(str(sub.folder), w) for w in workloads]
    if ref.spec != task.reference:
        jobs += [(task.reference, w) for w in workloads]
    fresh = run_all(
        suite,
        jobs,
        workers=workers,
        address=address,
        progress=progress,
        desc=f"validate {sub.method}",
        trust_pickle=trust_pickle,
    )
    mine = fresh[: len(workloads)]
    reference = fresh[len(workloads) :] or mine
    scored = score_rows(mine, reference)
    if any(r["oracle"] for r in mine) and not sub.oracle:
        problems.append(
            "submission.yaml: field 'oracle' is false, but the policy reads true output lengths "
            "(oracle = True): declare it"
        )
    problems += compare_results(rows, scored, (*VALIDATED_COLUMNS, *SCORED_COLUMNS))
    return problems


def collect_submissions(root: Path, tasks: Sequence[str] | None = None) -> dict[str, list[Any]]:
    """Submission folders under ``root`` by task (folders with a ``submission.yaml``)."""
    from llmsched_gym.leaderboard.submission import load_submission

    out: dict[str, list[Any]] = {}
    for path in sorted(root.glob("*/*/submission.yaml")):
        sub = load_submission(path.parent)
        if tasks is None or sub.task.lower() in {t.lower() for t in tasks}:
            out.setdefault(sub.task, []).append(sub)
    return out


def show_leaderboards(
    root: Path, task_filter: str | None, out: str | Path, *, update: bool, suite: Any
) -> int:
    """Render every task's committed leaderboard: Markdown (printed and written) and a PNG."""
    from llmsched_gym.leaderboard.submission import read_results
    from llmsched_gym.leaderboard.tables import leaderboard_rows, markdown_table, plot_scores

    tasks = task_filter.split(",") if task_filter else None
    subs = collect_submissions(root, tasks)
    if not subs:
        raise ConfigError(f"no submissions under {root}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    boards, texts = {}, []
    for name in [t for t in suite.tasks if t in subs]:
        task = suite.task(name)
        methods = {s.method: read_results(s.results_path) for s in subs[name]}
        declared = {s.method: s.oracle for s in subs[name]}
        board = leaderboard_rows(task, methods, declared)
        boards[name] = (task, board)
        text = markdown_table(suite, task, board)
        texts.append(text)
        (out / f"{name.lower()}.md").write_text(text)
        if update:
            folder = root / name.lower()
            header = (
                f"# Leaderboard: {name}\n\nGenerated by `llmsched-gym leaderboard show --update` "
                "from the submissions in this folder (one per method: README.md, "
                "submission.yaml, results.csv). Re-check one with `llmsched-gym leaderboard "
                f"validate leaderboards/{name.lower()}/<method>`.\n\n"
            )
            (folder / "README.md").write_text(header + text)
            plot_scores(suite, {name: (task, board)}, folder / "leaderboard.png")
    plot_scores(suite, boards, out / "leaderboards.png")
    print("\n".join(texts))
    print(f"wrote {out}/<task>.md and {out}/leaderboards.png")
    return 0
