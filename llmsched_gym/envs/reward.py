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
TPOT SLO, ``finish <= deadline_s``; job: ``latency <= slo_e2e_s``), exactly as the records'
``slo_met`` column does; ``goodput`` counts finished units that met their SLOs or have none (the
numerator of the ``goodput`` metric).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from llmsched_gym.core.engine import Engine
from llmsched_gym.core.job import Job
from llmsched_gym.core.request import Request

REWARD_KINDS = ("latency", "slo", "goodput")
"""Selectable rewards: ``latency`` (default), ``slo`` (SLO-met count), ``goodput`` (good count)."""


class RewardLedger:
    """Tracks latency area and SLO counts of one episode's units; listens to the engine."""

    def __init__(self, items: Sequence[Any], engine: Engine) -> None:
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
        engine.finish_listeners.append(self._on_finish)

    # -- engine callback ---------------------------------------------------------------------
    def _on_finish(self, finished: list[Request], end: float) -> None:
        units = self._request_units
        for req in finished:
            arrival = units.get(req.request_id)
            if arrival is None:
                if req.spec.job_id is not None:
                    self._touched_jobs.append(req.spec.job_id)
                continue
            self._close(arrival, end)
            spec = req.spec
            has_slo = (
                spec.slo_ttft_s is not None
                or spec.slo_tpot_s is not None
                or spec.deadline_s is not None
            )
            met = _request_met(req, spec, end)
            if has_slo and met:
                self.num_slo_met += 1
            if met or not has_slo:
                self.num_good += 1

    def _close(self, arrival: float, finish: float) -> None:
        self.closed_latency += finish - arrival
        self.closed_arrival += arrival
        self.num_closed += 1

    def _settle_jobs(self) -> None:
        """Close jobs whose last request finished (the tracker updates after the listeners)."""
        if not self._touched_jobs:
            return
        states = self.engine.jobs.states if self.engine.jobs is not None else {}
        for job_id in self._touched_jobs:
            state = states.get(job_id)
            if state is None or state.finish_time is None or job_id in self._closed_jobs:
                continue
            job = self._jobs.get(job_id)
            if job is None:
                continue
            self._closed_jobs.add(job_id)
            arrival = float(job.arrival_time)
            latency = state.finish_time - arrival
            self._close(arrival, state.finish_time)
            if job.slo_e2e_s is not None and latency <= job.slo_e2e_s:
                self.num_slo_met += 1
            if job.slo_e2e_s is None or latency <= job.slo_e2e_s:
                self.num_good += 1
        self._touched_jobs.clear()

    # -- reading -----------------------------------------------------------------------------
    def area(self, t: float) -> float:
        """``L(t)``: unit-seconds of latency accrued up to ``t`` (see the module docstring).

        Valid when every finish at or before ``t`` has been seen and none after it.
        """
        self._settle_jobs()
        n = bisect.bisect_right(self._arrivals, t)
        num_open = n - self.num_closed
        return self.closed_latency + (num_open * t - (self._prefix[n] - self.closed_arrival))

    def num_unfinished(self, t: float) -> int:
        """Arrived, unfinished units at ``t``."""
        self._settle_jobs()
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


def _request_met(req: Request, spec: Any, finish: float) -> bool:
    """The records' ``slo_met`` for a request finishing at ``finish`` (same float operations)."""
    if spec.slo_ttft_s is not None and not (req.first_token_time - req.arrival_time) < (
        spec.slo_ttft_s
    ):
        return False
    if spec.slo_tpot_s is not None and req.num_output_tokens > 1:
        tpot = (finish - req.first_token_time) / (req.num_output_tokens - 1)
        if not (math.isnan(tpot) or tpot < spec.slo_tpot_s):
            return False
    return not (spec.deadline_s is not None and not finish <= spec.deadline_s)
