"""Async scheduling: vLLM 0.32.0's ``AsyncScheduler`` driven one step ahead of the model.

With ``EngineConfig.async_scheduling`` on, ``Engine.run`` hands its loop to ``AsyncLoop``. It
reproduces, step for step, what vLLM 0.32.0 does on a GPU by default
(``v1/engine/core.py``, ``EngineCore.step_with_batch_queue`` with a batch queue of depth 2, and
``v1/core/sched/async_scheduler.py``, ``AsyncScheduler``): batch N+1 is scheduled while batch N
runs, before N's sampled tokens are known. The differential test checks it against vLLM's own
``AsyncScheduler`` (``tests/differential``, ``--async-scheduling``).

Clock (the same as the oracle's ``_run_async``):

* ``now`` is the engine core's clock and ``gpu_free`` the end of the last batch on the GPU;
* with no request in the scheduler and no batch queued, ``now`` jumps to the next arrival;
* each iteration first admits the requests that arrived by ``now``;
* a batch scheduled at ``now`` starts at ``max(now, gpu_free)`` and lasts the cost model's
  step time, or 0 s when it has no tokens (vLLM executes nothing then);
* the engine core returns at once while the queue holds fewer than 2 batches and the new batch
  has tokens or the scheduler has requests; otherwise it waits for the oldest batch, sets
  ``now = max(now, its end)`` and applies its output.

What a request sees (vLLM 0.32.0 ``v1/core/sched/scheduler.py`` and ``async_scheduler.py``):

* a request that will sample when its batch runs gets an output placeholder at schedule time
  (``AsyncScheduler._update_after_schedule``), so it is scheduled again for one more token
  before that token is known (``num_new = num_tokens + placeholders - num_computed``);
* max_tokens guard (``Scheduler.schedule``, running phase): a running request with a placeholder
  whose in-flight token surely is its ``max_tokens``-th is not scheduled again;
* a token is appended when its batch's output is applied; the request finishes then (at the
  batch's end time) and frees its blocks; a finished request's later in-flight output is
  dropped (``update_from_output``);
* prefix-cache registration at apply time covers only the tokens whose KV is computed and
  known: ``cache_blocks(request, num_computed_tokens - num_output_placeholders)``
  (``AsyncScheduler._update_request_with_output``, running requests only);
* preemption zeroes the placeholders and marks the in-flight tokens stale
  (``Scheduler._preempt_request``); stale output is still delivered (it may finish the waiting
  request) without touching the placeholders, and a waiting request with stale output in
  flight is skipped by admission, the requests behind it are still tried
  (``Scheduler.schedule``, waiting phase, ``skip_request``).

One schedule-log line per batch that scheduled tokens or preempted a request, written when its
output is applied: ``time`` is the batch's start, ``scheduled`` / ``new`` / ``resumed`` /
``preempted`` / ``num_free_blocks`` / ``num_running`` / ``num_waiting`` are read right after its
scheduling, ``finished`` lists the requests whose last token that batch's output delivered.
``step`` counts logged batches; so does ``Engine.num_steps``.

Only the ``vllm-v1`` scheduler runs asynchronously (the scheduling rules above are vLLM's), and
only through ``Engine.run``. With ``fast_forward`` on, steady decode stretches advance many
batches at once (``_try_stretch``); logs, records and listeners see what stepping them gives:

* the state: one batch in flight, batch ``k``, that holds every running request and samples
  all of them, each then holding one placeholder with its known tokens computed; no stale
  output, no admissible waiting request. Batch ``k`` may be a request's full prefill (its
  state is then a decoder's), and a finish not yet reported does not matter (the next
  schedule reports it; with requests running it changes nothing else);
* stepping it is: schedule batch ``k + i`` (every running request, one token each), then apply
  batch ``k + i - 1``, for ``i = 1..j``, leaving batch ``k + j`` in flight; it repeats until a
  request's last token is delivered, an arrival, or blocks run out;
* batch ``k + i`` is scheduled when batch ``k + i - 1`` starts (its predecessor's end), so an
  arrival ends the stretch with the first batch that starts at or after it;
* the stretch may end with the finish of the requests closest to their last token, as stepping
  makes it: the last schedule leaves out the requests whose token in flight is their last
  (the ``max_tokens`` guard), then that token's output finishes them. It does so only when the
  guard leaves out exactly those requests and someone is left to schedule; the next stretch
  may then start at once.

Size: one module because the fast-forward applies the loop's own state (its batch queue, the
placeholders, ``apply`` and ``_finish``) inside the one extension type, ``AsyncLoop``.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import cython

from llmsched_gym.core.fastforward import (
    free_after_steps,
    head_fits,
    place_blocks,
    steps_before_hit_grows,
    steps_within_blocks,
    stretch_end,
)
from llmsched_gym.core.request import Request, RequestStatus, remove_identical
from llmsched_gym.core.steplog import (
    batch_line,
    record_decode_steps,
    record_step,
    step_line,
    write_decode_lines,
    write_line,
)
from llmsched_gym.errors import PolicyError

if TYPE_CHECKING:
    from llmsched_gym.core.context import StepContext
    from llmsched_gym.core.engine import Engine

_STALL_LIMIT = 10_000
"""Consecutive empty schedules (no tokens, no preemption) that make the loop call a deadlock."""

BATCH_QUEUE_SIZE = 2
"""vLLM 0.32.0's batch queue depth under async scheduling (``max_concurrent_batches``)."""

_INF = float("inf")
_RUNNING = RequestStatus.RUNNING
_FINISHED = RequestStatus.FINISHED
_ABORTED = RequestStatus.FINISHED_ABORTED


class _Batch:
    """A scheduled batch waiting for its output (one entry of the engine core's queue)."""

    __slots__ = ("scheduled", "samplers", "start", "end", "line", "row")

    def __init__(
        self,
        scheduled: dict[Request, int],
        samplers: list[bool],
        start: float,
        end: float,
        line: dict[str, Any] | None,
        row: list[Any] | None,
    ) -> None:
        self.scheduled = scheduled
        """Tokens per request in scheduling order (vLLM's ``num_scheduled_tokens``)."""
        self.samplers = samplers
        """Per entry of ``scheduled``: whether it samples a token when the batch runs (it is
        not a partial prefill chunk)."""
        self.start = start
        self.end = end
        self.line = line
        """Its schedule-log line without ``finished``; None for a batch that is not logged."""
        self.row = row
        """Its per-step record, ``record_step``'s arguments after the columns, without
        ``num_finished`` (``record_steps``); None for a batch that is not recorded."""


def _any_in_prefill_phase(running: list) -> bool:
    """Whether a running request is priced as a prefill item (``cpdef`` takes no genexpr)."""
    for req in running:
        if req.in_prefill_phase:
            return True
    return False


class AsyncLoop:
    """Runs an ``Engine`` under vLLM 0.32.0's async scheduling (see the module docstring).

    Args:
        engine: The engine; its config has ``async_scheduling`` on and its policy is vLLM V1's.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.stale: dict[Request, int] = {}
        """vLLM's ``num_stale_output_tokens``: in-flight tokens scheduled before a preemption."""
        self.finished_since_schedule = False
        """vLLM's non-empty ``finished_req_ids``: ``has_requests()`` stays true until the next
        ``schedule()`` tells the workers."""
        self.queue: deque[_Batch] = deque()
        self.gpu_free = engine.now
        policy = engine.policy
        self.priority = policy.queue_policy(engine.config) == "priority"
        """Priority queue and victims (else FCFS: the last admitted is preempted)."""
        self.continue_after_self = self.priority and policy.preemption_rule == "0.33"
        """vLLM 0.33's rule: a self-preempting request does not end the running phase."""

    # -- the engine core ---------------------------------------------------------------------
    def has_requests(self) -> bool:
        """vLLM's ``Scheduler.has_requests``: unfinished requests, or finishes not yet reported."""
        eng = self.engine
        return bool(eng._running or eng.waiting or self.finished_since_schedule)

    @cython.locals(eng="Engine", idle=cython.long, fast_forward=cython.bint)
    def run(self, progress: Any = None) -> None:
        """Run until every request finished (``progress(k)``: k more requests finished).

        The loop of ``EngineCore.step_with_batch_queue`` (vLLM 0.32.0, ``v1/engine/core.py``):
        schedule while the queue has room, else apply the oldest batch's output.
        """
        eng = self.engine
        queue = self.queue
        pending = eng._pending
        last_done = len(eng.finished)
        idle = 0
        fast_forward = eng.fast_forward and eng.policy.fast_forward_safe
        # ``has_requests()`` inlined: running, waiting, or finishes not yet reported.
        while (
            eng._next_arrival < len(pending)
            or eng._running
            or eng.waiting
            or self.finished_since_schedule
            or queue
        ):
            if not (eng._running or eng.waiting or self.finished_since_schedule or queue):
                eng.now = max(eng.now, pending[eng._next_arrival].arrival_time)
            num_aborted = len(eng.aborted)
            eng._admit_arrivals()
            if len(eng.aborted) != num_aborted:
                self._aborted(eng.aborted[num_aborted:])
            if fast_forward and len(queue) == 1 and self._try_stretch():
                if progress is not None and len(eng.finished) != last_done:
                    progress(len(eng.finished) - last_done)  # a stretch may end with finishes
                    last_done = len(eng.finished)
                continue
            if eng._running or eng.waiting or self.finished_since_schedule:
                batch = self.schedule()
                if batch.scheduled or eng.ctx.preempted:
                    idle = 0
                else:
                    idle += 1
                    if idle > _STALL_LIMIT:
                        raise PolicyError(
                            f"async scheduling: {_STALL_LIMIT} consecutive schedules with "
                            f"nothing scheduled, {len(eng.waiting)} waiting and "
                            f"{len(eng._running)} running at t={eng.now:.3f} s (a deadlock)"
                        )
                queue.append(batch)
                if len(queue) < BATCH_QUEUE_SIZE and (
                    batch.scheduled or eng._running or eng.waiting or self.finished_since_schedule
                ):
                    continue
            self.apply(queue.popleft())
            if progress is not None and len(eng.finished) != last_done:
                progress(len(eng.finished) - last_done)
                last_done = len(eng.finished)

    def _aborted(self, aborted: list) -> None:
        """Bookkeeping after ``Engine._abort_due`` aborted ``aborted``.

        vLLM's ``_free_request`` adds the ids to ``finished_req_ids``, so ``has_requests()``
        holds until the next ``schedule()``; an aborted request's stale output no longer counts.
        """
        self.finished_since_schedule = True
        for req in aborted:
            self.stale.pop(req, None)

    # -- fast-forward --------------------------------------------------------------------------
    @cython.locals(
        eng="Engine",
        kv="KVCacheManager",
        req=Request,
        b=_Batch,
        running=list,
        n=cython.long,
        k=cython.long,
        kb=cython.long,
        j=cython.long,
        bs=cython.long,
        m0=cython.long,
        m_last=cython.long,
        n_last=cython.long,
        longest=cython.long,
        left=cython.long,
        slack=cython.long,
        slack_min=cython.long,
        slack_last=cython.long,
        c=cython.long,
        finish=cython.bint,
        may_admit=cython.bint,
        needs_longest=cython.bint,
        pricer="StepPricer",
    )
    def _try_stretch(self) -> bool:
        """Advance a steady decode stretch of ``j`` batches at once; False if it may not.

        The rules are the module docstring's. Identical logs and records (the differential
        test runs this path).
        """
        eng = self.engine
        if self.stale or eng.unlogged_aborts:
            return False
        running = eng._running
        n = len(running)
        if n == 0 or n > eng.config.max_num_batched_tokens:
            return False
        b = self.queue[0]
        if len(b.scheduled) != n or not all(b.samplers):
            return False
        kv = eng._kv
        waiting = eng.waiting
        may_admit = bool(waiting) and n < eng.config.max_num_seqs
        if may_admit and head_fits(kv, waiting.peek()):
            return False  # as the synchronous stretch (``core/fastforward.py``)
        scheduled = b.scheduled
        k = 1 << 62
        m0 = longest = 0
        # The requests closest to their last token (``left == k``): how many, their context
        # sum, and the most batches after which the max_tokens guard stops one of them.
        n_last = m_last = slack_last = 0
        slack_min = 0
        for req in running:
            c = req.num_computed_tokens
            # Batch k may be a full prefill (it samples: the request's state is a decoder's).
            if req.num_output_placeholders != 1 or c != req.num_tokens or req not in scheduled:
                return False
            # Batch k delivers token o + 1, batch k + i - 1 token o + i: no finish while
            # o + i < output_len.
            left = req._output_len - req.num_output_tokens - 1
            # The guard stops scheduling it at batch k + i + 1 once c + i + 1 reaches
            # prompt + max_tokens: ``slack`` batches after its finish would (0: together).
            slack = req.num_prompt_tokens + req.max_tokens - c - 1 - left
            if slack < slack_min:
                slack_min = slack
            if left < k:
                k = left
                n_last = 1
                m_last = c
                slack_last = slack
            elif left == k:
                n_last += 1
                m_last += c
                if slack > slack_last:
                    slack_last = slack
            m0 += c
            if c > longest:
                longest = c
        if k < 1 or slack_min < 0:  # (a guard before a finish: never, output_len <= max_tokens)
            return False
        pricer = eng.pricer
        if pricer.phase_items and _any_in_prefill_phase(running):
            return False
        # Batch k + k delivers the last token of the requests with k left; batch k + k + 1,
        # scheduled before that output, leaves out exactly them when the guard stops each of
        # them there (the others have more left, so the guard cannot stop them). Then the
        # stretch takes that batch and the finish too, if someone is left to schedule.
        finish = slack_last == 0 and n_last < n
        if not finish and k < 2:
            return False
        bs = kv.block_size
        # Blocks for k (+ 1) batches (the finishers' in the last counted: a safe upper bound).
        kb = steps_within_blocks(running, bs, kv.pool.num_free, k + 1 if finish else k)
        if may_admit and kv.output_keys:  # (generated ids fixed: the head's hit may grow)
            kb = steps_before_hit_grows(kv, waiting.peek(), running, kb, 0)
        if finish and kb <= k:
            finish = False
        if kb < k:
            k = kb
        if not finish and k < 2:
            return False
        needs_longest = pricer.needs_longest
        if not needs_longest:
            longest = 0
        durations, starts = pricer.decode_series(
            n, m0, longest, k, b.end, stretch_end(eng._pending, eng._next_arrival, eng._cancels)
        )  # (aborts apply at their cancel time, as arrivals)
        j = len(durations)
        if j < k:
            finish = False
            if j > 0:
                # Cut by the arrival: batch k + j + 1 is scheduled when batch k + j starts,
                # before the arrival too (priced in pieces: the same floats).
                self._price_one(
                    durations, starts, n, m0 + j * n, longest + j if needs_longest else 0
                )
                j += 1
        elif finish:  # batch k + k + 1 is scheduled when batch k + k starts (before t_arr)
            self._price_after_finish(durations, starts, k, n - n_last, m0 - m_last)
            j += 1
        if j < 2:
            return False
        self._advance_stretch(j, durations, starts, finish)
        return True

    def _price_one(
        self, durations: list[float], starts: list[float], n: int, m: int, longest: int
    ) -> None:
        """Append one more decode batch of ``n`` requests (context sum ``m``) to a series."""
        more, more_starts = self.engine.pricer.decode_series(n, m, longest, 1, starts[-1], _INF)
        durations += more
        starts.append(more_starts[1])

    @cython.locals(req=Request, k=cython.long, c=cython.long, longest=cython.long)
    def _price_after_finish(
        self, durations: list[float], starts: list[float], k: int, n: int, m: int
    ) -> None:
        """Append the last batch of a stretch that ends with a finish (batch ``k + k + 1``).

        It decodes the ``n`` requests with more than ``k`` tokens left, whose context sum at
        batch ``k + 1`` is ``m``, one token each.
        """
        longest = 0
        if self.engine.pricer.needs_longest:
            for req in self.engine._running:
                c = req.num_computed_tokens
                if req._output_len - req.num_output_tokens - 1 != k and c > longest:
                    longest = c
            longest += k
        self._price_one(durations, starts, n, m + k * n, longest)

    @cython.locals(
        eng="Engine",
        kv="KVCacheManager",
        req=Request,
        running=list,
        events=list,
        free_after=list,
        finished=list,
        kept=list,
        to_cache=list,
        n=cython.long,
        j=cython.long,
        i=cython.long,
        bs=cython.long,
        c=cython.long,
        t=cython.long,
        pos=cython.long,
        room=cython.long,
        end=cython.long,
        stride=cython.long,
        caching=cython.bint,
        finish=cython.bint,
    )
    def _advance_stretch(
        self, j: int, durations: list[float], starts: list[float], finish: bool
    ) -> None:
        """Apply a stretch of ``j`` batches found by ``_try_stretch`` (see there).

        With ``finish``, batch ``k + j - 1`` delivers the last token of the requests with
        ``j - 1`` left, and batch ``k + j`` leaves them out.
        """
        eng = self.engine
        kv = eng._kv
        pool = kv.pool
        running = eng._running
        n = len(running)
        bs = kv.block_size
        # Batch k's output, as stepping applies it right after batch k + 1 is scheduled (no
        # finish, so nothing batch k + 1's scheduling reads changes with the order).
        self.apply(self.queue.popleft())
        # Block allocations in (batch, running position) order, as stepping makes them.
        events: list[int] = []
        stride = bs * n
        caching = kv.enable_caching
        last_end = starts[j - 1]  # end of batch k + j - 1, the last one applied
        finished: list[Request] = []
        kept = running
        if finish:
            kept = []
        to_cache: list[Request] = []
        pos = 0
        for req in running:
            c = req.num_computed_tokens
            room = len(req.blocks) * bs - c
            # Token o + 1 came with batch k: a finisher's last is batch k + j - 1's.
            if finish and req._output_len - req.num_output_tokens == j - 1:
                end = (j - 1) * n  # scheduled in batches k + 1 .. k + j - 1
                req.num_computed_tokens = c + j - 1
                req.num_computed_total += j - 1
                req.num_output_placeholders = 0
                finished.append(req)
            else:
                end = j * n
                req.num_computed_tokens = c + j
                req.num_computed_total += j
                req.num_output_placeholders = 1
                if finish:
                    kept.append(req)
            if room * n < end:
                events.extend(range(room * n + pos, end + pos, stride))
            pos += 1
            t = req.num_tokens + j - 1
            req.num_tokens = t
            req.num_output_tokens += j - 1
            req.last_token_time = last_end
            # Tokens known with their KV computed end at t - 1 (the last known token's KV is
            # batch k + j's to compute; a finisher's never is): ``apply``'s registration,
            # once the new blocks are in place.
            if caching and (t - 1) // bs > req.num_cached_blocks:
                to_cache.append(req)
        events.sort()
        log = eng.schedule_log
        records = eng._steps
        free_after = None
        if log is not None or records is not None:
            free_after = free_after_steps(events, n, j, pool.num_free)
        place_blocks(pool, running, events, n)
        for req in to_cache:
            kv.cache_blocks(req, req.num_tokens - 1)
        # Batches k + 1 .. k + j - 1 applied: n tokens each, one step's duration apart.
        itl_values = eng.itl_values
        itl_weights = eng.itl_weights
        for i in range(1, j):
            itl_values.append(starts[i] - starts[i - 1])
        itl_weights.extend([n] * (j - 1))
        if eng.token_listeners:
            for i in range(1, j):  # batch k + i's tokens, delivered at its end
                for listener in eng.token_listeners:
                    listener(running, starts[i])
        line = row = None
        if free_after is not None:
            line, row = self._log_stretch(j, starts, durations, free_after, finished, kept)
        n = len(kept)
        self.queue.append(
            _Batch(dict.fromkeys(kept, 1), [True] * n, starts[j - 1], starts[j], line, row)
        )
        self.gpu_free = starts[j]
        self.finished_since_schedule = False  # the stretch's schedules told the workers
        if last_end > eng.now:
            eng.now = last_end
        eng.num_steps += j
        eng.num_ff_steps += j
        if finished:
            self._finish(finished, last_end)

    @cython.locals(
        eng="Engine", running=list, n=cython.long, nf=cython.long, i=cython.long,
        j=cython.long, step0=cython.long,
    )  # fmt: skip
    def _log_stretch(
        self,
        j: int,
        starts: list[float],
        durations: list[float],
        free_after: list[int],
        finished: list[Request],
        kept: list[Request],
    ) -> tuple:
        """Write the log lines and records of a stretch's applied batches, and make its last's.

        Batches ``k + 1 .. k + j - 1`` are written (the last with its finishes); batch ``k + j``'s
        line and record row are returned (None when not kept). Every value is read right after
        its batch's scheduling, so every request still runs.
        """
        eng = self.engine
        running = eng._running
        n = len(running)
        step0 = eng.num_steps
        n_waiting = len(eng.waiting)
        nf = len(finished)
        log = eng.schedule_log
        records = eng._steps
        i = j - 1 if not finished else j - 2
        line = row = None
        if log is not None:
            ids = [r.request_id for r in running]
            if i:
                write_decode_lines(log, step0, starts, free_after, ids, n_waiting, i, [])
            if finished:
                write_line(
                    log,
                    batch_line(
                        step0 + i, starts[i], dict.fromkeys(ids, 1), {}, {}, [],
                        [r.request_id for r in finished], free_after[i], n, n_waiting,
                    ),
                )  # fmt: skip
            line = batch_line(
                step0 + j - 1, starts[j - 1], {r.request_id: 1 for r in kept}, {}, {}, [], [],
                free_after[j - 1], n, n_waiting,
            )  # fmt: skip
        if records is not None:
            if i:
                record_decode_steps(
                    records, step0, starts, durations, free_after, n, n_waiting, i, 0
                )
            if finished:
                record_step(
                    records, step0 + i, starts[i], durations[i], n, 0, n, 0, 0, 0, nf, n,
                    n_waiting, free_after[i],
                )  # fmt: skip
            row = [
                step0 + j - 1, starts[j - 1], durations[j - 1], len(kept), 0, len(kept), 0, 0,
                0, 0, n, n_waiting, free_after[j - 1],
            ]  # fmt: skip
        return line, row

    # -- scheduling ----------------------------------------------------------------------------
    @cython.locals(
        eng="Engine", ctx="StepContext", req=Request, n=cython.long, c=cython.long, p=cython.long
    )
    def schedule(self) -> _Batch:
        """One ``AsyncScheduler.schedule()`` call, queued as a batch."""
        eng = self.engine
        ctx = eng.ctx
        start = max(eng.now, self.gpu_free)
        ctx._begin(start, eng.num_steps)
        self.finished_since_schedule = False
        self._running_phase(ctx)
        if not ctx.preempted:
            # vLLM skips waiting requests whose stale output is still in flight.
            eng.policy.schedule_waiting_phase(ctx, self.stale)
        scheduled = ctx.scheduled
        num_free = eng._kv.pool.num_free
        duration = eng.pricer.price(ctx) if scheduled else 0.0
        end = start + duration
        self.gpu_free = end
        # vLLM's _update_after_schedule (+ AsyncScheduler's): advance computed tokens; a request
        # that is not a partial prefill chunk after it samples, so it gets a placeholder. The
        # chunk test counts the placeholders from before this batch.
        samplers: list[bool] = []
        for req, n in scheduled.items():
            c = req.num_computed_tokens + n
            req.num_computed_tokens = c
            req.num_computed_total += n
            p = req.num_output_placeholders
            if c >= req.num_tokens + p:
                samplers.append(True)
                req.num_output_placeholders = p + 1
            else:
                samplers.append(False)
        line = row = None
        if scheduled or ctx.preempted:
            eng.num_preemptions += len(ctx.preempted)
            step = eng.num_steps
            eng.num_steps += 1
            if eng.schedule_log is not None:  # its ``finished`` is filled in by ``apply``
                line = step_line(
                    step, start, ctx, [], num_free, len(eng._running), len(eng.waiting)
                )
                if eng.unlogged_aborts:
                    line["aborted"] = eng.take_unlogged_aborts()
            if eng._steps is not None:  # its num_finished (index 9) is filled in by ``apply``
                row = [
                    step, start, duration, ctx._tokens, ctx._num_prefill, ctx._num_decode,
                    len(ctx.new), len(ctx.resumed), len(ctx.preempted), 0, len(eng._running),
                    len(eng.waiting), num_free,
                ]  # fmt: skip
        # ctx._begin gives the next step a new dict: the batch keeps this one.
        return _Batch(scheduled, samplers, start, end, line, row)

    @cython.locals(
        eng="Engine",
        kv="KVCacheManager",
        req=Request,
        running=list,
        scheduled=dict,
        caching=cython.bint,
        priority=cython.bint,
        bs=cython.long,
        budget=cython.long,
        threshold=cython.long,
        tokens=cython.long,
        attn=cython.long,
        dkv=cython.long,
        pkv=cython.long,
        n_pre=cython.long,
        n_dec=cython.long,
        i=cython.long,
        p=cython.long,
        c=cython.long,
        n=cython.long,
        end=cython.long,
        t=cython.long,
    )
    def _running_phase(self, ctx: StepContext) -> None:
        """vLLM 0.32.0 ``Scheduler.schedule``, first phase, with async placeholders.

        ``num_new = num_tokens + placeholders - num_computed`` (a request with a token in flight
        is scheduled for the next one); the step's cost features are summed locally and added
        to ``ctx`` at the end (``ctx.preempt`` takes a victim's share off ``ctx`` directly).
        """
        eng = self.engine
        kv = eng._kv
        policy = eng.policy
        priority = self.priority
        threshold = eng.config.prefill_cap(ctx.num_eligible)
        running = ctx.running
        scheduled = ctx.scheduled
        caching = kv.enable_caching
        bs = kv.block_size
        budget = ctx.token_budget
        tokens = attn = dkv = pkv = n_pre = n_dec = 0
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            p = req.num_output_placeholders
            c = req.num_computed_tokens
            # The max_tokens guard: the token in flight surely is the last one allowed.
            if p > 0 and c + 2 - p >= req.num_prompt_tokens + req.max_tokens:
                i += 1
                continue
            n = req.num_tokens + p - c
            if 0 < threshold < n:
                n = threshold
            if n > budget:
                n = budget
            if n <= 0:
                i += 1
                continue
            end = c + n
            if end <= len(req.blocks) * bs:
                # The slots exist: allocate_slots would only register newly full known blocks.
                if caching:
                    t = req.num_tokens
                    if end < t:
                        t = end
                    if t // bs > req.num_cached_blocks:
                        kv.cache_blocks(req, t)
            elif kv.allocate_slots(req, n) is None:
                ok = True
                ctx.token_budget = budget
                while True:
                    if priority:
                        victim = max(running, key=policy.victim_key)
                        if running.index(victim) < i:
                            i -= 1
                    else:
                        victim = running[-1]
                    self._preempt(ctx, victim)
                    if victim is req:
                        ok = False
                        break
                    if kv.allocate_slots(req, n) is not None:
                        break
                budget = ctx.token_budget
                if not ok:
                    if self.continue_after_self:
                        continue
                    break
            scheduled[req] = n
            budget -= n
            tokens += n
            if n == 1:
                dkv += c
                n_dec += 1
            else:
                attn += n * n + 2 * c * n
                pkv += c
                n_pre += 1
            i += 1
        ctx.token_budget = budget
        ctx._tokens += tokens
        ctx._prefill_attn += attn
        ctx._decode_kv += dkv
        ctx._prefill_kv += pkv
        ctx._num_prefill += n_pre
        ctx._num_decode += n_dec

    def _preempt(self, ctx: StepContext, req: Request) -> None:
        """``StepContext.preempt`` plus vLLM's async bookkeeping (``_preempt_request``).

        The in-flight tokens become stale (still delivered, placeholders untouched) and the
        placeholders are zeroed; ``refill_tokens`` is the sequence known at preemption.
        """
        ctx.preempt(req)
        req.num_output_placeholders = 0
        # vLLM's num_in_flight_tokens: its tokens in the batches queued, not applied yet.
        stale = 0
        for batch in self.queue:
            stale += batch.scheduled.get(req, 0)
        if stale:
            self.stale[req] = stale

    # -- outputs -------------------------------------------------------------------------------
    @cython.locals(
        eng="Engine",
        kv="KVCacheManager",
        req=Request,
        caching=cython.bint,
        bs=cython.long,
        stale=dict,
        finished=list,
        itl_values=list,
        itl_weights=list,
        samplers=list,
        same_gap=cython.long,
        own_gaps=cython.long,
        k=cython.long,
        n=cython.long,
        s=cython.long,
        o=cython.long,
        p=cython.long,
        t=cython.long,
        samples=cython.bint,
        is_stale=cython.bint,
        sampled=list,
    )
    def apply(self, batch: _Batch) -> None:
        """Apply a batch's output: vLLM 0.32.0 ``Scheduler.update_from_output`` (async).

        Tokens carry the batch's end time; inter-token gaps that equal the batch's duration
        (the request's previous token came from the batch before) are counted in one entry,
        and the others in one per run of requests whose previous token came at the same time.
        """
        eng = self.engine
        kv = eng._kv
        caching = kv.enable_caching
        bs = kv.block_size
        start = batch.start
        end = batch.end
        if end > eng.now:
            eng.now = end
        stale = self.stale
        finished: list[Request] = []
        itl_values = eng.itl_values
        itl_weights = eng.itl_weights
        same_gap = own_gaps = 0
        own_last = None
        k = 0
        samplers = batch.samplers
        sampled = [] if eng.token_listeners else None
        for req, n in batch.scheduled.items():
            samples = samplers[k]
            k += 1
            if req.status is _FINISHED or req.status is _ABORTED:
                continue  # finished or aborted while this batch ran: its output is dropped
            is_stale = False
            if stale:
                s = stale.get(req, 0)
                if s:
                    is_stale = True
                    if s > n:
                        stale[req] = s - n
                    else:
                        del stale[req]
            if not samples:
                continue
            status_before = req.status
            req.num_tokens += 1
            o = req.num_output_tokens + 1
            req.num_output_tokens = o
            if status_before is not _RUNNING:
                eng.waiting_tokens += 1
            last = req.last_token_time
            if last is None:
                req.first_token_time = end
            elif last == start:
                same_gap += 1
            elif own_gaps and last == own_last:
                own_gaps += 1
            else:  # one sample per run of requests whose last token was alike (Engine._sample)
                if own_gaps:
                    itl_values.append(end - own_last)
                    itl_weights.append(own_gaps)
                own_last = last
                own_gaps = 1
            req.last_token_time = end
            if sampled is not None:
                sampled.append(req)
            p = req.num_output_placeholders
            if not is_stale:  # zeroed at the preemption that made it stale
                p -= 1
                req.num_output_placeholders = p
            if caching and status_before is _RUNNING:
                t = req.num_computed_tokens - p
                if t // bs > req.num_cached_blocks:  # a block became full and known
                    kv.cache_blocks(req, t)
            if o >= req._output_len:
                finished.append(req)
        if own_gaps:
            itl_values.append(end - own_last)
            itl_weights.append(own_gaps)
        if same_gap:
            itl_values.append(end - start)
            itl_weights.append(same_gap)
        if sampled:
            for listener in eng.token_listeners:
                listener(sampled, end)
        if finished:
            self._finish(finished, end)
        if batch.line is not None:
            batch.line["finished"] = [r.request_id for r in finished]
            write_line(eng.schedule_log, batch.line)
        if batch.row is not None:
            batch.row[9] = len(finished)  # num_finished
            record_step(eng._steps, *batch.row)

    @cython.locals(eng="Engine", req=Request, running=list, stale=dict)
    def _finish(self, finished: list[Request], end: float) -> None:
        """Finish requests at ``end`` in scheduling order: free blocks, leave their queue.

        A preempted request can finish too, when the stale output of a batch scheduled before
        its preemption delivers its last token (vLLM 0.32.0 ``update_from_output``).
        """
        eng = self.engine
        self.finished_since_schedule = True
        running = eng._running
        stale = self.stale
        for req in finished:
            req.num_output_placeholders = 0
            if stale:
                stale.pop(req, None)
            if req.status is _RUNNING:
                eng.running_tokens -= req.num_tokens - req.num_computed_tokens
                remove_identical(running, req)
            else:
                eng.waiting.remove(req)
                eng.waiting_tokens -= req.num_tokens
            req.status = _FINISHED
            req.finish_time = end
            eng._kv.free(req)
            eng.policy.on_finish(req, end)
        eng._finished(finished, end)
