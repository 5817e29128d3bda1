"""The discrete-event engine loop of one instance: arrivals, steps, completions.

One engine step is one batch iteration, as in vLLM's ``EngineCore.step``:

1. requests that arrived by the step's start join the waiting queue;
2. the policy builds the batch through a ``StepContext`` (the engine enforces the token budget,
   ``max_num_seqs`` and KV blocks; the policy picks order, admission, chunk sizes and victims);
   a caller may begin the step earlier and fill it itself (``hold_step``, for environments);
3. each scheduled request's ``num_computed_tokens`` advances by its scheduled tokens;
4. the step costs ``cost_model.step_time(features)`` seconds; then every request whose computed
   tokens caught up with its tokens samples one; a request that produced its last token finishes
   and frees its blocks (in scheduling order).

When nothing is running or waiting the clock jumps to the next arrival. With ``fast_forward`` on,
stretches in which the schedule provably cannot change (all running requests decode, none
finishes, no waiting request can be admitted, no allocation can fail, no arrival) advance many
steps at once; records and schedule logs are identical either way. A cluster's engines may leave
a stretch that only the next routing decision cut pending and continue it after the decision
(``lazy_stretches``, ``Engine.sync``): an instance that gets no request does not touch its
requests again until the stretch ends or someone reads them.
"""

from __future__ import annotations

import bisect
import heapq
import json
from collections.abc import Callable, Sequence
from operator import attrgetter
from operator import sub as _sub
from typing import IO, Any

import cython
import numpy as np

from llmsched_gym._gc import gc_paused
from llmsched_gym.config import EngineConfig
from llmsched_gym.core.job import Job, JobState, JobTracker
from llmsched_gym.core.queues import FCFSQueue, PriorityQueue, vllm_priority_key
from llmsched_gym.core.request import Request, RequestSpec, RequestStatus
from llmsched_gym.cost.base import items_step_time
from llmsched_gym.errors import ConfigError, PolicyError, TraceError
from llmsched_gym.kv.block_pool import BlockPool
from llmsched_gym.kv.manager import KVCacheManager, cdiv
from llmsched_gym.metrics.columns import StepColumn

_STALL_LIMIT = 10_000
_LIVELOCK_PREEMPTIONS = 100
"""Preemptions within a stretch of more than ``_STALL_LIMIT`` steps in which no request sampled a
token that make the engine call it a livelock (preempt / re-admit without progress)."""
_RUNNING = RequestStatus.RUNNING
_output_len = attrgetter("_output_len")
_num_output_tokens = attrgetter("num_output_tokens")
_num_computed_tokens = attrgetter("num_computed_tokens")


def check_oracle(policy: Any, req: Any) -> None:
    """The step context's rule: only policies flagged ``oracle = True`` read true output lengths.

    Shared by every ``StepContext`` implementation (the simulator's, the live backend's), so a
    policy gets the same error on both.
    """
    if not getattr(policy, "oracle", False):
        raise PolicyError(
            f"policy {policy.name!r} read the true output length of {req.request_id!r} but is "
            "not flagged oracle=True; oracle policies must say so"
        )


def check_schedule_running(
    req: Any, num_tokens: int, remaining: int, budget: int, scheduled: Any
) -> None:
    """Raise the ``PolicyError`` that ``schedule_running(req, num_tokens)`` breaks, if any.

    ``remaining`` is the request's tokens not yet computed, ``budget`` the step's token budget
    left, ``scheduled`` the step's scheduled requests (shared by every step context).
    """
    if req.status is not _RUNNING:
        raise PolicyError(f"schedule_running({req.request_id!r}): request is not running")
    if req in scheduled:
        raise PolicyError(f"schedule_running({req.request_id!r}): already scheduled this step")
    if not 1 <= num_tokens <= remaining:
        raise PolicyError(
            f"schedule_running({req.request_id!r}, {num_tokens}): must schedule between 1 and "
            f"{remaining} tokens (tokens not yet computed)"
        )
    if num_tokens > budget:
        raise PolicyError(
            f"schedule_running({req.request_id!r}, {num_tokens}): exceeds the remaining token "
            f"budget {budget} (max_num_batched_tokens)"
        )


def check_admit(req: Any, num_running: int, max_num_seqs: int) -> None:
    """Raise the ``PolicyError`` of an ``admit`` of a request not waiting, or into a full batch."""
    if req.status not in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
        raise PolicyError(f"admit({req.request_id!r}): request is not waiting")
    if num_running >= max_num_seqs:
        raise PolicyError(
            f"admit({req.request_id!r}): {num_running} requests already running "
            f"(max_num_seqs={max_num_seqs})"
        )


def check_admit_tokens(
    req: Any, num_tokens: int | None, n: int, remaining: int, budget: int
) -> None:
    """Raise the ``PolicyError`` of an ``admit`` of ``n`` tokens outside its valid range.

    ``n`` (asked: ``num_tokens``) must lie between 1 and the ``remaining`` tokens past the prefix
    hit, within the step's token ``budget``.
    """
    if not 1 <= n <= min(remaining, budget):
        raise PolicyError(
            f"admit({req.request_id!r}, {num_tokens}): must schedule between 1 and {remaining} "
            f"tokens within the token budget {budget}"
        )


class StepContext:
    """What a policy sees and may do while building one step's batch.

    Read: ``now``, ``step``, ``token_budget`` (left this step), ``num_free_blocks``, ``running``
    (admission order), ``waiting`` (service order), ``config``, per-request state on the
    ``Request`` objects. Act: ``schedule_running`` (or ``schedule_in_order`` for a run of
    them), ``admit``, ``preempt``. Nothing a policy reads goes beyond what vLLM's scheduler
    knows, except through ``true_output_len`` (oracles only).

    A step is normally begun by the engine right before it calls the policy. ``Engine.hold_step``
    begins it earlier, so that a caller outside the policy (an environment asking an agent for
    each pick or victim) can act on it over several calls; ``held`` says so until ``step()``.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._kv = engine._kv
        self.config = engine.config
        self.block_size = engine.config.block_size
        self.max_num_seqs = engine.config.max_num_seqs
        self.now = 0.0
        self.step = 0
        self.token_budget = 0
        self.scheduled: dict[Request, int] = {}
        """Tokens scheduled this step per request, in scheduling order."""
        self.new: list[tuple[Request, int]] = []
        self.resumed: list[tuple[Request, int]] = []
        self.preempted: list[Request] = []
        self.running: list[Request] = engine._running
        """Running requests in admission order (the engine's list: iterate, never reorder it)."""
        self.waiting = engine.waiting
        self.num_eligible = 0
        """Running plus waiting requests when the step began (vLLM's long-prefill rule)."""
        self._held = False

    def _begin(self, now: float, step: int) -> None:
        self.now = now
        self.step = step
        self.token_budget = self.config.max_num_batched_tokens
        self.scheduled = {}
        self.new = []
        self.resumed = []
        self.preempted = []
        self.num_eligible = len(self.running) + len(self.waiting)
        self._tokens = self._prefill_attn = self._decode_kv = self._prefill_kv = 0
        self._num_prefill = self._num_decode = 0

    @property
    def held(self) -> bool:
        """Whether this step was begun by ``Engine.hold_step`` and not executed yet."""
        return self._held

    def _account(self, m: int, n: int, sign: int) -> None:
        """Add (sign=1) or remove (-1) an item of n new tokens on m cached ones to the features."""
        self._tokens += sign * n
        if n == 1:
            self._decode_kv += sign * m
            self._num_decode += sign
        else:
            self._prefill_attn += sign * (n * n + 2 * m * n)
            self._prefill_kv += sign * m
            self._num_prefill += sign

    # -- reading -----------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Free KV blocks now (cached-but-unused blocks count as free)."""
        return self._kv.pool.num_free

    @property
    def num_gpu_blocks(self) -> int:
        """Total KV blocks including the null block."""
        return self.config.num_gpu_blocks

    def lookup(self, req: Request) -> tuple[list[int], int]:
        """Prefix hit ``req`` would get if admitted now: (hit block ids, hit tokens).

        No side effects; pass the result to ``admit(..., hit=...)`` to avoid a second lookup.
        A request whose prompt KV arrived from another instance (PD hand-off,
        ``Engine.enqueue(..., computed_tokens=N)``) reports at least N hit tokens on its first
        admission; its hit blocks are the local prefix-cache ones only.
        """
        hit = self._kv.get_computed_blocks(req)
        # PD hand-off: tokens delivered from outside count as computed (vLLM's external KV).
        ext = req.num_external_tokens
        if ext > hit[1] and req.status is RequestStatus.WAITING:
            return hit[0], ext
        return hit

    def surely_blocked(self, req: Request) -> bool:
        """Whether ``req`` surely fails the full-sequence admission gate now (no lookup needed).

        False means "maybe": ``admit`` decides.
        """
        return self._kv.surely_blocked(req)

    def blocks_needed_to_admit(self, req: Request) -> int:
        """Free blocks the admission gate would ask of ``req`` now."""
        hits, _ = self._kv.get_computed_blocks(req)
        return self._kv.blocks_to_admit(req, hits)

    def job(self, req: Request) -> JobState | None:
        """Released-so-far view of the job ``req`` belongs to (None outside jobs)."""
        jobs = self._engine.jobs
        return None if jobs is None else jobs.job_of(req.spec)

    def true_output_len(self, req: Request) -> int:
        """The request's real output length; only policies flagged ``oracle = True`` may ask."""
        check_oracle(self._engine.policy, req)
        return req._output_len

    # -- acting ------------------------------------------------------------------------------
    @cython.locals(
        req=Request,
        c=cython.long,
        remaining=cython.long,
        num_tokens=cython.long,
        num_lookahead_tokens=cython.long,
        end=cython.long,
        bs=cython.long,
        kv=KVCacheManager,
        scheduled=dict,
    )
    def schedule_running(
        self, req: Request, num_tokens: int, num_lookahead_tokens: int = 0
    ) -> bool:
        """Schedule ``num_tokens`` more tokens of a running request; False if blocks run out.

        ``num_lookahead_tokens`` allocates slots beyond this step's tokens (KV reserved for
        future decode tokens). On False nothing changed: the policy may preempt and retry.
        """
        scheduled = self.scheduled
        c = req.num_computed_tokens
        remaining = req.num_tokens - c
        if (  # one inline test on the hot path; check_schedule_running names the violation
            req.status is not _RUNNING
            or req in scheduled
            or not 1 <= num_tokens <= remaining
            or num_tokens > self.token_budget
        ):
            check_schedule_running(req, num_tokens, remaining, self.token_budget, scheduled)
        kv = self._kv
        end = c + num_tokens
        bs = self.block_size
        if num_lookahead_tokens == 0 and end <= len(req.blocks) * bs:
            # Fast path (most decode steps): the slots exist; only newly full blocks get cached.
            if kv.enable_caching and end // bs > req.num_cached_blocks:
                kv.cache_blocks(req, min(end, req.num_tokens))
        elif kv.allocate_slots(req, num_tokens, None, num_lookahead_tokens) is None:
            return False
        scheduled[req] = num_tokens
        self._tokens += num_tokens
        if num_tokens == 1:
            self._decode_kv += c
            self._num_decode += 1
        else:
            self._prefill_attn += num_tokens * num_tokens + 2 * c * num_tokens
            self._prefill_kv += c
            self._num_prefill += 1
        self.token_budget -= num_tokens
        return True

    @cython.locals(
        req=Request,
        kv=KVCacheManager,
        scheduled=dict,
        caching=cython.bint,
        bs=cython.long,
        budget=cython.long,
        tokens=cython.long,
        attn=cython.long,
        dkv=cython.long,
        pkv=cython.long,
        n_pre=cython.long,
        n_dec=cython.long,
        stop=cython.long,
        avail=cython.long,
        i=cython.long,
        c=cython.long,
        n=cython.long,
        end=cython.long,
        start=cython.long,
        threshold=cython.long,
        reserve=cython.long,
        decode=cython.bint,
        prefill=cython.bint,
    )
    def schedule_in_order(
        self,
        reqs: Sequence[Request],
        start: int = 0,
        *,
        threshold: int = 0,
        reserve: int = 0,
        decode: bool = True,
        prefill: bool = True,
    ) -> int:
        """vLLM V1's running phase over ``reqs[start:]`` until an allocation fails.

        Each request of ``reqs`` that is running gets its tokens left to compute, cut to
        ``threshold`` (when > 0) and to the budget above ``reserve``; requests that are not
        running are skipped, and so are decodes (one token left) without ``decode`` and
        prefills (more than one) without ``prefill``. It stops when the budget above
        ``reserve`` is spent. Returns the index of the first request whose blocks ran out
        (nothing changed for it: preempt a victim, then retry it with ``schedule_running``),
        or -1 when the loop ended. The same as calling ``schedule_running`` in a loop, in
        one call (the environments' and packing policies' hot path).
        """
        scheduled = self.scheduled
        kv = self._kv
        caching = kv.enable_caching
        bs = self.block_size
        budget = self.token_budget
        running = _RUNNING
        tokens = attn = dkv = pkv = n_pre = n_dec = 0
        stop = -1
        avail = budget - reserve  # tokens this call may still schedule
        for i in range(start, len(reqs)):
            if avail <= 0:
                break
            req = reqs[i]
            if req.status is not running:
                continue
            c = req.num_computed_tokens
            n = req.num_tokens - c
            if n == 1:  # a decode (the common case): one token, always within ``avail``
                if not decode:
                    continue
                if req in scheduled:
                    check_schedule_running(req, 1, n, avail, scheduled)
                if c < len(req.blocks) * bs:
                    if caching and (c + 1) // bs > req.num_cached_blocks:
                        kv.cache_blocks(req, c + 1)
                elif kv.allocate_slots(req, 1) is None:
                    stop = i
                    break
                scheduled[req] = 1
                dkv += c
                n_dec += 1
                avail -= 1
                continue
            if n <= 0 or not prefill:
                continue
            if 0 < threshold < n:
                n = threshold
            if n > avail:
                n = avail
            if req in scheduled:
                check_schedule_running(req, n, n, avail, scheduled)
            end = c + n
            if end <= len(req.blocks) * bs:
                if caching and end // bs > req.num_cached_blocks:
                    kv.cache_blocks(req, min(end, req.num_tokens))
            elif kv.allocate_slots(req, n) is None:
                stop = i
                break
            scheduled[req] = n
            avail -= n
            if n == 1:  # a chunk cut to one token counts as a decode item (``_account``)
                dkv += c
                n_dec += 1
            else:
                tokens += n
                attn += n * n + 2 * c * n
                pkv += c
                n_pre += 1
        tokens += n_dec
        budget = avail + reserve
        self.token_budget = budget
        self._tokens += tokens
        self._prefill_attn += attn
        self._decode_kv += dkv
        self._prefill_kv += pkv
        self._num_prefill += n_pre
        self._num_decode += n_dec
        return stop

    def admit(
        self,
        req: Request,
        num_tokens: int | None = None,
        num_lookahead_tokens: int = 0,
        full_sequence_must_fit: bool = True,
        hit: tuple[list[int], int] | None = None,
    ) -> int | None:
        """Admit a waiting request with a prefix lookup; returns tokens scheduled, or None.

        ``num_tokens`` is this step's tokens (default: the rest of the sequence cut to the
        budget, i.e. chunked prefill); an explicit value must fit the remaining budget.
        ``full_sequence_must_fit`` is vLLM 0.32's admission gate. On None nothing changed.
        ``hit`` passes a lookup already made this step.
        """
        eng = self._engine
        check_admit(req, len(self.running), self.max_num_seqs)
        hit_blocks, hit_tokens = hit if hit is not None else self.lookup(req)
        # Hit tokens beyond the local hit blocks are external KV (PD hand-off): they get fresh
        # blocks now, computed. Without a hand-off ``external`` is 0.
        local = len(hit_blocks) * self.block_size
        external = hit_tokens - local if hit_tokens > local else 0
        remaining = req.num_tokens - hit_tokens
        n = min(remaining, self.token_budget) if num_tokens is None else num_tokens
        check_admit_tokens(req, num_tokens, n, remaining, self.token_budget)
        if (
            eng._kv.allocate_slots(
                req, external + n, hit_blocks, num_lookahead_tokens, full_sequence_must_fit
            )
            is None
        ):
            return None
        eng._kv.record_lookup(req, hit_tokens - external)
        self.waiting.remove(req) if self.waiting.peek() is not req else self.waiting.pop()
        self.running.append(req)
        eng.waiting_tokens -= req.num_tokens
        eng.running_tokens += req.num_tokens - hit_tokens
        if req.num_tokens - hit_tokens > 1:
            eng.running_prefills += 1
        if req.status is RequestStatus.WAITING:
            self.new.append((req, hit_tokens))
            req.num_cached_tokens = hit_tokens
            req.first_scheduled_time = self.now
        else:
            self.resumed.append((req, hit_tokens))
        req.status = RequestStatus.RUNNING
        req.num_computed_tokens = hit_tokens
        self.scheduled[req] = n
        self._tokens += n
        if n == 1:
            self._decode_kv += hit_tokens
            self._num_decode += 1
        else:
            self._prefill_attn += n * n + 2 * hit_tokens * n
            self._prefill_kv += hit_tokens
            self._num_prefill += 1
        self.token_budget -= n
        return n

    def preempt(self, req: Request) -> None:
        """Preempt a running request by recompute: free its blocks and send it back to waiting.

        Tokens it was already scheduled this step return to the budget. Under the FCFS queue it
        goes to the head of waiting; under the priority queue it is re-inserted by priority.
        """
        if req.status is not RequestStatus.RUNNING:
            raise PolicyError(f"preempt({req.request_id!r}): request is not running")
        eng = self._engine
        self.running.remove(req)
        n = self.scheduled.pop(req, 0)
        if n:
            self.token_budget += n
            self._account(req.num_computed_tokens, n, -1)
        eng._kv.free(req, preempted=True)
        left = req.num_tokens - req.num_computed_tokens
        eng.running_tokens -= left
        if left > 1:
            eng.running_prefills -= 1
        eng.waiting_tokens += req.num_tokens
        req.status = RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        req.refill_tokens = req.num_tokens
        self.waiting.prepend(req)
        self.preempted.append(req)


class SchedulingPolicy:
    """Base class of local scheduling policies (see ``llmsched_gym.policies``).

    A policy implements ``schedule(ctx)``. Class attributes describe it to the engine:

    * ``oracle``: it reads true output lengths (never unflagged on a leaderboard);
    * ``fast_forward_safe``: in a state where every running request has exactly one token to
      compute, none is scheduled yet and no waiting request can be admitted (see
      ``head_of_line``), ``schedule`` schedules every running request for one token in running
      order and does nothing else — so the engine may advance such stretches in closed form;
    * ``head_of_line``: it admits waiting requests only in queue order and stops at the first
      that does not fit (vLLM's rule), so a blocked head blocks the queue.
    """

    name = "policy"
    oracle = False
    fast_forward_safe = False
    head_of_line = False

    def priority_key(self, req: Request) -> tuple:
        """Order of the priority waiting queue (vLLM's by default)."""
        return vllm_priority_key(req)

    def queue_policy(self, config: EngineConfig) -> str:
        """The waiting-queue discipline, ``fcfs`` or ``priority`` (the config's by default)."""
        return config.scheduling_policy

    def reset(self, engine: Engine) -> None:
        """Called once when an engine starts with this policy."""

    def schedule(self, ctx: StepContext) -> None:
        """Build one step's batch through ``ctx``."""
        raise NotImplementedError

    def on_finish(self, req: Request, now: float) -> None:
        """Called when a request finishes (e.g. to update an output-length histogram)."""


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
        self._plan: _Stretch | None = None
        """A decode stretch advanced on the clock but not yet applied (``lazy_stretches``)."""
        self.lazy_stretches = False
        """Let ``advance`` leave a stretch cut only by ``until`` pending (see ``sync``)."""
        self.config = config
        self.policy = policy
        self.cost_model = cost_model
        self.fast_forward = fast_forward
        self.async_scheduling = config.async_scheduling
        if config.async_scheduling:
            from llmsched_gym.policies.vllm_v1 import VllmV1Policy

            if type(policy) is not VllmV1Policy:  # the async rules are vLLM V1's own
                raise ConfigError(
                    "async_scheduling=True needs the vllm-v1 scheduler (vLLM's AsyncScheduler), "
                    f"got {policy.name!r}; set async_scheduling to false for other schedulers"
                )
        for key, default in (
            ("enable_chunked_prefill", True),
            ("long_prefill_token_threshold_adaptive", False),
        ):
            if getattr(config, key) is not default:
                from llmsched_gym.policies.vllm_v1 import VllmV1Policy

                if type(policy) is not VllmV1Policy:  # rules of vLLM V1's schedule()
                    raise ConfigError(
                        f"{key}={not default} is simulated for the vllm-v1 scheduler only, "
                        f"got {policy.name!r}; set {key} to {str(default).lower()} for other "
                        "schedulers"
                    )
        # A cost model may also price Σ m over prefill items (context under the prefill chunks;
        # InferMax's m_p term): it says so with ``uses_prefill_kv = True``.
        self._prefill_kv_feature = bool(getattr(cost_model, "uses_prefill_kv", False))
        self._phase_items = bool(getattr(cost_model, "phase_items", False))
        """The cost model prices items by phase (``Request.in_prefill_phase``), not by size."""
        self._item_priced = self._phase_items or bool(getattr(cost_model, "item_priced", False))
        """Each step is priced from its items (``items_step_time``), not the context's sums."""
        self._decode_series_longest = getattr(cost_model, "decode_series_longest", None)
        """Decode stretches priced with the longest context too (item-level cost models)."""
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
        self._steps: dict[str, list] | None = (
            {k: [] for k in _STEP_FIELDS} if record_steps else None
        )
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
        state stepping would have reached. ``num_steps``, ``itl_values`` and step records lag
        until then.
        """
        plan = self._plan
        if plan is None:
            return
        self._plan = None
        self.now = plan.starts[0]
        self._advance_decode_stretch(len(plan.durations), plan.durations, plan.starts)

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
                self._running.remove(req)
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
            return self._continue_stretch(until)
        if not self._ready(until):
            return False
        self._until = until
        if not (self.fast_forward and self._try_fast_forward()):
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
            if not (self.fast_forward and self._try_fast_forward()):
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

    @cython.locals(
        ctx=StepContext,
        req=Request,
        c=cython.long,
        t=cython.long,
        o=cython.long,
        same_gap=cython.long,
        num_partial=cython.long,
        partial_multi=cython.long,
        partial_to_one=cython.long,
        scheduled=dict,
        finished=list,
    )
    def _step(self) -> None:
        ctx = self.ctx
        if ctx._held:
            ctx._held = False
        else:
            ctx._begin(self.now, self.num_steps)
        self.policy.schedule(ctx)
        scheduled = ctx.scheduled
        num_free_after_schedule = self._kv.pool.num_free
        if self._item_priced:
            duration = self._phase_step_time(scheduled)
        elif self._prefill_kv_feature:
            duration = self.cost_model.step_time(
                ctx._tokens, ctx._prefill_attn, ctx._decode_kv, ctx._num_prefill,
                ctx._num_decode, prefill_kv=ctx._prefill_kv,
            )  # fmt: skip
        else:
            duration = self.cost_model.step_time(
                ctx._tokens, ctx._prefill_attn, ctx._decode_kv, ctx._num_prefill, ctx._num_decode
            )
        now = self.now
        end = now + duration
        # Advance computed tokens (vLLM's _update_after_schedule), then sample one token for
        # every request that caught up (update_from_output); finishers free in this order.
        finished: list[Request] = []
        same_gap = num_partial = partial_multi = partial_to_one = 0
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
            else:
                self.itl_values.append(end - last)
                self.itl_weights.append(1)
            req.last_token_time = end
            if o >= req._output_len:
                finished.append(req)
        if same_gap:
            self.itl_values.append(duration)
            self.itl_weights.append(same_gap)
        # Tokens left over running requests: each scheduled one computed n and sampled one.
        self.running_tokens += len(scheduled) - num_partial - ctx._tokens
        # Prefills that sampled (n > 1) or whose next chunk is one token now decode; partial
        # ones scheduled with n = 1 had more than one token left and still do unless at one.
        self.running_prefills -= ctx._num_prefill - partial_multi + partial_to_one
        if finished:
            self._finish(finished, end)
        self.num_preemptions += len(ctx.preempted)
        if self.schedule_log is not None:
            self._log_step(ctx, num_free_after_schedule, finished)
        if self._steps is not None:
            self._record_step(duration, ctx, len(finished), num_free_after_schedule)
        self.now = end
        self.num_steps += 1
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
        # Preemptions reset the stall count, so a policy that preempts and re-admits without
        # ever sampling (a livelock) is caught here: no token sampled for _STALL_LIMIT steps
        # while requests kept being preempted. Sampled tokens are never undone, so a policy
        # that progresses resets this.
        if len(scheduled) > num_partial:
            self._unsampled = self._unsampled_preemptions = 0
        else:
            self._unsampled += 1
            self._unsampled_preemptions += len(ctx.preempted)
            if (
                self._unsampled > _STALL_LIMIT
                and self._unsampled_preemptions >= _LIVELOCK_PREEMPTIONS
            ):
                most = max(
                    (*self._running, *self.waiting), key=lambda r: (r.num_preemptions, r.request_id)
                )
                raise PolicyError(
                    f"policy {self.policy.name!r} sampled no token for {_STALL_LIMIT} steps "
                    f"while preempting {self._unsampled_preemptions} times, at t={self.now:.3f} "
                    f"s with {len(self.waiting)} waiting and {len(self._running)} running "
                    f"requests (a livelock); request {most.request_id!r} was preempted "
                    f"{most.num_preemptions} times"
                )

    def _phase_step_time(self, scheduled: dict[Request, int]) -> float:
        """Step time priced from the step's items (``phase_items`` or ``item_priced`` models).

        With ``phase_items`` (e.g. Vidur's rule) an item of a request that has not sampled since
        its (re)admission is a prefill even with one token (a one-token prompt, the last chunk of
        a refill); ``item_priced`` models also get item-level terms (longest context...).
        """
        items = [(n, req.num_computed_tokens) for req, n in scheduled.items()]
        phases = [r.in_prefill_phase for r in scheduled] if self._phase_items else None
        return items_step_time(self.cost_model, items, phases)

    def _price(self, ctx: StepContext) -> float:
        """The cost model's time for the batch built on ``ctx`` (as ``_step`` prices it)."""
        if self._item_priced:
            return self._phase_step_time(ctx.scheduled)
        if self._prefill_kv_feature:
            return self.cost_model.step_time(
                ctx._tokens, ctx._prefill_attn, ctx._decode_kv, ctx._num_prefill,
                ctx._num_decode, prefill_kv=ctx._prefill_kv,
            )  # fmt: skip
        return self.cost_model.step_time(
            ctx._tokens, ctx._prefill_attn, ctx._decode_kv, ctx._num_prefill, ctx._num_decode
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
                running.remove(req)  # by identity (no __eq__), order kept
        else:
            done = set(finished)
            running[:] = [r for r in running if r not in done]
        self.finished.extend(finished)
        for listener in self.finish_listeners:
            listener(finished, end)
        if self.jobs is not None:
            released: list[RequestSpec] = []
            for req in finished:
                released.extend(self.jobs.on_finish(req.spec, end))
            if released:
                self._release(released)

    # -- fast-forward ------------------------------------------------------------------------
    @cython.locals(
        n=cython.long,
        k=cython.long,
        bs=cython.long,
        free=cython.long,
        m0=cython.long,
        longest=cython.long,
        j=cython.long,
        running=list,
    )
    def _try_fast_forward(self) -> bool:
        """Advance a stretch of pure-decode steps at once; False if the state does not allow it."""
        policy = self.policy
        if not policy.fast_forward_safe or self.unlogged_aborts:
            return False  # (a stepped line carries the aborts)
        running = self._running
        n = len(running)
        if n == 0 or n > self.config.max_num_batched_tokens or self.running_prefills:
            return False
        # The waiting head first: after a finish it is usually admissible (a stepped step).
        waiting = self.waiting
        if waiting and n < self.config.max_num_seqs:
            if not policy.head_of_line:
                return False
            head = waiting.peek()
            # Admission needs (blocks_to_admit <= free); during the stretch free blocks only
            # shrink and the head's need only grows (hits can only be evicted), so a blocked
            # head stays blocked.
            if not self._kv.surely_blocked(head):
                hits, _ = self._kv.get_computed_blocks(head)
                if self._kv.blocks_to_admit(head, hits) <= self._kv.pool.num_free:
                    return False
        # Every running request decodes: none has more than one token left and, as each has at
        # least one, the tokens left sum to n. So the check needs no pass over ``running`` in
        # Python: the next finisher and the context sum are C-level reductions, and the
        # per-request block offsets are needed only when free blocks might not last (the
        # stretch computes them again while it advances the requests).
        if self.running_tokens != n:
            return False
        if self._phase_items and any(r.in_prefill_phase for r in running):
            return False  # a one-token prompt or refill chunk: priced as a prefill, stepped
        # Nobody finishes before the stretch's last step (finishers free after it).
        k = min(map(_sub, map(_output_len, running), map(_num_output_tokens, running)))
        if k < 2:
            return False
        # Largest k such that the block-boundary allocations in steps [0, k) fit in free blocks;
        # nobody allocates more than ceil(k / bs) blocks in k steps, so plenty is O(1).
        bs = self.config.block_size
        free = self._kv.pool.num_free
        if n * ((k + bs - 1) // bs) > free:
            k = _max_steps_within_blocks(_block_rooms(running, bs), bs, free, k)
            if k < 2:
                return False
        m0 = sum(map(_num_computed_tokens, running))
        # A decode's price may need the longest context too (item-level cost models).
        longest = (
            max(map(_num_computed_tokens, running))
            if self._decode_series_longest is not None
            else 0
        )
        # Every step of the stretch must start before the next arrival or cancel (and before
        # ``until``).
        t_arr = (
            self._pending[self._next_arrival].arrival_time
            if self._next_arrival < len(self._pending)
            else float("inf")
        )
        if self._cancels and self._cancels[0][0] < t_arr:
            t_arr = self._cancels[0][0]
        until = self._until
        durations, starts = self._decode_series(
            n, m0, longest, k, self.now, until if until < t_arr else t_arr
        )
        j = len(durations)
        if self.lazy_stretches and 0 < j < k and starts[j] < t_arr:
            # Cut only by ``until``: move the clock, keep the stretch pending (``sync``).
            self._plan = _Stretch(running, bs, k, n, m0, longest, t_arr, durations, starts)
            self.now = starts[j]
            return True
        if j < 2:
            return False
        self._advance_decode_stretch(j, durations, starts)
        return True

    def _decode_series(
        self, n: int, m0: int, longest: int, k: int, now: float, t_next: float
    ) -> tuple[list[float], list[float]]:
        """Durations and starts of up to ``k`` decode steps of ``n`` requests, cut at ``t_next``.

        Step ``j`` has context sum ``m0 + j * n`` (and longest context ``longest + j``); each
        duration is priced with the same float operations as stepping it, so a stretch priced
        in pieces equals one priced whole. ``len(starts) == len(durations) + 1``.
        """
        if self._decode_series_longest is not None:
            return self._decode_series_longest(n, m0, longest, k, now, t_next)
        if k <= 256:
            series = getattr(self.cost_model, "decode_series", None)
            if series is not None:
                return series(n, m0, k, now, t_next)
            step_time = self.cost_model.step_time
            durations: list[float] = []
            starts = [now]
            t = now
            for j in range(k):
                if t >= t_next:
                    break
                d = step_time(n, 0, m0 + j * n, 0, n)
                durations.append(d)
                t = t + d
                starts.append(t)
            return durations, starts
        steps = np.arange(k, dtype=np.int64)
        nn = np.full(k, n, dtype=np.int64)
        zero = np.zeros(k, dtype=np.int64)
        dur = self.cost_model.step_times(nn, zero, m0 + steps * n, zero, nn)
        st = np.cumsum(np.concatenate(([now], dur)))  # sequential additions
        k = min(k, int(np.searchsorted(st[:k], t_next, side="left")))
        return dur[:k].tolist(), st[: k + 1].tolist()

    @cython.locals(plan="_Stretch", j=cython.long, n=cython.long)
    def _continue_stretch(self, until: float) -> bool:
        """``advance`` with a pending stretch: price its next steps that start before ``until``.

        The stretch is applied (``sync``) once it reaches its end or the next arrival.
        """
        plan = self._plan
        now = self.now
        if now >= until:
            return False
        t_arr = plan.t_arr
        j = len(plan.durations)
        n = plan.n
        durations, starts = self._decode_series(
            n, plan.m0 + j * n, plan.longest + j, plan.k - j, now, until if until < t_arr else t_arr
        )
        plan.durations += durations
        plan.starts += starts[1:]
        end = starts[-1]
        if len(plan.durations) == plan.k or end >= t_arr:
            self.sync()
        else:
            self.now = end
        return True

    @cython.locals(
        req=Request,
        n=cython.long,
        bs=cython.long,
        k=cython.long,
        stride=cython.long,
        end=cython.long,
        pos=cython.long,
        c=cython.long,
        room=cython.long,
        t=cython.long,
        o=cython.long,
        n_same_first=cython.long,
        kv=KVCacheManager,
        pool=BlockPool,
        caching=cython.bint,
        events=list,
        finished=list,
        to_cache=list,
        itl_values=list,
        running=list,
    )
    def _advance_decode_stretch(self, k: int, durations: list[float], starts: list[float]) -> None:
        """Advance every running request (all decoding) by ``k`` steps in one pass.

        Block-boundary allocations are collected in the same pass and made afterwards, in the
        order stepping would make them; then full blocks are registered and finishers free.
        """
        running = self._running
        n = len(running)
        bs = self.config.block_size
        kv = self._kv
        pool = kv.pool
        # Allocation events in (step, running position) order, as stepping would make them,
        # packed as step * n + position so that they sort as ints: request ``pos`` needs a
        # new block at steps room, room + bs, ... below k (``room``: its free slots before).
        events: list[int] = []
        stride = bs * n
        end = k * n
        first_end, last_end = starts[1], starts[k]
        now = self.now
        caching = kv.enable_caching
        n_same_first = 0
        finished: list[Request] = []
        to_cache: list[Request] = []
        itl_values = self.itl_values
        pos = 0
        for req in running:
            c = req.num_computed_tokens
            room = len(req.blocks) * bs - c
            if room < k:
                events.extend(range(room * n + pos, end + pos, stride))
            pos += 1
            req.num_computed_tokens = c + k
            req.num_computed_total += k
            t = req.num_tokens + k
            req.num_tokens = t
            o = req.num_output_tokens + k
            req.num_output_tokens = o
            if caching and (t - 1) // bs > req.num_cached_blocks:
                to_cache.append(req)  # registered once its new blocks are in place
            # The gap before the stretch's first token is the request's own unless it also
            # produced a token in the previous step; later gaps are the shared step durations.
            last = req.last_token_time
            if last == now:
                n_same_first += 1
            elif last is None:  # the stretch's first step samples its first token
                req.first_token_time = first_end
            else:
                itl_values.append(first_end - last)
                self.itl_weights.append(1)
            req.last_token_time = last_end
            if o >= req._output_len:
                finished.append(req)
        events.sort()
        free_after: list[int] | None = None
        if self.schedule_log is not None or self._steps is not None:
            free_after = []
            ev = 0
            free = pool.num_free
            for j in range(k):
                while ev < len(events) and events[ev] // n == j:
                    free -= 1
                    ev += 1
                free_after.append(free)
        if events:  # taken from the free queue's front in event order, as stepping would
            for e, b in zip(events, pool.get_new_blocks(len(events)), strict=True):
                running[e % n].blocks.append(b)
        for req in to_cache:
            kv.cache_blocks(req, req.num_tokens - 1)
        if n_same_first:
            self.itl_values.append(durations[0])
            self.itl_weights.append(n_same_first)
        self.itl_values.extend(durations[1:])
        self.itl_weights.extend([n] * (k - 1))
        if free_after is not None:
            self._log_stretch(k, starts, durations, free_after, [r.request_id for r in finished])
        if finished:  # freed in scheduling (= running) order, as a stepped finish would be
            self._finish(finished, last_end)
        self.now = last_end
        self.num_steps += k
        self.num_ff_steps += k
        self._unsampled = self._unsampled_preemptions = 0  # decode stretches sample

    # -- logs and records -------------------------------------------------------------------
    def _log_step(self, ctx: StepContext, num_free: int, finished: list[Request]) -> None:
        line = {
            "step": self.num_steps,
            "time": self.now,
            "scheduled": {r.request_id: n for r, n in ctx.scheduled.items()},
            "new": {r.request_id: h for r, h in ctx.new},
            "resumed": {r.request_id: h for r, h in ctx.resumed},
            "preempted": [r.request_id for r in ctx.preempted],
            "finished": [r.request_id for r in finished],
            "num_free_blocks": num_free,
            "num_running": len(self._running),
            "num_waiting": len(self.waiting),
        }
        if self.unlogged_aborts:
            line["aborted"] = self.take_unlogged_aborts()
        self.schedule_log.write(json.dumps(line) + "\n")

    def take_unlogged_aborts(self) -> list[str]:
        """Ids aborted since the last schedule-log line (the next line's ``aborted``)."""
        ids, self.unlogged_aborts = self.unlogged_aborts, []
        return ids

    def _log_stretch(
        self,
        k: int,
        starts: list[float],
        durations: list[float],
        free_after: list[int],
        finished_ids: list[str],
    ) -> None:
        """Emit the per-step log lines and records of a fast-forwarded stretch.

        Called before the finishers of the last step leave ``running``.
        """
        ids = [r.request_id for r in self._running]
        n, n_waiting, nf = len(ids), len(self.waiting), len(finished_ids)
        base = self.num_steps
        if self.schedule_log is not None:
            write = self.schedule_log.write
            scheduled = json.dumps({rid: 1 for rid in ids})
            for j in range(k):
                last = j == k - 1
                write(
                    f'{{"step": {base + j}, "time": {json.dumps(starts[j])}, '
                    f'"scheduled": {scheduled}, "new": {{}}, "resumed": {{}}, "preempted": [], '
                    f'"finished": {json.dumps(finished_ids) if last else "[]"}, '
                    f'"num_free_blocks": {free_after[j]}, '
                    f'"num_running": {n - nf if last else n}, "num_waiting": {n_waiting}}}\n'
                )
        if self._steps is not None:
            s = self._steps
            s["step"].extend(range(base, base + k))
            s["time_s"].extend(starts[:k])
            s["duration_s"].extend(durations)
            s["num_scheduled_tokens"].extend([n] * k)
            s["num_prefill"].extend([0] * k)
            s["num_decode"].extend([n] * k)
            for key in ("num_new", "num_resumed", "num_preempted"):
                s[key].extend([0] * k)
            s["num_finished"].extend([0] * (k - 1) + [nf])
            s["num_running"].extend([n] * (k - 1) + [n - nf])
            s["num_waiting"].extend([n_waiting] * k)
            s["num_free_blocks"].extend(free_after)

    def _record_step(self, duration, ctx, nfin, num_free) -> None:
        s = self._steps
        s["step"].append(self.num_steps)
        s["time_s"].append(self.now)
        s["duration_s"].append(duration)
        s["num_scheduled_tokens"].append(ctx._tokens)
        s["num_prefill"].append(ctx._num_prefill)
        s["num_decode"].append(ctx._num_decode)
        s["num_new"].append(len(ctx.new))
        s["num_resumed"].append(len(ctx.resumed))
        s["num_preempted"].append(len(ctx.preempted))
        s["num_finished"].append(nfin)
        s["num_running"].append(len(self._running))
        s["num_waiting"].append(len(self.waiting))
        s["num_free_blocks"].append(num_free)

    def step_columns(self) -> dict[str, np.ndarray]:
        """Per-step records as columns (needs ``record_steps=True``)."""
        if self._plan is not None:
            self.sync()
        if self._steps is None:
            raise ConfigError("per-step records were not enabled (record_steps=False)")
        cols = {k: np.asarray(v) for k, v in self._steps.items()}
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


# Raw per-step columns the engine records; kv_cache_usage is derived from num_free_blocks.
_STEP_FIELDS = tuple(c.value for c in StepColumn if c is not StepColumn.KV_CACHE_USAGE)


class _Stretch:
    """A pure-decode stretch advanced on the clock but not applied (``Engine.sync``).

    ``k`` bounds it (no request finishes before step ``k - 1``, blocks last); ``durations`` and
    ``starts`` price the steps taken so far; ``t_arr`` is the next arrival, which ends it.
    """

    __slots__ = (
        "bs",
        "durations",
        "k",
        "longest",
        "m0",
        "memo",
        "n",
        "rooms",
        "running",
        "starts",
        "t_arr",
    )

    def __init__(
        self,
        running: list[Request],
        bs: int,
        k: int,
        n: int,
        m0: int,
        longest: int,
        t_arr: float,
        durations: list[float],
        starts: list[float],
    ) -> None:
        self.k, self.n, self.m0, self.longest, self.t_arr = k, n, m0, longest, t_arr
        self.durations, self.starts, self.bs = durations, starts, bs
        self.running = running
        self.rooms: list[int] | None = None
        self.memo: dict[str, Any] = {}
        """Readers' aggregates of the lagging counters (``Engine.peek_running``)."""

    def allocations(self, steps: int) -> int:
        """Blocks the stretch's first ``steps`` steps allocate."""
        if self.rooms is None:  # the requests' blocks do not change while it is pending
            self.rooms = _block_rooms(self.running, self.bs)
        return _allocations(self.rooms, self.bs, steps)


def _block_rooms(running: list[Request], bs: int) -> list[int]:
    """Free slots in each running request's blocks: request i allocates at steps o_i, o_i + bs..."""
    return [len(r.blocks) * bs - r.num_computed_tokens for r in running]


@cython.locals(bs=cython.long, k=cython.long, total=cython.long, o=cython.long)
def _allocations(offsets: list[int], bs: int, k: int) -> int:
    """Blocks allocated in steps [0, k) by requests allocating at steps o_i, o_i + bs, ..."""
    total = 0
    for o in offsets:
        if k > o:
            total += (k - o + bs - 1) // bs
    return total


def _arrival_time(spec: RequestSpec) -> float:
    return spec.arrival_time


def _max_steps_within_blocks(offsets: list[int], bs: int, free: int, k_max: int) -> int:
    """Largest k <= k_max such that block allocations in steps [0, k) number at most ``free``.

    Request i allocates at steps o_i, o_i + bs, ...: ``ceil((k - o_i) / bs)`` of them before k.
    """
    # Nobody allocates more than ceil(k / bs) blocks in k steps: plenty of free blocks is O(1).
    if len(offsets) * ((k_max + bs - 1) // bs) <= free or _allocations(offsets, bs, k_max) <= free:
        return k_max
    lo, hi = 0, k_max  # _allocations(lo) <= free < _allocations(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _allocations(offsets, bs, mid) <= free:
            lo = mid
        else:
            hi = mid
    return lo
