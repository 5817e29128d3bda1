"""``llmsched/Knob-*-v0``: token budget and sequence cap per window of simulated time."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces

from llmsched_gym.core.engine import StepContext
from llmsched_gym.envs.base import EnvPolicy, LLMSchedEnv, check_box, distinct_actions
from llmsched_gym.errors import ConfigError
from llmsched_gym.policies.vllm_v1 import drive, pack, vllm_victim


LOOKAHEAD_CANDIDATES = ((1.0, 1.0), (0.5, 1.0), (0.25, 1.0), (1.0, 0.5))
"""(token budget, sequence cap) fractions the lookahead oracle tries; (1, 1) is vLLM V1's own
setting."""


class KnobPolicy(EnvPolicy):
    """vLLM-v1 under a token cap and a sequence cap of the policy's own.

    The caps never exceed the engine's ``max_num_batched_tokens`` and ``max_num_seqs``.
    """

    name = "env-knob"

    def __init__(self, oracle: bool = False) -> None:
        super().__init__(oracle)
        self.token_cap: int | None = None
        self.seq_cap: int | None = None

    def set_caps(self, token_cap: int, seq_cap: int, max_num_seqs: int) -> None:
        """Set the caps; fast-forward stays exact only while every decode batch fits the cap."""
        self.token_cap, self.seq_cap = token_cap, seq_cap
        self.fast_forward_safe = token_cap >= max_num_seqs

    def schedule(self, ctx: StepContext) -> None:
        """vLLM-v1's batch within the caps."""
        drive(
            pack(ctx, token_cap=self.token_cap, seq_cap=self.seq_cap),
            lambda req: vllm_victim(ctx),
        )


def knob_caps(action: Any, max_num_batched_tokens: int, max_num_seqs: int) -> tuple[int, int]:
    """(token cap, sequence cap) of an action; values are clipped to [0, 1], caps are >= 1."""
    a = np.clip(check_box(action, (2,), "Knob"), 0.0, 1.0)
    token_cap = max(1, math.ceil(a[0] * max_num_batched_tokens))
    seq_cap = max(1, math.ceil(a[1] * max_num_seqs))
    return token_cap, seq_cap


class KnobEnv(LLMSchedEnv):
    """Set the token budget and the sequence cap for the next window of simulated time.

    ## Description

    Every ``window_s`` seconds of simulated time the agent sets two knobs that the
    environment's policy applies to every step of the window: a token budget
    ``ceil(a[0] * max_num_batched_tokens)`` and a sequence cap ``ceil(a[1] * max_num_seqs)``
    (both at least 1). Inside them the batch follows vLLM-v1 exactly; the engine's own limits
    stay the ceilings. ``a = (1, 1)`` is ``vllm-v1``. One environment step runs every engine
    step that starts in the window (fast-forwarded where exact).

    ## Action Space

    ``Box(0, 1, (2,), float32)``: (token budget fraction, ``max_num_seqs`` fraction). Values
    outside [0, 1] are clipped (documented, not an error); a wrong shape or a non-finite value
    raises ``InvalidActionError``.

    ## Observation Space

    As ``PriorityEnv`` (global features, top-K table of waiting then running, mask), read at the
    window's end.

    ## Rewards

    As ``PriorityEnv``, per window: ``-reward_scale * (L(t_end) - L(t_start))`` by default,
    where ``t_end`` is the later of the window's end and the end of its last step; the return
    of a drained episode is ``-reward_scale * sum e2e``. Every term is in ``info``.

    ## Episode End

    ``terminated`` when every request finished; ``truncated`` at ``max_sim_time_s`` or after
    ``max_episode_steps`` windows.

    ## Arguments

    As ``PriorityEnv``, plus ``window_s`` (default 5.0 s of simulated time).

    ## Version History

    * v0: initial version.
    """

    task = "Knob"

    def __init__(self, *args: Any, window_s: float = 5.0, **kwargs: Any) -> None:
        if not (isinstance(window_s, (int, float)) and math.isfinite(window_s) and window_s > 0):
            raise ConfigError(f"window_s must be a finite number > 0, got {window_s!r}")
        self.window_s = float(window_s)
        super().__init__(*args, **kwargs)

    def _make_action_space(self) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (2,), np.float32)

    def _make_policy(self) -> KnobPolicy:
        return KnobPolicy(self.oracle)

    def _reset_task(self) -> None:
        self._window_end = 0.0
        self._caps = (self.config.max_num_batched_tokens, self.config.max_num_seqs)

    def _clock(self) -> float:
        eng = self.engine
        if eng.next_event_time() == math.inf:
            return eng.now
        return max(eng.now, min(self._window_end, self._until()))

    def _advance(self) -> bool:
        eng = self.engine
        return eng.next_event_time() != math.inf and self._window_end < self._until()

    def policy_action(self, policy: Any) -> np.ndarray:
        """The whole budget and every sequence slot (the engine's own settings)."""
        return np.ones(2, dtype=np.float32)

    def drive_agent(self, inner: Any, ctx: StepContext, decide: Any) -> None:
        """At the first step of each window the agent sets the caps; every step packs under
        them."""
        if ctx.now >= self._next_window:
            cfg = ctx.config
            caps = knob_caps(decide(), cfg.max_num_batched_tokens, cfg.max_num_seqs)
            inner.set_caps(*caps, cfg.max_num_seqs)
            self._next_window = (math.floor(ctx.now / self.window_s) + 1) * self.window_s
        inner.schedule(ctx)

    @classmethod
    def random_action(
        cls, rng: np.random.Generator, top_k: int, obs: Any, action_masks: Any
    ) -> np.ndarray:
        """Both fractions uniform in [0, 1]."""
        return rng.uniform(0.0, 1.0, 2).astype(np.float32)

    @classmethod
    def check_lookahead_candidates(cls, candidates: Any) -> tuple:
        """(token fraction, sequence fraction) pairs in [0, 1] (default
        ``LOOKAHEAD_CANDIDATES``)."""
        pairs = LOOKAHEAD_CANDIDATES if candidates is None else candidates
        try:
            arr = np.asarray(pairs, dtype=np.float64)
        except (TypeError, ValueError):
            arr = np.empty(0)
        if arr.ndim != 2 or arr.shape[1] != 2 or len(arr) == 0:
            raise ConfigError(
                "LookaheadAgent: Knob candidates must be a non-empty list of (token fraction, "
                f"sequence fraction) pairs, got {pairs!r}"
            )
        if not (np.isfinite(arr).all() and (arr >= 0).all() and (arr <= 1).all()):
            raise ConfigError(
                f"LookaheadAgent: Knob candidate fractions must lie in [0, 1], got {pairs!r}"
            )
        return tuple(tuple(float(x) for x in row) for row in arr)

    def lookahead_options(self, own: Any, candidates: tuple) -> list[Any]:
        """The base's fractions, then each candidate pair, deduplicated."""
        return distinct_actions([own, *candidates])

    def _apply(self, action: Any) -> None:
        cfg = self.config
        token_cap, seq_cap = knob_caps(action, cfg.max_num_batched_tokens, cfg.max_num_seqs)
        self._caps = (token_cap, seq_cap)
        self.engine.policy.set_caps(token_cap, seq_cap, cfg.max_num_seqs)
        self._window_end += self.window_s
        until = min(self._window_end, self._until())
        eng = self.engine
        while eng.advance(until):
            pass
