"""Headroom per task: how far the task's reference is from what its decision can reach.

On a task's test workloads (or the quick subset) the harness runs the reference, every baseline
(agent kind: acts only through the task's action; reference kind: replaces the scheduler,
``Task.kind_of``) and the **upper references**, which know what no deployed scheduler knows:

* ``static-priority:shortest-output`` (engine tasks): shortest job first on the true output
  length, a whole scheduler;
* the lookahead oracle (``llmsched_gym.leaderboard.oracle.lookahead``, base ``vllm-v1``, or
  ``least-load:requests`` on Route): the task's own action, chosen at every decision by forking
  the run per candidate (rollout; Bertsekas, Tsitsiklis & Wu, 1997). It is costly, so it runs on
  a declared sample (``lookahead_sample``) with a declared horizon, and outside the suite's
  per-step limit (an upper reference is not a submission);
* the InferMax CSP bound (``llmsched_gym.policies.infermax.csp``, §5) where a workload is small
  enough: an offline instance (every request at t = 0) of at most ``CSP_MAX_CELLS`` request x
  batch cells. No suite workload is one (online arrivals, 300+ requests): the table says so with
  the workload's size.

Scores are those of ``leaderboard.score`` (geometric mean over workloads of the reference's
metric over the method's; > 1 better). **Headroom = best upper reference's score - 1**: what the
decision (or, for shortest-output, the whole schedule) can gain over the reference. A task below
``MIN_HEADROOM`` is redesigned or taken out of the scored set (issue 39).
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.score import geometric_score, score_rows
from llmsched_gym.leaderboard.suite import Suite, Task, Workload
from llmsched_gym.lookahead import BASES

__all__ = [
    "CSP_MAX_CELLS",
    "HEADROOM_COLUMNS",
    "MIN_HEADROOM",
    "ORACLE",
    "csp_size",
    "headroom_markdown",
    "headroom_summary",
    "lookahead_ref",
    "read_headroom",
    "run_headroom",
    "task_headroom",
    "write_headroom",
]

ORACLE = "static-priority:shortest-output"
"""The shortest-output oracle (engine tasks)."""

MIN_HEADROOM = 0.03
"""A task whose best upper reference gains less than this over the reference is redesigned."""

CSP_MAX_CELLS = 4096
"""Largest CSP instance (requests x batches) solved here: InferMax §5.1 solves 4 requests of
4 outputs (tens of cells) in seconds and 20 s time limits already leave gaps beyond a few
thousand cells (``leaderboards/infermax/results/csp.csv``)."""

HEADROOM_COLUMNS = (
    "suite",
    "task",
    "scored",
    "split",
    "method",
    "role",
    "kind",
    "oracle",
    "score",
    "score_low",
    "score_high",
    "num_workloads",
    "num_failed",
    "note",
)
"""One row per (task, method): ``role`` is reference, agent, reference-kind or upper."""


def lookahead_ref(horizon_s: float | None) -> Any:
    """The lookahead oracle as a ``PolicyRef`` the harness runs (``run_workload``)."""
    from llmsched_gym.leaderboard.policy import PolicyRef

    name = "lookahead:" + ("end" if horizon_s is None else f"{horizon_s:g}s")
    return PolicyRef(name, name, "oracle", horizon_s=horizon_s)


def csp_size(workload: Workload) -> int:
    """Request x batch cells of the workload's CSP: requests x the longest output (a batch
    generates at most one token of a request, so no schedule has fewer batches)."""
    outputs = []
    for item in workload.scenario().build_workload(seed=workload.seed):
        stages = getattr(item, "stages", None)
        specs = [r for st in stages for r in st.requests] if stages is not None else [item]
        outputs += [r.output_len for r in specs]
    return len(outputs) * max(outputs)


def _csp_note(workloads: Sequence[Workload]) -> str:
    """Why the CSP bound is (not) computed on these workloads."""
    if not workloads:
        return "no workload"
    smallest = min(csp_size(w) for w in workloads)
    return (
        f"not computed: the smallest workload is {smallest:,} request x batch cells (limit "
        f"{CSP_MAX_CELLS:,}) and arrives online, not at t = 0"
    )


def _summarise(name: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    score = geometric_score(r["ratio"] for r in rows)
    return {
        "method": name,
        "oracle": any(bool(r["oracle"]) for r in rows),
        "score": score.value,
        "score_low": score.low,
        "score_high": score.high,
        "num_workloads": len(rows),
        "num_failed": sum(r["status"] != "ok" for r in rows),
    }


def _role(task: Task, spec: str, oracle: bool) -> str:
    if spec == task.reference:
        return "reference"
    if oracle or spec == ORACLE or spec.startswith("lookahead:"):
        return "upper"
    return "agent" if task.kind_of(spec) == "agent" else "reference-kind"


def run_headroom(
    suite: Suite,
    tasks: Sequence[Task],
    *,
    quick: bool = False,
    lookahead_horizon_s: float | None = None,
    lookahead_sample: str = "quick-first",
    lookahead_skip: Sequence[str] = (),
    workers: int = 1,
    address: str | None = None,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """``HEADROOM_COLUMNS`` rows of every task: its reference, baselines and upper references.

    ``lookahead_sample``: ``none`` (no lookahead rows), ``quick-first`` (the first test seed of
    each source of the quick scenarios), ``quick`` (the quick subset) or ``all`` (the workloads
    evaluated); ``lookahead_skip``: tasks it does not run on (too costly), which the table says.
    """
    from llmsched_gym.leaderboard.run import run_all

    if lookahead_sample not in ("none", "quick-first", "quick", "all"):
        raise ConfigError(
            "lookahead sample must be none, quick-first, quick or all, got "
            f"{lookahead_sample!r}"
        )
    la = lookahead_ref(lookahead_horizon_s)
    jobs: list[tuple[Any, Workload]] = []
    la_jobs: list[tuple[Any, Workload]] = []
    plan = {}
    for task in tasks:
        ws = suite.workloads("test", tasks=[task.name], quick=quick)
        specs = list(dict.fromkeys([task.reference, *task.baselines]))
        if task.interface != "router" and ORACLE not in specs:
            specs.append(ORACLE)
        jobs += [(s, w) for s in specs for w in ws]
        skip = task.name.lower() in {t.lower() for t in lookahead_skip}
        la_ws = [] if skip else _lookahead_workloads(suite, task, ws, lookahead_sample)
        la_jobs += [(la, w) for w in la_ws]
        plan[task.name] = (ws, specs, la_ws)
    rows = run_all(suite, jobs, workers=workers, address=address, progress=progress)
    if la_jobs:
        # An upper reference, not a submission: outside the suite's per-step limit.
        free = dataclasses.replace(suite, per_step_limit_s=math.inf, workload_limit_s=math.inf)
        rows += run_all(
            free, la_jobs, workers=workers, address=address, progress=progress, desc="lookahead"
        )
    by_job = {
        (s if isinstance(s, str) else s.spec, w.id): r
        for (s, w), r in zip(jobs + la_jobs, rows, strict=True)
    }
    out = []
    for task in tasks:
        ws, specs, la_ws = plan[task.name]
        ref_rows = [by_job[(task.reference, w.id)] for w in ws]
        entries = [(s, ws) for s in specs] + ([(la.spec, la_ws)] if la_ws else [])
        base = {
            "suite": suite.version,
            "task": task.name,
            "scored": task.scored,
            "split": "quick" if quick else "test",
        }
        for spec, spec_ws in entries:
            scored = score_rows([by_job[(spec, w.id)] for w in spec_ws], ref_rows)
            s = _summarise(scored[0]["policy"], scored)
            role = _role(task, spec, s["oracle"])
            notes = []
            if spec == la.spec:
                base_policy = BASES.get(task.name, "vllm-v1")
                notes.append(f"base {base_policy}, sample {lookahead_sample}")
            failed = [r["error"] for r in scored if r["status"] != "ok"]
            if failed:
                notes.append(f"first failure: {failed[0][:160]}")
            note = "; ".join(notes)
            out.append(
                {**base, **s, "role": role, "kind": task.kind_of(spec), "note": note}
            )
        if not la_ws:
            why = "--lookahead none" if lookahead_sample == "none" else "--lookahead-skip"
            out.append(_not_run(base, la.spec, f"not run ({why})"))
        csp = "Route: a cluster, outside the CSP's single instance"
        if task.interface != "router":
            csp = _csp_note(ws)
        out.append(_not_run(base, "infermax-csp", csp))
    return out


def _not_run(base: Mapping[str, Any], method: str, note: str) -> dict[str, Any]:
    """An upper reference's row without a score (``note`` says why)."""
    nan = math.nan
    return {
        **base,
        "method": method,
        "role": "upper",
        "kind": "reference",
        "oracle": True,
        "score": nan,
        "score_low": nan,
        "score_high": nan,
        "num_workloads": 0,
        "num_failed": 0,
        "note": note,
    }


def _lookahead_workloads(
    suite: Suite, task: Task, ws: Sequence[Workload], sample: str
) -> list[Workload]:
    if sample == "none":
        return []
    if sample == "all":
        return list(ws)
    quick = suite.workloads("test", tasks=[task.name], quick=True)
    if sample == "quick":
        return quick
    firsts: dict[tuple[str, str], Workload] = {}
    for w in quick:
        firsts.setdefault((w.scenario_id, w.source), w)
    return list(firsts.values())


def headroom_summary(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per task: the reference, the best agent, the best reference-kind baseline, each upper
    reference's score and the headroom (best upper reference's score - 1)."""
    tasks: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        tasks.setdefault(r["task"], []).append(r)
    out = []
    for name, rs in tasks.items():

        def best(role: str, rs: list = rs) -> tuple[str, float]:
            ok = [
                r
                for r in rs
                if r["role"] == role and int(r["num_failed"]) == 0 and _finite(r["score"])
            ]
            if not ok:
                return "—", math.nan
            top = max(ok, key=lambda r: float(r["score"]))
            return str(top["method"]), float(top["score"])

        ref = next((r for r in rs if r["role"] == "reference"), None)
        agent, agent_score = best("agent")
        refk, refk_score = best("reference-kind")
        uppers = {
            str(r["method"]): float(r["score"]) if _finite(r["score"]) else math.nan
            for r in rs
            if r["role"] == "upper"
        }
        finite = {k: v for k, v in uppers.items() if math.isfinite(v)}
        top = max(finite, key=finite.get) if finite else "—"
        headroom = finite[top] - 1.0 if finite else math.nan
        # What acting through the task's decision alone gains: the best agent, or the
        # lookahead oracle (which acts through the same action), whichever is higher.
        through = [agent_score] + [v for k, v in finite.items() if k.startswith("lookahead")]
        through = [v for v in through if math.isfinite(v)]
        decision = max(through) - 1.0 if through else math.nan
        out.append(
            {
                "task": name,
                "scored": str(rs[0]["scored"]).lower() in ("true", "1"),
                "split": rs[0]["split"],
                "reference": ref["method"] if ref else "—",
                "best_agent": agent,
                "best_agent_score": agent_score,
                "best_reference_kind": refk,
                "best_reference_kind_score": refk_score,
                "uppers": uppers,
                "upper_notes": {str(r["method"]): r["note"] for r in rs if r["role"] == "upper"},
                "best_upper": top,
                "headroom": headroom,
                "decision_headroom": decision,
            }
        )
    return out


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _num(x: float) -> str:
    return f"{x:.3f}" if math.isfinite(x) else "—"


def _named(name: str, score: float) -> str:
    return f"{name} {_num(score)}" if math.isfinite(score) else "—"


def headroom_markdown(
    rows: Sequence[Mapping[str, Any]], suite: str, command: str | None = None
) -> str:
    """The summary table and one titled table per task (every method with its kind)."""
    summary = headroom_summary(rows)
    lines = [
        f"### Headroom per task ({suite})",
        "",
        *([f"Measured by `{command}`.", ""] if command else []),
        "Scores: geometric mean over the task's workloads of the reference's metric / the "
        "method's (> 1 better). Headroom = the best upper reference's score - 1. Through the "
        "decision = the best of the best agent and the lookahead oracle (both act only through "
        "the task's action) - 1: a task where it is below "
        f"{MIN_HEADROOM:.0%} is redesigned or unscored (leaderboards/headroom-decisions.md).",
        "",
        "| task | split | reference | best agent | best reference-kind | upper references | "
        "headroom | through the decision |",
        "|---|---|---|---|---|---|---:|---:|",
    ]
    for s in summary:
        uppers = "; ".join(f"{k} {_num(v)}" for k, v in s["uppers"].items() if math.isfinite(v))
        flag = "" if s["scored"] else " (unscored)"
        head = s["headroom"]
        agent = _named(s["best_agent"], s["best_agent_score"])
        refk = _named(s["best_reference_kind"], s["best_reference_kind_score"])
        dec = s["decision_headroom"]
        lines.append(
            f"| {s['task']}{flag} | {s['split']} | {s['reference']} | {agent} | {refk} | "
            f"{uppers or '—'} | {f'{head:+.1%}' if math.isfinite(head) else '—'} | "
            f"{f'{dec:+.1%}' if math.isfinite(dec) else '—'} |"
        )
    for s in summary:
        lines += ["", f"#### {s['task']}: every method ({s['split']} split)", ""]
        lines += [
            "| method | role | score [95% CI] | workloads | note |",
            "|---|---|---:|---:|---|",
        ]
        for r in rows:
            if r["task"] != s["task"]:
                continue
            score = float(r["score"]) if _finite(r["score"]) else math.nan
            lo, hi = (
                float(r[k]) if _finite(r[k]) else math.nan for k in ("score_low", "score_high")
            )
            text = _num(score) + (f" [{lo:.3f}, {hi:.3f}]" if math.isfinite(lo) else "")
            failed = int(r["num_failed"])
            note = (r["note"] + (f"; failed on {failed}" if failed else "")).replace("|", "/")
            lines.append(
                f"| {r['method']} | {r['role']} | {text} | {r['num_workloads']} | {note} |"
            )
    return "\n".join(lines) + "\n"


def task_headroom(rows: Sequence[Mapping[str, Any]], suite: str, task: str) -> str:
    """The headroom summary and method table of one task ("" when ``rows`` have none)."""
    mine = [r for r in rows if r["suite"] == suite and r["task"] == task]
    if not mine:
        return ""
    text = headroom_markdown(mine, suite)
    return text.replace(f"### Headroom per task ({suite})", f"#### Headroom ({suite})", 1)


def write_headroom(
    rows: Sequence[Mapping[str, Any]], out: str | Path, stem: str, command: str | None = None
) -> list[Path]:
    """``<out>/<stem>.csv`` (``HEADROOM_COLUMNS``) and ``<out>/<stem>.md`` (naming ``command``)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out / f"{stem}.csv", out / f"{stem}.md"
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, HEADROOM_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: _cell(r[k]) for k in HEADROOM_COLUMNS})
    md_path.write_text(headroom_markdown(rows, rows[0]["suite"] if rows else "", command))
    return [csv_path, md_path]


def _cell(x: Any) -> Any:
    if isinstance(x, float):
        return "" if not math.isfinite(x) else repr(round(x, 6))
    return x


def read_headroom(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a headroom CSV (``write_headroom``); an error names a file that is not one."""
    path = Path(path)
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    if rows and set(HEADROOM_COLUMNS) - set(rows[0]):
        raise ConfigError(
            f"{path}: not a headroom table (missing {sorted(set(HEADROOM_COLUMNS) - set(rows[0]))})"
        )
    for r in rows:
        for k in ("score", "score_low", "score_high"):
            r[k] = float(r[k]) if r[k] else math.nan
    return rows
