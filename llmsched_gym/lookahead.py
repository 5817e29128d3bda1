"""Lookahead over counterfactual forks: an oracle agent that tries its candidate actions out.

At each decision, ``LookaheadAgent.act(env)`` forks the environment once per candidate action
(``llmsched_gym.counterfactual.fork``), takes the candidate in its fork, lets a base policy decide
everything after it for ``horizon_s`` seconds of simulated time (or to the end of the episode),
and returns the candidate whose fork accrued the least latency: the area under the number of
unfinished units (requests, or jobs when the workload has them) up to a time common to all the
forks, the quantity the environments' latency reward sums (``llmsched_gym.envs.reward``). This is
the rollout algorithm of Bertsekas, Tsitsiklis & Wu (1997), "Rollout algorithms for
combinatorial optimization", Journal of Heuristics 3(3), with the base policy as the heuristic.

It is an **oracle**: each fork simulates requests that have not arrived yet and runs every
request to its true output length, which no deployed scheduler knows. Its scores are an upper
reference for what a task's decision can gain (leaderboards rank it apart), not a policy.

**Guarantee** (the rollout algorithm's cost improvement property, ibid.): with
``horizon_s=None`` the agent's episode accrues no more latency than the base policy's own
episode. The base's action is always a candidate, ties go to it, and its fork continues exactly
as the base would (the environment is deterministic and the base is forked with it), so the
latency the lookahead expects for the episode never rises from one decision to the next; it
starts at the base's and ends at the agent's. A finite horizon gives no such bound: it trades
the guarantee for speed.

Candidates: every valid action of the discrete tasks (Route, Select, Preempt, BatchType); for the
continuous ones a declared set, the scores of named schedulers for Priority
(``PRIORITY_CANDIDATES``) and (token budget, sequence cap) fractions for Knob
(``KNOB_CANDIDATES``), besides the base's own action.

    >>> import gymnasium as gym
    >>> from llmsched_gym.envs import rollout
    >>> from llmsched_gym.lookahead import LookaheadAgent
    >>> env = gym.make("llmsched/Preempt-ChatSharegptOverload-v0", max_requests=50)
    >>> out = rollout(env, LookaheadAgent("Preempt"), seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from llmsched_gym.counterfactual import fork
from llmsched_gym.envs.knob_v0 import LOOKAHEAD_CANDIDATES as KNOB_CANDIDATES
from llmsched_gym.envs.priority_v0 import LOOKAHEAD_CANDIDATES as PRIORITY_CANDIDATES
from llmsched_gym.tasks import TASKS as _SPECS
from llmsched_gym.errors import ConfigError

__all__ = [
    "BASES",
    "KNOB_CANDIDATES",
    "PRIORITY_CANDIDATES",
    "TASKS",
    "LookaheadAgent",
]

TASKS = tuple(_SPECS)
"""Tasks the agent acts in (its environment's ``task``; ``llmsched_gym.tasks``)."""

BASES = {name: t.lookahead_base for name, t in _SPECS.items() if t.lookahead_base != "vllm-v1"}
"""Default base policies: ``least-load:requests`` on Route, else ``vllm-v1`` (the reference);
each task's ``TaskSpec.lookahead_base``."""


class LookaheadAgent:
    """Pick each action by forking the environment per candidate and rolling the base out.

    Args:
        task: The environment's task (``TASKS``).
        base: The policy that continues each fork (and whose action is always a candidate): a
            registered router for Route, a registered scheduler otherwise, acting through
            ``PolicyAgent`` / ``RouterAgent``. Default ``BASES`` (``vllm-v1`` for the engine
            tasks).
        horizon_s: Simulated seconds each fork runs past the decision (None: to the episode's
            end, which carries the guarantee of the module docstring).
        candidates: Priority: scheduler names (default ``PRIORITY_CANDIDATES``); Knob:
            (token fraction, sequence fraction) pairs in [0, 1] (default ``KNOB_CANDIDATES``);
            the discrete tasks try every valid action and take no list.

    ``act(env)`` works in the task's environment (``rollout(env, agent)``); the agent has no
    randomness of its own, so an episode is a function of the environment's seed. ``stats``
    counts decisions, forks and the decisions where it left the base's choice.
    """

    oracle = True

    def __init__(
        self,
        task: str,
        *,
        base: str | None = None,
        horizon_s: float | None = None,
        candidates: Sequence[Any] | None = None,
    ) -> None:
        spec = _SPECS.get(task) if isinstance(task, str) else None
        if spec is None:
            raise ConfigError(f"LookaheadAgent: task must be one of {list(TASKS)}, got {task!r}")
        self.task = task
        self._spec = spec
        base = spec.lookahead_base if base is None else base
        from llmsched_gym.cluster.routers import registered_policies

        known, what = registered_policies(spec.cluster)
        if base not in known:
            raise ConfigError(
                f"LookaheadAgent: base {base!r} is not a registered {what} for {task} (see "
                f"'llmsched-gym list {what}s')"
            )
        self.base = base
        if horizon_s is not None and (
            isinstance(horizon_s, bool)
            or not isinstance(horizon_s, (int, float))
            or not math.isfinite(horizon_s)
            or horizon_s <= 0
        ):
            raise ConfigError(
                f"LookaheadAgent: horizon_s must be a finite number of seconds > 0, or None (to "
                f"the end of the episode), got {horizon_s!r}"
            )
        self.horizon_s = None if horizon_s is None else float(horizon_s)
        env_class = spec.env_class()
        self.candidates = env_class.check_lookahead_candidates(candidates)
        self._base_agent = self.base_agent()
        self._actors = env_class.lookahead_actors(self.candidates)
        self.stats = {"decisions": 0, "forks": 0, "left_base": 0}

    def _policy_agent(self, name: str) -> Any:
        from llmsched_gym.envs.adapters import PolicyAgent
        from llmsched_gym.policies.registry import make_policy

        return PolicyAgent(make_policy(name))

    def base_agent(self) -> Any:
        """A fresh agent of the base policy (``RouterAgent`` on Route, else ``PolicyAgent``)."""
        if self._spec.cluster:
            from llmsched_gym.envs.adapters import RouterAgent

            return RouterAgent(self.base)
        return self._policy_agent(self.base)

    # -- acting ------------------------------------------------------------------------------
    def act(self, env: Any) -> Any:
        """The candidate whose fork accrues the least latency (the base's on ties)."""
        env = env.unwrapped
        if getattr(env, "task", None) != self.task:
            raise ConfigError(
                f"LookaheadAgent for {self.task} cannot act in {type(env).__name__} (task "
                f"{getattr(env, 'task', None)!r})"
            )
        # The base decides first, in this environment: a stateful base (round-robin's turn)
        # moves on as it would have, and every fork continues from that state.
        own = self._base_agent.act(env)
        candidates = env.lookahead_options(own, self._actors)
        self.stats["decisions"] += 1
        if len(candidates) == 1:
            return own
        start = env._clock()
        stop = math.inf if self.horizon_s is None else start + self.horizon_s
        ends = []
        for action in candidates:
            copy, base = fork((env, self._base_agent))
            ends.append(_rollout(copy, base, action, stop))
        self.stats["forks"] += len(candidates)
        common = max(clock for clock, _ in ends)
        costs = [ledger.area(common) for _, ledger in ends]
        best = min(range(len(candidates)), key=lambda i: (costs[i], i))
        if best:
            self.stats["left_base"] += 1
        return candidates[best]

def _rollout(env: Any, base: Any, action: Any, stop: float) -> tuple[float, Any]:
    """Take ``action``, then ``base``'s actions until the clock reaches ``stop`` or the end.

    Returns the clock and the reward ledger, whose ``area(t)`` for any ``t`` at or after the
    clock is the latency accrued to ``t`` if no unit finished after the clock (exact for a
    drained episode; for a cut-off one it counts the open units as open until ``t``).
    """
    _, _, term, trunc, _ = env.step(action)
    while not (term or trunc) and env._clock() < stop:
        _, _, term, trunc, _ = env.step(base.act(env))
    return env._clock(), env.ledger
