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

import importlib
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.suite import TASK_ENVS, Suite, Workload

__all__ = ["TrainWorkloadEnv", "TrainWorkloads", "check_train", "env_class", "reset_seed"]


def check_train(workload: Workload) -> Workload:
    """``workload`` itself if it is of the train split; an AssertionError otherwise."""
    if workload.split != "train":
        raise AssertionError(
            f"{workload.id} is a {workload.split!r} workload: a learner may only train on the "
            "train split"
        )
    return workload


def env_class(task: str) -> type:
    """The environment class of a suite task (``TASK_ENVS``)."""
    module, _, name = TASK_ENVS[task].partition(":")
    return getattr(importlib.import_module(module), name)


def reset_seed(workload: Workload, scenario: Any) -> int:
    """The ``reset(seed=...)`` that makes the environment run ``workload``'s own seed."""
    return workload.seed - scenario.seed


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
    """

    def __init__(
        self,
        suite: Suite,
        task: str,
        scenarios: Sequence[str],
        sources: Sequence[str],
        per_group: int = 1,
    ) -> None:
        if per_group < 1:
            raise ValueError(f"per_group must be >= 1, got {per_group}")
        self.task = suite.task(task).name
        groups: dict[tuple[str, str], list[Workload]] = {
            (sc, src): [] for sc in scenarios for src in sources
        }
        for w in suite.train_workloads(self.task):
            key = (w.scenario_id, w.source)
            if key in groups:
                groups[key].append(check_train(w))
        empty = [f"{sc}/{src}" for (sc, src), ws in groups.items() if not ws]
        if empty:
            raise ConfigError(
                f"no train workloads for {empty} in task {self.task} of {suite.version} (a "
                "scenario id that is not the task's, or a test-only source); see "
                f"'llmsched-gym leaderboard list --task {self.task}'"
            )
        self.groups = groups
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

    Args:
        workloads: Where the train workloads come from.
        start: This environment's offset in the cycle.
        stride: Number of environments sharing the cycle.
        **env_kwargs: Passed to the task environment (e.g. ``top_k``).
    """

    def __init__(
        self, workloads: TrainWorkloads, start: int = 0, stride: int = 1, **env_kwargs: Any
    ) -> None:
        self._cls = env_class(workloads.task)
        self._source = workloads.cycle(start, stride)
        self._kwargs = env_kwargs
        self._envs: dict[tuple[str, str], Any] = {}
        self.workload: Workload | None = None
        first = next(iter(workloads.groups.values()))[0]
        self.env = self._env_for(first)
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
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
        return obs, {**info, "workload": w.id}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """One step of the current workload's environment."""
        return self.env.step(action)

    def action_masks(self) -> Any:
        """The task environment's action masks (MaskablePPO), where it has them."""
        return self.env.action_masks()
