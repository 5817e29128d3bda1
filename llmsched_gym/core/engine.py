"""The discrete-event engine of one instance: the step loop over arrivals, steps and completions.

One engine step is one batch iteration, as in vLLM's ``EngineCore.step``:

1. requests that arrived by the step's start join the waiting queue;
2. the policy builds the batch through a ``StepContext`` (the engine enforces the token budget,
   ``max_num_seqs`` and KV blocks; the policy picks order, admission, chunk sizes and victims);
   a caller may begin the step earlier and fill it itself (``hold_step``, for environments);
3. each scheduled request's ``num_computed_tokens`` advances by its scheduled tokens;
4. the step costs the cost model's time of its batch (``StepPricer.price``); then every request
   whose computed tokens caught up with its tokens samples one; a request that produced its
   last token finishes and frees its blocks (in scheduling order).

When nothing is running or waiting the clock jumps to the next arrival. With ``fast_forward`` on,
stretches in which the schedule provably cannot change (all running requests decode, none
finishes, no waiting request can be admitted, no allocation can fail, no arrival) advance many
steps at once; records and schedule logs are identical either way. A cluster's engines may leave
a stretch that only the next routing decision cut pending and continue it after the decision
(``lazy_stretches``, ``Engine.sync``): an instance that gets no request does not touch its
requests again until the stretch ends or someone reads them.

The rooms of the core, each in its own module (this one re-exports their public names, so
``from llmsched_gym.core.engine import StepContext, SchedulingPolicy`` keeps working):

* ``core/context.py``: the policy interface (``SchedulingPolicy``) and the ``StepContext``;
* ``core/engine.py`` (here): the engine's state, its requests and the step loop;
* ``core/pricing.py``: the ``StepPricer`` that prices steps and decode stretches with the cost
  model, chosen once per engine;
* ``core/fastforward.py``: when a decode stretch may be skipped, how far, where its blocks go;
* ``core/steplog.py``: the schedule log, step records and the engine's listeners;
* ``core/async_loop.py``: vLLM's async scheduling (``Engine.run`` hands its loop over).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Sequence
from typing import IO, Any

import cython
import numpy as np

from llmsched_gym._gc import gc_paused
from llmsched_gym.config import EngineConfig
from llmsched_gym.core import fastforward as _ff  # a module: it cimports Engine (its .pxd)
from llmsched_gym.core.context import (
    SchedulingPolicy,
    StepContext,
    check_admit,
    check_admit_tokens,
    check_oracle,
    check_policy_settings,
    check_schedule_running,
)
from llmsched_gym.core.job import Job, JobTracker
from llmsched_gym.core.pricing import step_pricer
from llmsched_gym.core.queues import FCFSQueue, PriorityQueue
from llmsched_gym.core.request import Request, RequestSpec, RequestStatus, remove_identical
from llmsched_gym.core.steplog import (
    STEP_DTYPES,
    new_step_records,
    record_step,
    step_line,
    write_line,
)
from llmsched_gym.errors import ConfigError, PolicyError, TraceError
from llmsched_gym.kv.manager import KVCacheManager, cdiv
from llmsched_gym.metrics.columns import StepColumn

__all__ = [
    "Engine",
    "SchedulingPolicy",
    "StepContext",
    "check_admit",
    "check_admit_tokens",
    "check_oracle",
    "check_schedule_running",
]

_STALL_LIMIT = 10_000
_LIVELOCK_PREEMPTIONS = 100
"""Preemptions within a stretch of more than ``_STALL_LIMIT`` steps in which no request sampled a
token that make the engine call it a livelock (preempt / re-admit without progress)."""
_RUNNING = RequestStatus.RUNNING


class Engine:
    """One simulated instance: KV cache, queues, clock, policy and cost model."""

    def __init__(
        self,
        config: EngineConfig,
        policy: SchedulingPolicy,
        cost_model: Any,
        *,
        fast_forward: bool = True,
        schedule_log: IO[str] | None = None,
        record_steps: bool = False,
    ) -> None:
        check_policy_settings(config, policy)
        self._plan: _ff.PendingStretch | None = None
        """A decode stretch advanced on the clock but not yet applied (``lazy_stretches``)."""
        self.lazy_stretches = False
        """Let ``advance`` leave a stretch cut only by ``until`` pending (see ``sync``)."""
        self.config = config
        self.policy = policy
        self.cost_model = cost_model
        self.pricer = step_pricer(cost_model)
        """Prices steps and decode stretches as the cost model asks (``core/pricing.py``)."""
        self.fast_forward = fast_forward
        self.async_scheduling = config.async_scheduling
        self.schedule_log = schedule_log
        self.record_steps = record_steps
        self._kv = KVCacheManager(
            config.num_gpu_blocks, config.block_size, config.enable_prefix_caching
        )
        self._running: list[Request] = []
        if policy.queue_policy(config) == "priority":
            self.waiting: FCFSQueue | PriorityQueue = PriorityQueue(policy.priority_key)
        else:
            self.waiting = FCFSQueue()
        self.now = 0.0
        self.num_steps = 0
        self.num_ff_steps = 0
        self.num_preemptions = 0
        self._stall = 0
        self._unsampled = self._unsampled_preemptions = 0
        self._until = float("inf")
        self.finished: list[Request] = []
        self.aborted: list[Request] = []
        """Requests cancelled before they finished (``RequestSpec.cancel_time``), in abort
        order; ``finish_time`` holds when the engine aborted them."""
        self.unlogged_aborts: list[str] = []
        """Aborted since the last schedule-log line: that line's ``aborted`` (logs only)."""
        self._cancels: list[tuple[float, int, Request]] = []
        """Heap of (cancel_time, arrival seq, request) of joined requests that have one."""
        self._pending: list[RequestSpec] = []
        self._next_arrival = 0
        self.jobs: JobTracker | None = None
        """Job DAGs (``add_jobs``): releases stage requests as their predecessors finish."""
        self._external: dict[str, int] = {}
        """Request id -> prompt tokens whose KV arrives with it (``enqueue(computed_tokens=)``)."""
        self.finish_listeners: list[Callable[[list[Request], float], None]] = []
        """Called with (finished requests, finish time) after they free their blocks."""
        self.token_listeners: list[Callable[[list[Request], float], None]] = []
        """Called with (requests that each delivered one output token, its time) after every
        step that sampled, and per step of a fast-forwarded stretch (``core/steplog.py``)."""
        self.batch_listeners: list[Callable[[StepContext, float, list[Request]], None]] = []
        """Called with (the step's context, its end, requests it finishes) after every step
        whose batch the policy built, before its finishers free their blocks; never for a
        fast-forwarded stretch, which only decodes (``core/steplog.py``)."""
        self._seq = 0
        self.waiting_tokens = 0
        """Tokens left to compute over the waiting queue (kept incrementally)."""
        self.running_tokens = 0
        """Tokens left to compute over the running requests (kept incrementally)."""
        self.running_prefills = 0
        """Running requests with more than one token left to compute (kept incrementally)."""
        self.ctx = StepContext(self)
        # Inter-token latencies as (gap, multiplicity) runs; identical gaps share one entry.
        self.itl_values: list[float] = []
        self.itl_weights: list[int] = []
        self._steps: dict[str, list] | None = new_step_records() if record_steps else None
        policy.reset(self)

    # -- state a pending stretch leaves behind ------------------------------------------------
    @property
    def running(self) -> list[Request]:
        """Running requests in admission order (a pending stretch is applied first)."""
        if self._plan is not None:
            self.sync()
        return self._running

    @property
    def kv(self) -> KVCacheManager:
        """The KV cache manager (a pending stretch is applied first)."""
        if self._plan is not None:
            self.sync()
        return self._kv

    @property
    def num_running(self) -> int:
        """Requests in the running batch (no stretch ends while one is pending)."""
        return len(self._running)

    @property
    def num_free_blocks(self) -> int:
        """Free KV blocks at the clock, counting a pending stretch's allocations (no apply)."""
        free = self._kv.pool.num_free
        plan = self._plan
        if plan is None:
            return free
        return free - plan.allocations(len(plan.durations))

    @property
    def prefix_cache_counts(self) -> tuple[int, int]:
        """(hit tokens, queried tokens) of prefix lookups so far (decode steps change neither)."""
        kv = self._kv
        return kv.hits, kv.queries

    def peek_running(self) -> tuple[list[Request], int, dict[str, Any] | None]:
        """The running list without applying a pending stretch: ``(running, lag, memo)``.

        While ``lag`` > 0 every running request is a pure decode whose ``num_computed_tokens``,
        ``num_tokens`` and ``num_output_tokens`` are each ``lag`` short of their values at the
        clock, and none finishes before the stretch is applied. ``memo`` (None without a pending
        stretch) is a dict that lives as long as the stretch: readers may keep aggregates of the
        lagging counters there and shift them by ``lag`` on later reads. Read-only: the list is
        the engine's.
        """
        plan = self._plan
        if plan is None:
            return self._running, 0, None
        return self._running, len(plan.durations), plan.memo

    def sync(self) -> None:
        """Apply a pending decode stretch to the requests, KV blocks and records.

        With ``lazy_stretches`` (clusters set it), ``advance`` may stop a fast-forwarded stretch
        at ``until`` without touching the requests: the clock moves, and the next ``advance``
        continues the same stretch. Everything that reads or changes the rest of the state
        (``running``, ``kv``, ``step``, ``enqueue``...) applies it first; the result is the
        state stepping would have reached. ``num_steps``, ``itl_values``, step records and the
        token listeners lag until then (listeners then hear each step's tokens with its time).
        """
        plan = self._plan
        if plan is None:
            return
        self._plan = None
        self.now = plan.starts[0]
        _ff.advance_decode_stretch(self, len(plan.durations), plan.durations, plan.starts)

    # -- requests ----------------------------------------------------------------------------
    def add_requests(self, specs: Sequence[RequestSpec]) -> None:
        """Queue specs for arrival (validated against this engine's KV capacity)."""
        if self._plan is not None:
            self.sync()
        self._check_specs(specs)
        self._pending.extend(specs)
        self._pending[self._next_arrival :] = sorted(
            self._pending[self._next_arrival :], key=lambda s: s.arrival_time
        )

    def add_jobs(self, jobs: Sequence[Job]) -> None:
        """Queue jobs: root stages arrive with the job, later stages when predecessors finish.

        Requests of fixed stages are validated now; ``build`` stages when they are released.
        """
        if self._plan is not None:
            self.sync()
        for job in jobs:
            for stage in job.stages:
                self._check_specs(stage.requests, offset=job.arrival_time)
                for spec in stage.requests:
                    if spec.cancel_time is not None:
                        raise ConfigError(
                            f"job {job.job_id!r}: request {spec.request_id!r} has a cancel_time; "
                            "a job cannot lose a request (cancel_time is for single requests)"
                        )
        if self.jobs is None:
            self.jobs = JobTracker()
        self.add_requests(self.jobs.add(jobs))

    def _check_specs(
        self, specs: Sequence[RequestSpec], offset: float = 0.0, allow_past: bool = False
    ) -> None:
        bs, usable = self.config.block_size, self.config.num_gpu_blocks - 1
        if self.config.max_model_len is not None:  # admission refuses these before the engine
            self.config.check_request_lengths(specs, "engine")
        for spec in specs:
            cancel = spec.cancel_time
            if cancel is not None and not cancel >= spec.arrival_time:
                raise TraceError(
                    f"request {spec.request_id!r}: cancel_time={cancel!r} must be a number >= "
                    f"its arrival_time={spec.arrival_time!r}"
                )
            longest = spec.prompt_len + min(spec.output_len, spec.max_tokens) - 1
            if (
                not self.config.enable_chunked_prefill
                and longest > self.config.max_num_batched_tokens
            ):
                raise TraceError(
                    f"request {spec.request_id!r} can never be scheduled whole: with "
                    f"enable_chunked_prefill=false its prompt (or refill after a preemption) of "
                    f"up to {longest} tokens must fit max_num_batched_tokens="
                    f"{self.config.max_num_batched_tokens} (vLLM requires max_num_batched_tokens "
                    ">= max_model_len)"
                )
            need = cdiv(longest, bs)
            if need > usable:
                raise TraceError(
                    f"request {spec.request_id!r} can never fit the KV cache: prompt_len="
                    f"{spec.prompt_len} + output_len={spec.output_len} needs {need} blocks of "
                    f"{bs} tokens but num_gpu_blocks={self.config.num_gpu_blocks} leaves {usable} "
                    "usable (block 0 is reserved); raise num_gpu_blocks or drop the request"
                )
            if not allow_past and offset + spec.arrival_time < self.now:
                raise TraceError(
                    f"request {spec.request_id!r} arrives at {spec.arrival_time} s, before the "
                    f"engine clock {self.now} s"
                )

    def enqueue(self, spec: RequestSpec, computed_tokens: int = 0) -> None:
        """Add one request routed to this engine (clusters and routers use this).

        It may have arrived before the clock (while a step was running): it joins at the next step.
        ``computed_tokens`` (PD hand-off) is a prompt prefix whose KV arrives with the request:
        at its first admission those tokens count as computed (blocks are allocated for them
        then, no compute is charged), as vLLM's external KV of a disaggregated prefill.
        """
        if self._plan is not None:
            self.sync()
        self._check_specs([spec], allow_past=True)
        if computed_tokens:
            if not 0 < computed_tokens < spec.prompt_len:
                raise TraceError(
                    f"request {spec.request_id!r}: computed_tokens={computed_tokens} must be "
                    f"between 1 and prompt_len - 1 = {spec.prompt_len - 1}"
                )
            self._external[spec.request_id] = computed_tokens
        i = bisect.bisect_right(
            self._pending, spec.arrival_time, lo=self._next_arrival, key=_arrival_time
        )
        self._pending.insert(i, spec)

    def _release(self, specs: list[RequestSpec]) -> None:
        """Insert released stage requests into the arrivals, after equal arrival times."""
        self._check_specs(specs)
        pending = self._pending
        for spec in specs:
            i = bisect.bisect_right(
                pending, spec.arrival_time, lo=self._next_arrival, key=_arrival_time
            )
            pending.insert(i, spec)

    @cython.locals(req=Request, i=cython.long, bs=cython.long, pending=list)
    def _admit_arrivals(self) -> None:
        """Requests that arrived by the clock join; then those cancelled by it are aborted.

        vLLM's engine core takes new requests and aborts from its input queue between steps,
        before ``schedule()``: the same point for both.
        """
        pending, i, now = self._pending, self._next_arrival, self.now
        if i < len(pending) and pending[i].arrival_time <= now:
            bs = self.config.block_size
            while i < len(pending) and pending[i].arrival_time <= now:
                spec = pending[i]
                req = Request(spec, self._seq, bs)
                self._seq += 1
                if self._external:  # PD hand-off (enqueue with computed_tokens)
                    req.num_external_tokens = self._external.pop(req.request_id, 0)
                self.waiting.add(req)
                self.waiting_tokens += req.num_tokens
                if spec.cancel_time is not None:
                    heapq.heappush(self._cancels, (spec.cancel_time, req.seq, req))
                if spec.output_token_ids is not None:  # (KVCacheManager.output_keys)
                    self._kv.output_keys = True
                i += 1
            self._next_arrival = i
        if self._cancels and self._cancels[0][0] <= now:
            self._abort_due()

    @cython.locals(req=Request, left=cython.long)
    def _abort_due(self) -> None:
        """Abort every unfinished request whose ``cancel_time`` has come, earliest first.

        As vLLM's ``Scheduler.finish_requests(request_id, FINISHED_ABORTED)`` (one call per
        client's abort): the request leaves its queue and frees its blocks, like a finished
        one (``_free_request``); an output still in flight for it (async scheduling) is dropped.
        Ties in ``cancel_time`` go in arrival order.
        """
        cancels, now = self._cancels, self.now
        while cancels and cancels[0][0] <= now:
            req = heapq.heappop(cancels)[2]
            if req.status is RequestStatus.FINISHED:
                continue
            if req.status is _RUNNING:
                remove_identical(self._running, req)
                left = req.num_tokens - req.num_computed_tokens
                self.running_tokens -= left
                if left > 1:
                    self.running_prefills -= 1
            else:
                self.waiting.remove(req)
                self.waiting_tokens -= req.num_tokens
            req.status = RequestStatus.FINISHED_ABORTED
            req.finish_time = now
            req.num_output_placeholders = 0
            self._kv.free(req)
            self.aborted.append(req)
            if self.schedule_log is not None:
                self.unlogged_aborts.append(req.request_id)

    def next_cancel_time(self) -> float:
        """The earliest pending ``cancel_time`` of a joined request (inf: none).

        Fast-forwarded stretches end before it, as they end before the next arrival.
        """
        return self._cancels[0][0] if self._cancels else float("inf")

    # -- the loop ----------------------------------------------------------------------------
    def run(
        self, until: float | None = None, progress: Callable[[int], None] | None = None
    ) -> None:
        """Run until all requests finish, or to the first step starting at or after ``until``."""
        if self.async_scheduling:
            if until is not None:
                raise ConfigError(
                    "async_scheduling=True: Engine.run runs to the end (until must be None)"
                )
            from llmsched_gym.core.async_loop import AsyncLoop

            with gc_paused():
                AsyncLoop(self).run(progress)
            return
        limit = float("inf") if until is None else until
        last_done = 0
        with gc_paused():  # the loop makes no reference cycles; see llmsched_gym._gc
            while self.advance(limit):
                if progress is not None and len(self.finished) != last_done:
                    progress(len(self.finished) - last_done)
                    last_done = len(self.finished)
        self.sync()

    def next_event_time(self) -> float:
        """When this engine next acts: the clock if it has work, else its next arrival (inf)."""
        if self._running or self.waiting:
            return self.now
        if self._next_arrival < len(self._pending):
            return max(self.now, self._pending[self._next_arrival].arrival_time)
        return float("inf")

    def next_finish_start(self, stop: float) -> float:
        """A lower bound of when this engine's next step that may finish a request starts.

        Valid until a request is added (``enqueue``); at least ``next_event_time()``. In a
        pending decode stretch it is the stretch's last step (``fastforward.finish_start``,
        which prices steps ahead only while they start before ``stop``). A cluster lets other
        instances run ahead to it: no stage or hand-off can come from here before.
        """
        return _ff.finish_start(self, stop)

    def _ready(self, until: float) -> bool:
        """Admit arrivals (jumping an idle clock to the next one); True if a step starts < until."""
        self._admit_arrivals()
        while not self._running and not self.waiting:
            if self._next_arrival >= len(self._pending):
                return False
            t = self._pending[self._next_arrival].arrival_time
            if t >= until:
                return False
            self.now = max(self.now, t)
            self._admit_arrivals()
        return self.now < until

    def advance(self, until: float = float("inf")) -> bool:
        """One unit of progress: a fast-forwarded stretch or one step, starting before ``until``.

        Arrivals up to the clock join first; an idle clock jumps to the next arrival. Returns
        False (and does nothing) when no request is left or the next step would start at or
        after ``until``. A cluster interleaves its instances with this.
        """
        if self.async_scheduling:
            _reject_async()
        if self._plan is not None:
            return _ff.continue_stretch(self, until)
        if not self._ready(until):
            return False
        self._until = until
        if not (self.fast_forward and _ff.try_fast_forward(self)):
            self._step()
        return True

    def advance_to_decision(self, until: float = float("inf")) -> bool:
        """Advance through idle time and fast-forwardable stretches to the next policy step.

        True when there is one (set the decision, then call ``step``); False when no request is
        left or that step would start at or after ``until``.

        Environments sit on these decision points: a stretch the engine fast-forwards is one
        whose schedule no decision could change.
        """
        if self.async_scheduling:
            _reject_async()
        if self._plan is not None:
            self.sync()
        while self._ready(until):
            self._until = until
            if not (self.fast_forward and _ff.try_fast_forward(self)):
                return True
        return False

    def hold_step(self) -> StepContext:
        """Begin the next step's batch now and keep it open for the caller; returns ``ctx``.

        Call it at a decision (after ``advance_to_decision`` returned True). The caller may then
        schedule on the returned context over several calls (an environment asking an agent
        for each pick or victim); the next ``step()`` executes that batch as it stands: the
        policy's ``schedule`` still runs, on the held context, instead of on a fresh one.
        ``ctx.held`` is True until then.
        """
        if self.async_scheduling:
            _reject_async()
        if self._plan is not None:
            self.sync()
        ctx = self.ctx
        ctx._begin(self.now, self.num_steps)
        ctx._held = True
        return ctx

    def step(self) -> bool:
        """Execute exactly one engine step (no fast-forward); False when nothing is left to do.

        Arrivals up to the clock join first; when idle, the clock jumps to the next arrival.
        A step begun by ``hold_step`` is executed with what the caller scheduled on it.
        """
        if self.async_scheduling:
            _reject_async()
        if self._plan is not None:
            self.sync()
        self._admit_arrivals()
        while not self._running and not self.waiting:
            if self._next_arrival >= len(self._pending):
                return False
            self.now = max(self.now, self._pending[self._next_arrival].arrival_time)
            self._admit_arrivals()
        self._step()
        return True

    @cython.locals(ctx="_StepContext", num_partial=cython.long)
    def _step(self) -> None:
        """Execute one step: steps 2-4 of the module docstring, then the progress checks.

        The policy builds the batch on ``ctx`` (begun now, or held open by ``hold_step``); the
        pricer prices it; ``_sample`` advances the scheduled requests and samples a token for
        each that caught up, at the step's end; the batch listeners hear of the batch;
        finishers free their blocks (``_finish``); the step is logged and recorded; the clock
        moves to the step's end; ``_check_progress`` raises on a deadlock or livelock.
        """
        ctx = self.ctx
        if ctx._held:
            ctx._held = False
        else:
            ctx._begin(self.now, self.num_steps)
        self.policy.schedule(ctx)
        num_free_after_schedule = self._kv.pool.num_free
        duration = self.pricer.price(ctx)
        end = self.now + duration
        finished: list[Request] = []
        num_partial = self._sample(ctx, end, duration, finished)
        if self.batch_listeners:
            for listener in self.batch_listeners:
                listener(ctx, end, finished)
        if finished:
            self._finish(finished, end)
        self.num_preemptions += len(ctx.preempted)
        if self.schedule_log is not None:
            self._log_step(ctx, num_free_after_schedule, finished)
        if self._steps is not None:
            record_step(
                self._steps, self.num_steps, self.now, duration, ctx._tokens, ctx._num_prefill,
                ctx._num_decode, len(ctx.new), len(ctx.resumed), len(ctx.preempted),
                len(finished), len(self._running), len(self.waiting), num_free_after_schedule,
            )  # fmt: skip
        self.now = end
        self.num_steps += 1
        self._check_progress(ctx, num_partial)

    @cython.locals(
        ctx="_StepContext",
        req=Request,
        n=cython.long,
        c=cython.long,
        t=cython.long,
        o=cython.long,
        same_gap=cython.long,
        own_gaps=cython.long,
        num_partial=cython.long,
        partial_multi=cython.long,
        partial_to_one=cython.long,
        scheduled=dict,
        finished=list,
        sampled=list,
    )
    def _sample(self, ctx: StepContext, end: float, duration: float, finished: list) -> int:
        """Advance the batch's requests; each that caught up samples one token at ``end``.

        vLLM's ``_update_after_schedule`` then ``update_from_output``: computed tokens advance
        by the scheduled tokens; a partial prefill chunk samples nothing; a request that
        produced its last token joins ``finished`` (scheduling order, the order they free in).
        Keeps the inter-token gaps (weighted samples: the step's duration once for the requests
        that also sampled in the previous step, and one sample per run of requests, in
        scheduling order, that last sampled at the same earlier time) and the running
        counters, tells the token listeners, and returns the number of partial chunks.
        """
        now = self.now
        scheduled = ctx.scheduled
        sampled = [] if self.token_listeners else None
        same_gap = num_partial = partial_multi = partial_to_one = own_gaps = 0
        own_last = None
        for req, n in scheduled.items():
            c = req.num_computed_tokens + n
            req.num_computed_tokens = c
            req.num_computed_total += n
            t = req.num_tokens
            if c < t:
                num_partial += 1
                if n > 1:
                    partial_multi += 1
                if t - c == 1:
                    partial_to_one += 1
                continue  # partial prefill chunk: nothing sampled
            req.num_tokens = t + 1
            o = req.num_output_tokens + 1
            req.num_output_tokens = o
            last = req.last_token_time
            if last is None:
                req.first_token_time = end
            elif last == now:
                same_gap += 1
            elif own_gaps and last == own_last:
                own_gaps += 1
            else:  # a gap of its own: one sample per run of requests whose last token was alike
                if own_gaps:
                    self.itl_values.append(end - own_last)
                    self.itl_weights.append(own_gaps)
                own_last = last
                own_gaps = 1
            req.last_token_time = end
            if sampled is not None:
                sampled.append(req)
            if o >= req._output_len:
                finished.append(req)
        if own_gaps:
            self.itl_values.append(end - own_last)
            self.itl_weights.append(own_gaps)
        if same_gap:
            self.itl_values.append(duration)
            self.itl_weights.append(same_gap)
        # Tokens left over running requests: each scheduled one computed n and sampled one.
        self.running_tokens += len(scheduled) - num_partial - ctx._tokens
        # Prefills that sampled (n > 1) or whose next chunk is one token now decode; partial
        # ones scheduled with n = 1 had more than one token left and still do unless at one.
        self.running_prefills -= ctx._num_prefill - partial_multi + partial_to_one
        if sampled:
            for listener in self.token_listeners:
                listener(sampled, end)
        return num_partial

    @cython.locals(ctx="_StepContext", num_partial=cython.long)
    def _check_progress(self, ctx: StepContext, num_partial: int) -> None:
        """Raise the ``PolicyError`` of a deadlock or a livelock after a step.

        A deadlock: nothing scheduled and nothing preempted for ``_STALL_LIMIT`` steps. A
        livelock: no token sampled for ``_STALL_LIMIT`` steps while requests kept being
        preempted (preemptions reset the stall count, so a policy that preempts and re-admits
        without ever sampling is caught here). Sampled tokens are never undone, so a policy
        that progresses resets both.
        """
        scheduled = ctx.scheduled
        if scheduled or ctx.preempted:
            self._stall = 0
        else:
            self._stall += 1
            if self._stall > _STALL_LIMIT:
                raise PolicyError(
                    f"policy {self.policy.name!r} scheduled nothing for {_STALL_LIMIT} "
                    f"consecutive steps with {len(self.waiting)} waiting and "
                    f"{len(self._running)} running requests at t={self.now:.3f} s (a deadlock)"
                )
        if len(scheduled) > num_partial:
            self._unsampled = self._unsampled_preemptions = 0
        else:
            self._unsampled += 1
            self._unsampled_preemptions += len(ctx.preempted)
            if (
                self._unsampled > _STALL_LIMIT
                and self._unsampled_preemptions >= _LIVELOCK_PREEMPTIONS
            ):
                raise self._livelock()

    def _livelock(self) -> PolicyError:
        """The error of a livelock, naming the request preempted most."""
        most = max((*self._running, *self.waiting), key=lambda r: (r.num_preemptions, r.request_id))
        return PolicyError(
            f"policy {self.policy.name!r} sampled no token for {_STALL_LIMIT} steps "
            f"while preempting {self._unsampled_preemptions} times, at t={self.now:.3f} "
            f"s with {len(self.waiting)} waiting and {len(self._running)} running "
            f"requests (a livelock); request {most.request_id!r} was preempted "
            f"{most.num_preemptions} times"
        )

    @cython.locals(req=Request)
    def _finish(self, finished: list[Request], end: float) -> None:
        """Finish requests at ``end``: free their blocks in the given (scheduling) order."""
        for req in finished:
            req.status = RequestStatus.FINISHED
            req.finish_time = end
            self.running_tokens -= req.num_tokens - req.num_computed_tokens
            self._kv.free(req)
            self.policy.on_finish(req, end)
        running = self._running
        if len(finished) <= 4:
            for req in finished:
                remove_identical(running, req)  # order kept
        else:
            done = set(finished)
            running[:] = [r for r in running if r not in done]
        self._finished(finished, end)

    def _finished(self, finished: list[Request], end: float) -> None:
        """After requests finished at ``end`` and freed their blocks (the async loop's too).

        They join ``finished``, the finish listeners hear of them, and job stages waiting for
        them are released.
        """
        self.finished.extend(finished)
        for listener in self.finish_listeners:
            listener(finished, end)
        if self.jobs is not None:
            released: list[RequestSpec] = []
            for req in finished:
                released.extend(self.jobs.on_finish(req.spec, end))
            if released:
                self._release(released)

    # -- logs and records (core/steplog.py) ---------------------------------------------------
    def _log_step(self, ctx: StepContext, num_free: int, finished: list[Request]) -> None:
        line = step_line(
            self.num_steps,
            self.now,
            ctx,
            [r.request_id for r in finished],
            num_free,
            len(self._running),
            len(self.waiting),
        )
        if self.unlogged_aborts:
            line["aborted"] = self.take_unlogged_aborts()
        write_line(self.schedule_log, line)

    def take_unlogged_aborts(self) -> list[str]:
        """Ids aborted since the last schedule-log line (the next line's ``aborted``)."""
        ids, self.unlogged_aborts = self.unlogged_aborts, []
        return ids

    def step_columns(self) -> dict[str, np.ndarray]:
        """Per-step records as columns (needs ``record_steps=True``)."""
        if self._plan is not None:
            self.sync()
        if self._steps is None:
            raise ConfigError("per-step records were not enabled (record_steps=False)")
        cols = {k: np.fromiter(v, STEP_DTYPES[k], len(v)) for k, v in self._steps.items()}
        cols[StepColumn.KV_CACHE_USAGE.value] = 1.0 - cols["num_free_blocks"] / (
            self.config.num_gpu_blocks - 1
        )
        return cols


def _reject_async() -> None:
    raise ConfigError(
        "async_scheduling=True is supported by Engine.run only (the simulate command and "
        "llmsched_gym.simulate): step-by-step callers (environments, clusters, the live "
        "backend) drive the synchronous engine; set async_scheduling to false there"
    )


def _arrival_time(spec: RequestSpec) -> float:
    return spec.arrival_time
