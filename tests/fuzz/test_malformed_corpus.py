"""Every class of malformed input the issue-23 fuzz found: one clear error, bounded in time and
memory (a subprocess with an address-space limit and a timeout; not a speed assertion)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from malformed_corpus import CASES  # noqa: E402

TIMEOUT_S = 600
"""Generous bound on the whole corpus (about 20 s on a quiet 2-core machine)."""


def _run_corpus(root: Path, pure: bool) -> dict[str, dict]:
    env = {**os.environ, "LLMSCHED_PURE": "1" if pure else "0"}
    proc = subprocess.run(
        [sys.executable, str(HERE / "malformed_corpus.py"), str(root)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {row["id"]: row for row in rows}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    return _run_corpus(tmp_path_factory.mktemp("corpus"), pure=False)


def test_pure_python_gives_the_same_outcomes(outcomes, tmp_path) -> None:
    """The compiled core and pure Python refuse each input with the same message."""
    pure = _run_corpus(tmp_path, pure=True)
    for case_id, got in outcomes.items():
        assert (pure[case_id]["rc"], pure[case_id]["stderr"]) == (got["rc"], got["stderr"])


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case(case: dict, outcomes: dict[str, dict]) -> None:
    got = outcomes[case["id"]]
    assert got["rc"] == case["rc"], got
    err = got["stderr"]
    assert "Traceback" not in err, err
    assert case["err"] in err, err
    if case["rc"] == 2 and not err.startswith("usage:"):
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and ": error: " in lines[0], err  # one line, no traceback
        assert "at at" not in err and "[Errno" not in err
