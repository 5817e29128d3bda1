"""HexGen-Text2SQL's online alpha tuning (paper §4.3) as a router wrapper.

:class:`HexGenTunedRouter` dispatches with Eq. 4 (:class:`~llmsched_gym.policies.hexgen.dispatch.
HexGenWBRouter`) starting at ``alpha = 0``. It records what a live system would: every routed
request's prompt length and stage, the query arrival times, and the output lengths of stages
that have finished. At the end of the first window (100 s) it replays the queries that arrived
in the window in ``llmsched_gym`` itself, on a fresh copy of the cluster (same cost models,
engine settings and copies of the local schedulers), for ``alpha`` in ``{0, 0.2, ..., 1.0}``,
then ``best +- 0.1``, and keeps the alpha of least mean simulated query latency. At the end of
every later window it compares the mean latency of the queries finished in it with the previous
window's by a one-sided Welch t-test (:func:`welch_one_sided`); ``p < 0.01`` re-tunes on the
last window.

Replay lengths: finished stages use their observed output lengths, running ones the stage-mean
prediction. Stages not yet released are unknown: with ``complete=True`` (default) an unfinished
query is completed with the rest of its standard-workflow template (``TemplateState``, the
Eq. 5 bookkeeping) at stage-typical lengths (GC two calls, EV the trace's mean fan-out), so the
replay sees the window's whole load; ``complete=False`` replays the observed stages only.

``score="code"`` dispatches and replays with Hexgen-Flow's cumulative-work score instead of
Eq. 4 (the score its offline α sweep, ``run_multiple_simulations.py``, tuned). The paper's
procedure (first 100 s at α = 0, coarse grid then ±0.1, one-sided t-test) is not in the code;
it is implemented as the paper describes it for both scores.

A replay is a run of the whole cluster, the floor above the policies: the cluster that resets
the router hands its ``run_cluster`` over first (:meth:`HexGenTunedRouter.bind_runner`, part of
the cluster's router protocol), so this module never imports the cluster.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmsched_gym.core.job import Job, JobState, Stage
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import ConfigError
from llmsched_gym.policies.hexgen.dispatch import HexGenCodeRouter, HexGenWBRouter
from llmsched_gym.policies.hexgen.tcomp import stage_abbr
from llmsched_gym.policies.hexgen.urgency import TemplateState
from llmsched_gym.workloads.text2sql import load_hexgen_stats

__all__ = [
    "COARSE_GRID",
    "HexGenTunedRouter",
    "TuningEvent",
    "betainc_regularized",
    "coarse_to_fine",
    "regression_detected",
    "student_t_sf",
    "welch_one_sided",
]

COARSE_GRID: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
"""§4.3's initial sweep."""


# -- statistics ----------------------------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc_regularized(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta ``I_x(a, b)`` for ``a, b > 0``, ``0 <= x <= 1``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x)
    ln += b * math.log1p(-x)
    front = math.exp(ln)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def student_t_sf(t: float, df: float) -> float:
    """``P(T > t)`` for Student's t with ``df`` degrees of freedom."""
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc_regularized(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def welch_one_sided(new: Sequence[float], ref: Sequence[float]) -> tuple[float, float]:
    """One-sided Welch two-sample t-test of ``H1: mean(new) > mean(ref)``.

    Args:
        new: Latencies of the current window.
        ref: Latencies of the reference (previous) window.

    Returns:
        ``(t, p)``; ``p`` is NaN when a sample has fewer than two values or both variances are 0.
    """
    x = np.asarray(new, dtype=np.float64)
    y = np.asarray(ref, dtype=np.float64)
    if x.size < 2 or y.size < 2:
        return math.nan, math.nan
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se2 = vx + vy
    if se2 <= 0:
        return math.nan, math.nan
    t = float((x.mean() - y.mean()) / math.sqrt(se2))
    df = se2 * se2 / (vx * vx / (x.size - 1) + vy * vy / (y.size - 1))
    return t, float(student_t_sf(t, df))


def regression_detected(new: Sequence[float], ref: Sequence[float], level: float = 0.01) -> bool:
    """Whether the window ``new`` is significantly slower than ``ref`` (p < level)."""
    _, p = welch_one_sided(new, ref)
    return bool(p < level)


def coarse_to_fine(objective: Any, coarse: Sequence[float] = COARSE_GRID, step: float = 0.1):
    """§4.3 search: the coarse grid, then ``best +- step``; returns (best alpha, {alpha: value}).

    Ties go to the smaller alpha.
    """
    values: dict[float, float] = {}
    for a in coarse:
        values[round(a, 6)] = float(objective(a))
    best = min(values, key=lambda a: (values[a], a))
    for a in (best - step, best + step):
        a = round(a, 6)
        if 0.0 <= a <= 1.0 and a not in values:
            values[a] = float(objective(a))
    best = min(values, key=lambda a: (values[a], a))
    return best, values


# -- the wrapper ---------------------------------------------------------------------------------


@dataclass
class TuningEvent:
    """One tuning run: when, why, on how many queries, the grid's objective and the choice."""

    time_s: float
    reason: str
    num_queries: int
    values: dict[float, float]
    alpha: float
    p_value: float = math.nan


@dataclass
class _Query:
    arrival: float
    state: JobState | None
    slo: float | None
    stages: dict[str, list[RequestSpec]] = field(default_factory=dict)


class HexGenTunedRouter(HexGenWBRouter):
    """Eq. 4 dispatch whose alpha is tuned online by replaying windows in ``llmsched_gym``.

    Args:
        window_s: Window length in seconds (paper: 100).
        p_level: Re-tune when the one-sided t-test's p is below this (paper: 0.01).
        coarse: Initial alpha grid (paper: 0, 0.2, ..., 1).
        step: Refinement step (paper: 0.1).
        initial_alpha: Alpha before the first tuning (paper: 0).
        replay_scheduler: Factory ``(view) -> policy`` of replay local schedulers; default a
            fresh instance of each instance's policy class.
        seed: Seed of replay runs.
        complete: Complete unfinished queries with their template's remaining stages.
        score: ``"paper"`` (Eq. 4, default) or ``"code"``: dispatch and replay with
            Hexgen-Flow's cumulative-work score (:class:`~llmsched_gym.policies.hexgen.dispatch.
            HexGenCodeRouter`), the score the code's α sweep tuned.
        **kwargs: Passed to :class:`HexGenWBRouter` (``beta``, ``beta_scale``, ``trace``, ...).
    """

    def __init__(
        self,
        window_s: float = 100.0,
        p_level: float = 0.01,
        coarse: Sequence[float] = COARSE_GRID,
        step: float = 0.1,
        initial_alpha: float = 0.0,
        replay_scheduler: Any = None,
        seed: int = 0,
        complete: bool = True,
        score: str = "paper",
        **kwargs: Any,
    ) -> None:
        kwargs.pop("alpha", None)
        if score not in ("paper", "code"):
            raise ConfigError(f"score must be 'paper' or 'code', got {score!r}")
        self.score = score
        self._code: HexGenCodeRouter | None = None
        super().__init__(alpha=initial_alpha, **kwargs)
        if score == "code":
            self._code = HexGenCodeRouter(alpha=initial_alpha, trace=self.predictor.trace)
        if not window_s > 0:
            raise ConfigError(f"window_s must be > 0, got {window_s!r}")
        self.window_s = float(window_s)
        self.p_level = float(p_level)
        self.coarse = tuple(coarse)
        self.step = float(step)
        self.initial_alpha = float(initial_alpha)
        self.replay_scheduler = replay_scheduler
        self.replay_seed = int(seed)
        self.complete = bool(complete)
        stats = load_hexgen_stats()["traces"][self.predictor.trace]
        self._widths = {"GC": 2, "EV": max(1, round(stats["evaluate_fanout_n"]["mean"]))}
        self.name = "hexgen-wb-tuned"
        self._run_cluster: Any = None
        self._reset_tuning()

    def bind_runner(self, run_cluster: Any) -> None:
        """Keep the cluster's ``run_cluster`` for replays (it calls this before ``reset``)."""
        self._run_cluster = run_cluster

    def _reset_tuning(self) -> None:
        self.events: list[TuningEvent] = []
        self.alpha_trace: list[tuple[float, float]] = [(0.0, self.initial_alpha)]
        self._queries: dict[str, _Query] = {}
        self._next_boundary = self.window_s
        self._ref: list[float] | None = None
        self._specs: list[Any] = []

    def set_alpha(self, alpha: float) -> None:
        """Change alpha, keeping the wrapper's name."""
        super().set_alpha(alpha)
        if self._code is not None:
            self._code.set_alpha(alpha)
        self.name = "hexgen-wb-tuned"

    def reset(self, instances: Sequence[Any], seed: int) -> None:
        """Start at the initial alpha; snapshot the cluster's instance specs for replays."""
        super().reset(instances, seed)
        if self._code is not None:
            self._code.reset(instances, seed)
        self.set_alpha(self.initial_alpha)
        self._reset_tuning()
        self._specs = [self._instance_spec(v) for v in instances]

    def _instance_spec(self, view: Any) -> dict[str, Any]:
        """The fields of the instance's ``InstanceSpec``, with a fresh copy of its policy."""
        engine = view._engine
        if self.replay_scheduler is not None:
            policy = self.replay_scheduler(view)
        else:
            policy = copy.deepcopy(engine.policy)
        return {
            "name": view.name,
            "cost_model": view.cost_model,
            "engine": engine.config,
            "scheduler": policy,
            "role": view.role,
        }

    # -- recording ----------------------------------------------------------------------------
    def _record(self, request: RequestSpec, job: JobState | None, now: float) -> None:
        if job is None:
            return
        q = self._queries.get(job.job_id)
        if q is None:
            q = self._queries[job.job_id] = _Query(job.arrival_time, job, job.slo_e2e_s)
        parts = request.request_id.rsplit("-", 2)
        stage = parts[1] if len(parts) == 3 else request.request_id
        q.stages.setdefault(stage, []).append(request)

    def _replay_jobs(self, start: float, end: float) -> list[Job]:
        """The queries that arrived in ``[start, end)`` as jobs, times shifted to the window."""
        jobs = []
        for job_id, q in self._queries.items():
            if not start <= q.arrival < end:
                continue
            finished = set(q.state.stages_finished) if q.state is not None else set()
            stages = []
            for name, specs in q.stages.items():
                known = name in finished
                out_specs = []
                for s in specs:
                    out = s.output_len if known else self.predictor.output(stage_abbr(s.request_id))
                    out = max(1, int(out))
                    out_specs.append(
                        RequestSpec(
                            s.request_id,
                            0.0,
                            prompt_len=s.prompt_len,
                            output_len=out,
                            max_tokens=out,
                        )
                    )
                after = (stages[-1].name,) if stages else ()
                stages.append(Stage(name, tuple(out_specs), after=after))
            done = q.state is not None and q.state.finish_time is not None
            if self.complete and stages and not done:
                stages.extend(self._template_rest(job_id, q, stages[-1].name))
            if stages:
                jobs.append(
                    Job(job_id, q.arrival - start, tuple(stages), kind="text2sql", slo_e2e_s=q.slo)
                )
        jobs.sort(key=lambda j: (j.arrival_time, j.job_id))
        return jobs

    def _template_rest(self, job_id: str, q: _Query, last: str) -> list[Stage]:
        """The template's remaining stages of an unfinished query at stage-typical lengths."""
        state = TemplateState()
        for name in q.stages:
            abbr = name.rstrip("0123456789")
            state.consume(abbr)
        out: list[Stage] = []
        for k, abbr in enumerate(state.remaining):
            name = f"X{abbr}{k}"
            i, o = self.predictor.typical(abbr)
            specs = tuple(
                RequestSpec(f"{job_id}-{name}-{j}", 0.0, prompt_len=i, output_len=o, max_tokens=o)
                for j in range(self._widths.get(abbr, 1))
            )
            out.append(Stage(name, specs, after=(out[-1].name if out else last,)))
        return out

    def replay_mean_latency(self, jobs: Sequence[Job], alpha: float) -> float:
        """Mean simulated query latency of ``jobs`` on a fresh cluster under ``alpha``."""
        if self._run_cluster is None:
            raise ConfigError(
                "hexgen-wb-tuned replays windows on the cluster that runs it: run it through "
                "run_cluster or a cluster scenario (which call bind_runner), or call "
                "bind_runner(llmsched_gym.cluster.run_cluster) first"
            )
        if self.score == "code":
            router: Any = HexGenCodeRouter(alpha=alpha, trace=self.predictor.trace)
        else:
            router = HexGenWBRouter(
                alpha=alpha,
                beta=self.beta,
                trace=self.predictor.trace,
                queue_metric=self.queue_metric,
                eps=self.eps,
            )
        specs = [{**spec, "scheduler": copy.deepcopy(spec["scheduler"])} for spec in self._specs]
        result = self._run_cluster(list(jobs), specs, router, seed=self.replay_seed)
        lat = result.jobs["latency_s"].to_numpy(np.float64)
        return float(np.nanmean(np.nan_to_num(lat, nan=np.inf))) if lat.size else math.inf

    def tune(self, start: float, end: float, reason: str, p: float = math.nan) -> TuningEvent:
        """Replay the window ``[start, end)`` over the alpha grid and adopt the best alpha."""
        jobs = self._replay_jobs(start, end)
        if not jobs:
            event = TuningEvent(end, reason, 0, {}, self.alpha, p)
        else:
            best, values = coarse_to_fine(
                lambda a: self.replay_mean_latency(jobs, a), self.coarse, self.step
            )
            self.set_alpha(best)
            event = TuningEvent(end, reason, len(jobs), values, best, p)
        self.events.append(event)
        self.alpha_trace.append((end, self.alpha))
        return event

    def _window_latencies(self, start: float, end: float) -> list[float]:
        out = []
        for q in self._queries.values():
            st = q.state
            if st is not None and st.finish_time is not None and start <= st.finish_time < end:
                out.append(st.finish_time - q.arrival)
        return out

    def _on_boundary(self, boundary: float) -> None:
        start = boundary - self.window_s
        if not self.events:
            self.tune(start, boundary, "initial")
            self._ref = self._window_latencies(start, boundary)
            return
        new = self._window_latencies(start, boundary)
        _, p = welch_one_sided(new, self._ref or [])
        if p < self.p_level:
            self.tune(start, boundary, "regression", p)
        if new:
            self._ref = new

    def route(self, request, job, instances, now) -> int:
        """Record, handle window boundaries passed by ``now``, then dispatch by Eq. 4."""
        if not self._tcomp:
            self.reset(instances, 0)
        while now >= self._next_boundary:
            self._on_boundary(self._next_boundary)
            self._next_boundary += self.window_s
        self._record(request, job, now)
        if self._code is not None:
            return self._code.route(request, job, instances, now)
        return super().route(request, job, instances, now)
