"""Reward bookkeeping: the area under the number of unfinished requests (or jobs) over time.

Let a *unit* be a request of the workload, or a job when the workload has jobs (a job's requests
are not units of their own). For unit ``i`` with arrival ``a_i`` and finish ``f_i``, the latency
area up to time ``T`` is::

    L(T) = sum_i  max(0, min(f_i, T) - a_i)   over units with a_i <= T
         = sum_{closed i} (f_i - a_i)  +  n_open(T) * T  -  sum_{open i, a_i <= T} a_i

so ``dL/dT`` is the number of arrived, unfinished units. Every environment rewards
``-reward_scale * (L(T_next) - L(T_prev))`` between two decision points; the sum telescopes to
``-reward_scale * L(T_end)``, which is ``-reward_scale * sum_i (f_i - a_i)`` (total end-to-end
latency, or total job latency) once the workload drains.

The SLO terms count units at their finish: ``slo`` counts units with an SLO that met it (request:
strict ``ttft < slo_ttft_s``, strict ``tpot < slo_tpot_s`` with a single-token request meeting any
TPOT SLO, ``finish <= deadline_s``; job: ``latency <= slo_e2e_s``) by the rules that fill the
records' ``slo_met`` column (``llmsched_gym.metrics.slo``); ``goodput`` counts finished units
that met their SLOs or have none (the numerator of the ``goodput`` metric).
"""

from __future__ import annotations

import bisect
import functools
import heapq
import math
from collections.abc import Mapping, Sequence
from itertools import accumulate
from typing import Any

from llmsched_gym.core.engine import Engine
from llmsched_gym.core.job import Job
from llmsched_gym.core.request import Request
from llmsched_gym.metrics.slo import has_slo, latency_slo_met, request_slo_met

_NAN = math.nan

REWARD_KINDS = ("latency", "slo", "goodput")
"""Selectable rewards: ``latency`` (default), ``slo`` (SLO-met count), ``goodput`` (good count)."""


class RewardLedger:
    """Tracks latency area and SLO counts of one episode's units; listens to the engine."""

    def __init__(self, items: Sequence[Any], engine: Engine | None) -> None:
        self.engine = engine
        self.has_jobs = any(isinstance(x, Job) for x in items)
        units = sorted(
            ((float(x.arrival_time), i) for i, x in enumerate(items)), key=lambda t: t[0]
        )
        self._arrivals = [a for a, _ in units]
        self._prefix = [0.0, *accumulate(self._arrivals)]
        self.num_units = len(items)
        self._request_units: dict[str, float] = {}
        self._jobs: dict[str, Job] = {}
        for x in items:
            if isinstance(x, Job):
                self._jobs[x.job_id] = x
            else:
                self._request_units[x.request_id] = float(x.arrival_time)
        self.closed_latency = 0.0
        self.closed_arrival = 0.0
        self.num_closed = 0
        self.num_slo_met = 0
        self.num_good = 0
        self._closed_jobs: set[str] = set()
        self._touched_jobs: list[str] = []
        self._last_area = 0.0
        self._last_slo = 0
        self._last_good = 0
        if engine is not None:
            engine.finish_listeners.append(self._on_finish)

    # -- engine callback ---------------------------------------------------------------------
    def _on_finish(self, finished: list[Request], end: float) -> None:
        for req in finished:
            self._finish(req, end)

    def _finish(self, req: Request, end: float) -> None:
        """Close the unit of ``req`` finishing at ``end`` (or note its job)."""
        arrival = self._request_units.get(req.request_id)
        if arrival is None:
            if req.spec.job_id is not None:
                self._touched_jobs.append(req.spec.job_id)
            return
        self._close(arrival, end)
        spec = req.spec
        slo_ttft, slo_tpot = _or_nan(spec.slo_ttft_s), _or_nan(spec.slo_tpot_s)
        deadline = _or_nan(spec.deadline_s)
        if has_slo(slo_ttft, slo_tpot, deadline):
            first, arr, n_out = self._first_token(req)
            tpot = (end - first) / (n_out - 1) if n_out > 1 else _NAN
            if request_slo_met(first - arr, tpot, end, slo_ttft, slo_tpot, deadline):
                self.num_slo_met += 1
                self.num_good += 1
        else:
            self.num_good += 1

    def _first_token(self, req: Request) -> tuple[float, float, int]:
        """(first token time, arrival time, output tokens) of the whole request."""
        return req.first_token_time, req.arrival_time, req.num_output_tokens

    def _job_finish(self, job_id: str, state: Any) -> float:
        """Finish time of a job the tracker reports finished."""
        return state.finish_time

    def _job_states(self) -> Mapping[str, Any]:
        jobs = self.engine.jobs
        return jobs.states if jobs is not None else {}

    def _close(self, arrival: float, finish: float) -> None:
        self.closed_latency += finish - arrival
        self.closed_arrival += arrival
        self.num_closed += 1

    def _settle_jobs(self, t: float) -> None:
        """Close jobs whose last request finished by ``t``.

        The tracker updates after the listeners, so jobs are settled when the ledger is read.
        A job touched by a request finishing before its last one is dropped here and touched
        again by the last one.
        """
        if not self._touched_jobs:
            return
        states = self._job_states()
        for job_id in self._touched_jobs:
            state = states.get(job_id)
            if state is None or state.finish_time is None or job_id in self._closed_jobs:
                continue
            finish = self._job_finish(job_id, state)
            if finish > t:
                continue
            job = self._jobs.get(job_id)
            if job is None:
                continue
            self._closed_jobs.add(job_id)
            arrival = float(job.arrival_time)
            latency = finish - arrival
            self._close(arrival, finish)
            if job.slo_e2e_s is None:
                self.num_good += 1
            elif latency_slo_met(latency, job.slo_e2e_s):
                self.num_slo_met += 1
                self.num_good += 1
        self._touched_jobs.clear()

    # -- reading -----------------------------------------------------------------------------
    def area(self, t: float) -> float:
        """``L(t)``: unit-seconds of latency accrued up to ``t`` (see the module docstring).

        Valid when every finish at or before ``t`` has been seen and none after it.
        """
        self._settle_jobs(t)
        n = bisect.bisect_right(self._arrivals, t)
        num_open = n - self.num_closed
        return self.closed_latency + (num_open * t - (self._prefix[n] - self.closed_arrival))

    def num_unfinished(self, t: float) -> int:
        """Arrived, unfinished units at ``t``."""
        self._settle_jobs(t)
        return bisect.bisect_right(self._arrivals, t) - self.num_closed

    def collect(self, t: float, scale: float) -> dict[str, float]:
        """Reward terms since the last call, all scaled by ``scale``; advances the marks."""
        area = self.area(t)
        d_area = area - self._last_area
        d_slo = self.num_slo_met - self._last_slo
        d_good = self.num_good - self._last_good
        self._last_area, self._last_slo, self._last_good = area, self.num_slo_met, self.num_good
        return {
            "reward_latency": -scale * d_area,
            "reward_slo": scale * d_slo,
            "reward_goodput": scale * d_good,
            "latency_area_s": d_area,
        }


def _or_nan(value: float | None) -> float:
    """An SLO or deadline as the SLO rules take it: NaN when unset."""
    return _NAN if value is None else value


class ClusterLedger(RewardLedger):
    """The ledger of a cluster run: listens to every instance, counts each request once.

    A request counts where it finishes for good (``Cluster.final``): a PD prefill copy that hands
    off does not, its decode continuation does, with TTFT and output tokens of the whole request
    (as the records merge them). Instances run ahead of the routing clock (a busy instance has
    finished the step it was running when the request arrived), so finishes are kept in a heap
    and enter ``L(t)`` only once ``t`` reaches them: ``L(t)`` is exact at every decision.
    """

    def __init__(self, items: Sequence[Any], cluster: Any) -> None:
        super().__init__(items, None)
        self.cluster = cluster
        self._future: list[tuple[float, int, Request]] = []
        self._num_future = 0
        self._job_last: dict[str, float] = {}
        for inst in cluster.instances:
            inst.engine.finish_listeners.append(self._listener(inst.index))

    def _listener(self, index: int) -> Any:
        """Instance ``index``'s finish listener (a bound method: copies follow the ledger)."""
        return functools.partial(self._on_instance_finish, index)

    def _on_instance_finish(self, index: int, finished: list[Request], end: float) -> None:
        final = self.cluster.final
        job_last = self._job_last
        for req in finished:
            if final.get(req.request_id) == index:
                heapq.heappush(self._future, (end, self._num_future, req))
                self._num_future += 1
                job_id = req.spec.job_id
                if job_id is not None and end > job_last.get(job_id, -math.inf):
                    job_last[job_id] = end

    def _flush(self, t: float) -> None:
        future = self._future
        while future and future[0][0] <= t:
            end, _, req = heapq.heappop(future)
            self._finish(req, end)

    def _first_token(self, req: Request) -> tuple[float, float, int]:
        handoff = self.cluster.handoffs.get(req.request_id)
        if handoff is None:
            return req.first_token_time, req.arrival_time, req.num_output_tokens
        p = handoff[0]
        return p.first_token_time, p.arrival_time, p.num_output_tokens + req.num_output_tokens

    def _job_states(self) -> Mapping[str, Any]:
        return self.cluster.tracker.states

    def _job_finish(self, job_id: str, state: Any) -> float:
        # The latest finish of the job's requests (as the records), not the tracker's
        # ``finish_time``: instances report finishes out of time order, and the tracker stamps
        # the job with the time of the report that completed it.
        return self._job_last[job_id]

    def area(self, t: float) -> float:
        """``L(t)`` over finishes up to ``t`` (later ones wait in the heap)."""
        self._flush(t)
        return super().area(t)

    def num_unfinished(self, t: float) -> int:
        """Arrived, unfinished units at ``t``."""
        self._flush(t)
        return super().num_unfinished(t)
