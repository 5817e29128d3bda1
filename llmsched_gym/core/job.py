"""Jobs: DAGs of stages whose requests are released when their predecessors finish.

A relQuery is a one-stage job (all its requests arrive together); a Text-to-SQL workflow is a
chain and fan-out of stages (schema linking, parallel candidates, self-correction rounds, unit
tests, evaluation). The engine releases a stage's requests at the moment its last predecessor
stage finishes (its last request's finish time), or at the job's arrival for root stages.

A stage's requests carry *offsets*: their ``arrival_time`` is seconds after the stage's release
(usually 0). Their ``job_id`` and ``stage`` are stamped by the engine. A stage may instead decide
its contents at release (``build``), e.g. how many self-correction rounds a workflow needs: what
has not been released is invisible to policies, which see a job only through ``JobState``.

>>> from llmsched_gym.core.request import RequestSpec
>>> r = lambda i: RequestSpec(f"q0-{i}", 0.0, prompt_len=100, output_len=5, max_tokens=5)
>>> job = Job("q0", arrival_time=2.0, stages=(Stage("map", (r(0), r(1))),
...                                          Stage("reduce", (r(2),), after=("map",))))
>>> [s.name for s in job.stages]
['map', 'reduce']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import ConfigError, TraceError

__all__ = ["Job", "JobState", "JobTracker", "Stage"]


@dataclass(frozen=True, slots=True)
class Stage:
    """One stage of a job: requests released together once every stage in ``after`` finished."""

    name: str
    """Unique within the job."""
    requests: tuple[RequestSpec, ...] = ()
    """The stage's requests; ``arrival_time`` is the offset in seconds after release (>= 0)."""
    after: tuple[str, ...] = ()
    """Names of the stages that must finish before this one is released."""
    build: Callable[[float], Sequence[RequestSpec]] | None = None
    """Decides the requests at release instead of ``requests`` (gets the release time); must be
    deterministic, and give no request a ``cancel_time`` (a job cannot lose a request). Hidden
    from policies until it runs."""


@dataclass(frozen=True, slots=True)
class Job:
    """A DAG of stages arriving at ``arrival_time`` (root stages are released then)."""

    job_id: str
    arrival_time: float
    stages: tuple[Stage, ...]
    kind: str = "job"
    """What the job is (``relquery``, ``text2sql``, ...), for records and policies."""
    slo_e2e_s: float | None = None
    """End-to-end SLO of the whole job in seconds, if any."""

    def __post_init__(self) -> None:
        where = f"job {self.job_id!r}"
        if not isinstance(self.job_id, str) or not self.job_id:
            raise TraceError(f"job_id must be a non-empty string, got {self.job_id!r}")
        if not (isinstance(self.arrival_time, (int, float)) and self.arrival_time >= 0):
            raise TraceError(f"{where}: arrival_time must be >= 0, got {self.arrival_time!r}")
        if not self.stages:
            raise TraceError(f"{where}: needs at least one stage")
        names: dict[str, Stage] = {}
        for stage in self.stages:
            if stage.name in names:
                raise TraceError(f"{where}: duplicate stage name {stage.name!r}")
            names[stage.name] = stage
        for stage in self.stages:
            for dep in stage.after:
                if dep not in names:
                    raise TraceError(
                        f"{where}: stage {stage.name!r} comes after unknown stage {dep!r}"
                    )
            for spec in stage.requests:
                if spec.arrival_time < 0:
                    raise TraceError(
                        f"{where}: request {spec.request_id!r} in stage {stage.name!r} has a "
                        f"negative release offset arrival_time={spec.arrival_time}"
                    )
        # Acyclic: Kahn's algorithm over the declared order.
        indegree = {s.name: len(set(s.after)) for s in self.stages}
        children: dict[str, list[str]] = {s.name: [] for s in self.stages}
        for s in self.stages:
            for dep in set(s.after):
                children[dep].append(s.name)
        ready = [n for n, d in indegree.items() if d == 0]
        seen = 0
        while ready:
            n = ready.pop()
            seen += 1
            for c in children[n]:
                indegree[c] -= 1
                if indegree[c] == 0:
                    ready.append(c)
        if seen != len(self.stages):
            cyclic = sorted(n for n, d in indegree.items() if d > 0)
            raise TraceError(f"{where}: stages {cyclic} form a cycle")

    @property
    def num_requests(self) -> int:
        """Requests in the job's fixed stages (``build`` stages count only once released)."""
        return sum(len(s.requests) for s in self.stages)


class JobState:
    """What a policy may know of a job: what has been released and finished so far.

    Attributes are read-only for policies. ``total_stages`` is not here: how many stages a
    workflow will need is decided as it runs and is an oracle's knowledge (``JobTracker.job``).
    """

    __slots__ = (
        "job_id",
        "kind",
        "arrival_time",
        "slo_e2e_s",
        "stages_released",
        "stages_finished",
        "num_released",
        "num_finished",
        "finish_time",
    )

    def __init__(self, job: Job) -> None:
        self.job_id = job.job_id
        self.kind = job.kind
        self.arrival_time = float(job.arrival_time)
        self.slo_e2e_s = job.slo_e2e_s
        self.stages_released: list[str] = []
        """Stage names in release order."""
        self.stages_finished: list[str] = []
        """Stage names in finish order."""
        self.num_released = 0
        """Requests released so far."""
        self.num_finished = 0
        """Requests finished so far."""
        self.finish_time: float | None = None
        """Finish time of the job's last request once every stage has finished."""

    def __repr__(self) -> str:
        return (
            f"JobState({self.job_id!r}, released={self.num_released}, "
            f"finished={self.num_finished}, stages={self.stages_finished}/{self.stages_released})"
        )


class JobTracker:
    """Releases stage requests as predecessors finish; the engine calls it, policies read it."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        self.states: dict[str, JobState] = {}
        self._open: dict[tuple[str, str], int] = {}  # (job, stage) -> unfinished requests
        # (job, stage) -> latest finish of its requests so far (or its release time): with
        # several engines, finishes may be reported out of time order.
        self._end: dict[tuple[str, str], float] = {}
        self._waiting_on: dict[tuple[str, str], int] = {}  # (job, stage) -> unfinished deps
        self._request_stage: dict[str, tuple[str, str]] = {}

    def add(self, jobs: Sequence[Job]) -> list[RequestSpec]:
        """Register jobs; returns the requests of their root stages (absolute arrival times)."""
        seen = set(self.jobs)
        for job in jobs:
            if job.job_id in seen:
                raise TraceError(f"duplicate job_id {job.job_id!r}")
            seen.add(job.job_id)
        released: list[RequestSpec] = []
        for job in jobs:
            self.jobs[job.job_id] = job
            self.states[job.job_id] = JobState(job)
            for stage in job.stages:
                self._waiting_on[(job.job_id, stage.name)] = len(set(stage.after))
            released.extend(self._release_ready(job))
        return released

    def job_of(self, spec: RequestSpec) -> JobState | None:
        """The job state of a released request, or None when it is not part of a tracked job."""
        key = self._request_stage.get(spec.request_id)
        return None if key is None else self.states[key[0]]

    def on_finish(self, spec: RequestSpec, now: float) -> list[RequestSpec]:
        """Account a finished request; returns the requests of stages it releases."""
        key = self._request_stage.get(spec.request_id)
        if key is None:
            return []
        state = self.states[key[0]]
        state.num_finished += 1
        self._open[key] -= 1
        if now > self._end[key]:
            self._end[key] = now
        if self._open[key]:
            return []
        return self._stage_done(self.jobs[key[0]], key[1])

    def _stage_done(self, job: Job, name: str) -> list[RequestSpec]:
        state = self.states[job.job_id]
        state.stages_finished.append(name)
        if len(state.stages_finished) == len(job.stages):
            state.finish_time = max(self._end[(job.job_id, s.name)] for s in job.stages)
            return []
        for stage in job.stages:
            if name in stage.after:
                self._waiting_on[(job.job_id, stage.name)] -= 1
        return self._release_ready(job)

    def _release_ready(self, job: Job) -> list[RequestSpec]:
        """Release every stage whose predecessors all finished, at the latest of their ends."""
        state = self.states[job.job_id]
        released: list[RequestSpec] = []
        empty: list[str] = []
        for stage in job.stages:
            key = (job.job_id, stage.name)
            if self._waiting_on[key] != 0 or stage.name in state.stages_released:
                continue
            now = max(
                (self._end[(job.job_id, dep)] for dep in stage.after),
                default=float(job.arrival_time),
            )
            self._end[key] = now
            state.stages_released.append(stage.name)
            specs = tuple(stage.build(now)) if stage.build is not None else stage.requests
            if stage.build is not None:
                for spec in specs:
                    if not isinstance(spec, RequestSpec) or spec.arrival_time < 0:
                        raise TraceError(
                            f"job {job.job_id!r}: stage {stage.name!r} built {spec!r}; "
                            "expected RequestSpecs with release offsets >= 0"
                        )
                    if spec.cancel_time is not None:  # as Engine.add_jobs for fixed stages
                        raise ConfigError(
                            f"job {job.job_id!r}: stage {stage.name!r} built request "
                            f"{spec.request_id!r} with a cancel_time; a job cannot lose a "
                            "request (cancel_time is for single requests)"
                        )
            self._open[key] = len(specs)
            state.num_released += len(specs)
            for spec in specs:
                if spec.request_id in self._request_stage:
                    raise TraceError(
                        f"job {job.job_id!r}: request_id {spec.request_id!r} released twice"
                    )
                self._request_stage[spec.request_id] = key
                released.append(
                    dataclasses.replace(
                        spec,
                        arrival_time=now + spec.arrival_time,
                        job_id=job.job_id,
                        stage=stage.name,
                    )
                )
            if not specs:
                empty.append(stage.name)
        for name in empty:  # a stage with nothing to run finishes at its release
            released.extend(self._stage_done(job, name))
        return released
