"""``llmsched-gym leaderboard``: list, evaluate, validate, show (and reproduce)."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llmsched_gym.errors import ConfigError

__all__ = ["add_parser", "leaderboards_root"]


def leaderboards_root(given: str | None = None) -> Path:
    """The repository's ``leaderboards/`` folder (or ``given``), with a clear error if absent."""
    if given is not None:
        root = Path(given)
    else:
        root = Path(__file__).resolve().parents[2] / "leaderboards"
    if not root.is_dir():
        raise ConfigError(
            f"no leaderboards folder at {root}: run from a clone of the repository or pass --root"
        )
    return root


def _suite(args: argparse.Namespace) -> Any:
    from llmsched_gym.leaderboard.suite import load_suite

    return load_suite(args.suite_file)


def _tasks_in_scope(suite: Any, args: argparse.Namespace) -> list[Any]:
    if args.task:
        return [suite.task(t) for t in args.task.split(",")]
    return list(suite.tasks.values())


def _cmd_list(args: argparse.Namespace) -> int:
    suite = _suite(args)
    print(f"suite {suite.version}: {suite.description}\n")
    for task in _tasks_in_scope(suite, args):
        print(f"{task.name}  [{task.interface}; metric {task.metric}; reference {task.reference}]")
        print(f"  {task.decision}")
        print(f"  baselines: {', '.join(task.baselines)}")
        for sc in task.scenarios:
            quick = " (quick)" if sc.quick else ""
            print(f"  {sc.id}{quick}: {sc.base} at {sc.load:g}x capacity ({sc.level})")
            for src in sc.sources:
                rate = sc.load * sc.capacity[src.name]
                train = (
                    f"train seeds {src.train.seeds[0]}-{src.train.seeds[-1]}"
                    + (f" window {list(src.train.window_s)} s" if src.train.window_s else "")
                    if src.train
                    else "test only (held-out trace)"
                )
                test = f"test seeds {list(src.test.seeds)}" + (
                    f" window {list(src.test.window_s)} s" if src.test.window_s else ""
                )
                print(f"      {src.name:<18} {rate:8.4g}/s  {train}; {test}")
    n_test = len(suite.workloads("test"))
    n_quick = len(suite.workloads("test", quick=True))
    print(f"\n{n_test} test workloads ({n_quick} in the quick subset)")
    return 0


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80] or "policy"


def _evaluate_task(
    suite: Any, task: Any, specs: Sequence[str], quick: bool, args: argparse.Namespace
) -> tuple[list[dict], list[str]]:
    """Rows (policy and reference) of ``specs`` on ``task``; skipped specs with the reason."""
    from llmsched_gym.leaderboard.policy import resolve_policy

    usable, skipped = [], []
    for spec in specs:
        try:
            resolve_policy(spec, task)
            usable.append(spec)
        except ConfigError as exc:
            if len(_tasks_in_scope(suite, args)) == 1:
                raise
            skipped.append(f"{task.name}: {exc}")
    if not usable:
        return [], skipped
    workloads = suite.workloads("test", tasks=[task.name], quick=quick)
    jobs = [(task.reference, w) for w in workloads]
    jobs += [(s, w) for s in usable if s != task.reference for w in workloads]
    return jobs, skipped


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from llmsched_gym.leaderboard.run import run_all
    from llmsched_gym.leaderboard.score import score_rows
    from llmsched_gym.leaderboard.submission import load_submission, write_results
    from llmsched_gym.leaderboard.tables import leaderboard_rows, markdown_table, plot_scores

    suite = _suite(args)
    quick = args.suite == "quick"
    if args.update and quick:
        raise ConfigError("--update writes a submission's results: it needs the full test split")
    tasks = _tasks_in_scope(suite, args)
    all_jobs, skipped = [], []
    for task in tasks:
        jobs, why = _evaluate_task(suite, task, args.policy, quick, args)
        all_jobs += jobs
        skipped += why
    for line in skipped:
        print(f"skipped: {line}", file=sys.stderr)
    if not all_jobs:
        raise ConfigError("nothing to evaluate: no policy fits the chosen task(s)")
    # Ray or not, the same rows in the same order.
    unique = list({(s, w.id): (s, w) for s, w in all_jobs}.values())
    rows = run_all(
        suite,
        unique,
        workers=args.workers,
        address=args.address,
        progress=not args.quiet,
        trust_pickle=args.trust_pickle,
    )
    by_job = {(s, w.id): r for (s, w), r in zip(unique, rows, strict=True)}

    out = (
        Path(args.out)
        if args.out
        else Path("out/leaderboard/evaluate")
        / _slug("+".join(Path(p).name if Path(p).is_dir() else p for p in args.policy))
    )
    out.mkdir(parents=True, exist_ok=True)
    all_rows, boards, md, summary = [], {}, [], []
    for task in tasks:
        ws = suite.workloads("test", tasks=[task.name], quick=quick)
        ref_rows = [by_job[(task.reference, w.id)] for w in ws if (task.reference, w.id) in by_job]
        if not ref_rows:
            continue
        methods: dict[str, list[dict]] = {}
        oracle_declared: dict[str, bool] = {}
        for spec in dict.fromkeys([task.reference, *args.policy]):
            got = [by_job[(spec, w.id)] for w in ws if (spec, w.id) in by_job]
            if not got:
                continue
            scored = score_rows(got, ref_rows)
            methods[got[0]["policy"]] = scored
            all_rows += scored
            if Path(spec).is_dir():
                sub = load_submission(spec)
                oracle_declared[got[0]["policy"]] = sub.oracle
                if args.update:
                    write_results(scored, sub.results_path)
                    print(f"wrote {sub.results_path}")
        board = leaderboard_rows(task, methods, oracle_declared)
        boards[task.name] = (task, board)
        md.append(markdown_table(suite, task, board, spread_line=len(board) > 2))
        for r in board:
            summary.append(
                {
                    "task": task.name,
                    "method": r["method"],
                    "score": r["score"].value,
                    "score_low": r["score"].low,
                    "score_high": r["score"].high,
                    "tail_score": r["tail"].value,
                    **{f"score_{k}": v.value for k, v in r["levels"].items()},
                    "num_workloads": r["num_workloads"],
                    "num_failed": r["num_failed"],
                    "oracle": r["oracle"],
                }
            )
    write_results(all_rows, out / "results.csv")
    import pandas as pd

    pd.DataFrame(summary).to_csv(out / "summary.csv", index=False)
    text = "\n".join(md)
    (out / "summary.md").write_text(text)
    plot_scores(suite, boards, out / "scores.png")
    if args.json:
        print(json.dumps(_jsonable(summary), indent=1))
    else:
        print(text)
        print(f"wrote {out}/results.csv, summary.csv, summary.md, scores.png")
    return 0


def _jsonable(rows: list[dict]) -> list[dict]:
    return [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
        for r in rows
    ]


def _cmd_validate(args: argparse.Namespace) -> int:
    from llmsched_gym.leaderboard.validate import validate_submission

    problems = validate_submission(
        args.submission,
        quick=args.quick,
        workers=args.workers,
        address=args.address,
        progress=not args.quiet,
        trust_pickle=args.trust_pickle,
    )
    if problems:
        print(f"{args.submission}: INVALID ({len(problems)} problem(s))")
        for p in problems[:50]:
            print(f"  {p}")
        return 1
    print(f"{args.submission}: valid (results reproduce exactly)")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from llmsched_gym.leaderboard.validate import show_leaderboards

    return show_leaderboards(
        leaderboards_root(args.root), args.task, args.out, update=args.update, suite=_suite(args)
    )


def _common(p: argparse.ArgumentParser, workers: bool = True) -> None:
    p.add_argument(
        "--suite-file",
        default="llmsched-v1",
        metavar="NAME|FILE",
        help="suite version or YAML file (default llmsched-v1)",
    )
    if workers:
        p.add_argument(
            "--workers",
            type=int,
            default=1,
            metavar="N",
            help="parallel Ray workers (default 1: serial, no Ray needed; N > 1 starts a local "
            "Ray, needs pip install -e '.[ray]')",
        )
        p.add_argument(
            "--address",
            metavar="ADDR",
            help="join a running Ray cluster (e.g. HEAD:6379 after 'ray start --head') instead "
            "of starting a local one",
        )
        p.add_argument("--quiet", action="store_true", help="no progress bar")
        p.add_argument(
            "--trust-pickle",
            action="store_true",
            help="let a submission's sandboxed code unpickle (e.g. SB3's PPO.load of a "
            "model.zip): a pickle runs code chosen by whoever wrote it; off by default",
        )


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``leaderboard`` command and its sub-commands to the top-level CLI."""
    p = sub.add_parser(
        "leaderboard",
        help="the benchmark: list tasks, evaluate a policy, validate or show submissions, "
        "reproduce a paper",
        description="The llmsched-v1 benchmark: tasks with train and held-out test workloads, "
        "scores against vllm-v1 with paired 95%% intervals, validated submissions under "
        "leaderboards/<task>/<method>/.",
    )
    lsub = p.add_subparsers(dest="leaderboard_command", required=True, metavar="ACTION")

    q = lsub.add_parser("list", help="the suite's tasks, scenarios, load levels and splits")
    _common(q, workers=False)
    q.add_argument("--task", metavar="T[,T...]", help="only these tasks")
    q.set_defaults(func=_cmd_list)

    q = lsub.add_parser(
        "evaluate",
        help="score policies on held-out test workloads against the task's reference",
        description="Run each POLICY (a registered scheduler or router name, 'random', a "
        "module:factory entry point, or a submission folder) and the task's reference on the "
        "task's held-out test workloads; print the leaderboard table and write results.csv, "
        "summary.csv, summary.md and scores.png under --out.",
    )
    q.add_argument("policy", nargs="+", metavar="POLICY", help="what to evaluate")
    q.add_argument("--task", metavar="T[,T...]", help="the task(s) (e.g. Priority)")
    q.add_argument(
        "--suite",
        choices=("quick", "full"),
        help="every task (or those of --task): the quick subset (one load level each) or all "
        "test workloads (the default with --task)",
    )
    q.add_argument(
        "--out", metavar="DIR", help="output folder (default out/leaderboard/evaluate/<policy>)"
    )
    q.add_argument(
        "--update",
        action="store_true",
        help="also write each submission folder's results.csv (full test split only)",
    )
    q.add_argument("--json", action="store_true", help="print the summary as JSON")
    _common(q)
    q.set_defaults(func=_cmd_evaluate)

    q = lsub.add_parser(
        "validate",
        help="re-run a submission and check its committed results reproduce exactly",
        description="Re-runs the submission's policy and the task's reference on the test "
        "workloads and compares every column of results.csv but wall time; also checks the "
        "suite version, the task, the workload set and the oracle declaration.",
    )
    q.add_argument("submission", metavar="FOLDER", help="leaderboards/<task>/<method>/")
    q.add_argument("--quick", action="store_true", help="re-run only the quick subset's workloads")
    _common(q)
    q.set_defaults(func=_cmd_validate)

    q = lsub.add_parser(
        "show",
        help="render the committed leaderboards (Markdown and a PNG)",
        description="Reads every leaderboards/<task>/<method>/results.csv and writes one "
        "Markdown table per task and a plot of scores with their intervals.",
    )
    q.add_argument("--task", metavar="T[,T...]", help="only these tasks")
    q.add_argument("--root", metavar="DIR", help="the leaderboards folder (default: the clone's)")
    q.add_argument("--out", default="out/leaderboard/show", metavar="DIR", help="output folder")
    q.add_argument(
        "--update",
        action="store_true",
        help="write the tables into leaderboards/<task>/README.md and leaderboard.png",
    )
    _common(q, workers=False)
    q.set_defaults(func=_cmd_show)

    from llmsched_gym.leaderboard import reproduce

    reproduce.add_parser(lsub)
