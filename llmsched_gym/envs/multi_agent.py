"""A PettingZoo ``ParallelEnv`` over a cluster: the router and each instance's scheduler as agents.

Agents: ``router`` and ``instance_0`` ... ``instance_{N-1}``. One parallel step is one routing
decision of the cluster (an arriving request or a released job stage, as in ``RouteEnv``):

* ``router`` picks the instance of the pending request (``Discrete(N)``; its candidates are
  ``infos["router"]["action_mask"]``, and a masked choice is replaced by the first candidate and
  reported in ``infos["router"]["action_replaced"]``, as ``RouteEnv`` does);
* ``instance_i`` sets its engine's batching knobs until the next decision: a token budget and a
  sequence cap as fractions of its ``max_num_batched_tokens`` and ``max_num_seqs`` (``Box(0, 1,
  (2,))``, ``KnobEnv``'s action); ``[1, 1]`` is vLLM V1 unchanged.

Observations: the router sees ``RouteEnv``'s (global, request, instance table, mask); an instance
sees its own engine as the single-engine tasks do (global features, its top-K request table and
mask). The reward is shared (a cooperative team): ``RouteEnv``'s reward over the whole cluster,
minus ``reward_scale`` times the latency every unfinished unit accrued since the previous
decision, which sums to minus the total latency over an episode. Everything is exact against the
engine: a knob change first applies any decode stretch an instance fast-forwarded up to now.

    from pettingzoo.test import parallel_api_test
    parallel_api_test(ClusterParallelEnv("chat-azure-conv-4x-v0"), num_cycles=100)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from llmsched_gym.envs.knob_v0 import KnobPolicy, knob_caps
from llmsched_gym.envs.observation import Observer, first_waiting, observation_space
from llmsched_gym.envs.route_v0 import RouteEnv
from llmsched_gym.errors import ConfigError

try:  # PettingZoo is optional (the ``rl`` extra); the class works as a plain object without it.
    from pettingzoo import ParallelEnv as _Base
except ImportError:  # pragma: no cover - exercised only without the extra
    _Base = object

__all__ = ["ClusterParallelEnv"]


class _KnobRouteEnv(RouteEnv):
    """``RouteEnv`` whose instances run ``KnobPolicy`` (vLLM V1 under per-instance caps)."""

    def _instance_specs(self) -> list[Any]:
        from llmsched_gym.cluster.spec import instance_specs

        sc = self.scenario
        return instance_specs(
            sc.cluster, engine=sc.engine, cost_model=sc.cost_model, scheduler=KnobPolicy()
        )


class ClusterParallelEnv(_Base):
    """Router and per-instance schedulers of a cluster scenario as PettingZoo parallel agents.

    Args:
        scenario: A shipped cluster scenario (or a ``Scenario``), e.g. ``chat-azure-conv-4x-v0``.
        scenario_overrides: Dotted overrides (``{"workload.num_requests": 200}``).
        top_k: Rows of each instance's request table.
        reward: ``latency`` (default), ``slo`` or ``goodput`` (as ``RouteEnv``).
        reward_scale: Multiplies the reward.
        max_requests: Keep only the first N arrivals.
    """

    metadata = {"name": "llmsched_cluster_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(
        self,
        scenario: Any = "chat-azure-conv-4x-v0",
        *,
        scenario_overrides: Mapping[str, Any] | None = None,
        top_k: int = 16,
        reward: str = "latency",
        reward_scale: float = 0.01,
        max_requests: int | None = None,
    ) -> None:
        self._route = _KnobRouteEnv(
            scenario,
            scenario_overrides=scenario_overrides,
            reward=reward,
            reward_scale=reward_scale,
            max_requests=max_requests,
        )
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ConfigError(f"top_k must be an integer >= 1, got {top_k!r}")
        self.top_k = top_k
        self.render_mode = None
        n = self._route.num_instances
        self.possible_agents = ["router", *(f"instance_{i}" for i in range(n))]
        self.agents: list[str] = []
        self.observation_spaces = {"router": self._route.observation_space}
        self.action_spaces: dict[str, spaces.Space] = {"router": self._route.action_space}
        for name in self.possible_agents[1:]:
            self.observation_spaces[name] = observation_space(top_k, False)
            self.action_spaces[name] = spaces.Box(0.0, 1.0, (2,), np.float32)
        self._observers: list[Observer] = []

    @property
    def route_env(self) -> RouteEnv:
        """The ``RouteEnv`` underneath (its cluster, decision and views; for router adapters)."""
        return self._route

    def observation_space(self, agent: str) -> spaces.Space:
        """The observation space of ``agent``."""
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        """The action space of ``agent``."""
        return self.action_spaces[agent]

    # -- API -----------------------------------------------------------------------------------
    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """Start an episode (workload seed ``scenario.seed + seed``, as ``RouteEnv``).

        ``options`` are accepted and unused: none are defined (PettingZoo's API test passes some).
        """
        if seed is not None:
            for space in (*self.observation_spaces.values(), *self.action_spaces.values()):
                space.seed(seed)
        obs, info = self._route.reset(seed=seed)
        self._observers = [Observer(x.engine, self.top_k) for x in self._route.cluster.instances]
        self.agents = list(self.possible_agents)
        return self._observations(obs), self._infos(info)

    def step(self, actions: Mapping[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        """Apply every instance's knobs, route the pending request, run to the next decision."""
        if not self.agents:
            raise ConfigError("the episode has ended (or never started): call reset() first")
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ConfigError(f"step() needs an action for every live agent; missing {missing}")
        cluster = self._route.cluster
        for i, inst in enumerate(cluster.instances):
            cfg = inst.engine.config
            token_cap, seq_cap = knob_caps(
                actions[f"instance_{i}"], cfg.max_num_batched_tokens, cfg.max_num_seqs
            )
            inst.engine.sync()  # a fast-forwarded stretch ran under the old caps: close it
            inst.policy.set_caps(token_cap, seq_cap, cfg.max_num_seqs)
        obs, reward, terminated, truncated, info = self._route.step(actions["router"])
        agents = list(self.agents)
        observations = self._observations(obs)
        rewards = dict.fromkeys(agents, float(reward))
        terminations = dict.fromkeys(agents, bool(terminated))
        truncations = dict.fromkeys(agents, bool(truncated))
        infos = self._infos(info)
        if terminated or truncated:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def close(self) -> None:
        """Drop the cluster."""
        self._route.close()
        self.agents = []

    # -- helpers -------------------------------------------------------------------------------
    def _observations(self, router_obs: dict[str, np.ndarray]) -> dict[str, Any]:
        out: dict[str, Any] = {"router": router_obs}
        k = self.top_k
        for i, (inst, observer) in enumerate(
            zip(self._route.cluster.instances, self._observers, strict=True)
        ):
            engine = inst.engine
            rows = first_waiting(engine, k)
            if len(rows) < k:
                rows.extend(engine.running[: k - len(rows)])
            table, mask = observer.table(rows)
            out[f"instance_{i}"] = {
                "global": observer.global_features(inst.policy.token_cap),
                "requests": table,
                "mask": mask,
            }
        return out

    def _infos(self, route_info: dict[str, Any]) -> dict[str, dict[str, Any]]:
        infos = {a: {} for a in self.possible_agents}
        infos["router"] = {**route_info, "action_mask": self._route.action_masks()}
        return infos

    def state(self) -> np.ndarray:
        """A global state for centralised critics: every agent's observation, flattened."""
        obs = self._observations(self._route._observe())
        return np.concatenate(
            [spaces.flatten(self.observation_spaces[a], obs[a]) for a in self.possible_agents]
        ).astype(np.float32)
