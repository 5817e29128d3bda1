"""Submissions: ``leaderboards/<task>/<method>/`` with ``submission.yaml``, ``results.csv``, README.

``submission.yaml``::

    suite: llmsched-v1              # the suite version the results were produced on
    task: Priority                  # a task of that suite
    method: shortest-prompt-first   # the row's name (defaults to the folder's name)
    policy: static-priority:shortest-prompt   # a registered name, 'random', or module:factory
                                    # (a file entry point is relative to this folder)
    oracle: false                   # true if the policy reads true output lengths
    paper: null                     # the source paper (title, venue, arXiv id), if any
    training: null                  # learned policies: algorithm and the train workloads used

``results.csv`` holds one row per held-out test workload (``RESULT_COLUMNS`` plus the reference's
value and the ratios), written by ``llmsched-gym leaderboard evaluate FOLDER --update``.
``validate`` re-runs the policy and requires every column but wall time to reproduce exactly.

This module reads and writes ``results.csv``; a folder's ``submission.yaml`` is read by
``llmsched_gym.leaderboard.policy`` (``Submission``, ``load_submission``, re-exported here),
which resolves every kind of policy reference, folders included, in one place.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.policy import SUBMISSION_FIELDS, Submission, load_submission

__all__ = [
    "SUBMISSION_FIELDS",
    "Submission",
    "compare_results",
    "load_submission",
    "read_results",
    "write_results",
]

SCORED_COLUMNS = ("reference_value", "ratio", "tail_ratio")
"""Columns ``results.csv`` adds to the run's columns."""

ADDED_IN_V2 = ("kind", "oracle_reason")
"""Text columns llmsched-v2 added to the run's columns (empty in v1's frozen results)."""


def write_results(rows: Sequence[Mapping[str, Any]], path: str | Path) -> None:
    """Write result rows as CSV (floats in shortest round-trip form), atomically."""
    import pandas as pd

    from llmsched_gym.leaderboard.run import RESULT_COLUMNS
    from llmsched_gym.metrics._atomic import atomic_output

    columns = list(RESULT_COLUMNS) + [c for c in SCORED_COLUMNS if rows and c in rows[0]]
    frame = pd.DataFrame(list(rows), columns=columns)
    with atomic_output(path) as tmp:
        frame.to_csv(tmp, index=False)


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a results CSV; an error names the file and what is wrong."""
    import pandas as pd

    from llmsched_gym.leaderboard.run import RESULT_COLUMNS

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no results file (run evaluate with --update first)")
    try:
        frame = pd.read_csv(path, keep_default_na=False, na_values=["", "nan", "NaN"])
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"{path}: not a readable CSV: {exc}") from None
    for col in ADDED_IN_V2:  # llmsched-v1's frozen results predate them
        if col not in frame.columns:
            frame[col] = ""
    missing = [c for c in RESULT_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"{path}: missing column(s) {missing}")
    rows = frame.to_dict("records")
    for row in rows:
        for col in ("error", *ADDED_IN_V2):
            row[col] = "" if _is_nan(row.get(col)) else str(row[col])
        row["oracle"] = bool(row["oracle"])
    return rows


def _is_nan(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _same(a: Any, b: Any) -> bool:
    if _is_nan(a) and _is_nan(b):
        return True
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return str(a) == str(b)


def compare_results(
    committed: Sequence[Mapping[str, Any]],
    fresh: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
) -> list[str]:
    """Differences between committed and re-run rows (matched by workload): one line each."""
    problems = []
    new = {r["workload"]: r for r in fresh}
    for row in committed:
        other = new.get(row["workload"])
        if other is None:
            continue
        for col in columns:
            if col in ADDED_IN_V2 and row.get(col) == "":
                continue  # a frozen llmsched-v1 row, written before the column existed
            if not _same(row.get(col), other.get(col)):
                was, now = row.get(col), other.get(col)
                problems.append(f"{row['workload']}: {col} committed {was!r}, re-run {now!r}")
    return problems
