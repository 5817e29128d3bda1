"""Native vector environments: ``gym.make_vec("llmsched/<Task>-<Scenario>-v0", num_envs=N)``.

Every registered id has a ``vector_entry_point`` here, so ``gym.make_vec`` returns a
``LLMSchedVectorEnv``: N engines of the same task and scenario stepped in this process, one after
the other (the engines are single-threaded Python; on a multi-core machine, SB3's
``SubprocVecEnv`` or Gymnasium's ``vectorization_mode="async"`` run them in processes instead).

Seeding and auto-reset follow Gymnasium 1.x: ``reset(seed=s)`` seeds sub-environment ``i`` with
``s + i`` (so sub-environment ``i`` replays exactly what a single environment reset with ``s + i``
does), and the auto-reset mode is ``NEXT_STEP`` (declared in ``metadata``): the step after an
episode ends resets that sub-environment, returning its first observation with reward 0. Action
masks of every sub-environment stack as ``action_masks()`` (for MaskablePPO-style learners).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from llmsched_gym.errors import ConfigError

__all__ = ["LLMSchedVectorEnv"]


class _VectorEnvType(type):
    """The class's repr names SB3's adapter.

    stable-baselines3 refuses a Gymnasium vector env with "The environment is of type
    <repr of its class>, not a Gymnasium environment" before any code of ours runs; the repr is
    the one place that message can say what to do instead.
    """

    def __repr__(cls) -> str:
        return (
            f"<class '{cls.__module__}.{cls.__qualname__}'> (a Gymnasium vector env; for "
            "stable-baselines3 wrap it: llmsched_gym.envs.sb3_vec.SB3VecEnv(venv))"
        )


class LLMSchedVectorEnv(VectorEnv, metaclass=_VectorEnvType):
    """N copies of one environment, stepped in this process with NEXT_STEP auto-reset.

    Args:
        entry_point: ``module:Class`` of the single environment (the registered entry point).
        num_envs: Number of sub-environments (>= 1).
        **kwargs: Keyword arguments of every sub-environment (``scenario``, ``top_k``, ...).
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, entry_point: str, num_envs: int = 1, **kwargs: Any) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ConfigError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        module, _, cls = entry_point.partition(":")
        env_class = getattr(importlib.import_module(module), cls)
        kwargs.pop("render_mode", None)
        self.envs = [env_class(**kwargs) for _ in range(num_envs)]
        self.num_envs = num_envs
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._obs = create_empty_array(self.single_observation_space, num_envs, fn=np.zeros)
        self._autoreset = np.zeros(num_envs, dtype=bool)

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every sub-environment (``seed + i``, or one seed each from a list)."""
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, int):
            seeds = [seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ConfigError(f"{len(seeds)} seeds for {self.num_envs} sub-environments")
        if seed is not None:
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(seeds[0])
        infos: dict[str, Any] = {}
        results = []
        for i, (env, s) in enumerate(zip(self.envs, seeds, strict=True)):
            obs, info = env.reset(seed=s, options=options)
            results.append(obs)
            infos = self._add_info(infos, info, i)
        self._autoreset[:] = False
        self._obs = concatenate(self.single_observation_space, results, self._obs)
        return _copy(self._obs), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-environment (resetting those whose episode ended last step)."""
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        infos: dict[str, Any] = {}
        results = []
        for i, (env, action) in enumerate(
            zip(self.envs, iterate(self.action_space, actions), strict=True)
        ):
            if self._autoreset[i]:
                obs, info = env.reset()
            else:
                obs, rewards[i], terminated[i], truncated[i], info = env.step(action)
            results.append(obs)
            infos = self._add_info(infos, info, i)
        self._autoreset = terminated | truncated
        self._obs = concatenate(self.single_observation_space, results, self._obs)
        return _copy(self._obs), rewards, terminated, truncated, infos

    def action_masks(self) -> np.ndarray:
        """Every sub-environment's action mask, stacked (tasks with masks only).

        A sub-environment whose episode just ended ignores its next action (it resets): its row
        allows every action.
        """
        masks = [getattr(env, "action_masks", None) for env in self.envs]
        if any(m is None for m in masks):
            raise ConfigError(f"{type(self.envs[0]).__name__} has no action masks")
        rows = [
            np.ones(int(self.single_action_space.n), dtype=bool) if self._autoreset[i] else m()
            for i, m in enumerate(masks)
        ]
        return np.stack(rows)

    def close_extras(self, **kwargs: Any) -> None:
        """Close the sub-environments."""
        for env in self.envs:
            env.close()


def _copy(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {k: _copy(v) for k, v in obs.items()}
    return np.array(obs, copy=True)


def vector_entry_point(entry_point: str) -> Any:
    """The ``vector_entry_point`` registered beside ``entry_point``."""
    return functools.partial(LLMSchedVectorEnv, entry_point)
