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

Only the ``vllm-v1`` scheduler runs asynchronously (the scheduling rules above are vLLM's), only
through ``Engine.run``, and without fast-forward: a decode stretch under async scheduling is not
the closed form of the synchronous one (a batch's requests still hold placeholders), so it is
stepped.
"""

from __future__ import annotations

import json
from collections import deque
from typing import TYPE_CHECKING, Any

from llmsched_gym.core.request import Request, RequestStatus
from llmsched_gym.errors import PolicyError

if TYPE_CHECKING:
    from llmsched_gym.core.engine import Engine, StepContext

BATCH_QUEUE_SIZE = 2
"""vLLM 0.32.0's batch queue depth under async scheduling (``max_concurrent_batches``)."""

_RUNNING = RequestStatus.RUNNING


class _Batch:
    """A scheduled batch waiting for its output (one entry of the engine core's queue)."""

    __slots__ = ("scheduled", "samplers", "start", "end", "line", "row")

    def __init__(
        self,
        scheduled: dict[Request, int],
        samplers: set[Request],
        start: float,
        end: float,
        line: dict[str, Any] | None,
        row: dict[str, Any] | None,
    ) -> None:
        self.scheduled = scheduled
        """Tokens per request in scheduling order (vLLM's ``num_scheduled_tokens``)."""
        self.samplers = samplers
        """Requests that sample a token when the batch runs (not a partial prefill chunk)."""
        self.start = start
        self.end = end
        self.line = line
        """Its schedule-log line without ``finished``; None for a batch that is not logged."""
        self.row = row
        """Its per-step record without ``num_finished`` (``record_steps``), or None."""


class AsyncLoop:
    """Runs an ``Engine`` under vLLM 0.32.0's async scheduling (see the module docstring).

    Args:
        engine: The engine; its config has ``async_scheduling`` on and its policy is vLLM V1's.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.placeholders: dict[Request, int] = {}
        """vLLM's ``num_output_placeholders``: tokens in flight whose ids are not known yet."""
        self.in_flight: dict[Request, int] = {}
        """vLLM's ``num_in_flight_tokens``: scheduled tokens of batches not applied yet."""
        self.stale: dict[Request, int] = {}
        """vLLM's ``num_stale_output_tokens``: in-flight tokens scheduled before a preemption."""
        self.finished_since_schedule = False
        """vLLM's non-empty ``finished_req_ids``: ``has_requests()`` stays true until the next
        ``schedule()`` tells the workers."""
        self.queue: deque[_Batch] = deque()
        self.gpu_free = engine.now

    # -- the engine core ---------------------------------------------------------------------
    def has_requests(self) -> bool:
        """vLLM's ``Scheduler.has_requests``: unfinished requests, or finishes not yet reported."""
        eng = self.engine
        return bool(eng._running or eng.waiting or self.finished_since_schedule)

    def run(self, progress: Any = None) -> None:
        """Run until every request finished (``progress(k)``: k more requests finished).

        The loop of ``EngineCore.step_with_batch_queue`` (vLLM 0.32.0, ``v1/engine/core.py``):
        schedule while the queue has room, else apply the oldest batch's output.
        """
        eng = self.engine
        queue = self.queue
        pending = eng._pending
        last_done = len(eng.finished)
        while eng._next_arrival < len(pending) or self.has_requests() or queue:
            if not self.has_requests() and not queue:
                eng.now = max(eng.now, pending[eng._next_arrival].arrival_time)
            eng._admit_arrivals()
            if self.has_requests():
                batch = self.schedule()
                queue.append(batch)
                if len(queue) < BATCH_QUEUE_SIZE and (batch.scheduled or self.has_requests()):
                    continue
            self.apply(queue.popleft())
            if progress is not None and len(eng.finished) != last_done:
                progress(len(eng.finished) - last_done)
                last_done = len(eng.finished)

    # -- scheduling ----------------------------------------------------------------------------
    def schedule(self) -> _Batch:
        """One ``AsyncScheduler.schedule()`` call, queued as a batch."""
        eng = self.engine
        ctx = eng.ctx
        start = max(eng.now, self.gpu_free)
        ctx._begin(start, eng.num_steps)
        self.finished_since_schedule = False
        self._running_phase(ctx)
        if not ctx.preempted:
            self._waiting_phase(ctx)
        scheduled = ctx.scheduled
        num_free = eng._kv.pool.num_free
        duration = eng._price(ctx) if scheduled else 0.0
        end = start + duration
        self.gpu_free = end
        # vLLM's _update_after_schedule (+ AsyncScheduler's): advance computed tokens; a request
        # that is not a partial prefill chunk after it samples, so it gets a placeholder. The
        # chunk test counts the placeholders from before this batch.
        samplers: set[Request] = set()
        placeholders = self.placeholders
        in_flight = self.in_flight
        for req, n in scheduled.items():
            c = req.num_computed_tokens + n
            req.num_computed_tokens = c
            req.num_computed_total += n
            in_flight[req] = in_flight.get(req, 0) + n
            p = placeholders.get(req, 0)
            if c >= req.num_tokens + p:
                samplers.add(req)
                placeholders[req] = p + 1
        line = row = None
        if scheduled or ctx.preempted:
            eng.num_preemptions += len(ctx.preempted)
            step = eng.num_steps
            eng.num_steps += 1
            if eng.schedule_log is not None:
                line = {
                    "step": step,
                    "time": start,
                    "scheduled": {r.request_id: n for r, n in scheduled.items()},
                    "new": {r.request_id: h for r, h in ctx.new},
                    "resumed": {r.request_id: h for r, h in ctx.resumed},
                    "preempted": [r.request_id for r in ctx.preempted],
                    "finished": [],
                    "num_free_blocks": num_free,
                    "num_running": len(eng._running),
                    "num_waiting": len(eng.waiting),
                }
            if eng._steps is not None:
                row = {
                    "step": step,
                    "time_s": start,
                    "duration_s": duration,
                    "num_scheduled_tokens": ctx._tokens,
                    "num_prefill": ctx._num_prefill,
                    "num_decode": ctx._num_decode,
                    "num_new": len(ctx.new),
                    "num_resumed": len(ctx.resumed),
                    "num_preempted": len(ctx.preempted),
                    "num_finished": 0,
                    "num_running": len(eng._running),
                    "num_waiting": len(eng.waiting),
                    "num_free_blocks": num_free,
                }
        return _Batch(dict(scheduled), samplers, start, end, line, row)

    def _running_phase(self, ctx: StepContext) -> None:
        """vLLM 0.32.0 ``Scheduler.schedule``, first phase, with async placeholders."""
        eng = self.engine
        kv = eng._kv
        policy = eng.policy
        priority = policy.queue_policy(eng.config) == "priority"
        continue_after_self = priority and getattr(policy, "preemption_rule", "0.32") == "0.33"
        threshold = eng.config.long_prefill_token_threshold if ctx.num_eligible > 1 else 0
        placeholders = self.placeholders
        running = ctx.running
        scheduled = ctx.scheduled
        i = 0
        while i < len(running) and ctx.token_budget > 0:
            req = running[i]
            p = placeholders.get(req, 0)
            c = req.num_computed_tokens
            # The max_tokens guard: the token in flight surely is the last one allowed.
            if p > 0 and c + 2 - p >= req.num_prompt_tokens + req.max_tokens:
                i += 1
                continue
            n = req.num_tokens + p - c
            if 0 < threshold < n:
                n = threshold
            if n > ctx.token_budget:
                n = ctx.token_budget
            if n <= 0:
                i += 1
                continue
            ok = True
            while kv.allocate_slots(req, n) is None:
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
            if not ok:
                if continue_after_self:
                    continue
                break
            scheduled[req] = n
            ctx._account(c, n, 1)
            ctx.token_budget -= n
            i += 1

    def _preempt(self, ctx: StepContext, req: Request) -> None:
        """``StepContext.preempt`` plus vLLM's async bookkeeping (``_preempt_request``).

        The in-flight tokens become stale (still delivered, placeholders untouched) and the
        placeholders are zeroed; ``refill_tokens`` is the sequence known at preemption.
        """
        ctx.preempt(req)
        self.placeholders.pop(req, None)
        stale = self.in_flight.get(req, 0)
        if stale:
            self.stale[req] = stale

    def _waiting_phase(self, ctx: StepContext) -> None:
        """vLLM 0.32.0 ``Scheduler.schedule``, second phase; stale requests are skipped."""
        eng = self.engine
        threshold = eng.config.long_prefill_token_threshold if ctx.num_eligible > 1 else 0
        running = ctx.running
        waiting = ctx.waiting
        stale = self.stale
        # Queue order, skipping requests whose stale output is still in flight (vLLM skips
        # them in place: they keep their queue positions). Without any, peek at the head.
        candidates = iter(list(waiting)) if stale else None
        while ctx.token_budget > 0 and waiting and len(running) < ctx.max_num_seqs:
            if candidates is None:
                req = waiting.peek()
            else:
                req = next(candidates, None)
                if req is None:
                    break
                if req.status is _RUNNING:  # admitted by this loop
                    continue
                if req in stale:
                    continue
            if ctx.surely_blocked(req):
                break
            hit = ctx.lookup(req)
            n = req.num_tokens - hit[1]
            if 0 < threshold < n:
                n = threshold
            if ctx.admit(req, min(n, ctx.token_budget), hit=hit) is None:
                break

    # -- outputs -------------------------------------------------------------------------------
    def apply(self, batch: _Batch) -> None:
        """Apply a batch's output: vLLM 0.32.0 ``Scheduler.update_from_output`` (async)."""
        eng = self.engine
        kv = eng._kv
        end = batch.end
        if end > eng.now:
            eng.now = end
        placeholders = self.placeholders
        in_flight = self.in_flight
        stale = self.stale
        samplers = batch.samplers
        finished: list[Request] = []
        for req, n in batch.scheduled.items():
            if req.status is RequestStatus.FINISHED:
                continue  # finished while this batch ran: its output is dropped
            left = in_flight[req] - n
            if left:
                in_flight[req] = left
            else:
                del in_flight[req]
            is_stale = False
            s = stale.get(req, 0)
            if s:
                is_stale = True
                if s > n:
                    stale[req] = s - n
                else:
                    del stale[req]
            if req not in samplers:
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
            else:
                eng.itl_values.append(end - last)
                eng.itl_weights.append(1)
            req.last_token_time = end
            if not is_stale:
                placeholders[req] -= 1
            if status_before is _RUNNING and kv.enable_caching:
                kv.cache_blocks(req, req.num_computed_tokens - placeholders[req])
            if o >= req._output_len:
                finished.append(req)
        if finished:
            self._finish(finished, end)
        if batch.line is not None:
            batch.line["finished"] = [r.request_id for r in finished]
            eng.schedule_log.write(json.dumps(batch.line) + "\n")
        if batch.row is not None:
            batch.row["num_finished"] = len(finished)
            for key, value in batch.row.items():
                eng._steps[key].append(value)
        if finished and batch.line is None and batch.row is None and not batch.scheduled:
            raise PolicyError(f"an empty batch finished {[r.request_id for r in finished]}")

    def _finish(self, finished: list[Request], end: float) -> None:
        """Finish requests at ``end`` in scheduling order: free blocks, leave their queue.

        A preempted request can finish too, when the stale output of a batch scheduled before
        its preemption delivers its last token (vLLM 0.32.0 ``update_from_output``).
        """
        eng = self.engine
        self.finished_since_schedule = True
        running = eng._running
        for req in finished:
            self.placeholders.pop(req, None)
            self.in_flight.pop(req, None)
            self.stale.pop(req, None)
            if req.status is _RUNNING:
                eng.running_tokens -= req.num_tokens - req.num_computed_tokens
                running.remove(req)
            else:
                eng.waiting.remove(req)
                eng.waiting_tokens -= req.num_tokens
            req.status = RequestStatus.FINISHED
            req.finish_time = end
            eng._kv.free(req)
            eng.policy.on_finish(req, end)
        eng.finished.extend(finished)
        for listener in eng.finish_listeners:
            listener(finished, end)
        if eng.jobs is not None:
            released = []
            for req in finished:
                released.extend(eng.jobs.on_finish(req.spec, end))
            if released:
                eng._release(released)

