"""Differential test: the simulator's ``vllm-v1`` scheduler against vLLM 0.32.0's own scheduler.

For each seed, ``gen_traces.generate`` makes a random trace and engine config; the oracle
(``vllm_oracle.py``, run with the vLLM virtualenv's Python) and the simulator
(``python -m llmsched_gym simulate ... --cost-model constant:1.0``) each write a schedule log,
and the two logs must agree line by line (see ``compare_logs`` for the field rules).

Both scheduling modes are compared on the same traces: ``sync`` (vLLM's ``Scheduler``, driven as
``EngineCore.step`` does) and ``async`` (vLLM's ``AsyncScheduler``, driven one step ahead as
``EngineCore.step_with_batch_queue`` does; the simulator with ``--async-scheduling``).

The oracle runs once per session for all seeds (``--batch``): importing vLLM takes several
seconds, replaying a trace a fraction of a second. Tests skip when vLLM 0.32.0 is not installed;
``.ci/setup_vllm_venv.sh`` installs it (or point ``LLMSCHED_VLLM_PYTHON`` at a Python that has it).
``LLMSCHED_DIFF_NUM_SEEDS`` changes the number of seeds (default 40) of each mode.

The multi-turn tests (``-k multiturn``) do the same on ``gen_traces.generate_multiturn`` traces:
conversations whose turns continue earlier ones (``parent_request_id``), the oracle sampling the
parents' generated ids that the turns' prompts hold, so turns hit their parents' blocks of
generated tokens; ``LLMSCHED_DIFF_NUM_MULTITURN_SEEDS`` (default 40) seeds in each mode.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.oracle

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
ORACLE_SCRIPT = HERE / "vllm_oracle.py"
VLLM_VERSION = "0.32.0"
NUM_SEEDS = int(os.environ.get("LLMSCHED_DIFF_NUM_SEEDS", "40"))
SEEDS = list(range(NUM_SEEDS))
MULTITURN_SEEDS = list(range(int(os.environ.get("LLMSCHED_DIFF_NUM_MULTITURN_SEEDS", "40"))))
MODES = ("sync", "async")
"""Scheduling modes: vLLM's synchronous ``Scheduler`` and its ``AsyncScheduler``."""
STEP_TIME_S = 1.0
TIME_TOLERANCE_S = 1e-9
SKIP_REASON = (
    f"vLLM {VLLM_VERSION} oracle not installed: run .ci/setup_vllm_venv.sh "
    "(or set LLMSCHED_VLLM_PYTHON)"
)
LOG_FIELDS = (
    "step",
    "time",
    "scheduled",
    "new",
    "resumed",
    "preempted",
    "finished",
    "num_free_blocks",
    "num_running",
    "num_waiting",
)
OPTIONAL_LOG_FIELDS = ("aborted",)
"""Fields a line holds only when not empty: ``aborted`` lists the requests aborted
(``cancel_time``) since the previous line, in abort order."""


def _load_gen_traces() -> ModuleType:
    """Import ``gen_traces`` from this folder whatever pytest's import mode."""
    spec = importlib.util.spec_from_file_location(
        "llmsched_diff_gen_traces", HERE / "gen_traces.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen_traces = _load_gen_traces()


# --------------------------------------------------------------------------- oracle discovery


def _vllm_version(python: str) -> tuple[str | None, str]:
    """Return (vLLM version or None, error text) for an interpreter."""
    try:
        proc = subprocess.run(
            [python, "-c", "import vllm; print(vllm.__version__)"],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    if proc.returncode != 0:
        return None, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"
    return proc.stdout.strip().splitlines()[-1], ""


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """The Python that runs the oracle, or skip the module's tests."""
    explicit = os.environ.get("LLMSCHED_VLLM_PYTHON")
    candidate = explicit or str(REPO_ROOT / ".venv-vllm" / "bin" / "python")
    if not explicit and not Path(candidate).exists():
        pytest.skip(SKIP_REASON)
    version, error = _vllm_version(candidate)
    if version is None or not version.startswith(VLLM_VERSION):
        found = f"found vLLM {version}" if version else f"import vllm failed: {error}"
        if explicit:
            pytest.fail(f"LLMSCHED_VLLM_PYTHON={explicit}: {found}; need vLLM {VLLM_VERSION}")
        pytest.skip(f"{SKIP_REASON} ({candidate}: {found})")
    return candidate


@dataclass(frozen=True)
class SeedCase:
    """One (mode, seed)'s generated inputs and the oracle's outputs."""

    mode: str
    seed: int
    folder: Path
    trace: Path
    engine_config: Path
    oracle_log: Path
    summary: Path


def _run_oracle(
    vllm_python: str, root: Path, seeds: Sequence[int], multiturn: bool = False
) -> dict[tuple[str, int], SeedCase]:
    """Generate every seed's trace into ``root`` and run the oracle in both modes, at once."""
    cases: dict[tuple[str, int], SeedCase] = {}
    manifest_lines = []
    for seed in seeds:
        folder = root / f"seed{seed:03d}"
        trace, engine_config = gen_traces.write(seed, folder, multiturn)
        for mode in MODES:
            case = SeedCase(
                mode,
                seed,
                folder,
                trace,
                engine_config,
                folder / f"oracle_log_{mode}.jsonl",
                folder / f"oracle_summary_{mode}.json",
            )
            cases[mode, seed] = case
            manifest_lines.append(
                json.dumps(
                    {
                        "trace": str(trace),
                        "engine_config": str(engine_config),
                        "schedule_log": str(case.oracle_log),
                        "summary": str(case.summary),
                        "async_scheduling": mode == "async",
                    }
                )
            )
    manifest = root / "manifest.jsonl"
    manifest.write_text("\n".join(manifest_lines) + "\n", encoding="utf-8")
    proc = subprocess.run(
        [
            vllm_python,
            str(ORACLE_SCRIPT),
            "--batch",
            str(manifest),
            "--step-time",
            str(STEP_TIME_S),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=REPO_ROOT,
    )
    if proc.returncode != 0:
        pytest.fail(f"vLLM oracle failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return cases


@pytest.fixture(scope="session")
def oracle_runs(
    vllm_python: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, int], SeedCase]:
    """Generate every seed's trace and run the oracle in both modes, all in one process."""
    return _run_oracle(vllm_python, tmp_path_factory.mktemp("vllm_oracle"), SEEDS)


@pytest.fixture(scope="session")
def multiturn_oracle_runs(
    vllm_python: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, int], SeedCase]:
    """The same for the multi-turn traces (``gen_traces.generate_multiturn``)."""
    root = tmp_path_factory.mktemp("vllm_oracle_multiturn")
    return _run_oracle(vllm_python, root, MULTITURN_SEEDS, multiturn=True)


# --------------------------------------------------------------------------- log comparison


def read_log(path: Path) -> list[dict[str, Any]]:
    """Read a JSONL schedule log."""
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def _field_differs(name: str, expected: Any, actual: Any) -> bool:
    """Whether one schedule-log field differs between the oracle and the simulator.

    ``time`` is compared with a tolerance of ``TIME_TOLERANCE_S``; ``finished`` as a set (the
    oracle lists ids in the order vLLM reports them, i.e. scheduling order; the contract does
    not fix an order); ``preempted`` as a list (order is preemption order); the dicts
    ``scheduled`` / ``new`` / ``resumed`` as mappings (key order ignored).
    """
    if name == "time":
        if not isinstance(actual, int | float) or isinstance(actual, bool):
            return True
        return not math.isclose(expected, actual, rel_tol=0.0, abs_tol=TIME_TOLERANCE_S)
    if name == "finished":
        if not isinstance(actual, list):
            return True
        return sorted(expected) != sorted(actual) or len(set(actual)) != len(actual)
    return bool(expected != actual)


def compare_logs(
    expected: Sequence[dict[str, Any]], actual: Sequence[dict[str, Any]]
) -> tuple[int, list[str]] | None:
    """Find the first line where the simulator's log departs from the oracle's.

    Args:
        expected: The oracle's log (vLLM).
        actual: The simulator's log.

    Returns:
        None when they agree, else ``(index of the first differing line, differing fields)``;
        a missing line is reported with the field ``<missing line>``.
    """
    for index in range(max(len(expected), len(actual))):
        if index >= len(expected) or index >= len(actual):
            return index, ["<missing line>"]
        want, got = expected[index], actual[index]
        fields = [
            name
            for name in LOG_FIELDS
            if name not in got or _field_differs(name, want[name], got[name])
        ]
        fields += [name for name in OPTIONAL_LOG_FIELDS if want.get(name) != got.get(name)]
        if fields:
            return index, fields
    return None


def _mismatch_message(
    seed: int,
    case: SeedCase,
    sim_log: Path,
    expected: Sequence[dict[str, Any]],
    actual: Sequence[dict[str, Any]],
    index: int,
    fields: list[str],
) -> str:
    def line(log: Sequence[dict[str, Any]], i: int) -> str:
        return json.dumps(log[i]) if 0 <= i < len(log) else "<no line: log ended>"

    parts = [
        f"seed {seed} ({case.mode}): schedule logs differ at step {index} in field(s) "
        f"{', '.join(fields)}",
        f"  engine config: {json.dumps(json.loads(case.engine_config.read_text('utf-8')))}",
        f"  vLLM 0.32.0 : {line(expected, index)}",
        f"  simulator   : {line(actual, index)}",
    ]
    for name in fields:
        if name != "<missing line>" and index < len(expected) and index < len(actual):
            got = actual[index].get(name, "<absent>")
            want = expected[index].get(name, "<absent>")
            parts.append(f"  {name}: vLLM {want!r} != simulator {got!r}")
    if index > 0 and index - 1 < min(len(expected), len(actual)):
        parts.append(f"  previous step (equal): {line(expected, index - 1)}")
    parts.append(f"  logs: {case.oracle_log} (vLLM), {sim_log} (simulator)")
    parts.append(f"  log lengths: {len(expected)} (vLLM), {len(actual)} (simulator)")
    parts.append(f"  reproduce: python tests/differential/gen_traces.py --seed {seed} --out-dir D")
    return "\n".join(parts)


# --------------------------------------------------------------------------- log sanity checks


@dataclass
class Coverage:
    """What a set of oracle logs exercised; counts over all seeds."""

    traces: int = 0
    steps: int = 0
    empty_steps: int = 0
    preemptions: Counter[str] = field(default_factory=Counter)
    resumed: int = 0
    resumed_with_hit: int = 0
    prefix_hit_tokens: int = 0
    same_step_hits: int = 0
    partial_prefill_chunks: int = 0
    threshold_capped_chunks: int = 0
    seeds_with_preemption: int = 0
    arrivals_on_step_start: int = 0
    arrivals_ulp_before_step: int = 0
    arrivals_ulp_after_step: int = 0
    aborted_waiting: int = 0
    unchunked_admissions: int = 0
    adaptive_capped_chunks: int = 0
    aborted_running: int = 0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly view."""
        out = dict(self.__dict__)
        out["preemptions"] = dict(self.preemptions)
        return out


@dataclass
class _ReqState:
    prompt: list[int]
    output_len: int
    arrival_time: float
    cancel_time: float | None = None
    aborted: bool = False
    computed: int = 0
    generated: int = 0
    running: bool = False
    preempted: bool = False
    admitted_once: bool = False
    finished: bool = False

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + self.generated


def check_log(
    rows: Sequence[dict[str, Any]],
    engine_config: dict[str, Any],
    log: Sequence[dict[str, Any]],
    coverage: Coverage,
    step_time_s: float = STEP_TIME_S,
) -> None:
    """Check a schedule log against the trace, the engine limits and its own token accounting.

    Replays each request's ``num_computed_tokens`` and generated tokens from the log alone, and
    asserts: steps and clock advance as the contract says; admissions only of arrived,
    waiting requests, with block-aligned prefix hits below ``num_tokens`` (none without prefix
    caching); no admission in a step that preempted; per-step token and sequence budgets; a
    token sampled exactly when a request catches up; every request finishes exactly once,
    with ``output_len`` tokens, in the step its last token is sampled; ``num_running`` /
    ``num_waiting`` / ``num_free_blocks`` consistent with that. Adds what it saw to
    ``coverage``.

    Raises:
        AssertionError: Naming the step and the broken rule.
    """
    block_size = engine_config["block_size"]
    threshold = engine_config["long_prefill_token_threshold"]
    chunked = engine_config.get("enable_chunked_prefill", True)
    adaptive = engine_config.get("long_prefill_token_threshold_adaptive", False)
    requests = {
        row["request_id"]: _ReqState(
            row["prompt_token_ids"], row["output_len"], row["arrival_time"], row.get("cancel_time")
        )
        for row in rows
    }
    coverage.traces += 1
    had_preemption = False
    clock = 0.0
    prev_start = -math.inf
    for index, entry in enumerate(log):
        where = f"step {index}"
        assert entry["step"] == index, f"{where}: step field {entry['step']}"
        for req_id in entry.get("aborted", []):
            # Aborted before this step, at a clock in (previous step's start, this start].
            state = requests[req_id]
            assert state.cancel_time is not None and state.cancel_time <= entry["time"], where
            assert not state.finished, f"{where}: aborted {req_id} had finished"
            coverage.aborted_running += state.running
            coverage.aborted_waiting += not state.running
            state.finished = state.aborted = True
            state.running = False
        for r in requests.values():
            # A request cancelled by the previous step's start was aborted then.
            assert r.finished or r.cancel_time is None or r.cancel_time > prev_start, (
                f"{where}: a request cancelled at {r.cancel_time} is still served"
            )
        unfinished = [r for r in requests.values() if not r.finished]
        if all(r.arrival_time > clock for r in unfinished):
            # Nothing running or waiting: the clock jumps to the next arrival.
            expected_time = min(r.arrival_time for r in unfinished)
        else:
            expected_time = clock
        assert entry["time"] == expected_time, f"{where}: time {entry['time']} != {expected_time}"
        arrived = [r for r in requests.values() if r.arrival_time <= entry["time"]]
        coverage.steps += 1
        scheduled: dict[str, int] = entry["scheduled"]
        coverage.empty_steps += not scheduled
        assert sum(scheduled.values()) <= engine_config["max_num_batched_tokens"], where
        assert len(scheduled) <= engine_config["max_num_seqs"], where

        for req_id in entry["preempted"]:
            state = requests[req_id]
            assert state.running and not state.finished, f"{where}: preempted {req_id} not running"
            state.running, state.preempted, state.computed = False, True, 0
            coverage.preemptions[engine_config["scheduling_policy"]] += 1
            had_preemption = True
        if entry["preempted"]:
            assert not entry["new"] and not entry["resumed"], f"{where}: admitted after preempting"

        new_this_step: list[str] = []
        for kind in ("new", "resumed"):
            for req_id, hit in entry[kind].items():
                state = requests[req_id]
                assert state.arrival_time <= entry["time"], f"{where}: {req_id} admitted early"
                assert not state.running and not state.finished, f"{where}: {req_id} re-admitted"
                assert state.admitted_once == (kind == "resumed"), (
                    f"{where}: {req_id} wrongly {kind}"
                )
                if kind == "resumed":
                    assert state.preempted, f"{where}: {req_id} resumed without preemption"
                assert hit % block_size == 0 and 0 <= hit < state.num_tokens, f"{where}: hit {hit}"
                if not engine_config["enable_prefix_caching"]:
                    assert hit == 0, f"{where}: prefix hit with caching disabled"
                state.running, state.preempted, state.admitted_once = True, False, True
                state.computed = hit
                coverage.prefix_hit_tokens += hit
                if kind == "resumed":
                    coverage.resumed += 1
                    coverage.resumed_with_hit += hit > 0
                else:
                    new_this_step.append(req_id)
        coverage.same_step_hits += _same_step_hits(
            requests, entry["new"], new_this_step, block_size
        )

        num_eligible = sum(
            1 for r in requests.values() if r.arrival_time <= entry["time"] and not r.finished
        )
        cap = threshold if num_eligible > 1 else 0
        if cap and adaptive:  # the fair-share floor of long_prefill_token_threshold_adaptive
            cap = max(cap, engine_config["max_num_batched_tokens"] // num_eligible)
        expected_finished = set()
        for req_id, num in scheduled.items():
            state = requests[req_id]
            assert state.running, f"{where}: scheduled {req_id} is not running"
            remaining = state.num_tokens - state.computed
            assert 0 < num <= remaining, f"{where}: {req_id} scheduled {num} of {remaining}"
            if not chunked and (req_id in entry["new"] or req_id in entry["resumed"]):
                # Without chunked prefill an admission is whole (or capped by the threshold).
                assert num in (remaining, cap), f"{where}: {req_id} admitted in a chunk"
                coverage.unchunked_admissions += 1
            if cap:
                assert num <= cap, f"{where}: {req_id} exceeds long_prefill_token_threshold"
                coverage.threshold_capped_chunks += num == cap < remaining
                coverage.adaptive_capped_chunks += threshold < cap == num < remaining
            state.computed += num
            if state.computed == state.num_tokens:
                state.generated += 1
                if state.generated == state.output_len:
                    expected_finished.add(req_id)
            else:
                coverage.partial_prefill_chunks += 1
        assert set(entry["finished"]) == expected_finished, (
            f"{where}: finished {entry['finished']}, expected {sorted(expected_finished)}"
        )
        assert len(entry["finished"]) == len(set(entry["finished"])), where
        for req_id in expected_finished:
            requests[req_id].finished, requests[req_id].running = True, False

        assert 0 <= entry["num_free_blocks"] <= engine_config["num_gpu_blocks"] - 1, where
        running = sum(r.running for r in requests.values())
        waiting = sum(1 for r in arrived if not r.running and not r.finished)
        assert entry["num_running"] == running, (
            f"{where}: num_running {entry['num_running']} != {running}"
        )
        assert entry["num_waiting"] == waiting, (
            f"{where}: num_waiting {entry['num_waiting']} != {waiting}"
        )
        assert running <= engine_config["max_num_seqs"], where
        clock = entry["time"] + step_time_s
        prev_start = entry["time"]
    step_starts = {entry["time"] for entry in log}
    for r in requests.values():
        coverage.arrivals_on_step_start += r.arrival_time in step_starts
        coverage.arrivals_ulp_before_step += math.nextafter(r.arrival_time, math.inf) in step_starts
        coverage.arrivals_ulp_after_step += math.nextafter(r.arrival_time, -math.inf) in step_starts
    # Requests aborted after the last step are on no line; only a cancelled one may be missing.
    unfinished = [
        req_id for req_id, r in requests.items() if not r.finished and r.cancel_time is None
    ]
    assert not unfinished, f"never finished: {unfinished}"
    # (a request aborted after the last line finished on no line: its cancel_time allows it)
    assert all(
        r.generated == r.output_len for r in requests.values() if r.finished and not r.aborted
    )
    coverage.seeds_with_preemption += had_preemption


def _same_step_hits(
    requests: dict[str, _ReqState], new: dict[str, int], order: list[str], block_size: int
) -> int:
    """Count admissions whose hit can only come from blocks registered earlier in the same step.

    A request admitted with a hit, after another request admitted in the same step with no hit
    although its prompt shares (at least) the first block and runs past it: those blocks did not
    exist in the cache before the step.
    """
    count = 0
    for j, later in enumerate(order):
        if new[later] == 0:
            continue
        head = requests[later].prompt[:block_size]
        for earlier in order[:j]:
            prompt = requests[earlier].prompt
            if new[earlier] == 0 and len(prompt) > block_size and prompt[:block_size] == head:
                count += 1
                break
    return count


# --------------------------------------------------------------------------- tests


def _read_rows(path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def _simulate_and_compare(case: SeedCase, tmp_path: Path) -> None:
    """Run the simulator on a case's trace and compare its schedule log with the oracle's."""
    mode, seed = case.mode, case.seed
    sim_log = tmp_path / "sim_log.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmsched_gym",
            "simulate",
            "--trace",
            str(case.trace),
            "--engine-config",
            str(case.engine_config),
            "--cost-model",
            "constant:1.0",
            "--schedule-log",
            str(sim_log),
            "--out",
            str(tmp_path / "out"),
            *(["--async-scheduling"] if mode == "async" else []),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0, (
        f"seed {seed} ({mode}): simulator failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    )
    expected = read_log(case.oracle_log)
    actual = read_log(sim_log)
    mismatch = compare_logs(expected, actual)
    if mismatch is not None:
        index, fields = mismatch
        pytest.fail(_mismatch_message(seed, case, sim_log, expected, actual, index, fields))
    # Aborts after the last step are on no line: the totals must agree too.
    oracle_aborted = json.loads(case.summary.read_text(encoding="utf-8"))["aborted"]
    sim_out = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    num_aborted = sim_out["summary"]["num_aborted"]
    assert num_aborted == len(oracle_aborted), (
        f"seed {seed} ({mode}): {num_aborted} aborted, vLLM {len(oracle_aborted)}"
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", MODES)
def test_schedule_matches_vllm(
    mode: str, seed: int, oracle_runs: dict[tuple[str, int], SeedCase], tmp_path: Path
) -> None:
    """The simulator schedules every step exactly as vLLM 0.32.0 does, in both modes."""
    _simulate_and_compare(oracle_runs[mode, seed], tmp_path)


def test_oracle_logs_are_consistent_and_meaningful(
    oracle_runs: dict[tuple[str, int], SeedCase],
) -> None:
    """The synchronous oracle's logs are self-consistent and exercise the paths worth comparing."""
    coverage = Coverage()
    sync_runs = {seed: case for (mode, seed), case in oracle_runs.items() if mode == "sync"}
    for seed, case in sync_runs.items():
        engine_config = json.loads(case.engine_config.read_text(encoding="utf-8"))
        try:
            check_log(_read_rows(case.trace), engine_config, read_log(case.oracle_log), coverage)
        except AssertionError as exc:
            pytest.fail(f"seed {seed}: oracle log {case.oracle_log} is inconsistent: {exc}")
        summary = json.loads(case.summary.read_text(encoding="utf-8"))
        assert summary["vllm_version"].startswith(VLLM_VERSION)
    print(f"\ndifferential-test coverage over {len(sync_runs)} seeds:")
    print(json.dumps(coverage.as_dict()))
    assert sum(coverage.preemptions.values()) > 0, "no trace preempts"
    assert coverage.resumed > 0, "no trace resumes a preempted request"
    assert coverage.prefix_hit_tokens > 0, "no trace hits the prefix cache"
    if len(sync_runs) >= 40:
        # The default seed set covers every path named in gen_traces' docstring.
        assert coverage.preemptions["fcfs"] > 0 and coverage.preemptions["priority"] > 0
        assert coverage.resumed_with_hit > 0
        assert coverage.same_step_hits > 0
        assert coverage.partial_prefill_chunks > 0
        assert coverage.threshold_capped_chunks > 0
        assert coverage.empty_steps > 0
        # Arrivals exactly on a step start and one ulp either side (gen_traces._ulp_shifted).
        assert coverage.arrivals_on_step_start > 0
        assert coverage.arrivals_ulp_before_step > 0
        assert coverage.arrivals_ulp_after_step > 0
        assert coverage.aborted_waiting > 0 and coverage.aborted_running > 0
        assert coverage.unchunked_admissions > 0
        assert coverage.adaptive_capped_chunks > 0


def test_async_oracle_logs_are_consistent(oracle_runs: dict[tuple[str, int], SeedCase]) -> None:
    """The async oracle's logs keep the async contract (``vllm_oracle._run_async``).

    Steps are numbered and start no earlier than the previous one; a batch with tokens lasts
    ``STEP_TIME_S`` on the GPU, so the next batch starts at least that much later; budgets
    hold; nothing is admitted in a batch that preempted; every request finishes exactly once,
    and is not scheduled again except in the batch scheduled while the finishing one ran.
    """
    preemptions = stale_finishes = 0
    for (mode, seed), case in oracle_runs.items():
        if mode != "async":
            continue
        engine_config = json.loads(case.engine_config.read_text(encoding="utf-8"))
        rows = {r["request_id"]: r for r in _read_rows(case.trace)}
        log = read_log(case.oracle_log)
        finished: dict[str, int] = {}
        aborted: set[str] = set()
        gpu_free = 0.0
        for index, entry in enumerate(log):
            where = f"seed {seed} (async) step {index}"
            assert entry["step"] == index, where
            assert entry["time"] >= gpu_free - TIME_TOLERANCE_S, f"{where}: overlaps the GPU"
            scheduled = entry["scheduled"]
            if scheduled:
                gpu_free = entry["time"] + STEP_TIME_S
            assert sum(scheduled.values()) <= engine_config["max_num_batched_tokens"], where
            assert entry["num_running"] <= engine_config["max_num_seqs"], where
            assert not (entry["preempted"] and (entry["new"] or entry["resumed"])), where
            # Batch k + 1 was scheduled before batch k's output finished a request.
            done_before = {r for r, k in finished.items() if k < index - 1}
            assert not done_before & (set(scheduled) | set(entry["preempted"])), where
            # Aborted before this batch was scheduled: never scheduled again.
            aborted.update(entry.get("aborted", []))
            assert not aborted & (set(scheduled) | set(entry["finished"])), f"{where}: aborted"
            for req_id in entry.get("aborted", []):
                assert rows[req_id]["cancel_time"] <= entry["time"], f"{where}: early abort"
            for req_id in [*entry["new"], *entry["resumed"]]:
                assert rows[req_id]["arrival_time"] <= entry["time"], f"{where}: early {req_id}"
            preemptions += len(entry["preempted"])
            # A request preempted while its last token was in flight: that stale output
            # finished it (its finish shows on the line of the batch scheduled before).
            stale_finishes += sum(finished.get(r) == index - 1 for r in entry["preempted"])
            assert not finished.keys() & set(entry["finished"]), f"{where}: finished twice"
            finished.update(dict.fromkeys(entry["finished"], index))
        summary = json.loads(case.summary.read_text(encoding="utf-8"))
        assert aborted <= set(summary["aborted"]), f"seed {seed} (async)"
        assert not finished.keys() & set(summary["aborted"]), f"seed {seed} (async)"
        assert finished.keys() | set(summary["aborted"]) == rows.keys(), (
            f"seed {seed} (async): never finished"
        )
    assert preemptions > 0, "no async trace preempts"
    print(f"\nasync oracle: {preemptions} preemptions, {stale_finishes} stale-output finishes")


def test_gen_traces_is_deterministic_and_valid() -> None:
    """Same seed, same trace; every request fits the cache on its own; vLLM's config rules hold."""
    for seed in SEEDS:
        rows, engine_config = gen_traces.generate(seed)
        assert (rows, engine_config) == gen_traces.generate(seed)
        assert engine_config.pop("enable_chunked_prefill", False) is False
        assert engine_config.pop("long_prefill_token_threshold_adaptive", True) is True
        assert set(engine_config) == {
            "max_num_batched_tokens",
            "max_num_seqs",
            "block_size",
            "num_gpu_blocks",
            "enable_prefix_caching",
            "scheduling_policy",
            "long_prefill_token_threshold",
        }
        block_size = engine_config["block_size"]
        max_model_len = max(len(r["prompt_token_ids"]) + r["output_len"] for r in rows)
        for row in rows:
            need = -(-(len(row["prompt_token_ids"]) + row["output_len"]) // block_size)
            assert need <= engine_config["num_gpu_blocks"] - 1
            assert all(1 <= t <= gen_traces.VOCAB_SIZE for t in row["prompt_token_ids"])
            assert 1 <= row["output_len"] <= 40
        assert engine_config["block_size"] in (1, 4, 8, 16, 32, 64)
        assert engine_config["max_num_batched_tokens"] >= engine_config["max_num_seqs"]
        assert engine_config["long_prefill_token_threshold"] <= max_model_len
        arrivals = [r["arrival_time"] for r in rows]
        assert arrivals == sorted(arrivals)
        # On a 1/32 s grid, or one ulp from it (see gen_traces._ulp_shifted).
        assert all(
            any(
                (32 * u).is_integer()
                for u in (t, math.nextafter(t, -math.inf), math.nextafter(t, math.inf))
            )
            for t in arrivals
        )
        assert len({r["request_id"] for r in rows}) == len(rows)


# --------------------------------------------------------------------------- multi-turn


@pytest.mark.parametrize("seed", MULTITURN_SEEDS)
@pytest.mark.parametrize("mode", MODES)
def test_multiturn_schedule_matches_vllm(
    mode: str, seed: int, multiturn_oracle_runs: dict[tuple[str, int], SeedCase], tmp_path: Path
) -> None:
    """Turns hit their parents' blocks of prompt and generated tokens exactly as in vLLM 0.32.0.

    Per-step scheduled tokens, admissions with their prefix hits (``new`` / ``resumed``),
    preemptions, finishes and free blocks, in both modes.
    """
    _simulate_and_compare(multiturn_oracle_runs[mode, seed], tmp_path)


def _resolved_rows(case: SeedCase) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The trace with every turn's whole prompt (the simulator's loader), and specs by id."""
    from llmsched_gym.workloads import load_trace

    specs = {s.request_id: s for s in load_trace(case.trace)}
    rows = []
    for row in _read_rows(case.trace):
        spec = specs[row["request_id"]]
        rows.append({**row, "prompt_token_ids": list(spec.prompt_token_ids)})
    return rows, specs


def test_multiturn_oracle_feeds_the_simulators_generated_ids(
    multiturn_oracle_runs: dict[tuple[str, int], SeedCase],
) -> None:
    """The oracle's parents sampled exactly the ids the simulator's loader gives them."""
    for (mode, seed), case in multiturn_oracle_runs.items():
        rows, specs = _resolved_rows(case)
        payload = {
            row["request_id"]: list(specs[row["request_id"]].output_token_ids)
            for row in rows
            if specs[row["request_id"]].output_token_ids is not None
        }
        digest = hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:16]
        summary = json.loads(case.summary.read_text(encoding="utf-8"))
        assert summary["parents"] == len(payload) > 0, f"seed {seed} ({mode})"
        assert summary["generated_ids_digest"] == digest, f"seed {seed} ({mode})"


def test_multiturn_oracle_logs_hit_answers(
    multiturn_oracle_runs: dict[tuple[str, int], SeedCase],
) -> None:
    """The oracle's multi-turn logs are consistent and turns hit their parents' answers.

    A turn's hit beyond its parent's full prompt blocks covers generated tokens: vLLM cached
    them. Such hits, whole-parent hits (every full block the parent computed), preemptions and
    resumed turns occur over the seeds, in both modes.
    """
    seen: Counter[str] = Counter()
    for (mode, seed), case in multiturn_oracle_runs.items():
        engine_config = json.loads(case.engine_config.read_text(encoding="utf-8"))
        bs = engine_config["block_size"]
        rows, specs = _resolved_rows(case)
        log = read_log(case.oracle_log)
        if mode == "sync":
            try:
                check_log(rows, engine_config, log, Coverage())
            except AssertionError as exc:
                pytest.fail(f"seed {seed}: oracle log {case.oracle_log} is inconsistent: {exc}")
        for entry in log:
            seen[f"{mode} preemptions"] += len(entry["preempted"])
            for kind in ("new", "resumed"):
                for req_id, hit in entry[kind].items():
                    parent_id = specs[req_id].parent_request_id
                    if parent_id is None:
                        continue
                    parent = specs[parent_id]
                    seen[f"{mode} {kind} turns"] += 1
                    seen[f"{mode} answer hits"] += hit > parent.prompt_len // bs * bs
                    whole = (parent.prompt_len + parent.output_len - 1) // bs * bs
                    seen[f"{mode} whole-parent hits"] += 0 < whole <= hit
    print(f"\nmulti-turn oracle coverage: {dict(seen)}")
    for mode in MODES:
        for what in ("answer hits", "whole-parent hits", "preemptions", "resumed turns"):
            assert seen[f"{mode} {what}"] > 0, f"no {what} in {mode} mode"


def test_gen_multiturn_traces_are_deterministic_and_valid(tmp_path: Path) -> None:
    """Same seed, same trace; parents come first; every request fits the cache on its own."""
    from llmsched_gym.workloads import load_trace

    for seed in MULTITURN_SEEDS[:10]:
        rows, engine_config = gen_traces.generate_multiturn(seed)
        assert (rows, engine_config) == gen_traces.generate_multiturn(seed)
        assert engine_config["enable_prefix_caching"] is True
        assert engine_config["block_size"] in gen_traces.MULTITURN_BLOCK_SIZES
        ids = [r["request_id"] for r in rows]
        assert len(set(ids)) == len(ids)
        arrivals = [r["arrival_time"] for r in rows]
        assert arrivals == sorted(arrivals)
        position = {rid: i for i, rid in enumerate(ids)}
        turns = [r for r in rows if "parent_request_id" in r]
        assert turns and all(
            position[r["parent_request_id"]] < position[r["request_id"]] for r in turns
        )
        path, _ = gen_traces.write(seed, tmp_path / f"seed{seed}", multiturn=True)
        for spec in load_trace(path):
            need = -(-(spec.prompt_len + spec.output_len) // engine_config["block_size"])
            assert need <= engine_config["num_gpu_blocks"] - 1
