"""Training on a suite's train workloads only: deterministic workload batches and a cycling env.

A learner submitted to a leaderboard may use ``Suite.train_workloads(task)`` and nothing else.
``TrainWorkloads`` picks a fixed set of (scenario, source) groups of those workloads and hands
them out in a fixed order; every workload it returns is checked to be of the train split (an
explicit check, not a bare ``assert``, so ``python -O`` keeps it). ``TrainWorkloadEnv`` is a
Gymnasium environment for SB3 that resets onto those workloads in a fixed cycle.

A workload runs in an environment exactly as the harness runs it: the environment is built on
``workload.scenario()`` and reset with ``seed = workload.seed - scenario.seed``, so the engine's
workload seed (``scenario.seed + seed``, ``LLMSchedEnv.reset``) is the workload's own seed.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.spaces import (  # re-exported: learners import them from here
    SCORE_BOUND,
    env_class,
    task_spaces,
    unbounded_scores_space,
)
from llmsched_gym.leaderboard.suite import Suite, Workload

__all__ = [
    "TrainWorkloadEnv",
    "TrainWorkloads",
    "baseline_curve",
    "check_train",
    "env_class",
    "SCORE_BOUND",
    "reset_seed",
    "task_spaces",
]


def check_train(workload: Workload) -> Workload:
    """``workload`` itself if it is of the train split; an AssertionError otherwise."""
    if workload.split != "train":
        raise AssertionError(
            f"{workload.id} is a {workload.split!r} workload: a learner may only train on the "
            "train split"
        )
    return workload


def reset_seed(workload: Workload, scenario: Any) -> int:
    """The ``reset(seed=...)`` that makes the environment run ``workload``'s own seed."""
    return workload.seed - scenario.seed


_CHANGES_WORKLOAD = ("max_requests", "max_sim_time_s", "scenario_overrides", "reward")


def _check_baseline(baseline: str | None, task: Any, env_kwargs: dict[str, Any]) -> str | None:
    """The baseline policy's name (``"reference"``: the task's), checked; ``None`` if none."""
    if baseline is None:
        return None
    name = task.reference if baseline == "reference" else baseline
    from llmsched_gym.cluster.routers import registered_policies

    known, what = registered_policies(task.interface == "router")
    if name not in known:
        raise ConfigError(
            f"reward baseline {baseline!r}: not a registered {what} for task {task.name} "
            f"(known: {', '.join(sorted(known))}, or 'reference' for {task.reference})"
        )
    clash = sorted(k for k in _CHANGES_WORKLOAD if k in env_kwargs)
    if clash:
        raise ConfigError(
            f"a reward baseline runs the workload as the harness does; {clash} would make the "
            "agent's episodes differ from the baseline's run"
        )
    return name


def baseline_curve(policy: str, task: Any, workload: Workload) -> Any:
    """The ``LatencyCurve`` of built-in ``policy`` run on ``workload`` as the harness runs it."""
    from llmsched_gym.envs.shaping import LatencyCurve
    from llmsched_gym.leaderboard.run import simulate_workload

    requests = simulate_workload(task, policy, workload).requests
    if requests["job_id"].notna().any():
        raise ConfigError(
            f"{workload.id} has jobs: a reward baseline needs request-level units (the latency "
            "reward of a job workload counts jobs)"
        )
    return LatencyCurve.from_requests(requests)


_CURVES: OrderedDict[tuple, Any] = OrderedDict()
"""The ``LatencyCurve`` of baseline runs by (policy, scenario, seed), least recently used first:
shared by every ``TrainWorkloadEnv`` of the process (the environments of a vector env, the
restarts of a recipe), so each workload's baseline runs once."""
CURVE_CACHE_SIZE = 4096
"""Most curves kept: a curve holds two floats per unit (~10 KB for 300 requests)."""


def cached_baseline_curve(policy: str, task: Any, workload: Workload) -> Any:
    """``baseline_curve(policy, task, workload)``, run once per process (``_CURVES``)."""
    key = (policy, task.name, repr(workload.scenario().to_dict()), workload.seed)
    curve = _CURVES.get(key)
    if curve is None:
        curve = baseline_curve(policy, task, workload)
        _CURVES[key] = curve
        while len(_CURVES) > CURVE_CACHE_SIZE:
            _CURVES.popitem(last=False)
    else:
        _CURVES.move_to_end(key)
    return curve


class TrainWorkloads:
    """The train workloads of chosen (scenario, source) groups, handed out in a fixed order.

    Batch ``i`` holds, for every group in the order given (scenarios outer, sources inner),
    that group's train seeds number ``i * per_group`` to ``i * per_group + per_group - 1``
    (wrapping around after the last seed). Deterministic: the same arguments give the same
    batches on every machine.

    Args:
        suite: The loaded suite.
        task: A task of the suite (``"Priority"``).
        scenarios: Suite scenario ids to train on (e.g. ``("chat-knee", "chat-overload")``).
        sources: Source names to train on (e.g. ``("sharegpt", "azure-conv")``); a source
            without a train split (a held-out trace) is an error.
        per_group: Workloads of each group per batch.
        groups: (scenario, source) pairs to train on instead of every scenario with every
            source (for tasks whose scenarios have different sources, e.g. Route's chat and
            Text-to-SQL clusters); ``scenarios`` and ``sources`` are then ignored.
    """

    def __init__(
        self,
        suite: Suite,
        task: str,
        scenarios: Sequence[str] = (),
        sources: Sequence[str] = (),
        per_group: int = 1,
        groups: Sequence[Sequence[str]] | None = None,
    ) -> None:
        if per_group < 1:
            raise ValueError(f"per_group must be >= 1, got {per_group}")
        self.task = suite.task(task).name
        pairs = (
            [(sc, src) for sc in scenarios for src in sources]
            if groups is None
            else [tuple(g) for g in groups]
        )
        if not pairs or any(len(p) != 2 for p in pairs):
            raise ConfigError(
                f"train groups must be (scenario, source) pairs, at least one; got {pairs}"
            )
        by_group: dict[tuple[str, str], list[Workload]] = {p: [] for p in pairs}
        for w in suite.train_workloads(self.task):
            key = (w.scenario_id, w.source)
            if key in by_group:
                by_group[key].append(check_train(w))
        empty = [f"{sc}/{src}" for (sc, src), ws in by_group.items() if not ws]
        if empty:
            raise ConfigError(
                f"no train workloads for {empty} in task {self.task} of {suite.version} (a "
                "scenario id that is not the task's, or a test-only source); see "
                f"'llmsched-gym leaderboard list --task {self.task}'"
            )
        self.suite = suite
        self.groups = by_group
        self.per_group = per_group

    def batch(self, index: int) -> list[Workload]:
        """Batch number ``index`` (``len(groups) * per_group`` workloads, groups in order)."""
        out = []
        for ws in self.groups.values():
            for j in range(self.per_group):
                out.append(check_train(ws[(index * self.per_group + j) % len(ws)]))
        return out

    def cycle(self, start: int = 0, stride: int = 1) -> Any:
        """The workloads of batches 0, 1, 2, ... in order, forever: every ``stride``-th one.

        Starts at position ``start``, so ``stride`` environments with starts ``0 .. stride - 1``
        see disjoint workloads that together are the whole sequence.
        """
        n = 0
        index = 0
        while True:
            for w in self.batch(index):
                if n % stride == start % stride:
                    yield check_train(w)
                n += 1
            index += 1

    def describe(self) -> str:
        """One line naming the groups and the seeds used, e.g. for a submission's README."""
        names = ", ".join(f"{sc}/{src}" for sc, src in self.groups)
        return (
            f"{self.task} train workloads of {names} (train seeds in order, {self.per_group} "
            "per group per batch)"
        )


class TrainWorkloadEnv(gym.Env):
    """The task's environment, reset onto train workloads in a fixed cycle (for SB3).

    Each ``reset`` takes the next workload of ``workloads.cycle(start, stride)``, builds (or
    reuses) the task environment on its scenario and resets it with the workload's seed; the
    ``seed`` argument of ``reset`` is ignored apart from Gymnasium's own seeding, since the
    workload fixes the episode. Spaces are the task environment's (the same for every
    scenario, as ``top_k`` is fixed).

    With ``baseline`` (a built-in scheduler or router name, or ``"reference"`` for the task's
    reference), the latency reward is shaped by that policy's run on the same workload
    (``llmsched_gym.envs.shaping.ReferenceShaping``): each step's reward is the agent's latency
    saving over the baseline at the same clock, divided by the baseline's total latency, so the
    return of a drained episode is ``1 - L / L_ref``. The baseline is run once per workload (the
    harness's own ``scenario.simulate``, on the episode's own build of the workload) and cached
    for the process (``cached_baseline_curve``). ``info["reward_unshaped"]`` holds the task's
    reward, and ``ratios`` the baseline's total latency over the agent's, per finished episode.

    With ``lean_info`` a step that does not end the episode returns an empty ``info``: SB3's
    vector envs deep-copy every step's infos, and a learner reads them only at episode ends
    (``episode``, ``terminal_observation``), where the full info is returned.

    Args:
        workloads: Where the train workloads come from.
        start: This environment's offset in the cycle.
        stride: Number of environments sharing the cycle.
        baseline: Policy whose run on each workload shapes the reward; ``None``: the task's
            reward unchanged.
        gamma: The learner's discount factor, for the shaping (``ReferenceShaping``): with
            ``gamma < 1`` the optimal policies are kept only if it is the learner's own.
        unbounded_scores: Priority only: declare the scores ``Box(-SCORE_BOUND, SCORE_BOUND)``
            (SB3 needs finite bounds) instead of the task's ``Box(-1, 1)``. SB3 clips actions
            into the action space before stepping (and in ``predict``); Priority takes any
            finite score and only their order matters, so clipping changes nothing but ties
            every score beyond +-1 (row order decides among them, i.e. FCFS) and leaves the
            clipped scores without a gradient back. A model trained so keeps the wide space,
            and the task environment takes its scores as they are at evaluation too.
        lean_info: Return ``{}`` as the info of every step but an episode's last.
        **env_kwargs: Passed to the task environment (e.g. ``top_k``).
    """

    def __init__(
        self,
        workloads: TrainWorkloads,
        start: int = 0,
        stride: int = 1,
        baseline: str | None = None,
        gamma: float = 1.0,
        unbounded_scores: bool = False,
        lean_info: bool = False,
        **env_kwargs: Any,
    ) -> None:
        self._cls = env_class(workloads.task)
        self._source = workloads.cycle(start, stride)
        self._kwargs = env_kwargs
        self._task = workloads.suite.task(workloads.task)
        self.baseline = _check_baseline(baseline, self._task, env_kwargs)
        self.gamma = gamma
        self.lean_info = lean_info
        self._shaping: Any = None
        self._area = 0.0
        self.ratios: list[float] = []
        """Per episode (with a baseline): the baseline's total latency over the agent's; NaN if
        the episode was truncated."""
        self._envs: dict[tuple[str, str], Any] = {}
        self.workload: Workload | None = None
        first = next(iter(workloads.groups.values()))[0]
        self.env = self._env_for(first)
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        if unbounded_scores:
            self.action_space = unbounded_scores_space(self._task.name, self.action_space)
        self.seen: list[Workload] = []
        """The workloads of the episodes started so far, in order."""

    def _env_for(self, w: Workload) -> Any:
        key = (w.scenario_id, w.source)
        if key not in self._envs:
            self._envs[key] = self._cls(scenario=w.scenario(), **self._kwargs)
        return self._envs[key]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start an episode on the next train workload."""
        super().reset(seed=seed)
        w = check_train(next(self._source))
        self.workload = w
        self.env = self._env_for(w)
        self.seen.append(w)
        obs, info = self.env.reset(seed=reset_seed(w, self.env.scenario), options=options)
        if self.baseline is not None:
            from llmsched_gym.envs.shaping import ReferenceShaping

            self._shaping = ReferenceShaping(self._curve(w), info["time_s"], self.gamma)
            self._area = 0.0
        return obs, {**info, "workload": w.id}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """One step of the current workload's environment (its reward shaped by the baseline)."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        end = terminated or truncated
        if self._shaping is not None:
            area = info["latency_area_s"]
            self._area += area
            unshaped, reward = reward, self._shaping.reward(area, info["time_s"], terminated)
            if end:  # one ratio per episode, NaN where it did not drain
                drained = terminated and self._area > 0
                self.ratios.append(self._shaping.curve.total / self._area if drained else math.nan)
            if end or not self.lean_info:
                info = {**info, "reward_unshaped": unshaped}
        return obs, reward, terminated, truncated, info if end or not self.lean_info else {}

    def _curve(self, w: Workload) -> Any:
        """The baseline's ``LatencyCurve`` on workload ``w`` (run once per process)."""
        return cached_baseline_curve(self.baseline, self._task, w)

    def action_masks(self) -> Any:
        """The task environment's action masks (MaskablePPO), where it has them."""
        return self.env.action_masks()
