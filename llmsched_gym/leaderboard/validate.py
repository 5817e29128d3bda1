"""Validate submissions (re-run, compare exactly) and render the committed leaderboards."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmsched_gym.errors import ConfigError

__all__ = [
    "TaskBoard",
    "collect_submissions",
    "show_leaderboards",
    "task_boards",
    "validate_submission",
]


def validate_submission(
    folder: str | Path,
    *,
    quick: bool = False,
    sample: int = 2,
    seed: int | None = None,
    workers: int = 1,
    address: str | None = None,
    progress: bool = False,
    report: list[str] | None = None,
    reference_runs: dict[tuple[str, str], dict[str, Any]] | None = None,
    trust_pickle: bool = False,
) -> list[str]:
    """Problems found checking ``folder``'s submission (empty: valid).

    A folder holding pickled objects is refused (``ConfigError``) before anything runs, unless
    ``trust_pickle`` (``weights.refuse_pickled``).

    Checks, in order: ``submission.yaml`` (fields, suite version, task); ``results.csv`` (its
    columns, one row per test workload of the task, nothing else); every row's consistency (its
    value is its metric's column, its reference value the reference's committed value, its
    ratios recomputed from the values; ``check_rows``); the policy resolves; the oracle
    declaration matches what the harness saw; and a re-run of the policy and of the reference
    reproduces every column but wall time exactly.

    By default every row is re-run. ``quick`` re-runs the quick subset's rows and ``sample``
    other rows drawn with ``seed`` (None: a fresh seed, said in ``report``), so a tampered row
    outside the subset can be drawn; the rows it does not re-run are checked for consistency
    only, and ``report`` says so (``report`` receives one line per statement of what was done).
    ``reference_runs`` ((suite, workload id) -> the reference's re-run row) is filled and reused
    across calls, so validating many submissions of a task re-runs its reference once per
    workload.
    """
    import random

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
    from llmsched_gym.leaderboard.weights import refuse_pickled

    refuse_pickled(folder, trust_pickle=trust_pickle)

    report = [] if report is None else report
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
    resolve_policy(str(sub.folder), task)  # resolves before anything runs (errors name it)
    rows = [r for r in committed if r["workload"] in expected]
    is_reference = sub.policy == task.reference
    reference_values = None if is_reference else committed_reference_values(sub.folder, task)
    if not is_reference and reference_values is None:
        report.append(
            f"no submission of the reference {task.reference!r} beside this folder: reference "
            "values are checked only where rows are re-run"
        )
    problems += check_rows(rows, task, sub.method, reference_values, is_reference=is_reference)
    if quick:
        keep = {w.id for w in suite.workloads("test", tasks=[task.name], quick=True)}
        others = sorted(r["workload"] for r in rows if r["workload"] not in keep)
        if seed is None:
            seed = random.SystemRandom().randrange(2**32)
        drawn = random.Random(seed).sample(others, min(sample, len(others)))
        rerun = [r for r in rows if r["workload"] in keep or r["workload"] in drawn]
        report.append(
            f"re-ran {len(rerun)} of {len(rows)} rows (the quick subset and {len(drawn)} drawn "
            f"with --seed {seed}); the other {len(rows) - len(rerun)} were checked for "
            "consistency only, not re-run"
        )
    else:
        rerun = rows
        report.append(f"re-ran all {len(rows)} rows")
    workloads = [expected[r["workload"]] for r in rerun]
    cache = {} if reference_runs is None else reference_runs
    jobs = [(str(sub.folder), w) for w in workloads]
    if not is_reference:
        jobs += [(task.reference, w) for w in workloads if (suite.version, w.id) not in cache]
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
    for (_, w), row in zip(jobs[len(workloads) :], fresh[len(workloads) :], strict=True):
        cache[(suite.version, w.id)] = row
    if is_reference:
        for w, row in zip(workloads, mine, strict=True):
            cache[(suite.version, w.id)] = row
        reference = mine
    else:
        reference = [cache[(suite.version, w.id)] for w in workloads]
    scored = score_rows(mine, reference)
    if any(r["oracle"] for r in mine) and not sub.oracle:
        problems.append(
            "submission.yaml: field 'oracle' is false, but the harness saw the policy read "
            "hidden truth: declare it"
        )
    kinds = {r["kind"] for r in mine if r["status"] == "ok"}
    if kinds and kinds != {sub.kind}:
        problems.append(
            f"submission.yaml: field 'kind' is {sub.kind!r}, but the harness runs the policy as "
            f"{'/'.join(sorted(kinds))} (a registered scheduler replaces the engine's own: "
            "reference; an agent, rule or router acts only through the task's decision: agent)"
        )
    problems += compare_results(rerun, scored, (*VALIDATED_COLUMNS, *SCORED_COLUMNS))
    return problems


def _close(a: float, b: float) -> bool:
    """Equal as the harness computes them (NaN equals NaN)."""
    return (math.isnan(a) and math.isnan(b)) or a == b


def check_rows(
    rows: Sequence[Mapping[str, Any]],
    task: Any,
    method: str,
    reference_values: Mapping[str, tuple[float, float]] | None,
    *,
    is_reference: bool = False,
) -> list[str]:
    """Each row's consistency without re-running it: what a tampered row cannot keep.

    An ``ok`` row's ``value`` is finite and > 0 and equals its metric's own column, its
    ``tail_value`` its tail metric's column; ``reference_value`` is the reference's committed
    value on that workload (``reference_values``: workload -> (value, tail value); the
    reference's own rows refer to themselves; None otherwise: the row's own reference value is
    used); ``ratio`` and ``tail_ratio`` are recomputed from the values. A ``failed`` row has no
    value.
    """
    from llmsched_gym.leaderboard.score import ratio

    problems = []
    for r in rows:
        wid = r["workload"]
        if r.get("policy") != method:
            problems.append(f"{wid}: policy {r.get('policy')!r} is not the method {method!r}")
        if r.get("status") not in ("ok", "failed"):
            problems.append(f"{wid}: status {r.get('status')!r} is neither ok nor failed")
            continue
        value, tail = _num(r.get("value")), _num(r.get("tail_value"))
        if r["status"] == "failed":
            if not (math.isnan(value) and math.isnan(_num(r.get("ratio")))):
                problems.append(f"{wid}: a failed row carries a value or a ratio")
            continue
        if not (math.isfinite(value) and value > 0 and math.isfinite(tail) and tail >= 0):
            problems.append(f"{wid}: value {value!r} / tail_value {tail!r} of an ok row")
            continue
        for col, v in ((r.get("metric"), value), (r.get("tail_metric"), tail)):
            if col in r and not _close(_num(r[col]), v):
                problems.append(f"{wid}: {col} is {r[col]!r} but the row's value says {v!r}")
        if is_reference:
            ref_value, ref_tail = value, tail
        elif reference_values is None:
            ref_value, ref_tail = _num(r.get("reference_value")), math.nan
        elif wid in reference_values:
            ref_value, ref_tail = reference_values[wid]
        else:
            problems.append(f"{wid}: the reference's committed results have no such row")
            continue
        if not _close(_num(r.get("reference_value")), ref_value):
            problems.append(
                f"{wid}: reference_value {r.get('reference_value')!r}, but the reference's "
                f"committed value is {ref_value!r}"
            )
        want = ratio(value, ref_value, str(r.get("metric")))
        want_tail = ratio(tail, ref_tail, str(r.get("tail_metric")))
        for col, v in (("ratio", want), ("tail_ratio", want_tail)):
            if col == "tail_ratio" and math.isnan(ref_tail):
                continue  # no committed reference: its tail value is not known here
            if not _close(_num(r.get(col)), v):
                problems.append(f"{wid}: {col} {r.get(col)!r}, recomputed from the values {v!r}")
    return problems


def _num(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def reference_folder(folder: Path, task: Any) -> Path | None:
    """The sibling submission folder that evaluates the task's reference, if there is one."""
    from llmsched_gym.leaderboard.submission import load_submission

    for path in sorted(Path(folder).resolve().parent.glob("*/submission.yaml")):
        try:
            sub = load_submission(path.parent)
        except ConfigError:
            continue
        if sub.policy == task.reference and sub.task == task.name:
            return path.parent
    return None


def committed_reference_values(
    folder: Path, task: Any
) -> dict[str, tuple[float, float]] | None:
    """Workload -> (value, tail value) of the reference's committed results beside ``folder``.

    The reference's own folder is validated by re-running it like any other submission; every
    other row's reference value and ratio are checked against these values, never taken as
    committed. None when no such folder exists.
    """
    from llmsched_gym.leaderboard.submission import read_results

    where = reference_folder(folder, task)
    if where is None:
        return None
    return {
        r["workload"]: (_num(r["value"]), _num(r["tail_value"]))
        for r in read_results(where / "results.csv")
    }


def collect_submissions(root: Path, tasks: Sequence[str] | None = None) -> dict[str, list[Any]]:
    """Submission folders under ``root`` by task (folders with a ``submission.yaml``)."""
    from llmsched_gym.leaderboard.submission import load_submission

    out: dict[str, list[Any]] = {}
    for path in sorted(root.glob("*/*/submission.yaml")):
        sub = load_submission(path.parent)
        if tasks is None or sub.task.lower() in {t.lower() for t in tasks}:
            out.setdefault(sub.task, []).append(sub)
    return out


def rescored_results(task: Any, subs: Sequence[Any]) -> dict[str, list[dict[str, Any]]]:
    """Each submission's committed rows with ratios recomputed from the values, by method.

    A committed ``reference_value``, ``ratio`` or ``tail_ratio`` is never read as truth: each
    comes again from the row's value and the reference submission's value on that workload. A
    committed ratio that disagrees is reported on stderr (validate fails such a row).
    """
    import sys

    from llmsched_gym.leaderboard.score import score_rows
    from llmsched_gym.leaderboard.submission import read_results

    committed = {s.method: read_results(s.results_path) for s in subs}
    refs = [s for s in subs if s.policy == task.reference]
    if not refs:
        raise ConfigError(
            f"{task.name}: no submission of the reference {task.reference!r}: scores are "
            "recomputed from its values"
        )
    ref_rows = committed[refs[0].method]
    out = {}
    for method, rows in committed.items():
        scored = score_rows(rows, ref_rows)
        for was, now in zip(rows, scored, strict=True):
            if not all(_close(_num(was.get(c)), _num(now[c])) for c in ("ratio", "tail_ratio")):
                print(
                    f"warning: {task.name}/{method}: {was['workload']}: committed ratio "
                    f"{was.get('ratio')!r} is not {now['ratio']!r} recomputed from the values; "
                    "showing the recomputed one",
                    file=sys.stderr,
                )
        out[method] = scored
    return out


@dataclass(frozen=True)
class TaskBoard:
    """One task's committed leaderboard: its submissions, their rescored rows and the board."""

    task: Any
    submissions: list[Any]
    methods: dict[str, list[dict[str, Any]]]
    """Each method's committed rows, ratios recomputed (``rescored_results``)."""
    board: list[dict[str, Any]]
    """``tables.leaderboard_rows``: one summary per method, in the board's order."""


def task_boards(
    root: Path, suite: Any, tasks: Sequence[str] | None = None
) -> dict[str, TaskBoard]:
    """The committed leaderboards of ``suite`` under ``root``, in suite order (``show``, ``site``).

    Raises:
        ConfigError: no submission of the suite under ``root``.
    """
    from llmsched_gym.leaderboard.tables import leaderboard_rows

    subs = {
        task: kept
        for task, found in collect_submissions(root, tasks).items()
        if (kept := [s for s in found if s.suite == suite.version])
    }
    if not subs:
        raise ConfigError(f"no submissions of suite {suite.version} under {root}")
    out = {}
    for name in [t for t in suite.tasks if t in subs]:
        task = suite.task(name)
        methods = rescored_results(task, subs[name])
        declared = {s.method: s.oracle for s in subs[name]}
        board = leaderboard_rows(task, methods, declared, {s.method: s.kind for s in subs[name]})
        out[name] = TaskBoard(task, subs[name], methods, board)
    return out


def show_leaderboards(
    root: Path, task_filter: str | None, out: str | Path, *, update: bool, suite: Any
) -> int:
    """Render every task's committed leaderboard: Markdown (printed and written) and a PNG."""
    from llmsched_gym.leaderboard.headroom import read_headroom, task_headroom
    from llmsched_gym.leaderboard.tables import markdown_table, plot_scores

    tasks = task_filter.split(",") if task_filter else None
    committed = root / "headroom.csv"  # 'leaderboard headroom --update'
    headroom = read_headroom(committed) if committed.is_file() else []
    built = task_boards(root, suite, tasks)
    if suite.superseded:
        print(f"SUPERSEDED {suite.superseded}\n")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    boards, texts = {}, []
    for name, b in built.items():
        task, board = b.task, b.board
        boards[name] = (task, board)
        text = markdown_table(suite, task, board)
        if headroom:
            text += "\n" + task_headroom(headroom, suite.version, name)
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
    names = ", ".join(f"{n.lower()}.md" for n in built)
    print(f"wrote {out}/ ({names}, leaderboards.png)")
    if update:
        for name in boards:
            folder = root / name.lower()
            print(f"wrote {folder / 'README.md'} and {folder / 'leaderboard.png'}")
    return 0
