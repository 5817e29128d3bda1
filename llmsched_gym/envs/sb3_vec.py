"""The native vector env as a stable-baselines3 ``VecEnv`` (needs the ``rl`` extra).

SB3 takes its own ``VecEnv`` classes, not Gymnasium's: ``PPO(policy, gym.make_vec(...))`` fails
in SB3 with "not a Gymnasium environment" (whose quoted class, ``LLMSchedVectorEnv``, names this
adapter). ``SB3VecEnv`` wraps what ``gym.make_vec`` returns
(``LLMSchedVectorEnv``, or any vector env holding its sub-environments in ``envs``):

>>> import gymnasium as gym  # doctest: +SKIP
>>> from stable_baselines3 import PPO  # doctest: +SKIP
>>> from llmsched_gym.envs.sb3_policies import RowScorePolicy  # doctest: +SKIP
>>> from llmsched_gym.envs.sb3_vec import SB3VecEnv  # doctest: +SKIP
>>> env_id = "llmsched/Priority-ChatSharegptOverload-v0"
>>> venv = SB3VecEnv(gym.make_vec(env_id, num_envs=8))  # doctest: +SKIP
>>> model = PPO(RowScorePolicy, venv, n_steps=256, batch_size=256)  # doctest: +SKIP

It is SB3's ``DummyVecEnv`` over the sub-environments (so seeding with ``seed(s)`` gives
sub-environment ``i`` the seed ``s + i``, as ``reset(seed=s)`` of the native env does; episodes
end with SB3's same-step auto-reset, ``terminal_observation`` and ``TimeLimit.truncated`` in the
info; ``env_method("action_masks")`` serves MaskablePPO) with two differences that save CPU:
the infos are passed on as the environments return them (``DummyVecEnv`` deep-copies every
step's; these environments build a fresh dict per step), and each finished episode's
``episode`` info (return ``r``, length ``l``, seconds ``t``) is added as SB3's ``Monitor`` adds
it, so ``ep_rew_mean`` is logged without wrapping each environment. The policy runs one forward
pass for all the environments, as with any SB3 ``VecEnv``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv

__all__ = ["SB3VecEnv"]


class SB3VecEnv(DummyVecEnv):
    """A Gymnasium vector env's sub-environments, stepped as SB3's ``DummyVecEnv``.

    Args:
        venv: What ``gym.make_vec(id, num_envs=N)`` returns for an ``llmsched/`` id (or another
            vector env that keeps its sub-environments in ``envs``, e.g. ``SyncVectorEnv``).
            Its sub-environments are taken over: step them through this object only.
        monitor: Add SB3 ``Monitor``'s ``episode`` info at the end of each episode (leave off if
            the sub-environments are wrapped in ``Monitor`` already or a ``VecMonitor`` follows).
    """

    def __init__(self, venv: Any, monitor: bool = True) -> None:
        envs = getattr(getattr(venv, "unwrapped", venv), "envs", None)
        if not isinstance(envs, (list, tuple)) or not envs:
            raise TypeError(
                f"SB3VecEnv wraps a Gymnasium vector env that holds its sub-environments in "
                f"'envs' (gym.make_vec('llmsched/...', num_envs=N)), got {type(venv).__name__}; "
                "for a single environment use SB3's DummyVecEnv([lambda: env])"
            )
        self.venv = venv
        super().__init__([lambda e=e: e for e in envs])
        self.monitor = monitor
        self._returns = np.zeros(self.num_envs, dtype=np.float64)
        self._lengths = np.zeros(self.num_envs, dtype=np.int64)
        self._started = time.time()

    def reset(self) -> Any:
        """Reset every sub-environment (seeds and options from ``seed`` / ``set_options``)."""
        self._returns[:] = 0.0
        self._lengths[:] = 0
        return super().reset()

    def step_wait(self) -> Any:
        """Step every sub-environment; a finished one resets at once (SB3's convention)."""
        infos: list[dict[str, Any]] = []
        for i, env in enumerate(self.envs):
            obs, reward, terminated, truncated, info = env.step(self.actions[i])
            self.buf_rews[i] = reward
            done = terminated or truncated
            self.buf_dones[i] = done
            info["TimeLimit.truncated"] = truncated and not terminated
            if self.monitor:
                self._returns[i] += reward
                self._lengths[i] += 1
            if done:
                info["terminal_observation"] = obs
                if self.monitor:
                    info["episode"] = {
                        "r": round(float(self._returns[i]), 6),
                        "l": int(self._lengths[i]),
                        "t": round(time.time() - self._started, 6),
                    }
                    self._returns[i] = 0.0
                    self._lengths[i] = 0
                obs, self.reset_infos[i] = env.reset()
            self._save_obs(i, obs)
            infos.append(info)
        self.buf_infos = infos
        return self._obs_from_buf(), np.copy(self.buf_rews), np.copy(self.buf_dones), infos

    def render(self, mode: str | None = None) -> Any:
        """Each sub-environment's text view (``render()``), in a list."""
        return [env.render() for env in self.envs]
