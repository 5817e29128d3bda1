"""Run policies on suite workloads, serially or as Ray tasks, into result rows.

One row per (policy, workload): the workload's identity, the task metric and tail metric, a few
standard metrics beside them, and the status (``ok`` or ``failed`` with the error). Rows are
deterministic except ``wall_s``: the engine is, so re-running a deterministic policy reproduces
every other column bit for bit, serially or on Ray (``llmsched-gym leaderboard validate``).

A submission's code (an entry point) runs in its own sandboxed process for each workload
(``llmsched_gym.leaderboard.sandbox``); the suite's limits apply to it, the per-workload wall
limit counting from the start of building the policy. ``trust_pickle`` lets that process
unpickle (SB3's ``PPO.load`` of a ``model.zip``); it is off by default.

Ray: one task per (policy, workload); ``workers`` > 1 starts a local Ray with that many CPUs,
``address`` joins a running cluster (``ray start --head`` on one machine, ``ray start
--address=HEAD:6379`` on the others; token authentication as ``raycluster`` says). A worker that
dies is retried once; a second death, like any error the policy raises, becomes a ``failed`` row
naming the error: nothing is dropped. A local Ray takes seconds to start (about 7 s on a 2-core
machine, and 1-2 s to stop); where that outweighs the runs, a line says so (``startup_note``).
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.sandbox import SandboxLimits, close_policy
from llmsched_gym.leaderboard.suite import Suite, Workload

__all__ = ["RESULT_COLUMNS", "VALIDATED_COLUMNS", "run_all", "run_workload", "simulate_workload"]

RESULT_COLUMNS = (
    "suite",
    "task",
    "scenario",
    "level",
    "source",
    "split",
    "seed",
    "workload",
    "rate_per_s",
    "policy",
    "kind",
    "oracle",
    "oracle_reason",
    "status",
    "error",
    "metric",
    "value",
    "tail_metric",
    "tail_value",
    "e2e_s_mean",
    "e2e_s_p99",
    "ttft_s_p99",
    "tpot_s_mean",
    "slo_attainment",
    "job_latency_s_mean",
    "num_finished",
    "num_steps",
    "wall_s",
)
"""Columns of a results CSV, in order."""

VALIDATED_COLUMNS = tuple(c for c in RESULT_COLUMNS if c != "wall_s")
"""Columns ``validate`` requires to reproduce exactly (wall time is the machine's)."""

_EXTRA = ("e2e_s_mean", "e2e_s_p99", "ttft_s_p99", "tpot_s_mean", "slo_attainment")


class WorkloadTimeout(Exception):
    """A workload ran past the suite's wall-time limit."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise ``WorkloadTimeout`` in this thread after ``seconds`` (main thread, Unix only)."""
    usable = (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and math.isfinite(seconds)
    )
    if not usable:
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise WorkloadTimeout(
            f"ran past the suite's limit of {seconds:g} s per workload (per_workload_s)"
        )

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _base_row(workload: Workload, policy: str) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(RESULT_COLUMNS)
    row.update(
        suite=workload.suite,
        task=workload.task,
        scenario=workload.scenario_id,
        level=workload.level,
        source=workload.source,
        split=workload.split,
        seed=workload.seed,
        workload=workload.id,
        rate_per_s=workload.rate_per_s,
        policy=policy,
        kind="",
        oracle=False,
        oracle_reason="",
        metric=workload.metric,
        error="",
    )
    return row


BLIND_CONTEXT = 1 << 20
"""The context length a blinded re-run gives requests without a limit: above any request."""


def blinded_overrides(scenario: Any) -> dict[str, Any] | None:
    """Overrides that stop a workload's ``max_tokens`` carrying the true output (None: it does not).

    A trace without client limits, loaded by the legacy rule (no ``default_max_tokens``), and
    Text-to-SQL calls without a cap have ``max_tokens`` = the true output (llmsched-v1's leak).
    Blinded, they get a limit above every output, so the engine serves the same work.
    """
    kind = scenario.workload.get("kind")
    if kind == "trace" and scenario.workload.get("default_max_tokens") is None:
        return {"workload.default_max_tokens": BLIND_CONTEXT}
    if kind == "text2sql" and scenario.workload.get("max_tokens") is None:
        return {"workload.max_tokens": BLIND_CONTEXT}
    return None


def hidden_truth_reads(policy_factory: Any, workload: Workload, task: Any, result: Any) -> str:
    """Why the harness counts a run as an oracle's ('' if it read no hidden truth).

    ``result`` is the run's; on a workload whose ``max_tokens`` carries the true output
    (``blinded_overrides``), the policy runs again blinded: a schedule that changes read it.
    """
    scenario = workload.scenario()
    blind = blinded_overrides(scenario)
    if blind is None:
        return ""
    from llmsched_gym.scenarios.spec import load_scenario

    blinded = load_scenario(workload.base, {**workload.overrides, **blind})
    policy = policy_factory()
    try:
        if task.interface == "router":
            again = blinded.simulate(router=policy, seed=workload.seed)
        else:
            again = blinded.simulate(policy, seed=workload.seed)
    finally:
        close_policy(policy)
    if again.summary.get(workload.metric) != result.summary.get(workload.metric):
        return (
            "its schedule changes when max_tokens stops carrying the true output length "
            "(this workload's legacy max_tokens)"
        )
    return ""


def simulate_workload(task: Any, policy: Any, workload: Workload) -> Any:
    """``policy`` run on ``workload``'s own scenario and seed, as the harness scores it.

    A scheduler, or a router where the task routes (``task.interface == "router"``).
    """
    scenario = workload.scenario()
    if task.interface == "router":
        return scenario.simulate(router=policy, seed=workload.seed)
    return scenario.simulate(policy, seed=workload.seed)


def run_workload(
    suite: Suite, policy_spec: Any, workload: Workload, trust_pickle: bool = False
) -> dict[str, Any]:
    """Run ``policy_spec`` on one workload; a failure becomes a ``failed`` row, never an exception.

    ``policy_spec``: what ``resolve_policy`` takes, or a ``PolicyRef`` already resolved (an
    upper reference the headroom table builds, such as the lookahead oracle with its horizon).

    The policy is built fresh for the workload (seeded by it), so runs are independent; a
    sandboxed one is stopped when the workload ends. ``trust_pickle`` is a plain argument so that
    Ray ships it with the task. The row is an oracle's when the policy says so or the harness
    saw it read hidden truth (``hidden_truth_reads``).
    """
    from llmsched_gym.leaderboard.policy import PolicyRef, resolve_policy

    task = suite.task(workload.task)
    ref = policy_spec if isinstance(policy_spec, PolicyRef) else resolve_policy(policy_spec, task)
    row = _base_row(workload, ref.name)
    row["kind"] = ref.row_kind
    row["tail_metric"] = task.tail_metric
    t0 = time.perf_counter()
    policy = None
    try:
        from llmsched_gym.core.hidden import watching

        deadline = time.monotonic() + suite.workload_limit_s

        def build() -> Any:
            return ref.build(
                task,
                workload.seed,
                workload,
                limits=SandboxLimits.of(suite),
                trust_pickle=trust_pickle,
                deadline_s=deadline,
            )

        with _deadline(suite.workload_limit_s):
            policy = build()
            declared = bool(getattr(policy, "oracle", False))
            with watching() as reads:
                result = simulate_workload(task, policy, workload)
            wall = time.perf_counter() - t0
            why = ", ".join(f"{what} ({n} reads)" for what, n in sorted(reads.items()))
            if not why and not declared:
                why = hidden_truth_reads(build, workload, task, result)
        row["oracle"] = declared or bool(why)
        row["oracle_reason"] = why or ("declared" if declared else "")
        summary = result.summary
        steps = int(summary.get("num_steps") or getattr(result, "num_steps", 0))
        per_step = wall / max(steps, 1)
        if per_step > suite.per_step_limit_s:
            raise WorkloadTimeout(
                f"{per_step * 1e3:.1f} ms per engine step on average, over the suite's limit of "
                f"{suite.per_step_limit_s * 1e3:g} ms"
            )
        value = float(summary[workload.metric])
        if not math.isfinite(value):
            raise ConfigError(f"metric {workload.metric} is {value} (no finished unit)")
        row.update(
            status="ok",
            value=value,
            tail_value=float(summary[task.tail_metric]),
            job_latency_s_mean=float(summary.get("job_latency_s_mean", math.nan)),
            num_finished=int(summary["num_finished"]),
            num_steps=steps,
        )
        for key in _EXTRA:
            row[key] = float(summary[key])
    except Exception as exc:  # noqa: BLE001 - every failure is reported in the row
        row.update(status="failed", error=f"{type(exc).__name__}: {exc}"[:500])
    finally:
        close_policy(policy)
    row["wall_s"] = round(time.perf_counter() - t0, 3)
    return row


def _check_ray(workers: int, address: str | None) -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            f"--workers {workers}{' --address' if address else ''} needs Ray: pip install -e "
            "'.[ray]' (or pip install 'ray[default]>=2.40'); --workers 1 runs serially without it"
        ) from None
    return ray


def run_all(
    suite: Suite,
    jobs: Sequence[tuple[str, Workload]],
    *,
    workers: int = 1,
    address: str | None = None,
    progress: bool = True,
    desc: str = "evaluate",
    trust_pickle: bool = False,
) -> list[dict[str, Any]]:
    """Rows of every (policy spec, workload) job, in the order given.

    ``workers`` 1 without ``address``: in this process. Otherwise one Ray task per job; where a
    local Ray's start-up cost more than the runs themselves, a line on stderr says so, with the
    measured times (``startup_note``). ``trust_pickle``: as ``run_workload``'s.
    """
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    from tqdm import tqdm

    serial = workers == 1 and address is None
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        # Ray prints its start-up lines (token authentication, "Started a local Ray instance")
        # as it starts: before the bar, so that they do not break into it.
        ray = None if serial else _start_ray(workers, address, stack, timing)
        bar = tqdm(total=len(jobs), desc=desc, unit="run", disable=not progress, leave=False)
        stack.callback(bar.close)
        if serial:
            rows = []
            for spec, w in jobs:
                rows.append(run_workload(suite, spec, w, trust_pickle))
                bar.update()
            return rows
        rows = _run_ray(ray, suite, jobs, bar, trust_pickle)
    if address is None and "start_s" in timing:
        note = startup_note(timing, rows, workers, time.perf_counter() - t0)
        if note:
            print(note, file=sys.stderr)
    return rows


def startup_note(
    timing: dict[str, float], rows: Sequence[dict[str, Any]], workers: int, elapsed_s: float
) -> str | None:
    """A line saying serial would have been faster, from measured times (None if it would not).

    ``timing``: the seconds a local Ray took to start (``start_s``) and to stop (``stop_s``);
    ``elapsed_s``: the whole parallel run. Serial time is estimated as the sum of the runs' own
    wall times (measured in the workers, so an over-estimate while Ray competes for the CPUs).
    """
    overhead = timing.get("start_s", 0.0) + timing.get("stop_s", 0.0)
    walls = [float(r["wall_s"]) for r in rows if r.get("wall_s") is not None]
    serial = sum(walls)
    if not walls or workers < 2 or serial >= elapsed_s:
        return None
    line = (
        f"note: Ray took {overhead:.1f} s to start and stop, of this run's {elapsed_s:.1f} s, "
        f"and the {len(walls)} runs themselves {serial:.1f} s in all: serial (--workers 1) "
        "would have been faster"
    )
    # Ray's run takes about overhead + n * per_run / workers, serial n * per_run.
    saved_per_run = serial / len(walls) * (1 - 1 / workers)
    if saved_per_run > 0:
        runs = math.ceil(overhead / saved_per_run)
        line += f"; {workers} workers pay off from about {runs:,} runs like these"
    return line


def _start_ray(
    workers: int, address: str | None, stack: contextlib.ExitStack, timing: dict[str, float]
) -> Any:
    """Ray, initialised here unless it already was; shut down by ``stack`` if started here.

    ``timing`` receives the seconds a start here took (``start_s``) and, on the way out, the
    shutdown's (``stop_s``).
    """
    ray = _check_ray(workers, address)
    if ray.is_initialized():
        return ray
    t0 = time.perf_counter()
    if address is not None:
        from llmsched_gym.leaderboard.raycluster import ray_joined

        note = stack.enter_context(ray_joined(ray, address))
        if note:
            print(note, file=sys.stderr)
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    timing["start_s"] = time.perf_counter() - t0

    def stop() -> None:
        t1 = time.perf_counter()
        ray.shutdown()
        timing["stop_s"] = time.perf_counter() - t1

    stack.callback(stop)
    return ray


def _run_ray(
    ray: Any,
    suite: Suite,
    jobs: Sequence[tuple[str, Workload]],
    bar: Any,
    trust_pickle: bool,
) -> list[dict[str, Any]]:
    """Every job as a Ray task."""
    remote = ray.remote(num_cpus=1, max_retries=1, retry_exceptions=False)(run_workload)
    suite_ref = ray.put(suite)
    # Clusters first: their runs are the longest, and starting them last would leave one
    # worker busy while the others idle. Rows still come back in the order given.
    order = sorted(
        range(len(jobs)), key=lambda i: suite.task(jobs[i][1].task).interface != "router"
    )
    pending = {remote.remote(suite_ref, *jobs[i], trust_pickle): i for i in order}
    rows: list[dict[str, Any] | None] = [None] * len(jobs)
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            i = pending.pop(ref)
            try:
                rows[i] = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - a worker died twice: report it
                spec, w = jobs[i]
                row = _base_row(w, getattr(spec, "name", spec))
                row.update(status="failed", error=f"worker died twice: {type(exc).__name__}")
                rows[i] = row
            bar.update()
    return [r for r in rows if r is not None]
