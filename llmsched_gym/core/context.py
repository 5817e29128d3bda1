"""The policy interface and the step context: what a scheduling policy sees and may do.

A policy (``SchedulingPolicy``) builds each engine step's batch through a ``StepContext``: it
reads the queues, the clock and the KV cache's free blocks, and acts with ``schedule_running`` /
``schedule_in_order``, ``admit`` and ``preempt``. The context enforces what vLLM's scheduler
enforces (token budget, ``max_num_seqs``, KV blocks, the admission gate) and sums the step's
cost features as items are added, so the engine prices the batch without another pass. The
``check_*`` functions name each rule's violation; the live backend's context
(``backends/vllm/stepctx.py``) raises the same errors through them.

The engine (``core/engine.py``) owns the state the context acts on; this module does not import
it (the context reaches the engine's counters through the engine object it is given).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import cython

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.hidden import note as note_hidden
from llmsched_gym.core.job import JobState
from llmsched_gym.core.queues import vllm_priority_key
from llmsched_gym.core.request import Request, RequestStatus, remove_identical
from llmsched_gym.errors import ConfigError, PolicyError
from llmsched_gym.kv.manager import KVCacheManager

if TYPE_CHECKING:
    from llmsched_gym.core.engine import Engine

_RUNNING = RequestStatus.RUNNING


def check_oracle(policy: Any, req: Any) -> None:
    """The step context's rule: only policies flagged ``oracle = True`` read true output lengths.

    Shared by every ``StepContext`` implementation (the simulator's, the live backend's), so a
    policy gets the same error on both; every read is counted (``core.hidden``).
    """
    note_hidden("true output length")
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
        remove_identical(self.running, req)
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

    def is_vllm_v1(self) -> bool:
        """Whether this is vLLM V1's own scheduler, rules unchanged (``policies/vllm_v1.py``).

        Some settings are simulated for that scheduler only (``check_policy_settings``); its
        subclasses change its rules and say False.
        """
        return False


_V1_ONLY_DEFAULTS = (
    ("enable_chunked_prefill", True),
    ("long_prefill_token_threshold_adaptive", False),
)
"""Settings simulated for vLLM V1's scheduler only, with the value every scheduler runs."""


def check_policy_settings(config: EngineConfig, policy: Any) -> None:
    """Raise the ``ConfigError`` of a setting that ``policy`` does not simulate.

    Async scheduling reproduces vLLM's ``AsyncScheduler`` (``core/async_loop.py``), and turning
    chunked prefill off or the adaptive long-prefill threshold on changes rules of vLLM V1's
    ``schedule()``: another scheduler would run without them, so it is refused instead.
    """
    if not config.async_scheduling and all(
        getattr(config, key) is default for key, default in _V1_ONLY_DEFAULTS
    ):
        return
    if policy.is_vllm_v1():
        return
    if config.async_scheduling:  # the async rules are vLLM V1's own
        raise ConfigError(
            "async_scheduling=True needs the vllm-v1 scheduler (vLLM's AsyncScheduler), "
            f"got {policy.name!r}; set async_scheduling to false for other schedulers"
        )
    for key, default in _V1_ONLY_DEFAULTS:
        if getattr(config, key) is not default:  # rules of vLLM V1's schedule()
            raise ConfigError(
                f"{key}={not default} is simulated for the vllm-v1 scheduler only, "
                f"got {policy.name!r}; set {key} to {str(default).lower()} for other "
                "schedulers"
            )
