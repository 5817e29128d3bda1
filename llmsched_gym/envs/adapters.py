"""Adapters both ways between policies and environments.

* ``PolicyAgent(policy)``: a built-in policy acting in an environment, so heuristics get returns
  on the same scale as learned agents. Exact (same records as ``simulate``) for ``vllm-v1``
  under the FCFS queue in Priority, Select, Preempt and Knob; under the priority queue exact in
  Select, Preempt and Knob (Priority's single score cannot also encode vLLM's (priority,
  arrival) victim order). In BatchType it plays the policy's batch-type rule (``vllm-v0``:
  prefill first; ``sarathi``: decode first; others: prefill first), since hybrid batches are
  not in that action space. Policies with their own priority queue (``static-priority:*``) order
  the visible waiting rows by their key.
* ``AgentPolicy(env_class, agent)``: a trained agent (any callable observation -> action, or an
  object with SB3's ``predict``) as a ``SchedulingPolicy`` for ``simulate``, ``compare`` and
  leaderboards. It builds the same observations from the engine it runs in and applies actions
  through the same code as the environment.
* ``RouterAgent(router)``: a cluster router (a name such as ``"least-load:backlog"`` or any
  object with ``route``) acting in ``RouteEnv``; exact (same records as ``simulate_cluster``
  with that router) for every router, seeded ones included.
* ``AgentRouter(agent)``: a trained Route agent as a cluster ``Router`` for
  ``simulate_cluster`` (``scenario.simulate(router=AgentRouter(agent))``), with the same
  observations as ``RouteEnv``.

>>> import gymnasium as gym
>>> from llmsched_gym.envs import PolicyAgent, rollout
>>> from llmsched_gym.policies.registry import make_policy
>>> env = gym.make("llmsched/Priority-ChatAzureConv-v0", max_requests=50)
>>> out = rollout(env, PolicyAgent(make_policy("vllm-v1")), seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from llmsched_gym.core.engine import Engine, SchedulingPolicy, StepContext
from llmsched_gym.envs.base import InvalidActionError, LLMSchedEnv, check_discrete
from llmsched_gym.errors import ConfigError

__all__ = ["AgentPolicy", "AgentRouter", "PolicyAgent", "RouterAgent", "rollout"]


class PolicyAgent:
    """A built-in ``SchedulingPolicy`` acting in an environment (``act(env)``)."""

    def __init__(self, policy: SchedulingPolicy) -> None:
        if not isinstance(policy, SchedulingPolicy):
            raise ConfigError(f"PolicyAgent needs a SchedulingPolicy, got {type(policy).__name__}")
        self.policy = policy

    def act(self, env: Any) -> Any:
        """The action ``policy`` takes at ``env``'s current decision (the task's
        ``policy_action``)."""
        base = env.unwrapped
        if not isinstance(base, LLMSchedEnv):
            raise ConfigError(f"PolicyAgent does not know environment {type(base).__name__}")
        return base.policy_action(self.policy)


def rollout(
    env: Any,
    agent: Any,
    seed: int | None = None,
    max_steps: int | None = None,
) -> dict[str, Any]:
    """Run one episode; returns ``{"return", "steps", "info", "terminated", "truncated"}``.

    ``agent`` is a ``PolicyAgent``, a ``RouterAgent``, any other object that acts on the
    environment itself (``act(env)``, e.g. ``llmsched_gym.lookahead.LookaheadAgent``), or a
    callable observation -> action (an object with SB3's ``predict`` is called with
    ``deterministic=True`` and, where the env has them, action masks).
    """
    obs, info = env.reset(seed=seed)
    total, steps = 0.0, 0
    terminated = truncated = False
    while not (terminated or truncated):
        if isinstance(agent, (PolicyAgent, RouterAgent)) or _acts_on_env(agent):
            action = agent.act(env)
        else:
            masks_fn = getattr(env.unwrapped, "action_masks", None)
            action = _call_agent(agent, obs, masks_fn() if masks_fn is not None else None)
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        steps += 1
        if max_steps is not None and steps >= max_steps:
            break
    return {
        "return": total,
        "steps": steps,
        "info": info,
        "terminated": terminated,
        "truncated": truncated,
    }


def _acts_on_env(agent: Any) -> bool:
    """An agent that reads the environment (``act(env)``) rather than an observation."""
    return callable(getattr(agent, "act", None)) and not hasattr(agent, "predict")


def _call_agent(agent: Any, obs: Any, mask: np.ndarray | None) -> Any:
    predict = getattr(agent, "predict", None)
    if predict is not None:
        kwargs: dict[str, Any] = {"deterministic": True}
        if mask is not None and "action_masks" in inspect.signature(predict).parameters:
            kwargs["action_masks"] = mask
        out = predict(obs, **kwargs)
        return out[0] if isinstance(out, tuple) else out
    return agent(obs)


class AgentPolicy(SchedulingPolicy):
    """A trained agent as a ``SchedulingPolicy`` (for ``simulate`` and leaderboards).

    Args:
        env_class: The environment class the agent was trained on (``PriorityEnv``, ...).
        agent: A callable observation -> action, or an object with SB3's ``predict``.
        top_k: As the environment's (must match training).
        oracle: As the environment's.
        lookup_prefix: As the environment's.
        window_s: ``KnobEnv`` only: seconds between knob decisions.
        name: The policy's name in records (default ``agent:<Task>``).

    Decisions are made at every step the engine does not fast-forward, as in the environment
    (Knob: at the first such step of each window).
    """

    def __init__(
        self,
        env_class: type[LLMSchedEnv],
        agent: Any,
        *,
        top_k: int = 16,
        oracle: bool = False,
        lookup_prefix: bool = True,
        window_s: float = 5.0,
        name: str | None = None,
    ) -> None:
        if not (isinstance(env_class, type) and issubclass(env_class, LLMSchedEnv)):
            raise ConfigError(f"env_class must be an environment class, got {env_class!r}")
        if not callable(agent) and not hasattr(agent, "predict"):
            raise ConfigError("agent must be callable (observation -> action) or have predict()")
        self.env_class = env_class
        self.agent = agent
        self.top_k = top_k
        self.oracle = oracle
        self.lookup_prefix = lookup_prefix
        self.window_s = window_s
        self.name = name or f"agent:{env_class.task}"
        shell = env_class.__new__(env_class)
        shell.top_k, shell.oracle, shell.lookup_prefix = top_k, oracle, lookup_prefix
        shell.ledger = None
        shell.builder = None
        shell.requester = None
        shell.window_s = window_s
        shell._visible = []
        self._shell = shell
        self._inner = shell._make_policy()
        self.fast_forward_safe = self._inner.fast_forward_safe
        self.head_of_line = self._inner.head_of_line

    def reset(self, engine: Engine) -> None:
        """Bind the observation builder to the engine this policy runs in."""
        shell = self._shell
        shell.config = engine.config
        shell._priority = engine.config.scheduling_policy == "priority"
        shell._bind(engine)
        shell._next_window = 0.0

    def _decide(self, mask: np.ndarray | None = None) -> Any:
        obs = self._shell._observe()
        return _call_agent(self.agent, obs, mask)

    def schedule(self, ctx: StepContext) -> None:
        """Ask the agent (once or several times) and build the batch from its answers (the
        task's ``drive_agent``, through the environment's own code)."""
        inner = self._inner
        self._shell.drive_agent(inner, ctx, self._decide)
        self.fast_forward_safe = inner.fast_forward_safe


class RouterAgent:
    """A cluster router acting in ``RouteEnv`` (``act(env)``).

    Args:
        router: A router name (``llmsched_gym.cluster.make_router``) or any object with
            ``route(request, job, instances, now)`` (and optionally ``reset``).

    The router is reset with every instance's view and the cluster's seed at the first decision
    of each episode, as ``Cluster`` resets it, and sees the candidates' views of the decision, so
    an episode reproduces ``simulate_cluster`` with that router.
    """

    def __init__(self, router: Any) -> None:
        from llmsched_gym.cluster.routers import make_router

        if isinstance(router, str):
            router = make_router(router)
        if not callable(getattr(router, "route", None)):
            raise ConfigError(f"RouterAgent needs a router with route(), got {router!r}")
        self.router = router
        self._cluster: Any = None

    def act(self, env: Any) -> int:
        """The instance ``router`` picks for ``env``'s pending request."""
        from llmsched_gym.envs.route_v0 import RouteEnv

        base = env.unwrapped
        if not isinstance(base, RouteEnv):
            raise ConfigError(f"RouterAgent acts in RouteEnv, got {type(base).__name__}")
        cluster = base.cluster
        if cluster is not self._cluster:
            self._cluster = cluster
            reset = getattr(self.router, "reset", None)
            if callable(reset):
                reset([x.view() for x in cluster.instances], cluster.seed)
        d = base.decision
        if d is None:
            return 0  # the episode's last step: the action is ignored
        views = base.views
        return int(self.router.route(d.request, d.job, [views[i] for i in base._candidates], d.now))


class AgentRouter:
    """A trained Route agent as a cluster router (``route``), for ``simulate_cluster``.

    Args:
        agent: A callable observation -> action, or an object with SB3's ``predict`` (called
            with ``action_masks`` when it takes them).
        oracle: As the environment's (must match training).
        name: The router's name in records (default ``agent:Route``).

    It builds ``RouteEnv``'s observation from the views the cluster passes (every instance's
    engine, read-only) and raises ``InvalidActionError`` when the agent picks an instance that
    is not a candidate. The agent must have been trained on a cluster with as many instances.
    """

    oracle = False

    def __init__(self, agent: Any, *, oracle: bool = False, name: str | None = None) -> None:
        if not callable(agent) and not hasattr(agent, "predict"):
            raise ConfigError("agent must be callable (observation -> action) or have predict()")
        self.agent = agent
        self.oracle = bool(oracle)
        self.name = name or "agent:Route"
        self._all: list[Any] = []
        self._observer: Any = None

    def reset(self, instances: Any, seed: int) -> None:
        """Bind to the cluster's instances (views of all of them, in index order)."""
        from llmsched_gym.envs.route_v0 import RouteObserver

        self._all = sorted(instances, key=lambda v: v.index)
        self._observer = RouteObserver(
            [_engine_of(v) for v in self._all], [v.role for v in self._all], oracle=self.oracle
        )

    def route(self, request: Any, job: Any, instances: Any, now: float) -> int:
        """Ask the agent for the instance of ``request``."""
        from llmsched_gym.cluster.routers import InstanceView

        if self._observer is None:
            raise ConfigError("AgentRouter.route before reset(): run it inside a Cluster")
        views: list[Any] = [None] * len(self._all)
        for v in instances:
            views[v.index] = v
        for i, v in enumerate(views):
            if v is None:
                a = self._all[i]
                views[i] = InstanceView(a.index, a.name, a.gpu, a.model, a.role, _engine_of(a))
        candidates = [v.index for v in instances]
        obs = self._observer.observe(request, job, views, candidates, now)
        mask = obs["mask"].astype(bool)
        a = check_discrete(_call_agent(self.agent, obs, mask), len(views), "Route")
        if not mask[a]:
            raise InvalidActionError(
                f"Route: the agent chose instance {a} for request {request.request_id!r}; the "
                f"candidates are {candidates}"
            )
        return a


def _engine_of(view: Any) -> Any:
    """The engine behind an ``InstanceView`` (the view exposes no public accessor for it)."""
    return view._engine
