"""``llmsched-gym leaderboard``: list, evaluate, validate, show, site, headroom, reproduce."""

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
from llmsched_gym.leaderboard.suite import SUITE_VERSION

__all__ = ["add_parser", "leaderboards_root"]

HEADROOM_STEM = "headroom"
"""``leaderboards/headroom.{csv,md}``: the committed headroom table (``headroom --update``)."""


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


def _tasks_in_scope(suite: Any, args: argparse.Namespace, scored_only: bool = False) -> list[Any]:
    """The tasks of ``--task``; without it every task (``scored_only``: of the scored set)."""
    if args.task:
        return [suite.task(t) for t in args.task.split(",")]
    return [t for t in suite.tasks.values() if t.scored or not scored_only]


def _cmd_list(args: argparse.Namespace) -> int:
    suite = _suite(args)
    print(f"suite {suite.version}: {suite.description}\n")
    if suite.superseded:
        print(f"SUPERSEDED {suite.superseded}\n")
    for task in _tasks_in_scope(suite, args):
        print(f"{task.name}  [{task.interface}; metric {task.metric}; reference {task.reference}]")
        print(f"  {task.decision}")
        agents = [b for b in task.baselines if task.kind_of(b) == "agent"]
        whole = [b for b in task.baselines if task.kind_of(b) == "reference"]
        print(f"  baselines (agent kind): {', '.join(agents) or '-'}")
        if whole:
            print(f"  baselines (reference kind): {', '.join(whole)}")
        if not task.scored:
            print(f"  UNSCORED: {task.unscored_reason}")
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
    _print_committed_headroom(suite, [t.name for t in _tasks_in_scope(suite, args)])
    return 0


def _print_committed_headroom(suite: Any, tasks: Sequence[str]) -> None:
    """The committed headroom table (``leaderboards/headroom.csv``) of ``suite``, if any."""
    from llmsched_gym.leaderboard.headroom import headroom_markdown, read_headroom

    try:
        path = leaderboards_root() / f"{HEADROOM_STEM}.csv"
    except ConfigError:  # an installed package: no committed table to print
        return
    if not path.is_file():
        return
    committed = read_headroom(path)
    rows = [r for r in committed if r["suite"] == suite.version and r["task"] in tasks]
    if rows:
        summary = headroom_markdown(rows, suite.version).split("\n#### ")[0]
        print(f"\n{summary.rstrip()}\n(from {path}; 'leaderboard headroom' re-measures it)")
    elif committed:
        other = committed[0]["suite"]
        print(f"\nheadroom of {other}: {path} ('leaderboard list --suite-file {other}')")


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
    from llmsched_gym.leaderboard.tables import (
        leaderboard_rows,
        markdown_table,
        per_workload_table,
        plot_scores,
    )

    suite = _suite(args)
    quick = args.suite == "quick"
    if args.update and quick:
        raise ConfigError("--update writes a submission's results: it needs the full test split")
    from llmsched_gym.leaderboard.weights import refuse_pickled

    for spec in args.policy:
        if Path(spec).is_dir():
            refuse_pickled(spec, trust_pickle=args.trust_pickle)
    tasks = _tasks_in_scope(suite, args, scored_only=True)
    for task in suite.tasks.values():
        if task not in tasks and not args.task:
            print(f"skipped: {task.name}: unscored ({task.unscored_reason})", file=sys.stderr)
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
        kind_declared: dict[str, str] = {}
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
                kind_declared[got[0]["policy"]] = sub.kind
                if args.update:
                    write_results(scored, sub.results_path)
                    print(f"wrote {sub.results_path}")
        board = leaderboard_rows(task, methods, oracle_declared, kind_declared)
        boards[task.name] = (task, board)
        md.append(markdown_table(suite, task, board, spread_line=len(board) > 2))
        if args.per_workload:
            md.append(per_workload_table(task, methods, ws[0].metric))
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
                    "kind": r["kind"],
                }
            )
    write_results(all_rows, out / "results.csv")
    import pandas as pd

    pd.DataFrame(summary).to_csv(out / "summary.csv", index=False)
    text = "\n".join(md)
    (out / "summary.md").write_text(text)
    plot_scores(
        suite,
        boards,
        out / "scores.png",
        workloads="the quick subset of the test workloads" if quick else "held-out test workloads",
    )
    if args.json:
        print(json.dumps(_jsonable(summary), indent=1))
    else:
        print(text)
        print(f"wrote {out}/results.csv, summary.csv, summary.md, scores.png")
    bad = [r for r in all_rows if r["status"] != "ok" and _input_error(r["error"])]
    if bad:
        print(
            f"{len(bad)} row(s) failed for an input error (a bad scenario, trace, config or "
            f"policy reference), e.g. {bad[0]['workload']}: {bad[0]['error']}",
            file=sys.stderr,
        )
        return 2
    return 0


INPUT_ERRORS = ("ConfigError", "TraceError", "CostModelError")
"""Error types of a failed row that mean the input is wrong, not that the policy failed."""


def _input_error(error: str) -> bool:
    return error.partition(":")[0] in INPUT_ERRORS


def _jsonable(rows: list[dict]) -> list[dict]:
    return [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
        for r in rows
    ]


def _cmd_validate(args: argparse.Namespace) -> int:
    from llmsched_gym.leaderboard.validate import validate_submission

    reference_runs: dict = {}
    invalid = []
    for folder in args.submission:
        report: list[str] = []
        problems = validate_submission(
            folder,
            quick=args.quick,
            sample=args.sample,
            seed=args.seed,
            workers=args.workers,
            address=args.address,
            progress=not args.quiet,
            report=report,
            reference_runs=reference_runs,
            trust_pickle=args.trust_pickle,
        )
        for line in report:
            print(f"{folder}: {line}")
        if problems:
            invalid.append(folder)
            print(f"{folder}: INVALID ({len(problems)} problem(s))")
            for p in problems[:50]:
                print(f"  {p}")
        elif args.quick:
            print(
                f"{folder}: valid (the re-run rows reproduce exactly; every row is consistent; "
                "rows not re-run are not proven: validate without --quick for that)"
            )
        else:
            print(f"{folder}: valid (every row re-ran and reproduces exactly)")
    if len(args.submission) > 1:
        print(f"{len(args.submission) - len(invalid)} of {len(args.submission)} valid")
    return 1 if invalid else 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from llmsched_gym.leaderboard.diff import diff_submissions

    out = args.out or str(
        Path("out/leaderboard/diff") / _slug(f"{Path(args.a).name}-vs-{Path(args.b).name}")
    )
    print(diff_submissions(args.a, args.b, out))
    print(f"wrote {out}/diff.csv and diff.md")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from llmsched_gym.leaderboard.validate import show_leaderboards

    return show_leaderboards(
        leaderboards_root(args.root), args.task, args.out, update=args.update, suite=_suite(args)
    )


def _cmd_site(args: argparse.Namespace) -> int:
    from llmsched_gym.leaderboard.site import write_site
    from llmsched_gym.leaderboard.site_timeline import timeline_pages

    extra = [] if args.no_timeline else [timeline_pages(args.timeline_workload)]
    out = write_site(leaderboards_root(args.root), _suite(args), args.out, extra)
    pages = sorted(out.glob("*.html"))
    print(f"wrote {out}/ ({len(pages)} pages); open {out / 'index.html'} in a browser")
    return 0


def _count(text: str) -> int:
    """An int >= 0 for argparse, or its error naming the value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an int >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an int >= 0, got {value}")
    return value


def _cmd_headroom(args: argparse.Namespace) -> int:
    from llmsched_gym.leaderboard.headroom import headroom_markdown, run_headroom, write_headroom

    suite = _suite(args)
    horizon = None
    if args.lookahead_horizon != "end":
        try:
            horizon = float(args.lookahead_horizon)
        except ValueError:
            raise ConfigError(
                f"--lookahead-horizon must be seconds or 'end', got {args.lookahead_horizon!r}"
            ) from None
    rows = run_headroom(
        suite,
        _tasks_in_scope(suite, args),
        quick=args.quick,
        lookahead_horizon_s=horizon,
        lookahead_sample=args.lookahead,
        lookahead_skip=args.lookahead_skip.split(",") if args.lookahead_skip else (),
        workers=args.workers,
        address=args.address,
        progress=not args.quiet,
    )
    if args.update:
        if args.quick and args.task:
            raise ConfigError("--update writes the committed table: not with --quick and --task")
        out = leaderboards_root(args.root)
    else:
        out = Path(args.out)
    command = " ".join(
        [
            "llmsched-gym leaderboard headroom",
            *(["--task", args.task] if args.task else []),
            *(["--quick"] if args.quick else []),
            f"--lookahead {args.lookahead}",
            *(["--lookahead-skip", args.lookahead_skip] if args.lookahead_skip else []),
            f"--lookahead-horizon {args.lookahead_horizon}",
            *(["--update"] if args.update else []),
        ]
    )
    paths = write_headroom(rows, out, HEADROOM_STEM, command)
    print(headroom_markdown(rows, suite.version, command))
    print("wrote " + ", ".join(map(str, paths)))
    return 0


def _common(p: argparse.ArgumentParser, workers: bool = True, suite: str = SUITE_VERSION) -> None:
    p.add_argument(
        "--suite-file",
        default=suite,
        metavar="NAME|FILE",
        help=f"suite version or YAML file (default {suite})",
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
            "of starting a local one; a cluster that requires Ray's token authentication is "
            "sent this machine's token if it runs on this machine, else set RAY_AUTH_MODE=token",
        )
        p.add_argument("--quiet", action="store_true", help="no progress bar")


def _trust_pickle(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="run a submission folder that holds pickled objects (an SB3 model.zip, .pkl, a "
        ".pth that torch.load(weights_only=True) refuses) and let its sandboxed code unpickle: "
        "a pickle runs code chosen by whoever wrote it; off by default",
    )


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``leaderboard`` command and its sub-commands to the top-level CLI."""
    p = sub.add_parser(
        "leaderboard",
        help="the benchmark: list tasks, evaluate a policy, validate or show submissions, "
        "reproduce a paper",
        description=f"The {SUITE_VERSION} benchmark: tasks with train and held-out test "
        "workloads, scores against vllm-v1 with paired 95% intervals, validated submissions under "
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
    q.add_argument(
        "--per-workload",
        action="store_true",
        help="also print (and write into summary.md) each workload's ratios, per task",
    )
    _trust_pickle(q)
    _common(q)
    q.set_defaults(func=_cmd_evaluate)

    q = lsub.add_parser(
        "validate",
        help="re-run a submission and check its committed results reproduce exactly",
        description="Re-runs the submission's policy and the task's reference on the test "
        "workloads and compares every column of results.csv but wall time; also checks the "
        "suite version, the task, the workload set and the oracle declaration.",
    )
    q.add_argument(
        "submission",
        nargs="+",
        metavar="FOLDER",
        help="leaderboards/<task>/<method>/ (several: each task's reference re-runs once)",
    )
    q.add_argument(
        "--quick",
        action="store_true",
        help="re-run the quick subset's rows and --sample others drawn at random; check every "
        "row's consistency (value, reference value, ratios); the default re-runs every row",
    )
    q.add_argument(
        "--sample",
        type=_count,
        default=2,
        metavar="N",
        help="with --quick: rows outside the quick subset re-run too (default 2)",
    )
    q.add_argument(
        "--seed",
        type=_count,
        metavar="S",
        help="with --quick: the seed that draws them (default: a fresh one, printed)",
    )
    _trust_pickle(q)
    _common(q)
    q.set_defaults(func=_cmd_validate)

    q = lsub.add_parser(
        "diff",
        help="two submissions side by side, per workload and level, from their results alone",
        description="Pairs two submissions of one task by workload: B's metric over A's "
        "(> 1: A is better), per level and overall with a paired 95% interval, then every "
        "workload. Reads the committed results.csv files; runs nothing.",
    )
    q.add_argument("a", metavar="A", help="a submission folder")
    q.add_argument("b", metavar="B", help="another submission folder of the same task")
    q.add_argument(
        "--out", metavar="DIR", help="output folder (default out/leaderboard/diff/A-vs-B)"
    )
    q.set_defaults(func=_cmd_diff)

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

    q = lsub.add_parser(
        "site",
        help="write the committed leaderboards and paper reproductions as a static site",
        description="Writes a self-contained static site (no network at view time: CSS, "
        "script and images inside the folder): a page per task (sortable tables, agents, "
        "whole schedulers and oracles apart, 95%% intervals drawn, per-level and per-workload "
        "tables), per submission (README, rows, learning curve) and per paper reproduction "
        "(headline table, plots), and one workload's schedule timeline (drawn, and its "
        "Chrome trace file for Perfetto). The numbers are those 'leaderboard show' prints. An "
        "existing --out folder is replaced only if the site wrote it.",
    )
    q.add_argument("--root", metavar="DIR", help="the leaderboards folder (default: the clone's)")
    q.add_argument("--out", default="out/site", metavar="DIR", help="output folder (default "
                   "out/site)")
    q.add_argument("--timeline-workload", metavar="ID", help="the test workload whose timeline "
                   "the site shows, as Task/scenario/source/test/seed (default: the first quick "
                   "Priority workload at overload), run under vllm-v1")
    q.add_argument("--no-timeline", action="store_true", help="no timeline page")
    _common(q, workers=False)
    q.set_defaults(func=_cmd_site)

    q = lsub.add_parser(
        "headroom",
        help="per task: the reference, the best agent and reference-kind baselines, and the "
        "upper references (oracles), with the headroom between them",
        description="Runs every task's reference, baselines and upper references "
        "(static-priority:shortest-output on engine tasks; the lookahead oracle on a declared "
        "sample; the InferMax CSP where a workload is small enough) on the test split (or the "
        "quick subset) and writes headroom.csv and headroom.md under --out (with --update: "
        "leaderboards/headroom.*, which 'leaderboard list' prints).",
    )
    q.add_argument("--task", metavar="T[,T...]", help="only these tasks")
    q.add_argument("--quick", action="store_true", help="the quick subset, not the test split")
    q.add_argument(
        "--lookahead",
        choices=("none", "quick-first", "quick", "all"),
        default="quick-first",
        help="workloads the lookahead oracle runs on: none, the first seed of each quick "
        "scenario's sources (default), the quick subset, or all evaluated",
    )
    q.add_argument(
        "--lookahead-skip",
        metavar="T[,T...]",
        help="tasks the lookahead oracle does not run on (too costly); the table says so",
    )
    q.add_argument(
        "--lookahead-horizon",
        default="end",
        metavar="S|end",
        help="simulated seconds each lookahead fork runs (default end: to the episode's end)",
    )
    q.add_argument(
        "--out", default="out/leaderboard/headroom", metavar="DIR", help="output folder"
    )
    q.add_argument(
        "--update", action="store_true", help="write leaderboards/headroom.csv and .md instead"
    )
    q.add_argument("--root", metavar="DIR", help="the leaderboards folder (default: the clone's)")

    _common(q, suite=SUITE_VERSION)
    q.set_defaults(func=_cmd_headroom)

    from llmsched_gym.leaderboard import reproduce

    reproduce.add_parser(lsub)
