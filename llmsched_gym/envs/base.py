"""The shared machinery of the environments: scenario, engine, decision loop, reward, render.

Each environment drives one ``Engine`` through ``advance_to_decision()`` / ``step()`` with a
``SchedulingPolicy`` it owns; there is no second simulator. Subclasses say which requests are
visible, how an action enters the engine (``_apply``) and how the engine moves to the next
decision (``_advance``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from llmsched_gym.core.engine import Engine, SchedulingPolicy, StepContext
from llmsched_gym.core.job import Job
from llmsched_gym.core.request import Request
from llmsched_gym.envs.observation import Observer, first_waiting, observation_space
from llmsched_gym.envs.reward import REWARD_KINDS, RewardLedger
from llmsched_gym.errors import ConfigError, PolicyError
from llmsched_gym.scenarios.spec import Scenario, cached_workload, load_scenario

BACKENDS = ("sim", "vllm")
"""Backends an environment can run on: the simulator, or a live vLLM engine (Priority only)."""

_all_true = np.logical_and.reduce


class InvalidActionError(PolicyError, ValueError):
    """An action has the wrong shape or type, is not finite, or picks a masked choice."""


def _workload(scenario: Scenario, seed: int, cost_model: Any, max_requests: int | None) -> list:
    """The scenario's workload under ``seed`` (``cached_workload``: shared with ``simulate``)."""
    return cached_workload(scenario, seed, cost_model, max_requests)


class EnvPolicy(SchedulingPolicy):
    """Base of the environments' policies: they apply the action the environment stored."""

    name = "env"
    fast_forward_safe = True
    head_of_line = True

    def __init__(self, oracle: bool = False) -> None:
        self.oracle = oracle

    def schedule(self, ctx: StepContext) -> None:
        """Nothing by default: the environment filled the held step (``Engine.hold_step``)."""


def check_discrete(action: Any, n: int, what: str) -> int:
    """An integer action in [0, n), from an int, a numpy integer or a one-element array."""
    if type(action) is int and 0 <= action < n:  # the common case, without numpy
        return action
    a = np.asarray(action)
    if a.size != 1 or not (np.issubdtype(a.dtype, np.integer) or a.dtype == bool):
        if a.size == 1 and np.issubdtype(a.dtype, np.floating) and float(a.flat[0]).is_integer():
            a = a.astype(np.int64)
        else:
            raise InvalidActionError(
                f"{what}: action must be one integer in [0, {n}), got {action!r} "
                f"(shape {a.shape}, dtype {a.dtype})"
            )
    value = int(a.reshape(()))
    if not 0 <= value < n:
        raise InvalidActionError(f"{what}: action {value} is out of range [0, {n})")
    return value


def distinct_actions(options: list[Any]) -> list[np.ndarray]:
    """Box actions as float32 arrays, in order, without repeats (the lookahead's candidates)."""
    out: list[np.ndarray] = []
    for a in options:
        a = np.asarray(a, dtype=np.float32)
        if not any(np.array_equal(a, b) for b in out):
            out.append(a)
    return out


def check_box(action: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
    """A float64 array of ``shape`` with finite values, or an InvalidActionError."""
    try:
        a = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidActionError(f"{what}: action must be numbers, got {action!r}") from None
    if a.shape != shape:
        if a.size == math.prod(shape) and a.ndim >= 1:
            a = a.reshape(shape)
        else:
            raise InvalidActionError(f"{what}: action must have shape {shape}, got {a.shape}")
    if not _all_true(np.isfinite(a), axis=None):  # ``.all()`` without its Python wrapper
        raise InvalidActionError(f"{what}: action must be finite, got {a.tolist()!r}")
    return a


class LLMSchedEnv(gym.Env):
    """Base class; see the concrete environments (``PriorityEnv`` and others).

    Decision points follow vLLM's synchronous scheduler (``EngineConfig.async_scheduling``
    false, the default): a policy acts on the state after the previous step's output was
    applied (its sampled tokens appended, its finished requests gone). Under vLLM's async
    scheduling (``async_scheduling=True``, vLLM 0.32.0's GPU default) the decision for step N+1
    would be taken while step N runs: the policy would see step N's requests with one output
    placeholder each (token not known yet), requests finishing in step N still running, and
    arrivals only up to step N's start. The environments do not offer that view yet: a scenario
    whose engine sets ``async_scheduling: true`` is rejected with a ``ConfigError``, rather than
    giving decisions at the wrong moment. ``llmsched_gym.simulate`` runs async mode exactly.
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}
    task = "Base"
    cluster_task = False
    """Whether the task runs on a scenario's cluster (Route) instead of one engine."""
    backends: tuple[str, ...] = ("sim",)
    """Backends the task runs on (``sim``: the simulator; ``vllm``: a live vLLM engine)."""
    _spec: Any = None

    @property
    def spec(self) -> Any:
        """The registered spec; marked ``nondeterministic`` on a live backend (measured time)."""
        s = self._spec
        if s is not None and getattr(self, "backend", "sim") != "sim" and not s.nondeterministic:
            import dataclasses

            s = dataclasses.replace(s, nondeterministic=True)
        return s

    @spec.setter
    def spec(self, value: Any) -> None:
        self._spec = value

    def __init__(
        self,
        scenario: str | Scenario = "chat-azure-conv-v0",
        *,
        scenario_overrides: Mapping[str, Any] | None = None,
        top_k: int = 16,
        reward: str = "latency",
        reward_scale: float = 0.01,
        max_requests: int | None = None,
        max_episode_steps: int | None = None,
        max_sim_time_s: float | None = None,
        oracle: bool = False,
        lookup_prefix: bool = True,
        strict_masks: bool = False,
        render_mode: str | None = None,
        backend: str = "sim",
    ) -> None:
        from llmsched_gym.cost.registry import load_cost_model

        sc = self._load_scenario(scenario, scenario_overrides, backend)
        self._check_settings(
            top_k, reward, reward_scale, max_requests, max_episode_steps, max_sim_time_s,
            render_mode,
        )  # fmt: skip
        self._check_engine(sc)
        self.scenario = sc
        self.cost_model = load_cost_model(sc.cost_model)
        self.config = None if self.cluster_task else sc.engine_config(self.cost_model)
        self.top_k = top_k
        self.reward_kind = reward
        self.reward_scale = float(reward_scale)
        self.max_requests = max_requests
        self.max_episode_steps = max_episode_steps
        self.max_sim_time_s = float("inf") if max_sim_time_s is None else float(max_sim_time_s)
        self.oracle = bool(oracle)
        self.lookup_prefix = bool(lookup_prefix)
        self.strict_masks = bool(strict_masks)
        self._action_replaced = False
        self.render_mode = render_mode
        self.backend = backend
        self.observation_space = self._make_observation_space()
        self.action_space = self._make_action_space()
        self.engine: Engine | None = None
        self.engine_hooks: list[Callable[[list[tuple[str, Any]]], None]] = []
        """Called at every reset with the episode's fresh engines as (name, engine) pairs (one;
        a cluster task's: one per instance), before their first step (``RecordTimeline``)."""
        self.ledger: RewardLedger | None = None
        self.observer: Observer | None = None
        self.workload_seed: int | None = None
        self._visible: list[Request] = []
        self._ended = True
        self._final_pending = False
        self._num_env_steps = 0
        self._episode_return = 0.0

    def _load_scenario(
        self, scenario: str | Scenario, overrides: Mapping[str, Any] | None, backend: str
    ) -> Scenario:
        """The episode's scenario, checked against this task and backend."""
        if backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
        if backend not in self.backends:
            raise ConfigError(
                f"backend={backend!r}: the {self.task} environment runs on "
                f"{' or '.join(repr(b) for b in self.backends)} (the Priority environments also "
                "run on a live vLLM engine, backend='vllm')"
            )
        if isinstance(scenario, Scenario):
            sc = scenario.with_overrides(overrides) if overrides else scenario
        else:
            sc = load_scenario(scenario, dict(overrides or {}))
        if self.cluster_task and sc.cluster is None:
            raise ConfigError(
                f"scenario {sc.name!r} has no cluster section; the {self.task} environment "
                "routes requests between a cluster's instances (e.g. chat-azure-conv-4x-v0)"
            )
        if not self.cluster_task and sc.cluster is not None:
            raise ConfigError(
                f"scenario {sc.name!r} describes a cluster; the {self.task} environment drives "
                "one engine (use llmsched/Route-* to route between a cluster's instances)"
            )
        return sc

    def _check_settings(
        self,
        top_k: Any,
        reward: Any,
        reward_scale: Any,
        max_requests: Any,
        max_episode_steps: Any,
        max_sim_time_s: Any,
        render_mode: Any,
    ) -> None:
        """Refuse bad constructor settings, naming the setting and its value."""
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ConfigError(f"top_k must be an integer >= 1, got {top_k!r}")
        if reward not in REWARD_KINDS:
            raise ConfigError(f"reward must be one of {list(REWARD_KINDS)}, got {reward!r}")
        if not (isinstance(reward_scale, (int, float)) and math.isfinite(reward_scale)):
            raise ConfigError(f"reward_scale must be a finite number, got {reward_scale!r}")
        if reward_scale <= 0:
            raise ConfigError(f"reward_scale must be > 0, got {reward_scale!r}")
        for key, value in (
            ("max_requests", max_requests),
            ("max_episode_steps", max_episode_steps),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ConfigError(f"{key} must be an integer >= 1 or None, got {value!r}")
        if max_sim_time_s is not None and not (
            isinstance(max_sim_time_s, (int, float)) and max_sim_time_s > 0
        ):
            raise ConfigError(
                f"max_sim_time_s must be a number > 0 or None, got {max_sim_time_s!r}"
            )
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, got "
                f"{render_mode!r}"
            )

    @staticmethod
    def _check_engine(sc: Scenario) -> None:
        """Refuse engine settings the environments cannot step (async, no chunking, adaptive)."""
        if sc.engine.get("async_scheduling"):
            raise ConfigError(
                f"scenario {sc.name!r}: engine.async_scheduling=True is not supported by the "
                "environments (a policy decides each step on a state whose previous step has "
                "finished; under vLLM's async scheduling that decision is made one step ahead, "
                "before the previous step's tokens are known); set engine.async_scheduling to "
                "false"
            )
        for key, default in (
            ("enable_chunked_prefill", True),
            ("long_prefill_token_threshold_adaptive", False),
        ):
            if sc.engine.get(key, default) is not default:
                raise ConfigError(
                    f"scenario {sc.name!r}: engine.{key}={not default} is not supported by the "
                    f"environments (their actions choose chunk sizes); set it to "
                    f"{str(default).lower()}"
                )

    # -- hooks ---------------------------------------------------------------------------------
    def _make_observation_space(self) -> gym.Space:
        return observation_space(self.top_k, self.oracle)

    def _make_action_space(self) -> gym.Space:
        raise NotImplementedError

    def _make_policy(self) -> EnvPolicy:
        return EnvPolicy(self.oracle)

    def _apply(self, action: Any) -> None:
        """Put the action into the engine (and execute steps as the task defines)."""
        raise NotImplementedError

    def _advance(self) -> bool:
        """Move the engine to the next decision; False when the episode ended."""
        raise NotImplementedError

    def _compute_visible(self) -> list[Request]:
        """The requests of the observation's table, in row order (default: waiting, running)."""
        k = self.top_k
        rows = first_waiting(self.engine, k)
        if len(rows) < k:
            rows.extend(self.engine.running[: k - len(rows)])
        return rows

    def _token_budget(self) -> int | None:
        return None

    def _clock(self) -> float:
        return self.engine.now

    # -- the task's behaviour outside its episode (``llmsched_gym.tasks``) -------------------
    def policy_action(self, policy: Any) -> Any:
        """The action the built-in scheduler ``policy`` takes at the current decision."""
        raise ConfigError(f"built-in schedulers do not act in {type(self).__name__}")

    def drive_agent(self, inner: EnvPolicy, ctx: StepContext, decide: Any) -> None:
        """One engine step whose decisions ``decide(mask)`` takes (``AgentPolicy``).

        ``self`` is the adapter's shell, bound to the engine the step runs in; ``inner`` is
        the task's policy (``_make_policy``), which builds the batch from the decisions.
        """
        raise ConfigError(f"{type(self).__name__} cannot be driven by an agent in simulate")

    @classmethod
    def random_action(
        cls, rng: np.random.Generator, top_k: int, obs: Any, action_masks: Any
    ) -> Any:
        """A uniformly random valid action (the ``random`` agent): masked tasks draw one of
        the valid actions (``action_masks`` if given, else the observation's row mask)."""
        mask = action_masks if action_masks is not None else obs["mask"]
        valid = np.flatnonzero(np.asarray(mask, dtype=bool))
        if valid.size == 0:
            return 0
        return int(valid[rng.integers(valid.size)])

    @classmethod
    def check_lookahead_candidates(cls, candidates: Any) -> tuple:
        """The lookahead oracle's declared candidates, checked (masked tasks take none: every
        valid action is a candidate)."""
        if candidates is not None:
            raise ConfigError(
                f"LookaheadAgent: {cls.task} tries every valid action; candidates apply to "
                "Priority and Knob only"
            )
        return ()

    @classmethod
    def lookahead_actors(cls, candidates: tuple) -> tuple:
        """What ``lookahead_options`` is given for ``candidates``, built once per agent."""
        return candidates

    def lookahead_options(self, own: Any, candidates: tuple) -> list[Any]:
        """The actions the lookahead oracle tries here: the base's own first, then the others
        (masked tasks: every other valid action)."""
        own = int(own)
        valid = np.flatnonzero(self.action_masks()).tolist()
        return [own, *(a for a in valid if a != own)]

    # -- binding (shared with AgentPolicy) ---------------------------------------------------
    def _bind(self, engine: Engine) -> None:
        self.engine = engine
        self.observer = Observer(
            engine,
            self.top_k,
            oracle=self.oracle,
            lookup_prefix=self.lookup_prefix,
        )

    def _observe(self) -> dict[str, np.ndarray]:
        self._visible = self._compute_visible()
        table, mask = self.observer.table(self._visible)
        return {
            "global": self.observer.global_features(self._token_budget()),
            "requests": table,
            "mask": mask,
        }

    # -- Gymnasium API ---------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start an episode on a fresh engine.

        The workload is built with seed ``scenario.seed + seed``; without a seed, from the
        environment's ``np_random`` (so same seed, same trajectory).
        """
        super().reset(seed=seed)
        if options:
            raise ConfigError(f"reset options are not supported, got {sorted(options)}")
        offset = seed if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        self.workload_seed = self.scenario.seed + offset
        items = _workload(self.scenario, self.workload_seed, self.cost_model, self.max_requests)
        self.items = items
        self._start(items)
        self._num_env_steps = 0
        self._episode_return = 0.0
        self._chosen = None
        self._reset_task()
        # Reward accrues from t = 0: the first step's reward covers everything before the first
        # decision too. An episode without any decision (e.g. Preempt when KV never runs out)
        # still has one step, whose action is ignored and which returns the whole reward.
        self._final_pending = not self._advance()
        self._ended = False
        obs = self._observe()
        if self.render_mode == "human":
            self.render()
        return obs, self._info({})

    def _start(self, items: list) -> None:
        """Build the episode's simulator over ``items`` and its reward ledger (one engine)."""
        engine = self._start_engine(items)
        for hook in self.engine_hooks:
            hook([(f"{self.task} ({self.scenario.name})", engine)])
        self._bind(engine)
        self.ledger = RewardLedger(items, engine)

    def _drained(self) -> bool:
        """Whether nothing is left to simulate (the episode terminates, not truncates)."""
        return self.engine.next_event_time() == math.inf

    def _start_engine(self, items: list) -> Any:
        """A fresh engine holding the episode's workload (the simulator's by default)."""
        engine = Engine(self.config, self._make_policy(), self.cost_model, fast_forward=True)
        specs = [x for x in items if not isinstance(x, Job)]
        jobs = [x for x in items if isinstance(x, Job)]
        engine.add_requests(specs)
        if jobs:
            engine.add_jobs(jobs)
        return engine

    def _reset_task(self) -> None:
        """Per-episode state of the task (called before the first ``_advance``)."""

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Apply the action, run the engine to the next decision, return the reward since."""
        if self._ended or self.ledger is None:
            raise gym.error.ResetNeeded(
                "the episode has ended (or never started): call reset() before step()"
            )
        self._action_replaced = False
        self._chosen = None
        if self._final_pending:
            self._check_action(action)  # ignored, but still validated
            more = False
        else:
            self._apply(action)
            more = self._advance()
        self._num_env_steps += 1
        terms = self.ledger.collect(self._clock(), self.reward_scale)
        reward = terms[f"reward_{self.reward_kind}"]
        self._episode_return += reward
        drained = self._drained()
        terminated = not more and drained
        truncated = not more and not drained
        if self.max_episode_steps is not None and self._num_env_steps >= self.max_episode_steps:
            truncated = not terminated
        self._ended = terminated or truncated
        obs = self._observe()
        if self.render_mode == "human":
            self.render()
        return obs, float(reward), terminated, truncated, self._info(terms)

    def _info(self, terms: dict[str, float]) -> dict[str, Any]:
        eng = self.engine
        led = self.ledger
        info: dict[str, Any] = {
            "time_s": self._clock(),
            "engine_steps": eng.num_steps,
            "num_finished_requests": len(eng.finished),
            "num_finished_units": led.num_closed,
            "num_slo_met": led.num_slo_met,
            "num_good": led.num_good,
            "num_running": len(eng.running),
            "num_waiting": len(eng.waiting),
            "action_replaced": self._action_replaced,
        }
        info.update(terms)
        return info

    def render(self) -> str | None:
        """A compact text view: clock, queues, KV use and the visible requests.

        ``render_mode="ansi"`` returns it; ``"human"`` writes it to stderr at every reset and
        step (and on ``render()``), never to stdout.
        """
        if self.engine is None:
            return None
        eng = self.engine
        usage = eng.kv.pool.usage()
        lines = [
            f"{self.task} t={eng.now:.3f}s step={eng.num_steps} decisions={self._num_env_steps} "
            f"running={len(eng.running)} waiting={len(eng.waiting)} kv={usage:.0%} "
            f"finished={len(eng.finished)} return={self._episode_return:.4g}"
        ]
        for i, r in enumerate(self._visible[: min(8, self.top_k)]):
            lines.append(
                f"  [{i}] {r.request_id:<14} {r.status.name[:4]} "
                f"computed={r.num_computed_tokens}/{r.num_tokens} out={r.num_output_tokens} "
                f"prio={r.priority} age={eng.now - r.arrival_time:.2f}s"
            )
        return self._emit("\n".join(lines))

    def _emit(self, text: str) -> str | None:
        """A rendered view: written to stderr in ``human`` mode (returns None), else returned.

        stderr, as progress bars: stdout stays the program's own output, and Gymnasium's
        ``check_env``, which renders every declared mode once, leaves it clean.
        """
        if self.render_mode == "human":
            print(text, file=sys.stderr)
            return None
        return text

    def close(self) -> None:
        """Drop the engine."""
        self.engine = None
        self.ledger = None
        self._ended = True

    # -- helpers ---------------------------------------------------------------------------------
    def _check_action(self, action: Any) -> None:
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            check_discrete(action, int(space.n), self.task)
        else:
            check_box(action, space.shape, self.task)

    def _masked(self, message: str) -> None:
        """A masked choice: raise with ``strict_masks``, else note the replacement in info."""
        if self.strict_masks:
            raise InvalidActionError(message)
        self._action_replaced = True

    def _until(self) -> float:
        return self.max_sim_time_s

    def episode_return(self) -> float:
        """The sum of rewards so far in this episode."""
        return self._episode_return
