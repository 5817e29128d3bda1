"""Every class of malformed input the issue-23 fuzz found: one clear error, bounded in time and
memory (a subprocess with an address-space limit and a timeout; not a speed assertion)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from malformed_corpus import CASES  # noqa: E402

TIMEOUT_S = 600
"""Generous bound on the whole corpus (about 20 s on a quiet 2-core machine)."""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("corpus")
    proc = subprocess.run(
        [sys.executable, str(HERE / "malformed_corpus.py"), str(root)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {row["id"]: row for row in rows}


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
