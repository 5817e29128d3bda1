"""Oracle references on the leaderboard: the lookahead agent, planning on the scored workload.

The harness owns the engine (or cluster) of a run and asks the policy for each decision through
``AgentPolicy`` / ``AgentRouter``, which build the task environment's observation from that
engine. ``lookahead(task, workload)`` answers with ``llmsched_gym.lookahead.LookaheadAgent``,
which needs an environment to fork: the answer keeps its own environment of the same workload
(the harness passes the ``Workload`` to factories that take one, only for oracles), steps it with
its own decisions, and checks at every decision that the harness's observation is exactly its
environment's, so that the plan is made for the run being scored. A submission's ``policy.py``::

    from llmsched_gym.leaderboard.oracle import lookahead

    def make(task, workload):
        return lookahead(task, workload, horizon_s=None)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from llmsched_gym.errors import ConfigError, PolicyError
from llmsched_gym.tasks import task_spec

__all__ = ["Lockstep", "lookahead"]


class Lockstep:
    """An agent (SB3's ``predict``) that decides in its own environment, in step with the harness.

    Args:
        env: The task's environment on the workload the harness runs (unreset).
        agent: Acts in ``env`` (``act(env)``), e.g. a ``LookaheadAgent``.
        seed: The workload seed (``env.reset(seed=seed)`` must build the harness's workload).

    Raises ``PolicyError`` when the harness asks for a decision its environment does not show:
    a different observation, or a decision after its episode ended.
    """

    oracle = True

    def __init__(self, env: Any, agent: Any, seed: int) -> None:
        self.env = env
        self.agent = agent
        self.obs, _ = env.reset(seed=seed)
        self.decisions = 0
        self._ended = False

    def predict(
        self, obs: Mapping[str, np.ndarray], deterministic: bool = True, action_masks: Any = None
    ) -> tuple[Any, None]:
        """The agent's action at the decision ``obs`` shows (which must be its environment's)."""
        n = self.decisions
        if self._ended:
            raise PolicyError(
                f"lookahead: the harness asks for decision {n}, but the planner's environment "
                "ended its episode there (the runs diverged)"
            )
        for key, mine in self.obs.items():
            if not np.array_equal(np.asarray(obs[key]), mine):
                raise PolicyError(
                    f"lookahead: at decision {n} the harness's observation {key!r} differs from "
                    "the planner's environment (not the same workload, or the runs diverged)"
                )
        action = self.agent.act(self.env)
        self.obs, _, terminated, truncated, _ = self.env.step(action)
        self._ended = terminated or truncated
        self.decisions = n + 1
        return action, None


def lookahead(
    task: str,
    workload: Any,
    *,
    base: str | None = None,
    horizon_s: float | None = None,
    candidates: Sequence[Any] | None = None,
) -> Any:
    """The harness's policy (or router) for ``workload``: a ``LookaheadAgent`` in lockstep.

    Args:
        task: The suite task (``Priority``, ``Select``, ``Preempt``, ``BatchType``, ``Knob``,
            ``Route``).
        workload: The suite ``Workload`` the harness runs.
        base: As ``LookaheadAgent``'s (default: ``vllm-v1``, or ``least-load:requests`` on Route).
        horizon_s: As ``LookaheadAgent``'s (None: every fork runs to the episode's end).
        candidates: As ``LookaheadAgent``'s (Priority and Knob only).

    The environment reads true output lengths (its ``oracle`` observation column), as the
    policy's ``oracle = True`` declares; the agent's forks know the future arrivals too.
    """
    from llmsched_gym.envs.adapters import AgentPolicy, AgentRouter
    from llmsched_gym.lookahead import LookaheadAgent

    agent = LookaheadAgent(task, base=base, horizon_s=horizon_s, candidates=candidates)
    if workload.task != task:
        raise ConfigError(f"lookahead for {task}: the workload {workload.id} is of {workload.task}")
    spec = task_spec(task)
    env_class = spec.env_class()
    # The harness builds the workload with the workload's seed as is; the environment adds its
    # scenario's seed to the reset seed, so it gets a scenario whose seed is 0.
    scenario = dataclasses.replace(workload.scenario(), seed=0)
    planner = Lockstep(env_class(scenario=scenario, oracle=True), agent, workload.seed)
    horizon = "end" if horizon_s is None else f"{horizon_s:g}s"
    name = f"lookahead:{agent.base}:{horizon}"
    if spec.cluster:
        return AgentRouter(planner, oracle=True, name=name)
    return AgentPolicy(env_class, planner, oracle=True, name=name)
