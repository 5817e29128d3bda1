"""``llmsched-gym leaderboard reproduce PAPER``: rerun a paper's reproduction, then its headlines.

The paper's findings are data (``leaderboards/<paper>/experiments.yaml``, schema in
``llmsched_gym.leaderboard.experiments``): its value, how ours is computed from the results
CSVs, the acceptance rule and the verdict words. This command

1. runs the paper's ``reproduce.py`` as the YAML's ``runs`` declare (``quick`` or ``full``
   units, independent of one another, then the ``finish`` commands in order), each writing its
   CSVs into the output folder: ``out/leaderboard/reproduce/<paper>/`` by default, the committed
   ``leaderboards/<paper>/results/`` only with ``--update``;
2. evaluates the experiments on those CSVs and writes ``headlines.csv`` and ``headlines.md``
   (figure, finding, paper, ours, rule, verdict) beside them, and prints the table.

``--from-results`` skips step 1 and evaluates the committed results (the analysis path; with
``--update`` it rewrites ``leaderboards/<paper>/results/headlines.md`` and ``.csv``, the tables
the READMEs carry). ``--workers N`` (N > 1) runs the units on a local Ray (``ray.init(num_cpus=
N)``), ``--address`` joins a running Ray cluster (its workers need this repository at the same
path); each unit is a separate process writing its own files, so the results are the same as
serially. Ray is optional (``pip install -e '.[ray]'``).

The experiments live in the repository's ``leaderboards/`` folder, not in the installed
package: the command finds the repository from this file's location or the working directory.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import subprocess
import sys
import time
from pathlib import Path

from llmsched_gym.leaderboard import experiments as E

RAY_HINT = "pip install -e '.[ray]'"
"""How to install the optional Ray dependency (the ``[ray]`` extra of pyproject.toml)."""


def repo_root(start: Path | None = None) -> Path:
    """The repository checkout holding ``leaderboards/*/experiments.yaml``.

    Looks above this module (an editable install or a source checkout), then above the working
    directory (``start``; default: the working directory).

    Raises:
        ExperimentError: no checkout found, e.g. when run from an installed wheel.
    """
    tried = []
    for base in (Path(__file__).resolve().parent, (start or Path.cwd()).resolve()):
        for d in (base, *base.parents):
            if (d / "leaderboards").is_dir() and (d / "pyproject.toml").is_file():
                return d
        tried.append(str(base))
    raise E.ExperimentError(
        "leaderboard reproduce needs the repository checkout (leaderboards/<paper>/"
        f"experiments.yaml is not part of the installed package); none found above "
        f"{' or '.join(tried)}. Run it from a clone of the repository, e.g. "
        "`cd llmsched_gym && .venv/bin/llmsched-gym leaderboard reproduce relserve`."
    )


def papers(root: Path | None = None) -> list[str]:
    """The papers with an ``experiments.yaml`` under ``leaderboards/``."""
    root = root or repo_root()
    return sorted(p.parent.name for p in (root / "leaderboards").glob("*/experiments.yaml"))


def load_paper(name: str, root: Path | None = None) -> E.Paper:
    """Load ``leaderboards/<name>/experiments.yaml``; unknown names list the known ones."""
    root = root or repo_root()
    path = root / "leaderboards" / name / "experiments.yaml"
    if not path.exists():
        raise E.ExperimentError(
            f"no paper {name!r}: {path} does not exist; choose from {', '.join(papers(root))}"
        )
    return E.load(path)


def commands(paper: E.Paper, out: Path, quick: bool) -> tuple[list[list[str]], list[list[str]]]:
    """(independent units, finishing commands) of the paper's ``runs``, as argv lists."""
    runs = paper.runs
    kind = "quick" if quick else "full"
    if kind not in runs:
        raise E.ExperimentError(
            f"{paper.path}: field 'runs.{kind}': missing (the commands that "
            f"rerun the {kind} reproduction)"
        )
    finish = runs.get("finish_quick" if quick and "finish_quick" in runs else "finish", [])
    folder = paper.path.parent

    def argv(cmd: list) -> list[str]:
        if not isinstance(cmd, list) or not cmd:
            raise E.ExperimentError(
                f"{paper.path}: field 'runs': each command is a non-empty "
                f"list [script, args...], got {cmd!r}"
            )
        script = folder / str(cmd[0])
        return [sys.executable, str(script), *(str(a).format(out=out) for a in cmd[1:])]

    return [argv(c) for c in runs[kind]], [argv(c) for c in finish]


def _run_unit(cmd: list[str], cwd: str, log: str) -> tuple[int, float]:
    """Run one unit, its output to ``log``: (exit status, seconds)."""
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    with open(log, "w") as f:
        rc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    return rc, time.perf_counter() - t0


def run_units(
    units: list[list[str]], root: Path, logs: Path, workers: int = 1, address: str | None = None
) -> None:
    """Run the units serially, or on Ray with ``workers`` > 1 or an ``address``.

    Raises:
        ExperimentError: Ray is needed but not installed, or a unit failed (its log is named).
    """
    logs.mkdir(parents=True, exist_ok=True)
    names = [str(logs / f"unit-{i:02d}.log") for i in range(len(units))]
    if workers <= 1 and not address:
        results = []
        for cmd, log in zip(units, names, strict=True):
            print(f"  run: {' '.join(cmd[1:])}", flush=True)
            results.append(_run_unit(cmd, str(root), log))
    else:
        try:
            import ray  # optional heavy dependency: only for --workers > 1 / --address
        except ImportError:
            raise E.ExperimentError(
                f"--workers {workers}{' --address ' + address if address else ''} runs the units "
                f"on Ray, which is not installed; install it with `{RAY_HINT}` (or run serially "
                "with --workers 1)"
            ) from None
        with contextlib.ExitStack() as stack:
            if address:
                from llmsched_gym.leaderboard.raycluster import ray_joined

                note = stack.enter_context(ray_joined(ray, address))
                if note:
                    print(f"  {note}", flush=True)
                ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
            else:
                ray.init(
                    num_cpus=workers,
                    ignore_reinit_error=True,
                    log_to_driver=False,
                    include_dashboard=False,
                )
            stack.callback(ray.shutdown)
            remote = ray.remote(num_cpus=1)(_run_unit)
            print(f"  {len(units)} units on Ray ({workers} workers)", flush=True)
            results = ray.get(
                [remote.remote(c, str(root), n) for c, n in zip(units, names, strict=True)]
            )
    for cmd, log, (rc, sec) in zip(units, names, results, strict=True):
        if rc != 0:
            raise E.ExperimentError(f"{' '.join(cmd[1:])} failed (exit {rc}); see {log}")
        print(f"  done in {sec:.1f} s: {' '.join(cmd[1:])}", flush=True)


def write_headlines(rows: list[dict], out: Path) -> str:
    """Write ``headlines.csv`` and ``headlines.md`` into ``out``; return the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "headlines.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["id"], lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    md = E.markdown(rows)
    (out / "headlines.md").write_text(md)
    return md


def reproduce(
    name: str,
    *,
    quick: bool = False,
    workers: int = 1,
    address: str | None = None,
    out: Path | None = None,
    update: bool = False,
    from_results: bool = False,
) -> tuple[list[dict], Path]:
    """Rerun (or, with ``from_results``, only evaluate) a paper's reproduction.

    Returns:
        The headline rows and the folder they were written to.
    """
    root = repo_root()
    paper = load_paper(name, root)
    if update and quick:
        raise E.ExperimentError(
            "--update rewrites the committed full results; a --quick run "
            "never writes there (drop --update or --quick)"
        )
    if update and out is not None:
        raise E.ExperimentError(f"--update writes into {paper.results}; drop --out {out}")
    if workers < 1:
        raise E.ExperimentError(f"--workers {workers}: must be >= 1")
    if update:
        dest = paper.results
    else:
        dest = Path(out) if out is not None else Path("out/leaderboard/reproduce") / name
    dest = dest.resolve()
    if from_results:
        rows = E.evaluate(paper, paper.results)
    else:
        if dest.exists() and any(p.name != "logs" for p in dest.iterdir()):
            print(
                f"note: {dest} already holds files; the scripts rewrite theirs, but files they "
                "do not write (and seeds.py's finished seeds) are kept and evaluated too",
                flush=True,
            )
        dest.mkdir(parents=True, exist_ok=True)
        units, finish = commands(paper, dest, quick)
        t0 = time.perf_counter()
        run_units(units, root, dest / "logs", workers, address)
        run_units(finish, root, dest / "logs" / "finish")
        print(f"{name}: reproduction done in {time.perf_counter() - t0:.1f} s", flush=True)
        rows = E.evaluate(paper, dest, quick=quick)
    write_headlines(rows, dest)
    return rows, dest


def add_parser(lsub: argparse._SubParsersAction) -> None:
    """Add ``reproduce`` to the ``leaderboard`` command's sub-commands."""
    p = lsub.add_parser(
        "reproduce",
        help="rerun a paper reproduction and write its paper-vs-ours headline table",
        description="Rerun leaderboards/PAPER/reproduce.py as its experiments.yaml declares, "
        "then evaluate the declared findings (paper value, ours from the results CSVs, "
        "acceptance rule) into headlines.csv / headlines.md. Writes to "
        "out/leaderboard/reproduce/PAPER/ unless --update (the committed results/).",
    )
    p.add_argument("paper", metavar="PAPER", help="relserve, proserve, hexgen or infermax")
    p.add_argument("--quick", action="store_true", help="the paper's quick reproduction")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help=f"run independent units on a local Ray with N CPUs (needs `{RAY_HINT}`)",
    )
    p.add_argument("--address", default=None, metavar="ADDR", help="join this Ray cluster")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="output folder (default out/leaderboard/reproduce/PAPER)",
    )
    p.add_argument(
        "--update",
        action="store_true",
        help="write into the committed leaderboards/PAPER/results/ (full runs only)",
    )
    p.add_argument(
        "--from-results",
        action="store_true",
        help="no simulation: evaluate the committed results/ CSVs",
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Entry point of ``llmsched-gym leaderboard reproduce``; returns the exit status."""
    try:
        rows, dest = reproduce(
            args.paper,
            quick=args.quick,
            workers=args.workers,
            address=args.address,
            out=args.out,
            update=args.update,
            from_results=args.from_results,
        )
    except E.ExperimentError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(E.markdown(rows))
    print(f"wrote {dest / 'headlines.md'} and headlines.csv")
    return 0
