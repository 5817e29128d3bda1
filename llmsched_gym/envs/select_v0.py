"""``llmsched/Select-*-v0``: build each batch one request at a time (Discrete(K+1), masked)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from llmsched_gym.core.engine import StepContext
from llmsched_gym.core.request import Request, RequestStatus
from llmsched_gym.envs.base import EnvPolicy, InvalidActionError, LLMSchedEnv, check_discrete
from llmsched_gym.errors import ConfigError
from llmsched_gym.policies.vllm_v1 import vllm_victim

SCHEDULED, PREEMPTED_SELF, BLOCKED = "scheduled", "preempted_self", "blocked"


class SelectPolicy(EnvPolicy):
    """The batch is built by the environment on the held step context."""

    name = "env-select"
    head_of_line = False


class BatchBuilder:
    """One step's batch under construction: candidates, validity and picks (vLLM-v1 rules)."""

    def __init__(self, ctx: StepContext, top_k: int) -> None:
        self.ctx = ctx
        self.top_k = top_k
        self.unscheduled = list(ctx.running)
        self.failed: set[Request] = set()
        threshold = ctx.config.long_prefill_token_threshold
        self.threshold = threshold if ctx.num_eligible > 1 else 0
        self.candidates: list[Request] = []
        self.valid = np.zeros(top_k + 1, dtype=bool)
        self.last_result: str | None = None
        self.refresh()

    def refresh(self) -> None:
        """Recompute the visible candidates and which picks are valid."""
        ctx, k = self.ctx, self.top_k
        self.unscheduled = [r for r in self.unscheduled if r.status is RequestStatus.RUNNING]
        cands = self.unscheduled[:k]
        if len(cands) < k:
            for r in ctx.waiting:
                if r not in self.failed:
                    cands.append(r)
                    if len(cands) == k:
                        break
        self.candidates = cands
        valid = np.zeros(k + 1, dtype=bool)
        budget = ctx.token_budget > 0
        can_admit = budget and not ctx.preempted and len(ctx.running) < ctx.max_num_seqs
        free = ctx.num_free_blocks
        for i, r in enumerate(cands):
            if r.status is RequestStatus.RUNNING:
                valid[i] = budget
            elif can_admit and not ctx.surely_blocked(r):
                valid[i] = ctx.blocks_needed_to_admit(r) <= free
        valid[k] = bool(ctx.scheduled or ctx.preempted) or not valid[:k].any()
        self.valid = valid

    def pick(self, index: int) -> str:
        """Schedule candidate ``index``; returns what happened."""
        ctx = self.ctx
        req = self.candidates[index]
        if req.status is RequestStatus.RUNNING:
            self.unscheduled.remove(req)
            n = min(req.num_tokens - req.num_computed_tokens, ctx.token_budget)
            if 0 < self.threshold < n:
                n = self.threshold
            result = SCHEDULED
            while not ctx.schedule_running(req, n):
                victim = vllm_victim(ctx)
                ctx.preempt(victim)
                if victim is req:
                    result = PREEMPTED_SELF
                    break
        else:
            hit = ctx.lookup(req)
            n = req.num_tokens - hit[1]
            if 0 < self.threshold < n:
                n = self.threshold
            if ctx.admit(req, min(n, ctx.token_budget), hit=hit) is None:
                self.failed.add(req)
                result = BLOCKED
            else:
                result = SCHEDULED
        self.last_result = result
        self.refresh()
        return result


class SelectEnv(LLMSchedEnv):
    """Build the batch one request at a time; one engine step spans several environment steps.

    ## Description

    At each decision step of the engine the environment holds the step open and shows the
    candidates: running requests not yet scheduled this step (admission order), then waiting
    requests (queue order), up to ``top_k``. Action ``k < top_k`` picks the k-th candidate:
    a running request gets its ``num_tokens - num_computed_tokens`` tokens (capped by the
    long-prefill threshold and the budget; when KV blocks run out the vLLM-v1 victim — newest
    running, or max (priority, arrival) under the priority queue — is preempted and the
    allocation retried, which may preempt the pick itself); a waiting request is admitted with
    a prefix lookup, chunked under the budget. Action ``top_k`` closes the batch and the engine
    executes the step. The batch also closes by itself when no pick is valid any more.
    Picking the first valid candidate until it fails is ``vllm-v1`` (``PolicyAgent``).

    ``action_masks()`` (and the observation's ``mask`` for rows) says what is valid: running
    candidates while budget remains; waiting candidates while budget and ``max_num_seqs``
    allow, nothing was preempted this step (vLLM's rule) and their blocks fit; close once the
    batch holds something (or nothing else is valid).

    ## Action Space

    ``Discrete(top_k + 1)``. A masked choice is replaced by close (when valid) or else the
    first valid pick, and ``info["action_replaced"]`` is True; with ``strict_masks=True`` it
    raises ``InvalidActionError`` naming the valid actions instead. Train with masks
    (MaskablePPO) to avoid replacements.

    ## Observation Space

    As ``PriorityEnv``, with the candidates as rows and the global ``token_budget`` feature
    showing what is left of this step's budget.

    ## Rewards

    As ``PriorityEnv``; picks within a step take no simulated time (reward 0), the step's time
    is charged to the closing action. The return of a drained episode is
    ``-reward_scale * sum e2e``.

    ## Episode End / Arguments

    As ``PriorityEnv``, plus ``work_conserving`` (default False): when True, close is valid
    only once no pick is (``work_conserving_mask``), so a batch never ends while budget, a
    sequence slot and a fitting request remain, as vLLM's own loop never stops early. The
    agent then decides only the order in which requests get the step's tokens. Every such
    policy is also a policy of the default task (it closes at moments the default allows), so
    an agent trained with it is evaluated on the unchanged task by applying the same mask to
    the default masks (``work_conserving_mask``), as the baselines' Select recipe does.

    ## Version History

    * v0: initial version.
    """

    task = "Select"

    def __init__(self, *args: Any, work_conserving: bool = False, **kwargs: Any) -> None:
        if not isinstance(work_conserving, bool):
            raise ConfigError(f"work_conserving must be True or False, got {work_conserving!r}")
        self.work_conserving = work_conserving
        super().__init__(*args, **kwargs)

    def _make_action_space(self) -> spaces.Discrete:
        return spaces.Discrete(self.top_k + 1)

    def _make_policy(self) -> SelectPolicy:
        return SelectPolicy(self.oracle)

    def _reset_task(self) -> None:
        self.builder: BatchBuilder | None = None

    def _compute_visible(self) -> list[Request]:
        return self.builder.candidates if self.builder is not None else []

    def _token_budget(self) -> int | None:
        return self.engine.ctx.token_budget if self.builder is not None else None

    def _advance(self) -> bool:
        eng = self.engine
        while True:
            if self.builder is not None:
                if self.builder.valid[: self.top_k].any():
                    return True
                self.builder = None
                eng.step()
            if not eng.advance_to_decision(self._until()):
                return False
            self.builder = BatchBuilder(eng.hold_step(), self.top_k)

    def _apply(self, action: Any) -> None:
        k = self.top_k
        a = check_discrete(action, k + 1, "Select")
        mask = self.action_masks()
        if not mask[a]:
            what = f"pick candidate {a}"
            if a == k and self.builder.valid[k]:
                what = "close the batch (work_conserving: a pick is still valid)"
            elif a == k:
                what = "close the batch (it is empty)"
            valid = np.flatnonzero(mask)
            self._masked(
                f"Select: action {a} ({what}) is masked; valid actions: {valid.tolist()} "
                "(see action_masks())"
            )
            a = k if mask[k] else int(valid[0])
        if a == k:
            self.builder = None
            self.engine.step()
        else:
            self.builder.pick(a)

    def policy_action(self, policy: Any) -> int:
        """vLLM's own packing: the first candidate (queue order) until a pick preempts the
        picked request or is blocked, then close."""
        b, k = self.builder, self.top_k
        if b is None or b.last_result in (PREEMPTED_SELF, BLOCKED) or not b.valid[0]:
            return k
        return 0

    def drive_agent(self, inner: Any, ctx: StepContext, decide: Any) -> None:
        """The agent picks candidates (masked) until it closes the batch or none is valid."""
        k = self.top_k
        builder = BatchBuilder(ctx, k)
        self.builder = builder
        while builder.valid[:k].any():
            a = check_discrete(decide(builder.valid.copy()), k + 1, "Select")
            if not builder.valid[a]:
                raise InvalidActionError(f"Select: the agent chose masked action {a}")
            if a == k:
                break
            builder.pick(a)
        self.builder = None

    def action_masks(self) -> np.ndarray:
        """Valid actions: candidates that can be picked, and close (index ``top_k``)."""
        if self.builder is None:
            mask = np.zeros(self.top_k + 1, dtype=bool)
            mask[self.top_k] = True
            return mask
        if self.work_conserving:
            return work_conserving_mask(self.builder.valid)
        return self.builder.valid.copy()


def work_conserving_mask(mask: np.ndarray) -> np.ndarray:
    """Select's mask with close (the last action) allowed only when no pick is valid."""
    out = np.array(mask, dtype=bool, copy=True)
    if out[:-1].any():
        out[-1] = False
    return out


class WorkConservingAgent:
    """A model trained with ``work_conserving=True``, acting on the default Select task.

    It applies ``work_conserving_mask`` to the task's masks before the model predicts, so the
    model sees the masks it was trained with; anything without masks passes through.
    """

    def __init__(self, model: Any) -> None:
        self.model = model

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = True,
        action_masks: Any = None,
    ) -> Any:
        """The model's ``predict`` (SB3's signature) under the work-conserving masks."""
        if action_masks is not None:
            action_masks = work_conserving_mask(action_masks)
        return self.model.predict(
            observation, state, episode_start, deterministic, action_masks=action_masks
        )
