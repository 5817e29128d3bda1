"""vLLM-v1 batch packing with pluggable orders, victims and caps (shared by the environments).

``pack`` is ``VllmV1Policy.schedule`` written over explicit orders: phase (a) schedules running
requests in ``running_order`` (each ``num_tokens - num_computed_tokens`` tokens, capped by the
long-prefill threshold and the budget), preempting a victim and retrying when KV blocks run out
(a request that preempts itself ends phase (a), vLLM 0.32); phase (b), only if nothing was
preempted, admits waiting requests in ``waiting_order`` while sequences and budget remain and
stops at the first that cannot get blocks. With the default orders, the default victim rule and
no caps it schedules exactly what ``vllm-v1`` schedules (tests/envs/test_adapters.py).

It is a generator so that an environment can ask an agent for each victim: it yields the request
that could not get blocks and expects the victim to be sent back (``drive`` answers with a
function instead).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable

from llmsched_gym.core.engine import StepContext
from llmsched_gym.core.request import Request

Packer = Generator[Request, Request, None]


def vllm_victim(ctx: StepContext) -> Request:
    """vLLM's preemption victim.

    The newest running request (FCFS), or the max by (priority, arrival_time), first in running
    order on ties (priority queue).
    """
    running = ctx.running
    if ctx.config.scheduling_policy == "priority":
        return max(running, key=_victim_key)
    return running[-1]


def _victim_key(req: Request) -> tuple:
    return (req.priority, req.arrival_time)


def pack(
    ctx: StepContext,
    running_order: Iterable[Request] | None = None,
    waiting_order: Iterable[Request] | None = None,
    *,
    token_cap: int | None = None,
    seq_cap: int | None = None,
    decode: bool = True,
    prefill: bool = True,
    admit: bool = True,
) -> Packer:
    """Pack one step's batch on ``ctx`` (a generator: yields a request that needs a victim).

    Args:
        ctx: The step's context.
        running_order: Order of phase (a) (default: ``ctx.running``, admission order).
        waiting_order: Order of the first requests of phase (b), a reordering of a prefix of
            the waiting queue; the rest follow in queue order.
        token_cap: Schedule at most this many tokens in total (<= ``max_num_batched_tokens``).
        seq_cap: Admit only while fewer than this many requests run (<= ``max_num_seqs``).
        decode: Schedule running requests with exactly one token to compute.
        prefill: Schedule running requests with more than one token to compute (prompt chunks,
            refills).
        admit: Run phase (b).
    """
    config = ctx.config
    reserve = 0 if token_cap is None else max(0, config.max_num_batched_tokens - token_cap)
    max_seqs = ctx.max_num_seqs if seq_cap is None else min(seq_cap, ctx.max_num_seqs)
    threshold = config.long_prefill_token_threshold if ctx.num_eligible > 1 else 0
    if running_order is None:
        order = list(ctx.running)  # preemptions shrink ``ctx.running`` while we walk it
    elif isinstance(running_order, (list, tuple)):
        order = running_order
    else:
        order = list(running_order)
    i = 0
    while True:
        # Runs of requests that get their blocks go in one call; a shortage comes back here.
        i = ctx.schedule_in_order(
            order, i, threshold=threshold, reserve=reserve, decode=decode, prefill=prefill
        )
        if i < 0:
            break
        req = order[i]
        n = req.num_tokens - req.num_computed_tokens
        if 0 < threshold < n:
            n = threshold
        budget = ctx.token_budget - reserve
        if n > budget:
            n = budget
        preempted_self = False
        while not ctx.schedule_running(req, n):
            victim = yield req
            ctx.preempt(victim)
            if victim is req:
                preempted_self = True
                break
        if preempted_self:
            break
        i += 1
    if ctx.preempted or not admit:
        return
    waiting = ctx.waiting
    running = ctx.running
    if waiting_order is not None:
        # The given order covers a prefix of the queue (the visible rows); once all of them
        # are admitted, the rest follows in queue order.
        for req in waiting_order:
            if not (len(running) < max_seqs and ctx.token_budget - reserve > 0):
                return
            if not _try_admit(ctx, req, threshold, reserve):
                return
    while waiting and len(running) < max_seqs and ctx.token_budget - reserve > 0:
        if not _try_admit(ctx, waiting.peek(), threshold, reserve):
            return


def _try_admit(ctx: StepContext, req: Request, threshold: int, reserve: int) -> bool:
    if ctx.surely_blocked(req):  # allocate_slots would return None: skip the lookup
        return False
    hit = ctx.lookup(req)
    n = req.num_tokens - hit[1]
    if 0 < threshold < n:
        n = threshold
    return ctx.admit(req, min(n, ctx.token_budget - reserve), hit=hit) is not None


def drive(packer: Packer, victim: Callable[[Request], Request]) -> None:
    """Run a packer to the end, answering each victim request with ``victim(req)``."""
    try:
        req = next(packer)
        while True:
            req = packer.send(victim(req))
    except StopIteration:
        pass
