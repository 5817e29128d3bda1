"""``llmsched/Preempt-*-v0``: choose the preemption victim when KV blocks run out."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from llmsched_gym.core.engine import StepContext
from llmsched_gym.core.request import Request, RequestStatus
from llmsched_gym.envs.base import EnvPolicy, InvalidActionError, LLMSchedEnv, check_discrete
from llmsched_gym.policies.vllm_v1 import Packer, drive, pack


class PreemptPolicy(EnvPolicy):
    """vLLM-v1 packing run by the environment on the held step context."""

    name = "env-preempt"


def victim_order(running: list[Request], priority_queue: bool) -> list[Request]:
    """Running requests in vLLM's victim order: the one vLLM would preempt first comes first.

    FCFS: newest admitted first. Priority queue: largest (priority, arrival_time) first, ties
    in running order (as ``max`` picks them).
    """
    if priority_queue:
        return sorted(running, key=lambda r: (r.priority, r.arrival_time), reverse=True)
    return running[::-1]


class PreemptEnv(LLMSchedEnv):
    """Pick the victim when a running request cannot get KV blocks.

    ## Description

    The engine schedules with vLLM-v1's rules; whenever a running request's allocation fails
    (``schedule_running`` returns False), the episode pauses inside the step and the agent
    picks which running request to preempt (by recompute: blocks freed, computed tokens
    reset). The allocation is then retried, and the agent asked again if it still fails. If
    the agent preempts the requesting request itself, phase (a) ends as in vLLM 0.32, and no
    waiting request is admitted in a step that preempted. Engine steps without a shortage are
    not decisions and run on their own (their time is charged to the next decision's reward).
    Always choosing row 0 is ``vllm-v1`` (``PolicyAgent``).

    Rows: the running requests in vLLM's victim order (FCFS: newest admitted first; priority
    queue: largest (priority, arrival_time) first), up to ``top_k``; all of them are valid
    choices (``action_masks()``), including the request that needs the blocks.

    ## Action Space

    ``Discrete(top_k)``: the row of the victim. An out-of-range value raises
    ``InvalidActionError``; an empty row is replaced by row 0 (vLLM's victim) with
    ``info["action_replaced"]`` True, or raises with ``strict_masks=True``.

    ## Observation Space

    As ``PriorityEnv``, rows as above.

    ## Rewards

    As ``PriorityEnv``; the return of a drained episode is ``-reward_scale * sum e2e``. A
    workload that never runs out of KV blocks has a single environment step (any action; it is
    ignored) whose reward is the whole return.

    ## Episode End / Arguments

    As ``PriorityEnv``.

    ## Version History

    * v0: initial version.
    """

    task = "Preempt"

    def _make_action_space(self) -> spaces.Discrete:
        return spaces.Discrete(self.top_k)

    def _make_policy(self) -> PreemptPolicy:
        return PreemptPolicy(self.oracle)

    def _reset_task(self) -> None:
        self._packer: Packer | None = None
        self.requester: Request | None = None
        self._priority = self.config.scheduling_policy == "priority"

    def _compute_visible(self) -> list[Request]:
        if self.requester is None:
            return []
        return victim_order(self.engine.running, self._priority)[: self.top_k]

    def _send(self, victim: Request | None) -> None:
        try:
            if victim is None:
                self.requester = next(self._packer)
            else:
                self.requester = self._packer.send(victim)
        except StopIteration:
            self.requester = None
            self._packer = None
            self.engine.step()

    def _advance(self) -> bool:
        eng = self.engine
        while self.requester is None:
            if not eng.advance_to_decision(self._until()):
                return False
            self._packer = pack(eng.hold_step())
            self._send(None)
        return True

    def _apply(self, action: Any) -> None:
        a = check_discrete(action, self.top_k, "Preempt")
        if a >= len(self._visible):
            self._masked(
                f"Preempt: row {a} is empty ({len(self._visible)} running requests visible); "
                "valid rows are those with mask 1 (see action_masks())"
            )
            a = 0
        victim = self._visible[a]
        if victim.status is not RequestStatus.RUNNING:
            raise InvalidActionError(f"Preempt: row {a} ({victim.request_id}) is not running")
        self._send(victim)

    def policy_action(self, policy: Any) -> int:
        """vLLM's victim: the first row (``victim_order``)."""
        return 0

    def drive_agent(self, inner: Any, ctx: StepContext, decide: Any) -> None:
        """vLLM's packing, with the agent naming each victim among the running rows."""
        k = self.top_k

        def victim(req: Request) -> Request:
            self.requester = req
            a = check_discrete(decide(), k, "Preempt")
            rows = self._visible
            if a >= len(rows):
                raise InvalidActionError(f"Preempt: the agent chose empty row {a}")
            return rows[a]

        drive(pack(ctx), victim)
        self.requester = None

    def action_masks(self) -> np.ndarray:
        """Rows holding a running request (row 0 when there is none, e.g. at the end)."""
        mask = np.zeros(self.top_k, dtype=bool)
        n = min(len(self._visible), self.top_k)
        mask[: max(1, n)] = True
        return mask
