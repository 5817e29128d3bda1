"""vLLM 0.32.0's synchronous V1 scheduler (``vllm/v1/core/sched/scheduler.py``, ``schedule``).

There is no prefill or decode phase: each request's ``num_computed_tokens`` catches up with its
``num_tokens`` under the token budget.

* Phase (a), running requests in admission order: ``num_new = num_tokens - num_computed``,
  capped by ``long_prefill_token_threshold`` (when > 0 and more than one request is running or
  waiting) and by the budget. When blocks run out, preempt (FCFS: the last admitted; priority:
  the max by (priority, arrival_time), first in running order on ties) and retry; a request that
  preempts itself ends phase (a) — vLLM 0.32. With ``preemption_rule="0.33"`` the priority policy
  instead goes on with the next running request (vLLM 0.33; FCFS still stops).
* Phase (b), only if nothing was preempted: admit waiting requests in queue order while
  ``len(running) < max_num_seqs`` and budget remains; stop at the first that cannot get blocks
  (its whole current sequence must fit: ``scheduler_reserve_full_isl``).
"""

from __future__ import annotations

from collections.abc import Container

from llmsched_gym.core.engine import SchedulingPolicy, StepContext
from llmsched_gym.errors import ConfigError

PREEMPTION_RULES = ("0.32", "0.33")


class VllmV1Policy(SchedulingPolicy):
    """The reference engine's scheduler; step-for-step equal to vLLM 0.32.0 (differential test)."""

    name = "vllm-v1"
    fast_forward_safe = True
    head_of_line = True

    def __init__(self, preemption_rule: str = "0.32") -> None:
        if preemption_rule not in PREEMPTION_RULES:
            raise ConfigError(
                f"preemption_rule must be one of {PREEMPTION_RULES}, got {preemption_rule!r}"
            )
        self.preemption_rule = preemption_rule

    def is_vllm_v1(self) -> bool:
        """True for this class only: a subclass changes vLLM's rules."""
        return type(self) is VllmV1Policy

    def victim_key(self, req) -> tuple:
        """Priority-policy preemption order: the max is preempted (vLLM: priority, arrival)."""
        return (req.priority, req.arrival_time)

    def schedule_running_phase(self, ctx: StepContext, priority: bool) -> None:
        """vLLM's first phase: running requests in order, preempting on block shortage.

        The victim is the last admitted (FCFS) or, with ``priority``, the max of ``victim_key``;
        a request that preempts itself ends the phase (vLLM 0.32), or not under vLLM 0.33's rule.
        """
        continue_after_self = priority and self.preemption_rule == "0.33"
        threshold = ctx.config.prefill_cap(ctx.num_eligible)
        running = ctx.running
        i = 0
        while i < len(running) and ctx.token_budget > 0:
            # Requests whose blocks suffice in one call (the common case); the first that
            # needs a victim is handled below, one at a time, as vLLM does.
            i = ctx.schedule_in_order(running, i, threshold=threshold)
            if i < 0:
                break
            req = running[i]
            n = req.num_tokens - req.num_computed_tokens
            if 0 < threshold < n:
                n = threshold
            if n > ctx.token_budget:
                n = ctx.token_budget
            if n <= 0:
                i += 1
                continue
            ok = True
            while not ctx.schedule_running(req, n):
                if priority:
                    victim = max(running, key=self.victim_key)
                    if running.index(victim) < i:
                        i -= 1
                else:
                    victim = running[-1]
                ctx.preempt(victim)
                if victim is req:
                    ok = False
                    break
            if not ok:
                if continue_after_self:
                    continue  # req left running; the next request now sits at index i
                break
            i += 1

    def schedule(self, ctx: StepContext) -> None:
        """One ``Scheduler.schedule()`` call."""
        self.schedule_running_phase(ctx, self.queue_policy(ctx.config) == "priority")
        if ctx.preempted:
            return
        self.schedule_waiting_phase(ctx)

    def schedule_waiting_phase(self, ctx: StepContext, skip: Container | None = None) -> None:
        """vLLM's second phase: admit waiting requests in queue order until one does not fit.

        ``skip`` holds requests that vLLM passes over in place, trying the ones behind them
        (async scheduling: a preempted request whose stale output is still in flight,
        ``Scheduler.schedule``'s ``skip_request`` in vLLM 0.32.0).
        """
        threshold = ctx.config.prefill_cap(ctx.num_eligible)
        chunked = ctx.config.enable_chunked_prefill
        running = ctx.running
        waiting = ctx.waiting
        # Queue order; admissions only remove the request at hand, so a snapshot stays exact.
        candidates = iter(list(waiting)) if skip else None
        while ctx.token_budget > 0 and waiting and len(running) < ctx.max_num_seqs:
            if candidates is None:
                req = waiting.peek()
            else:
                req = next(candidates, None)
                if req is None:
                    break
                if req in skip:
                    continue
            if ctx.surely_blocked(req):  # allocate_slots would return None: skip the lookup
                break
            hit = ctx.lookup(req)
            n = req.num_tokens - hit[1]
            if 0 < threshold < n:
                n = threshold
            if not chunked and n > ctx.token_budget:
                break  # vLLM without chunked prefill: only whole prompts (and refills) start
            if ctx.admit(req, min(n, ctx.token_budget), hit=hit) is None:
                break
