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

The step is written once, as :func:`pack`: a generator-like :class:`Packer` over explicit orders
that returns the request that could not get blocks and takes the victim sent back (and, unlike a
generator, can be copied mid-step for counterfactual forks), so that a caller may choose
victims, or ask an agent for them across environment steps (``llmsched/Preempt-*``).
:class:`VllmV1Policy` drives it with vLLM's victim rule (:func:`drive`); the environments drive
it with their agents' orders, victims and caps (``token_cap``, ``seq_cap``, phase filters). With
the default orders, victim rule and no caps it schedules exactly what ``vllm-v1`` schedules.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable

from llmsched_gym.core.engine import SchedulingPolicy, StepContext
from llmsched_gym.core.request import Request
from llmsched_gym.errors import ConfigError

__all__ = [
    "PREEMPTION_RULES",
    "Packer",
    "VllmV1Policy",
    "admit_waiting",
    "drive",
    "pack",
    "vllm_victim",
]

PREEMPTION_RULES = ("0.32", "0.33")


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
    continue_after_self: bool = False,
) -> Packer:
    """Pack one step's batch on ``ctx``: phase (a), then phase (b) unless something was preempted.

    The result runs as a generator does: ``next`` returns a request that could not get blocks,
    ``send`` takes the victim back (``drive`` answers with a function), and it stops when the
    batch is packed. Unlike a generator it can be copied mid-step (:class:`Packer`).

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
        continue_after_self: A request that preempts itself does not end phase (a): the next
            running request goes on (vLLM 0.33's priority rule).
    """
    return Packer(
        ctx, running_order, waiting_order, token_cap, seq_cap, decode, prefill, admit,
        continue_after_self,
    )  # fmt: skip


class Packer:
    """:func:`pack`'s loop as a generator-like object that can be copied mid-step.

    ``next(p)`` runs to the first request that cannot get its blocks and returns it (or raises
    ``StopIteration`` when the step is packed); ``p.send(victim)`` preempts ``victim`` and goes
    on. A generator function would read the same, but a suspended generator cannot be copied,
    and ``llmsched_gym.counterfactual.fork`` copies environments that wait for a victim
    (``llmsched/Preempt-*``). Nothing runs before the first ``next``, as with a generator.
    """

    __slots__ = (
        "ctx", "running_order", "waiting_order", "token_cap", "seq_cap", "decode", "prefill",
        "admit", "continue_after_self", "reserve", "threshold", "order", "live", "i", "req", "n",
        "state",
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
        continue_after_self: bool = False,
    ) -> None:
        self.ctx = ctx
        self.running_order = running_order
        self.waiting_order = waiting_order
        self.token_cap = token_cap
        self.seq_cap = seq_cap
        self.decode = decode
        self.prefill = prefill
        self.admit = admit
        self.continue_after_self = continue_after_self
        self.state = 0  # 0: not started, 1: waiting for a victim for ``req``, 2: done
        self.req: Request | None = None

    def __iter__(self) -> Packer:
        return self

    def __next__(self) -> Request:
        return self.send(None)

    def send(self, victim: Request | None) -> Request:
        """Preempt ``victim`` (None to start) and pack on; the next request that needs one."""
        req = self._resume(victim)
        if req is None:
            raise StopIteration
        return req

    def run(self, victim: Callable[[Request], Request]) -> None:
        """Pack to the end, answering each request that needs a victim with ``victim(req)``.

        What :func:`drive` does, without a ``StopIteration`` per step (the simulator's path).
        """
        req = self._resume(None)
        while req is not None:
            req = self._resume(victim(req))

    def _resume(self, victim: Request | None) -> Request | None:
        """``send`` without the exception: None once the step is packed."""
        if self.state == 2:
            return None
        if self.state == 0:
            if victim is not None:
                raise TypeError("can't send a victim to a packer that has not started")
            self._start()
            return self._phase_a()
        ctx = self.ctx
        req = self.req
        ctx.preempt(victim)
        if victim is req:  # a request that preempts itself ends phase (a) (vLLM 0.32)
            if not self.continue_after_self:
                return self._phase_b()
        elif not ctx.schedule_running(req, self.n):
            return req
        self.i += 1  # requests preempted meanwhile are no longer running: the walk skips them
        return self._phase_a()

    def _start(self) -> None:
        ctx = self.ctx
        token_cap = self.token_cap
        self.reserve = (
            0 if token_cap is None else max(0, ctx.config.max_num_batched_tokens - token_cap)
        )
        self.threshold = ctx.config.prefill_cap(ctx.num_eligible)
        running_order = self.running_order
        self.live = running_order is None
        if self.live:
            self.order = ctx.running  # walked as is until the first shortage, then a snapshot
        elif isinstance(running_order, (list, tuple)):
            self.order = running_order
        else:
            self.order = list(running_order)
        self.i = 0

    def _phase_a(self) -> Request | None:
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
            if self.live:  # preemptions will shrink ``ctx.running``: walk a copy from here on
                order = self.order = list(order)
                self.live = False
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

    def _phase_b(self) -> None:
        self.state = 2
        self.req = None
        ctx = self.ctx
        if not ctx.preempted and self.admit:
            admit_waiting(
                ctx, self.threshold, reserve=self.reserve, seq_cap=self.seq_cap,
                order=self.waiting_order,
            )  # fmt: skip


def admit_waiting(
    ctx: StepContext,
    threshold: int,
    *,
    reserve: int = 0,
    seq_cap: int | None = None,
    order: Iterable[Request] | None = None,
    skip: Container | None = None,
) -> None:
    """Phase (b): admit waiting requests in queue order until one does not fit.

    Args:
        ctx: The step's context.
        threshold: The step's cap on one request's new tokens (``EngineConfig.prefill_cap``).
        reserve: Tokens of the budget left unused (``pack``'s ``token_cap``).
        seq_cap: Admit only while fewer than this many requests run.
        order: Requests tried first, in this order (a reordering of a prefix of the queue).
        skip: Requests vLLM passes over in place, trying the ones behind them (async
            scheduling: a preempted request whose stale output is still in flight,
            ``Scheduler.schedule``'s ``skip_request`` in vLLM 0.32.0).
    """
    chunked = ctx.config.enable_chunked_prefill
    max_seqs = ctx.max_num_seqs if seq_cap is None else min(seq_cap, ctx.max_num_seqs)
    running = ctx.running
    waiting = ctx.waiting
    if order is not None:
        for req in order:
            if not (len(running) < max_seqs and ctx.token_budget - reserve > 0):
                return
            if not _try_admit(ctx, req, threshold, reserve, chunked):
                return
    # Queue order; admissions only remove the request at hand, so a snapshot stays exact.
    candidates = iter(list(waiting)) if skip else None
    while ctx.token_budget - reserve > 0 and waiting and len(running) < max_seqs:
        if candidates is None:
            req = waiting.peek()
        else:
            req = next(candidates, None)
            if req is None:
                break
            if req in skip:
                continue
        if not _try_admit(ctx, req, threshold, reserve, chunked):
            break


def _try_admit(ctx: StepContext, req: Request, threshold: int, reserve: int, chunked: bool) -> bool:
    if ctx.surely_blocked(req):  # allocate_slots would return None: skip the lookup
        return False
    hit = ctx.lookup(req)
    n = req.num_tokens - hit[1]
    if 0 < threshold < n:
        n = threshold
    budget = ctx.token_budget - reserve
    if not chunked and n > budget:
        return False  # vLLM without chunked prefill: only whole prompts (and refills) start
    return ctx.admit(req, min(n, budget), hit=hit) is not None


def drive(packer: Packer, victim: Callable[[Request], Request]) -> None:
    """Run a packer to the end, answering each victim request with ``victim(req)``."""
    packer.run(victim)


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
        running = ctx.running
        # The packer's first pass, made here: most steps end in it (no request short of
        # blocks), without building a packer. At a shortage the packer walks on from that
        # request, over a snapshot of the rest, as its own walk would (its first call fails
        # the same allocation again, which changes nothing).
        i = ctx.schedule_in_order(running, 0, threshold=ctx.config.prefill_cap(ctx.num_eligible))
        if i < 0:
            return
        rest = running[i:]
        if priority:
            key = self.victim_key
            victim = lambda req: max(running, key=key)  # noqa: E731
        else:
            victim = lambda req: running[-1]  # noqa: E731
        continue_after_self = priority and self.preemption_rule == "0.33"
        drive(pack(ctx, rest, admit=False, continue_after_self=continue_after_self), victim)

    def schedule(self, ctx: StepContext) -> None:
        """One ``Scheduler.schedule()`` call."""
        self.schedule_running_phase(ctx, self.queue_policy(ctx.config) == "priority")
        if ctx.preempted:
            return
        self.schedule_waiting_phase(ctx)

    def schedule_waiting_phase(self, ctx: StepContext, skip: Container | None = None) -> None:
        """vLLM's second phase: admit waiting requests in queue order until one does not fit.

        ``skip``: see :func:`admit_waiting` (async scheduling's in-flight preempted requests).
        """
        admit_waiting(ctx, ctx.config.prefill_cap(ctx.num_eligible), skip=skip)
