"""A PettingZoo parallel env as an SB3 ``VecEnv``: one learning group, the other agents fixed.

Independent learning with parameter sharing (needs the ``rl`` extra): a group of agents with
identical spaces (the instance schedulers ``instance_0 .. instance_{N-1}`` of
``ClusterParallelEnv``, or the ``router`` alone) is driven by one SB3 model, each agent of the
group being one "environment" of the ``VecEnv``; every other agent acts by a fixed callable
(a heuristic, or a model trained in an earlier round). All group members step the same underlying
episode together, and each gets the shared team reward. Alternating such rounds (train the
router with the instances fixed, then the instances with the router fixed) is the classic
independent-learner baseline for a cooperative Markov game (Tan, ICML 1993; parameter sharing as
in Gupta et al., AAMAS 2017 workshops).

    from llmsched_gym.envs.multi_agent import ClusterParallelEnv
    venv = AgentGroupVecEnv(ClusterParallelEnv(...), ["router"], {"instance_0": vllm_default, ...})
    MaskablePPO("MultiInputPolicy", venv).learn(10_000)

``action_masks()`` (MaskablePPO) returns the router's mask from the environment's infos when the
router is in the group; the instances' knob actions have no masks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env.base_vec_env import VecEnv

from llmsched_gym.errors import ConfigError

__all__ = ["AgentGroupVecEnv", "default_knobs", "model_actor", "router_actor"]

Actor = Callable[[Any, Mapping[str, Any]], Any]
"""A fixed agent: ``(its observation, its info) -> its action``."""


def default_knobs(_obs: Any, _info: Mapping[str, Any]) -> np.ndarray:
    """An instance agent that leaves vLLM V1 unchanged (the full budget and sequence cap)."""
    return np.ones(2, dtype=np.float32)


def router_actor(env: Any, router: Any) -> Actor:
    """A fixed ``router`` agent of a ``ClusterParallelEnv`` that routes as a cluster router.

    ``router`` is a name such as ``least-load:backlog`` or an object with ``route``; it acts
    exactly as ``RouterAgent`` does in ``RouteEnv``.
    """
    from llmsched_gym.envs.adapters import RouterAgent

    agent = RouterAgent(router)
    return lambda _obs, _info: agent.act(env.route_env)


def model_actor(model: Any) -> Actor:
    """A trained SB3 model as a fixed agent: deterministic, with the agent's action mask if any."""

    def act(obs: Any, info: Mapping[str, Any]) -> Any:
        mask = info.get("action_mask")
        if mask is not None:
            action, _ = model.predict(obs, deterministic=True, action_masks=mask)
        else:
            action, _ = model.predict(obs, deterministic=True)
        return action

    return act


class AgentGroupVecEnv(VecEnv):
    """SB3 ``VecEnv`` over one parallel env: ``group`` learns, ``fixed`` agents act by callables.

    Args:
        env: A PettingZoo ``ParallelEnv`` (e.g. ``ClusterParallelEnv``).
        group: The learning agents; their observation and action spaces must be identical.
        fixed: A callable for every other agent.
        seeds: The episodes' reset seeds, in order (cycled); default 0, 1, 2, ...
    """

    def __init__(
        self,
        env: Any,
        group: Sequence[str],
        fixed: Mapping[str, Actor],
        seeds: Sequence[int] | None = None,
    ) -> None:
        agents = list(env.possible_agents)
        group = list(group)
        if not group or len(set(group)) != len(group):
            raise ConfigError(f"group must name distinct agents, got {group}")
        unknown = sorted((set(group) | set(fixed)) - set(agents))
        if unknown:
            raise ConfigError(f"unknown agent(s) {unknown}; the env's agents are {agents}")
        both = sorted(set(group) & set(fixed))
        if both:
            raise ConfigError(f"agent(s) {both} are both learning and fixed")
        missing = [a for a in agents if a not in group and a not in fixed]
        if missing:
            raise ConfigError(f"agent(s) {missing} neither learn nor have a fixed policy")
        obs_space, act_space = env.observation_space(group[0]), env.action_space(group[0])
        for a in group[1:]:
            if env.observation_space(a) != obs_space or env.action_space(a) != act_space:
                raise ConfigError(
                    f"agents {group[0]} and {a} have different spaces: a shared policy needs "
                    "identical ones"
                )
        if seeds is not None and not list(seeds):
            raise ConfigError("seeds must hold at least one seed (or be None: 0, 1, 2, ...)")
        self.env, self.group, self.fixed = env, group, dict(fixed)  # get_attr reads self.env
        super().__init__(len(group), obs_space, act_space)
        self._seed_cycle: Iterator[int] = _cycle(seeds)
        self._obs: dict[str, Any] = {}
        self._infos: dict[str, dict[str, Any]] = {}
        self._actions: np.ndarray | None = None
        self.episode_returns: list[float] = []
        """The team return of every finished episode, in order."""
        self._return, self._length = 0.0, 0

    # -- VecEnv --------------------------------------------------------------------------------
    def reset(self) -> Any:
        """Start the next episode; the group's observations stacked."""
        self._obs, self._infos = self.env.reset(seed=next(self._seed_cycle))
        self._return, self._length = 0.0, 0
        return self._stack(self._obs)

    def step_async(self, actions: np.ndarray) -> None:
        """Store the group's actions (one row per group member)."""
        self._actions = actions

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """One joint step; on the episode's end the next one starts (SB3's auto-reset)."""
        if self._actions is None:
            raise ConfigError("step_wait() without step_async(): call step(actions)")
        joint = {a: self._action(a, self._actions[i]) for i, a in enumerate(self.group)}
        for a, actor in self.fixed.items():
            joint[a] = actor(self._obs[a], self._infos.get(a, {}))
        self._actions = None
        obs, rewards, terms, truncs, infos = self.env.step(joint)
        reward = np.array([rewards[a] for a in self.group], dtype=np.float32)
        self._return += float(rewards[self.group[0]])
        self._length += 1
        done = bool(terms[self.group[0]] or truncs[self.group[0]])
        dones = np.full(self.num_envs, done)
        out_infos = [dict(infos.get(a, {})) for a in self.group]
        if done:
            stacked_last = self._stack(obs)
            for i, info in enumerate(out_infos):
                info["terminal_observation"] = _row(stacked_last, i)
                info["TimeLimit.truncated"] = bool(truncs[self.group[0]]) and not bool(
                    terms[self.group[0]]
                )
                info["episode"] = {"r": self._return, "l": self._length, "t": 0.0}
            self.episode_returns.append(self._return)
            return self.reset(), reward, dones, out_infos
        self._obs, self._infos = obs, infos
        return self._stack(obs), reward, dones, out_infos

    def action_masks(self) -> np.ndarray:
        """The group's action masks (MaskablePPO): the router's, from the env's infos."""
        rows = []
        for a in self.group:
            mask = self._infos.get(a, {}).get("action_mask")
            if mask is None:
                raise ConfigError(f"agent {a} has no action mask; use PPO, not MaskablePPO")
            rows.append(np.asarray(mask, dtype=bool))
        return np.stack(rows)

    def close(self) -> None:
        """Close the parallel env."""
        self.env.close()

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        """An attribute of the parallel env, once per group member (``action_masks``: ours)."""
        source = self if attr_name == "action_masks" else self.env
        return [getattr(source, attr_name)] * len(self._indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        """Set an attribute of the parallel env (shared by every group member)."""
        setattr(self.env, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any
    ) -> list[Any]:
        """Call a method: ``action_masks`` per member; otherwise the parallel env's, per member."""
        idx = self._indices(indices)
        if method_name == "action_masks":
            masks = self.action_masks()
            return [masks[i] for i in idx]
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result] * len(idx)

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        """No Gymnasium wrappers sit inside (the members are agents, not envs)."""
        return [False] * len(self._indices(indices))

    # -- helpers -------------------------------------------------------------------------------
    def _action(self, agent: str, row: np.ndarray) -> Any:
        if isinstance(self.action_space, spaces.Discrete):
            return int(row)
        return np.asarray(row, dtype=np.float32)

    def _stack(self, obs: Mapping[str, Any]) -> Any:
        rows = [obs[a] for a in self.group]
        if isinstance(self.observation_space, spaces.Dict):
            return {k: np.stack([r[k] for r in rows]) for k in self.observation_space.spaces}
        return np.stack(rows)

    def _indices(self, indices: Any) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, int):
            return [indices]
        return list(indices)


def _row(stacked: Any, i: int) -> Any:
    if isinstance(stacked, dict):
        return {k: v[i] for k, v in stacked.items()}
    return stacked[i]


def _cycle(seeds: Sequence[int] | None) -> Iterator[int]:
    if seeds is None:
        n = 0
        while True:
            yield n
            n += 1
    seeds = list(seeds)
    while True:
        yield from seeds
