"""Reward shaping against a reference run: the latency area of a finished run as a potential.

The environments' latency reward (``llmsched_gym.envs.reward``) depends on the arrivals as much
as on the agent: a burst raises the number of waiting requests whatever the agent does, so
per-decision rewards and returns vary across workloads far more than between policies. A
learner can subtract what a reference policy (the task's reference, e.g. ``vllm-v1``) did on
the same workload: ``ReferenceShaping`` turns the reward into the agent's latency saving over
the reference at the same clock, which is potential-based (the optimal policies are kept) and
sums to the relative saving ``1 - L / L_ref`` over an episode.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

__all__ = ["LatencyCurve", "ReferenceShaping"]


class LatencyCurve:
    """``L(T)`` of one finished run, from its units' arrivals and finishes (the formula above).

    Used as the potential of a reference run in ``ReferenceShaping``: ``L(T)`` is piecewise
    linear with slope the number of arrived, unfinished units, so it is evaluated exactly from
    the sorted arrival and finish times. A unit that never finished (``f_i`` infinite or NaN)
    stays open for ever.

    Args:
        arrivals: Arrival time of every unit (seconds).
        finishes: Finish time of every unit, in the same order.
    """

    def __init__(self, arrivals: Sequence[float], finishes: Sequence[float]) -> None:
        if len(arrivals) != len(finishes):
            raise ValueError(f"{len(arrivals)} arrivals but {len(finishes)} finishes")
        closed = []
        for a, f in zip(arrivals, finishes, strict=True):
            a, f = float(a), float(f)
            if not math.isfinite(a):
                raise ValueError(f"a unit arrives at {a}: arrivals must be finite")
            if math.isfinite(f) and f < a:
                raise ValueError(f"a unit finishes at {f} before it arrives at {a}")
            closed.append((a, f if math.isfinite(f) else math.inf))
        self.num_units = len(closed)
        self.num_open = sum(1 for _, f in closed if f == math.inf)
        self.total = math.fsum(f - a for a, f in closed if f != math.inf)
        """``L(inf)`` over the units that finished: their total latency."""
        # Breakpoints: +1 at an arrival, -1 at a finish; L and the slope just after each.
        events = sorted([(a, 1) for a, _ in closed] + [(f, -1) for _, f in closed if f != math.inf])
        self._times: list[float] = []
        self._areas: list[float] = []
        self._slopes: list[int] = []
        area, slope, last = 0.0, 0, 0.0
        for t, step in events:
            area += slope * (t - last)
            slope += step
            last = t
            if self._times and self._times[-1] == t:
                self._areas[-1], self._slopes[-1] = area, slope
            else:
                self._times.append(t)
                self._areas.append(area)
                self._slopes.append(slope)

    def __call__(self, t: float) -> float:
        """``L(t)``: the latency area accrued by time ``t``."""
        i = bisect.bisect_right(self._times, t) - 1
        if i < 0:
            return 0.0
        return self._areas[i] + self._slopes[i] * (t - self._times[i])

    @classmethod
    def from_requests(cls, requests: Any) -> LatencyCurve:
        """From a records table (``SimulationResult.requests``) whose units are its requests."""
        return cls(requests["arrival_time_s"].to_numpy(), requests["finish_time_s"].to_numpy())


class ReferenceShaping:
    """Potential-based shaping with a reference run's latency area on the same workload.

    The latency reward between decisions at clocks ``t`` and ``t'`` is ``-(L(t') - L(t))``
    (the area under the number of the agent's unfinished units). With ``L_ref`` the area of a
    reference policy run on the same workload (``LatencyCurve``), the shaped reward is::

        r_k = (L_ref(t') - L_ref(t)) - (L(t') - L(t))          (divided by L_ref(inf))

    i.e. how many fewer units the agent keeps in the system than the reference did over the
    same stretch of time. ``L_ref(clock)`` is a potential (a function of the state through its
    clock), so this is potential-based shaping (Ng, Harada and Russell, ICML 1999): it leaves
    the optimal policies of the undiscounted task unchanged. At the episode's end the potential
    is set to ``L_ref(inf)`` (the terminal reward adds ``L_ref(inf) - L_ref(t_end)``), so the
    return of an episode that drains is exactly ``1 - L / L_ref``: the relative latency
    saving over the reference. What it removes is the reward's dependence on the arrivals (a
    burst raises the agent's and the reference's counts alike): the input-driven variance of
    Mao et al., "Variance Reduction for Reinforcement Learning in Input-Driven Environments",
    ICLR 2019, here with the reference's run as the input-dependent baseline.

    Args:
        curve: The reference run's ``LatencyCurve``; ``curve.total`` must be positive.
        start: The agent's clock at ``reset``.
    """

    def __init__(self, curve: LatencyCurve, start: float) -> None:
        if not curve.total > 0:
            raise ValueError(
                f"the reference run's total latency is {curve.total}: nothing to scale"
            )
        self.curve = curve
        self._clock = start
        self._ref_at = curve(start)

    def reward(self, latency_area: float, clock: float, terminated: bool) -> float:
        """The shaped reward of a step whose unscaled latency area is ``latency_area``."""
        drained = terminated and self.curve.num_open == 0
        ref_now = self.curve.total if drained else self.curve(clock)
        delta_ref = ref_now - self._ref_at
        self._clock, self._ref_at = clock, ref_now
        return (delta_ref - latency_area) / self.curve.total
