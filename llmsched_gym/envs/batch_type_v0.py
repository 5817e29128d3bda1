"""``llmsched/BatchType-*-v0``: prefill-only or decode-only step (RelServe's ABA decision)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from llmsched_gym.core.engine import StepContext
from llmsched_gym.envs.base import EnvPolicy, LLMSchedEnv, check_discrete
from llmsched_gym.policies.vllm_v1 import drive, pack, vllm_victim

PREFILL, DECODE = 0, 1


class BatchTypePolicy(EnvPolicy):
    """Builds a prefill-only or decode-only batch (vLLM-v1 rules inside the chosen type)."""

    name = "env-batch-type"

    def __init__(self, oracle: bool = False) -> None:
        super().__init__(oracle)
        self.batch_type = PREFILL

    def schedule(self, ctx: StepContext) -> None:
        """The chosen type; the other one when the chosen type scheduled nothing."""
        first = self.batch_type
        for kind in (first, 1 - first):
            if kind == PREFILL:
                packer = pack(ctx, decode=False, prefill=True, admit=True)
            else:
                packer = pack(ctx, decode=True, prefill=False, admit=False)
            drive(packer, lambda req: vllm_victim(ctx))
            if ctx.scheduled or ctx.preempted:
                return


class BatchTypeEnv(LLMSchedEnv):
    """Choose whether the next engine step is prefill-only or decode-only.

    ## Description

    RelServe's adaptive batch arranger (ABA) decision: at each decision step the agent picks a
    *prefill-only* step (running requests with more than one token to compute — prompt chunks
    and refills — in admission order, then waiting requests admitted in queue order, chunked
    under the token budget) or a *decode-only* step (every running request with exactly one
    token to compute, in admission order). Inside the chosen type vLLM-v1's rules apply: the
    newest running request (FCFS) or the max by (priority, arrival) (priority queue) is
    preempted when KV blocks run out; admission stops at the first request that cannot get
    blocks. **Fallback:** when the chosen type schedules nothing (and preempts nothing), the
    step is built with the other type instead, so a step is never wasted; ``action_masks()``
    marks a type without any candidate request as invalid for MaskablePPO. Hybrid batches
    (vLLM-v1's default) are not in this action space.

    ## Action Space

    ``Discrete(2)``: 0 = prefill-only, 1 = decode-only. Other values raise
    ``InvalidActionError``.

    ## Observation Space

    As ``PriorityEnv``: global features, the top-K table (waiting in queue order, then running
    in admission order) and its mask.

    ## Rewards

    As ``PriorityEnv``: ``-reward_scale * (L(t_{k+1}) - L(t_k))`` by default (return
    ``-reward_scale * sum e2e``), or the ``slo`` / ``goodput`` counts; every term is in ``info``.

    ## Starting State / Episode End / Arguments

    As ``PriorityEnv``.

    ## Version History

    * v0: initial version.
    """

    task = "BatchType"

    def _make_action_space(self) -> spaces.Discrete:
        return spaces.Discrete(2)

    def _make_policy(self) -> BatchTypePolicy:
        return BatchTypePolicy(self.oracle)

    def _advance(self) -> bool:
        return self.engine.advance_to_decision(self._until())

    def _apply(self, action: Any) -> None:
        self.engine.policy.batch_type = check_discrete(action, 2, "BatchType")
        self.engine.step()

    def action_masks(self) -> np.ndarray:
        """[prefill has candidates, decode has candidates]; never all False."""
        return batch_type_masks(self.engine)

    def policy_action(self, policy: Any) -> int:
        """The policy's batch-type rule (hybrid batches are not in this action space):
        ``sarathi`` decodes first, every other policy prefills first (``vllm-v0``'s rule)."""
        masks = batch_type_masks(self.engine)
        if policy.name == "sarathi" and masks[DECODE]:
            return DECODE
        return PREFILL if masks[PREFILL] else DECODE

    def drive_agent(self, inner: Any, ctx: StepContext, decide: Any) -> None:
        """The agent picks the step's type once (masked to the types with candidates)."""
        inner.batch_type = check_discrete(decide(batch_type_masks(self.engine)), 2, "BatchType")
        inner.schedule(ctx)


def batch_type_masks(engine: Any) -> np.ndarray:
    """Which batch types have candidate requests now."""
    if engine is None:
        return np.ones(2, dtype=bool)
    prefill = bool(engine.waiting)
    decode = False
    for r in engine.running:
        if r.num_tokens - r.num_computed_tokens > 1:
            prefill = True
        else:
            decode = True
        if prefill and decode:
            break
    if not (prefill or decode):
        return np.ones(2, dtype=bool)
    return np.array([prefill, decode], dtype=bool)
