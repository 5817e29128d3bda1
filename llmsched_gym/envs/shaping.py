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
    reference policy run on the same workload (``LatencyCurve``) as the potential,
    ``phi(t) = L_ref(t) / L_ref(inf)``, the shaped reward is::

        r_k = gamma * phi(t') - phi(t)  -  (L(t') - L(t)) / L_ref(inf)

    With ``gamma = 1`` that is how many fewer units the agent keeps in the system than the
    reference did over the same stretch of time. ``phi`` is a function of the state (through
    its clock), so this is potential-based shaping (Ng, Harada and Russell, ICML 1999, Theorem
    1): a learner discounting by ``gamma`` has the same optimal policies as without it, which
    holds only with the learner's own ``gamma`` in the formula (with ``gamma = 1`` and a
    discounting learner, the leftover ``(1 - gamma) * phi`` per step would pay for making more
    decisions). What it removes is the reward's dependence on the arrivals (a burst raises the
    agent's and the reference's counts alike): the input-driven variance of Mao et al.,
    "Variance Reduction for Reinforcement Learning in Input-Driven Environments", ICLR 2019,
    here with the reference's run as the input-dependent baseline.

    At the end of an episode, the potential of the terminal state is ``phi(inf) = 1`` with
    ``gamma = 1``, so the return of an episode that drains is exactly ``1 - L / L_ref``, the
    relative latency saving over the reference; with ``gamma < 1`` it is 0 (an absorbing
    state's potential must be 0 for the discounted invariance).

    Args:
        curve: The reference run's ``LatencyCurve``; ``curve.total`` must be positive.
        start: The agent's clock at ``reset``.
        gamma: The learner's discount factor, in (0, 1].
    """

    def __init__(self, curve: LatencyCurve, start: float, gamma: float = 1.0) -> None:
        if not curve.total > 0:
            raise ValueError(
                f"the reference run's total latency is {curve.total}: nothing to scale"
            )
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        self.curve = curve
        self.gamma = gamma
        self._phi = curve(start) / curve.total

    def reward(self, latency_area: float, clock: float, terminated: bool) -> float:
        """The shaped reward of a step whose unscaled latency area is ``latency_area``."""
        phi = self.curve(clock) / self.curve.total
        if terminated and self.gamma < 1.0:
            phi = 0.0
        elif terminated and self.curve.num_open == 0:
            phi = 1.0
        shaped = self.gamma * phi - self._phi - latency_area / self.curve.total
        self._phi = phi
        return shaped
