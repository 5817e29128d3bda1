"""vLLM-v1 batch packing with pluggable orders, victims and caps (shared by the environments).

``pack`` is ``VllmV1Policy.schedule`` written over explicit orders: phase (a) schedules running
requests in ``running_order`` (each ``num_tokens - num_computed_tokens`` tokens, capped by the
long-prefill threshold and the budget), preempting a victim and retrying when KV blocks run out
(a request that preempts itself ends phase (a), vLLM 0.32); phase (b), only if nothing was
preempted, admits waiting requests in ``waiting_order`` while sequences and budget remain and
stops at the first that cannot get blocks. With the default orders, the default victim rule and
no caps it schedules exactly what ``vllm-v1`` schedules (tests/envs/test_adapters.py).

It runs as a generator does, so that an environment can ask an agent for each victim: ``next``
returns the request that could not get blocks and ``send`` takes the victim back (``drive``
answers with a function instead); unlike a generator it can be copied mid-step (``Packer``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from llmsched_gym.core.engine import StepContext
from llmsched_gym.core.request import Request


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
    """Pack one step's batch on ``ctx``; ``next`` on the result gives a request needing a victim.

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
    return Packer(ctx, running_order, waiting_order, token_cap, seq_cap, decode, prefill, admit)


class Packer:
    """``pack``'s packing loop as a generator-like object that can be copied mid-step.

    ``next(p)`` runs to the first request that cannot get its blocks and returns it (or raises
    ``StopIteration`` at the end of the step); ``p.send(victim)`` preempts ``victim`` and carries
    on. A generator function would read the same, but a suspended generator cannot be copied,
    and ``llmsched_gym.counterfactual.fork`` copies environments that wait for a victim.
    Nothing runs before the first ``next``, as with a generator.
    """

    __slots__ = (
        "ctx", "running_order", "waiting_order", "token_cap", "seq_cap", "decode", "prefill",
        "admit", "reserve", "max_seqs", "threshold", "order", "i", "req", "n", "state",
    )  # fmt: skip

    def __init__(
        self,
        ctx: StepContext,
        running_order: Iterable[Request] | None,
        waiting_order: Iterable[Request] | None,
        token_cap: int | None,
        seq_cap: int | None,
        decode: bool,
        prefill: bool,
        admit: bool,
    ) -> None:
        self.ctx = ctx
        self.running_order = running_order
        self.waiting_order = waiting_order
        self.token_cap = token_cap
        self.seq_cap = seq_cap
        self.decode = decode
        self.prefill = prefill
        self.admit = admit
        self.state = 0  # 0: not started, 1: waiting for a victim for ``req``, 2: done
        self.req: Request | None = None

    def __iter__(self) -> Packer:
        return self

    def __next__(self) -> Request:
        return self.send(None)

    def send(self, victim: Request | None) -> Request:
        """Preempt ``victim`` (None to start) and pack on; the next request that needs one."""
        if self.state == 2:
            raise StopIteration
        if self.state == 0:
            if victim is not None:
                raise TypeError("can't send a victim to a packer that has not started")
            self._start()
            return self._phase_a()
        ctx = self.ctx
        req = self.req
        ctx.preempt(victim)
        if victim is req:  # a request that preempts itself ends phase (a)
            return self._phase_b()
        if not ctx.schedule_running(req, self.n):
            return req
        self.i += 1
        return self._phase_a()

    def _start(self) -> None:
        ctx = self.ctx
        config = ctx.config
        token_cap, seq_cap = self.token_cap, self.seq_cap
        self.reserve = 0 if token_cap is None else max(0, config.max_num_batched_tokens - token_cap)
        self.max_seqs = ctx.max_num_seqs if seq_cap is None else min(seq_cap, ctx.max_num_seqs)
        self.threshold = config.long_prefill_token_threshold if ctx.num_eligible > 1 else 0
        running_order = self.running_order
        if running_order is None:
            self.order = list(ctx.running)  # preemptions shrink ``ctx.running`` while we walk it
        elif isinstance(running_order, (list, tuple)):
            self.order = running_order
        else:
            self.order = list(running_order)
        self.i = 0

    def _phase_a(self) -> Request:
        ctx, order, threshold, reserve = self.ctx, self.order, self.threshold, self.reserve
        i = self.i
        while True:
            # Runs of requests that get their blocks go in one call; a shortage comes back here.
            i = ctx.schedule_in_order(
                order, i, threshold=threshold, reserve=reserve, decode=self.decode,
                prefill=self.prefill,
            )  # fmt: skip
            if i < 0:
                return self._phase_b()
            req = order[i]
            n = req.num_tokens - req.num_computed_tokens
            if 0 < threshold < n:
                n = threshold
            budget = ctx.token_budget - reserve
            if n > budget:
                n = budget
            if not ctx.schedule_running(req, n):
                self.i, self.req, self.n, self.state = i, req, n, 1
                return req
            i += 1

    def _phase_b(self) -> Request:
        self.state = 2
        self.req = None
        ctx = self.ctx
        if ctx.preempted or not self.admit:
            raise StopIteration
        threshold, reserve, max_seqs = self.threshold, self.reserve, self.max_seqs
        waiting = ctx.waiting
        running = ctx.running
        if self.waiting_order is not None:
            # The given order covers a prefix of the queue (the visible rows); once all of them
            # are admitted, the rest follows in queue order.
            for req in self.waiting_order:
                if not (len(running) < max_seqs and ctx.token_budget - reserve > 0):
                    raise StopIteration
                if not _try_admit(ctx, req, threshold, reserve):
                    raise StopIteration
        while waiting and len(running) < max_seqs and ctx.token_budget - reserve > 0:
            if not _try_admit(ctx, waiting.peek(), threshold, reserve):
                raise StopIteration
        raise StopIteration


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
