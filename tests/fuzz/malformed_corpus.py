"""A corpus of malformed inputs, one per class the issue-23 fuzz found, run through the CLI.

``python malformed_corpus.py WORKDIR`` runs every case in this one process under an address-space
limit, each with a wall-clock alarm, and prints one JSON line per case: its id, exit code,
stderr and seconds. ``test_malformed_corpus.py`` runs it in a subprocess with a timeout (the
time and memory bound) and checks each outcome.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

MEMORY_LIMIT_BYTES = 6 * 1024**3
"""Address-space limit of the whole run (a YAML bomb or a 10**30 allocation would exceed it)."""
CASE_SECONDS = 60
"""Alarm per case: a hang becomes a failed case instead of a stuck test run."""


def billion_laughs() -> str:
    """Nine levels of nine aliases: a few hundred bytes, 10**9 values once expanded."""
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 9):
        prev, cur = chr(96 + i), chr(97 + i)
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _line(**fields: object) -> str:
    record = {"request_id": "r0", "arrival_time": 0.0, "prompt_len": 16, "output_len": 4}
    record.update(fields)
    return json.dumps(record) + "\n"


TRACE = "trace.jsonl"
RUN = ["simulate", "--no-progress", "--cost-model", "constant:0.01"]

CASES: list[dict] = [
    # YAML: alias bombs, recursion, depth and duplicate keys in every YAML loader.
    {"id": "yaml-bomb-scenario", "files": {"bomb-v0.yaml": billion_laughs()},
     "argv": ["simulate", "--scenario", "bomb-v0.yaml"], "rc": 2, "err": "expand the document"},
    {"id": "yaml-bomb-engine", "files": {TRACE: _line(), "e.yaml": billion_laughs()},
     "argv": [*RUN, "--trace", TRACE, "--engine-config", "e.yaml"], "rc": 2,
     "err": "expand the document"},
    {"id": "yaml-bomb-profile", "files": {TRACE: _line(), "p.yaml": billion_laughs()},
     "argv": ["simulate", "--trace", TRACE, "--cost-model", "p.yaml"], "rc": 2,
     "err": "expand the document"},
    {"id": "yaml-recursive", "files": {TRACE: _line(), "e.yaml": "&a [*a]\n"},
     "argv": [*RUN, "--trace", TRACE, "--engine-config", "e.yaml"], "rc": 2,
     "err": "refers to a collection that contains it"},
    {"id": "yaml-deep", "files": {TRACE: _line(), "e.yaml": "[" * 100_000 + "]" * 100_000},
     "argv": [*RUN, "--trace", TRACE, "--engine-config", "e.yaml"], "rc": 2,
     "err": "nest"},
    {"id": "yaml-duplicate-key", "files": {TRACE: _line(), "e.yaml": "block_size: 16\nblock_size: 32\n"},
     "argv": [*RUN, "--trace", TRACE, "--engine-config", "e.yaml"], "rc": 2,
     "err": "line 2: duplicate key 'block_size'"},
    # Huge integers: range errors before typed code, the same compiled or pure.
    {"id": "huge-prompt-len", "files": {TRACE: _line(prompt_len=10**30)},
     "argv": [*RUN, "--trace", TRACE], "rc": 2, "err": "field 'prompt_len' must be an int <="},
    {"id": "huge-priority", "files": {TRACE: _line(priority=10**30)},
     "argv": [*RUN, "--trace", TRACE], "rc": 2, "err": "field 'priority' must be an int in"},
    {"id": "scenario-parameter-out-of-range", "files": {},
     "argv": ["simulate", "--scenario", "chat-sharegpt-v0", "--set",
              "workload.num_requests=100000"], "rc": 2,
     "err": "scenario chat-sharegpt-v0: workload: num_requests must be <="},
    {"id": "huge-budget-flag", "files": {TRACE: _line()},
     "argv": [*RUN, "--trace", TRACE, "--max-num-batched-tokens", str(10**30)], "rc": 2,
     "err": "max_num_batched_tokens must be at most"},
    {"id": "huge-blocks-file", "files": {TRACE: _line(), "e.json": f'{{"num_gpu_blocks": {10**30}}}'},
     "argv": [*RUN, "--trace", TRACE, "--engine-config", "e.json"], "rc": 2,
     "err": "num_gpu_blocks must be at most"},
    # Output paths: checked before the run.
    {"id": "out-is-a-file", "files": {TRACE: _line(), "taken": "x"},
     "argv": [*RUN, "--trace", TRACE, "--out", "taken"], "rc": 2, "err": "--out taken: is a file"},
    {"id": "out-unwritable", "files": {TRACE: _line()},
     "argv": [*RUN, "--trace", TRACE, "--out", "/proc/x"], "rc": 2,
     "err": "cannot create the output folder"},
    {"id": "schedule-log-is-a-folder", "files": {TRACE: _line(), "logs/keep": ""},
     "argv": [*RUN, "--trace", TRACE, "--schedule-log", "logs"], "rc": 2,
     "err": "--schedule-log logs: is a folder"},
    # Ambiguous input.
    {"id": "trace-duplicate-key", "files": {TRACE: _line()[:-2] + ', "output_len": 9}\n'},
     "argv": [*RUN, "--trace", TRACE], "rc": 2, "err": "field 'output_len' appears twice"},
    {"id": "scenario-name-not-file", "files": {"mine-v0.yaml": "SCENARIO:chat-sharegpt-v0"},
     "argv": ["simulate", "--scenario", "mine-v0.yaml"], "rc": 2,
     "err": "key 'name' is 'chat-sharegpt-v0'"},
    # Policy liveness.
    {"id": "proserve-one-token-slow-steps", "files": {TRACE: _line(prompt_len=1, output_len=5)},
     "argv": ["simulate", "--no-progress", "--trace", TRACE, "--scheduler", "proserve",
              "--cost-model", "constant:0.05"], "rc": 0, "err": ""},
    {"id": "relserve-small-kv", "files": {TRACE: _line()},
     "argv": [*RUN, "--trace", TRACE, "--scheduler", "relserve", "--num-gpu-blocks", "20"],
     "rc": 0, "err": ""},
    # Unclear messages.
    {"id": "num-requests-zero", "files": {},
     "argv": ["simulate", "--num-requests", "0"], "rc": 2, "err": "must be an integer >= 1, got 0"},
    {"id": "empty-trace", "files": {"empty.jsonl": ""},
     "argv": [*RUN, "--trace", "empty.jsonl"], "rc": 2, "err": "trace empty.jsonl holds no requests"},
    {"id": "control-character", "files": {TRACE: '{"request_id": "a\\u0001\x01"}\n'},
     "argv": [*RUN, "--trace", TRACE], "rc": 2, "err": "invalid JSON"},
    {"id": "set-without-equals", "files": {},
     "argv": ["simulate", "--scenario", "chat-sharegpt-v0", "--set", "seed"], "rc": 2,
     "err": "expected KEY=VALUE"},
]  # fmt: skip


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Timeout


def run_case(case: dict, root: Path) -> dict:
    """Runs one case in ``root / case['id']``; returns its outcome."""
    from llmsched_gym.cli.main import main
    from llmsched_gym.scenarios import scenario_path

    work = root / case["id"]
    work.mkdir(parents=True, exist_ok=True)
    for name, text in case["files"].items():
        if text.startswith("SCENARIO:"):
            text = scenario_path(text.removeprefix("SCENARIO:")).read_text()
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    err, out = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    cwd = os.getcwd()
    os.chdir(work)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                rc = main(list(case["argv"]))
            except SystemExit as exc:  # argparse usage errors
                rc = exc.code
    except _Timeout:
        rc = "timeout"
    except BaseException as exc:  # noqa: BLE001 - a crash is an outcome to report
        rc = f"crash: {type(exc).__name__}: {str(exc)[:300]}"
    finally:
        signal.alarm(0)
        os.chdir(cwd)
    return {"id": case["id"], "rc": rc, "stderr": err.getvalue()[-2000:],
            "seconds": round(time.perf_counter() - start, 2)}  # fmt: skip


def main(argv: list[str]) -> int:
    """Runs the corpus (optionally only the ids given after WORKDIR)."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    root = Path(argv[0])
    wanted = set(argv[1:])
    for case in CASES:
        if not wanted or case["id"] in wanted:
            print(json.dumps(run_case(case, root)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
