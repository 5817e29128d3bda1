"""A suite task's environment class and spaces, without a scenario (what weights are built for).

Below the harness and the training helpers alike: ``leaderboard.weights`` builds a learned
submission's network for these spaces, and ``leaderboard.training`` trains for them.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from llmsched_gym.errors import ConfigError
from llmsched_gym.tasks import task_spec

__all__ = ["SCORE_BOUND", "env_class", "task_spaces", "unbounded_scores_space"]


def env_class(task: str) -> type:
    """The environment class of a suite task (its ``llmsched_gym.tasks`` descriptor's)."""
    return task_spec(task).env_class()


SCORE_BOUND = 1e6
"""The bound of ``TrainWorkloadEnv(unbounded_scores=True)``'s scores: far beyond any score a
row-scoring network produces, so nothing is clipped in practice."""


def unbounded_scores_space(task: str, space: Any) -> gym.spaces.Box:
    """A scores task's scores (Priority's) declared as ``Box(-SCORE_BOUND, SCORE_BOUND)``
    (``unbounded_scores``)."""
    if task_spec(task).action != "scores":
        raise ConfigError(f"unbounded_scores is for Priority's scores, not task {task}")
    return gym.spaces.Box(-SCORE_BOUND, SCORE_BOUND, space.shape, np.float32)


def task_spaces(
    task: str,
    *,
    top_k: int | None = None,
    instances: int | None = None,
    unbounded_scores: bool = False,
) -> tuple[Any, Any]:
    """``(observation_space, action_space)`` of a suite task's environment, without a scenario.

    Engine tasks take ``top_k`` (the rows an agent sees, as ``AgentPolicy`` is built with);
    Route takes ``instances`` (its cluster's size). ``unbounded_scores``: as ``TrainWorkloadEnv``.
    """
    cls = env_class(task)
    if getattr(cls, "cluster_task", False):
        from llmsched_gym.envs.route_v0 import route_observation_space

        obs, act = route_observation_space(instances, False), gym.spaces.Discrete(instances)
    else:  # the spaces depend on top_k only: an unbuilt shell makes them, as AgentPolicy's does
        shell = cls.__new__(cls)
        shell.top_k, shell.oracle = top_k, False
        obs, act = shell._make_observation_space(), shell._make_action_space()
    return obs, (unbounded_scores_space(task, act) if unbounded_scores else act)
