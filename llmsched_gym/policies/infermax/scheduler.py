"""InferMax's unified scheduler (Kim et al., PVLDB, §3.1, Alg. 1).

One configurable policy class, :class:`InferMaxPolicy`, implements ``GETNEXTBATCH`` of Alg. 1:

1. **Grouping and order** (Alg. 1 line 11, step ①): ``prefill`` priority is vLLM's two groups
   ``[R_w, R_r]`` (waiting prefills/refills first), ``decode`` priority is Sarathi's three groups
   ``[R_r^d, R_r^p, R_w]``, ``rank`` is a single group ``R_w ∪ R_r`` sorted by a rank key
   (§4.6: Rank_org by arrival, Rank_I by initial input size, Rank_O by output size).
   Running requests are ordered by arrival (vLLM, Sarathi: the authors' code sorts by
   ``arrived_at``) or by processed tokens ``m`` descending (evict-short, §6).
2. **Hybrid batching** (line 13, step ②): when off, a candidate whose phase differs from the
   batch's is skipped (a decode-first batch with any decode stays decode-only; a prefill-first
   batch that admitted a prefill stays prefill-only).
3. **CANALLOCATE** (line 14, step ③): the ``C`` check (``cand.c <= C - Σ_B c``), the ``P`` check
   for prefill-phase candidates (``cand.c <= P - Σ_B c``, decodes of the batch included, as
   Sarathi's chunk budget), and the ``M`` check (``m_reserve <= M - Σ_{R_r} m``). With chunked
   prefill ``cand.c`` shrinks to ``min(cand.c, P - Σ_B c)``. ``m_reserve`` is 1 for a decode and
   the whole prompt (or refill) for a prefill — a chunked prefill reserves its whole prompt at
   admission, so later chunks always fit (§3.1: "all requests [of R_r^p] can be allocated as
   they are in the middle of prefill and have already reserved the whole input tokens") — and
   ``I + O - 1`` for the eviction-free (EF) variants (§4.1), reserved with
   ``num_lookahead_tokens`` so that an admitted EF request never needs another block.
4. **Eviction** (line 15, step ④): when ``M`` fails for a running candidate, the lowest-priority
   running request not yet visited this step (the last of the group order: the newest arrival,
   or the smallest ``m`` for evict-short) is evicted and the candidate retried; with none left
   the candidate evicts itself. Evicted requests go to the head of the waiting queue and are
   later refilled (prompt + generated tokens recomputed; the engine's preemption by recompute).
   A waiting candidate that fails ``M`` stops the FIFO waiting group (vLLM and Sarathi "skip" —
   the authors' code breaks at the first that does not fit); ranked schedulers evict lower-rank
   running requests for it as well, and skip it when none is left.

Evict-short ("ours", §6) is Sarathi's grouping with running requests sorted by processed tokens,
longest first, P = C, and the admission gate of an online output-length histogram
(:class:`OutputLengthHistogram`): 100 buckets keyed by ``floor(log2(initial prompt))`` hold the
count and the sum of ``I + O`` of completed requests; a waiting request (new or evicted) is
admitted only if the free KV tokens are at least ``max(prompt, ceil(mean I + O of its bucket))``
(its prompt alone while the bucket is empty) — but only its prompt is allocated.

Paper vs. the authors' code (``ValerioL29/infermax@f18ad5a``, ``vidur/``, identical to the
authors' commit ``ff9b6a3``) and the choices made here:

* §6 says the histogram is used to "reserve the estimated maximum memory usage"; the code only
  gates admission on it and allocates the prompt. We follow the code.
* Alg. 1 applies the ``C`` check to every candidate; the code's Sarathi/"test" schedulers add
  decodes without a token check (only a batch-size cap of 1e6). The engine enforces the token
  budget, so decodes here stop at ``C`` (as the code's vLLM scheduler does). With ``B <= C`` in
  all of the paper's settings this never binds.
* The code's EF reservation is ``ceil((I + O - 1) / block)`` in vLLM/Sarathi/"test" but
  ``I + O`` in the rank scheduler; we use ``I + O - 1`` everywhere (§4.1).
* In the rank scheduler's code, a victim evicted in this batch is met again later in the same
  loop as a waiting request; we do the same (the candidate's status decides its path).
* The histogram gate also applies to evicted requests coming back (the code treats any request
  without an allocation as new): bucket by the *initial* prompt, ``prefill_tokens = I + g``.
* Ranked schedulers use P = C (the code's ``chunk_size``; §4.6 does not say).
* The paper's decode-phase test is the request's phase, not a one-token step: a chunked prefill
  that has one prompt token left is still a prefill here (the cost model still sees ``c = 1``).

Oracles: EF variants need ``O`` and Rank_O sorts by ``O``; both set ``oracle = True`` and read the
output length through ``StepContext.true_output_len``.

Engine settings that match the paper: ``block_size: 1`` (KV counted in tokens), ``num_gpu_blocks:
M + 1`` (vLLM's null block), ``max_num_batched_tokens: C``, a large ``max_num_seqs`` (the code's
batch-size cap is 1e6) and ``enable_prefix_caching: false`` (refills recompute everything; this
policy never asks for prefix hits in any case).
"""

from __future__ import annotations

from dataclasses import replace

from llmsched_gym.core.engine import Engine, SchedulingPolicy, StepContext
from llmsched_gym.core.request import Request, RequestStatus
from llmsched_gym.errors import ConfigError, PolicyError
from llmsched_gym.policies.infermax.presets import PRESETS, InferMaxConfig

__all__ = [
    "InferMaxPolicy",
    "OutputLengthHistogram",
    "code_tpot",
    "make_infermax_policy",
]

_NO_HIT: tuple[list[int], int] = ([], 0)


class OutputLengthHistogram:
    """The online output-length histogram of evict-short (§6; code: ``test_replica_scheduler``).

    Buckets are keyed by ``floor(log2(initial prompt length))`` and hold (count, sum of
    ``I + O``) of completed requests.
    """

    NUM_BUCKETS = 100

    def __init__(self) -> None:
        self.count = [0] * self.NUM_BUCKETS
        self.total = [0] * self.NUM_BUCKETS

    @staticmethod
    def bucket(prompt_len: int) -> int:
        """``floor(log2(prompt_len))`` for ``prompt_len >= 1`` (exact, integer)."""
        if prompt_len < 1:
            raise ValueError(f"prompt_len must be >= 1, got {prompt_len}")
        return prompt_len.bit_length() - 1

    def record(self, prompt_len: int, total_tokens: int) -> None:
        """Add a completed request: its initial prompt and its ``I + O``."""
        k = self.bucket(prompt_len)
        self.count[k] += 1
        self.total[k] += total_tokens

    def mean_total(self, prompt_len: int) -> int | None:
        """``ceil(mean I + O)`` of the bucket of ``prompt_len``; None while it is empty."""
        k = self.bucket(prompt_len)
        if self.count[k] == 0:
            return None
        return -(-self.total[k] // self.count[k])

    def required(self, initial_prompt_len: int, prefill_tokens: int, threshold: int = 0) -> int:
        """KV tokens the admission gate asks for (code: ``_can_allocate_request``).

        Args:
            initial_prompt_len: The request's original prompt ``I`` (selects the bucket).
            prefill_tokens: Tokens to (re)fill now: ``I`` for a new request, ``I + generated``
                for an evicted one.
            threshold: Requests whose ``prefill_tokens`` are below it ignore the histogram (the
                code's ``histogram_threshold``, default 0: every request uses it).
        """
        mean = self.mean_total(initial_prompt_len)
        if mean is None or prefill_tokens < threshold:
            return prefill_tokens
        return max(prefill_tokens, mean)


class _Batch:
    """Running totals of the batch under construction (Alg. 1's ``B``)."""

    __slots__ = ("tokens", "has_prefill", "has_decode")

    def __init__(self) -> None:
        self.tokens = 0
        self.has_prefill = False
        self.has_decode = False


class InferMaxPolicy(SchedulingPolicy):
    """Alg. 1 ``GETNEXTBATCH`` with the knobs of :class:`InferMaxConfig`.

    Args:
        config: The configuration (or use :func:`make_infermax_policy` with a preset name).
        name: Display name (default ``infermax:custom``).
    """

    fast_forward_safe = True

    def __init__(self, config: InferMaxConfig | None = None, name: str | None = None) -> None:
        self.cfg = config or InferMaxConfig()
        self.name = name or "infermax:custom"
        self.oracle = self.cfg.oracle
        # FIFO groups stop at the first waiting request that does not fit (vLLM's rule);
        # ranked ones go on with later candidates.
        self.head_of_line = self.cfg.priority != "rank"
        self.histogram = OutputLengthHistogram()
        self._prefill_target: dict[Request, int] = {}
        self.num_evictions = 0
        self.evicted_output: dict[str, int] = {}
        """Request id -> output tokens generated when it was last evicted (see ``code_tpot``)."""

    # -- lifecycle ---------------------------------------------------------------------------
    def reset(self, engine: Engine) -> None:
        """Fresh histogram and phase bookkeeping for a new engine."""
        self.histogram = OutputLengthHistogram()
        self._prefill_target = {}
        self.num_evictions = 0
        self.evicted_output = {}

    def on_finish(self, req: Request, now: float) -> None:
        """Record ``(I, I + O)`` of a completed request in the histogram (§6)."""
        self._prefill_target.pop(req, None)
        if self.cfg.histogram:
            self.histogram.record(
                req.num_prompt_tokens, req.num_prompt_tokens + req.num_output_tokens
            )

    # -- helpers -----------------------------------------------------------------------------
    def _is_decode(self, req: Request) -> bool:
        """Decode phase: the (re)fill that started at admission is complete."""
        target = self._prefill_target.get(req)
        if target is None:  # admitted before this policy knew it (e.g. a swapped policy)
            return req.num_tokens - req.num_computed_tokens == 1 and req.num_output_tokens > 0
        return req.num_computed_tokens >= target

    def _running_key(self, req: Request) -> tuple:
        if self.cfg.running_order == "processed":
            return (-req.num_computed_tokens, req.arrival_time, req.seq)
        return (req.arrival_time, req.seq)

    def _rank_key(self, ctx: StepContext, req: Request) -> tuple:
        key = self.cfg.rank_key
        if key == "input":
            return (req.num_prompt_tokens, req.arrival_time, req.seq)
        if key == "output":
            return (ctx.true_output_len(req), req.arrival_time, req.seq)
        return (req.arrival_time, req.seq)

    def _reserve(self, ctx: StepContext, req: Request) -> tuple[int, int]:
        """(KV tokens to allocate, KV tokens the M check asks free) for a waiting request."""
        fill = req.num_tokens - req.num_computed_tokens
        if self.cfg.eviction_free:
            left = ctx.true_output_len(req) - req.num_output_tokens
            total = req.num_tokens + left - 1  # I + O - 1 for a new request (§4.1)
            return total, total
        if self.cfg.histogram:
            gate = self.histogram.required(
                req.num_prompt_tokens, fill, self.cfg.histogram_threshold
            )
            return fill, gate
        return fill, fill

    def _prefill_chunk(self, remaining: int, p_limit: int, batch: _Batch, ctx: StepContext) -> int:
        """``cand.c`` of a prefill-phase candidate after the C and P checks (0: does not fit)."""
        room = min(p_limit - batch.tokens, ctx.token_budget)
        if self.cfg.chunked:
            return max(0, min(remaining, room))
        return remaining if remaining <= room else 0

    def _evict(self, ctx: StepContext, victim: Request) -> None:
        self._prefill_target.pop(victim, None)
        self.evicted_output[victim.request_id] = victim.num_output_tokens
        ctx.preempt(victim)
        self.num_evictions += 1

    def _admit(self, ctx: StepContext, req: Request, c: int, alloc: int, gate: int) -> bool:
        """Admit ``req`` for ``c`` tokens reserving ``alloc`` KV tokens if ``gate`` fit."""
        bs = ctx.block_size
        if -(-gate // bs) > ctx.num_free_blocks:
            return False
        target = req.num_tokens
        if ctx.admit(req, c, alloc - c, full_sequence_must_fit=False, hit=_NO_HIT) is None:
            return False
        self._prefill_target[req] = target
        return True

    # -- Alg. 1 GETNEXTBATCH ----------------------------------------------------------------
    def schedule(self, ctx: StepContext) -> None:
        """Build one batch (Alg. 1 lines 10-18)."""
        cfg = self.cfg
        p_limit = min(cfg.prefill_tokens or ctx.token_budget, ctx.token_budget)
        batch = _Batch()
        if cfg.priority == "rank":
            self._schedule_ranked(ctx, batch, p_limit)
            return
        running = sorted(ctx.running, key=self._running_key)
        if cfg.priority == "prefill":
            # Groups [R_w, R_r]: prefills/refills first; running requests after.
            self._waiting_group(ctx, batch, p_limit)
            if batch.has_prefill and not cfg.hybrid:
                return
            self._running_group(ctx, batch, p_limit, running, defer_prefills=False)
            return
        # Groups [R_r^d, R_r^p, R_w] (Sarathi, evict-short).
        partial = self._running_group(ctx, batch, p_limit, running, defer_prefills=True)
        if batch.has_decode and not cfg.hybrid:
            return
        for req in partial:
            if req.status is not RequestStatus.RUNNING or ctx.token_budget == 0:
                continue
            c = self._prefill_chunk(req.num_tokens - req.num_computed_tokens, p_limit, batch, ctx)
            if c and ctx.schedule_running(req, c):  # the prompt is reserved: always fits
                batch.tokens += c
                batch.has_prefill = True
        self._waiting_group(ctx, batch, p_limit)

    def _no_shortage(self, ctx: StepContext) -> bool:
        """Every running request decodes and all of them fit (blocks and budget) at once."""
        running = ctx.running
        if len(running) > ctx.token_budget:
            return False
        bs = ctx.block_size
        need = 0
        for r in running:
            if not self._is_decode(r):
                return False
            if r.num_computed_tokens + 1 > len(r.blocks) * bs:
                need += 1
        return need <= ctx.num_free_blocks

    def _running_group(
        self,
        ctx: StepContext,
        batch: _Batch,
        p_limit: int,
        order: list[Request],
        defer_prefills: bool,
    ) -> list[Request]:
        """Running requests in ``order``: decodes with eviction (④); returns deferred prefills.

        With ``defer_prefills`` (Sarathi's ``R_r^d``) prefill-phase requests are returned for the
        ``R_r^p`` group; otherwise they are scheduled in place as prefill candidates.
        """
        if not self.cfg.hybrid and batch.has_prefill:
            return []
        if self._no_shortage(ctx) and not batch.has_prefill:
            # No eviction can happen, so the order is immaterial: use the engine's running order
            # (what a fast-forwarded stretch logs).
            for req in list(ctx.running):
                if ctx.schedule_running(req, 1):
                    batch.tokens += 1
                    batch.has_decode = True
            return []
        pending = list(order)
        deferred: list[Request] = []
        i = 0
        while i < len(pending):
            req = pending[i]
            i += 1
            if not self._is_decode(req):
                if defer_prefills:
                    deferred.append(req)
                    continue
                if not self.cfg.hybrid and batch.has_decode:
                    continue
                c = self._prefill_chunk(
                    req.num_tokens - req.num_computed_tokens, p_limit, batch, ctx
                )
                if c and ctx.schedule_running(req, c):
                    batch.tokens += c
                    batch.has_prefill = True
                continue
            if ctx.token_budget == 0:  # C check: the batch is full
                break
            if not self.cfg.hybrid and batch.has_prefill:
                continue
            while not ctx.schedule_running(req, 1):  # M check fails: evict (④)
                if i < len(pending):
                    self._evict(ctx, pending.pop())
                else:
                    self._evict(ctx, req)
                    break
            else:
                batch.tokens += 1
                batch.has_decode = True
        return deferred

    def _waiting_group(self, ctx: StepContext, batch: _Batch, p_limit: int) -> None:
        """``R_w`` in queue order; stop at the first request that does not fit (C, P or M)."""
        if not self.cfg.hybrid and batch.has_decode:
            return
        waiting, running = ctx.waiting, ctx.running
        while waiting and len(running) < ctx.max_num_seqs and ctx.token_budget > 0:
            req = waiting.peek()
            remaining = req.num_tokens - req.num_computed_tokens
            if not self.cfg.chunked and remaining > ctx.config.max_num_batched_tokens:
                raise PolicyError(
                    f"{self.name} cannot chunk prefills: request {req.request_id!r} needs "
                    f"{remaining} tokens in one batch but C = max_num_batched_tokens = "
                    f"{ctx.config.max_num_batched_tokens}"
                )
            c = self._prefill_chunk(remaining, p_limit, batch, ctx)
            if c == 0:
                break
            alloc, gate = self._reserve(ctx, req)
            if not self._admit(ctx, req, c, alloc, gate):
                break
            batch.tokens += c
            batch.has_prefill = True

    def _schedule_ranked(self, ctx: StepContext, batch: _Batch, p_limit: int) -> None:
        """One group ``R_w ∪ R_r`` in rank order (§4.6; code: ``rank_replica_scheduler``)."""
        if not ctx.waiting and self._no_shortage(ctx):
            for req in list(ctx.running):
                if ctx.schedule_running(req, 1):
                    batch.tokens += 1
                    batch.has_decode = True
            return
        cands = sorted([*ctx.waiting, *ctx.running], key=lambda r: self._rank_key(ctx, r))
        visited: set[Request] = set()
        exhausted = False  # no victim is left after the current candidate (stays true)

        def victim_after() -> Request | None:
            nonlocal exhausted
            if not exhausted:
                for r in reversed(cands):
                    if r in visited:
                        break
                    if r.status is RequestStatus.RUNNING and r not in ctx.scheduled:
                        return r
                exhausted = True
            return None

        for req in cands:
            visited.add(req)
            if ctx.token_budget == 0:
                break
            if req.status is RequestStatus.RUNNING:
                if req in ctx.scheduled:
                    continue
                if self._is_decode(req):
                    while not ctx.schedule_running(req, 1):
                        victim = victim_after()
                        self._evict(ctx, victim or req)
                        if victim is None:
                            break
                    else:
                        batch.tokens += 1
                        batch.has_decode = True
                    continue
                c = self._prefill_chunk(
                    req.num_tokens - req.num_computed_tokens, p_limit, batch, ctx
                )
                if c and ctx.schedule_running(req, c):
                    batch.tokens += c
                    batch.has_prefill = True
                continue
            if len(ctx.running) >= ctx.max_num_seqs:
                continue
            remaining = req.num_tokens - req.num_computed_tokens
            c = self._prefill_chunk(remaining, p_limit, batch, ctx)
            if c == 0:
                continue
            alloc, gate = self._reserve(ctx, req)
            while not self._admit(ctx, req, c, alloc, gate):
                victim = victim_after()
                if victim is None:
                    break  # skip it: it stays waiting
                self._evict(ctx, victim)
            else:
                batch.tokens += c
                batch.has_prefill = True


def code_tpot(first_token, finish, num_output, evicted_output) -> float:
    """Mean TPOT as the authors' extraction script computes it (token-weighted, restart-scaled).

    ``ValerioL29/infermax@f18ad5a``: ``vidur/extract_row_splitwise.py`` (``compute_metrics``) sums
    ``decode_time_execution_plus_preemption_normalized x request_num_decode_tokens`` over requests
    and divides by ``sum(request_num_decode_tokens) - #requests``. The normalised decode time is
    ``(completed_at - prefill_completed_at) / request.num_decode_tokens`` taken at completion
    (``vidur/metrics/metrics_store.py``, ``_on_request_end``), and ``Request.restart``
    (``vidur/entities/request.py``) rewrites ``num_decode_tokens`` to ``O - k`` when a request is
    evicted after generating ``k`` tokens, while ``request_num_decode_tokens`` in the CSV is the
    arrival-time ``O``. So a request last evicted at ``k`` counts its decode span ``O / (O - k)``
    times: ``Σ_r (finish_r - first_r)·O_r / (O_r - k_r) / Σ_r (O_r - 1)``. With no evictions and
    equal ``O`` this is the per-request mean of ``(finish - first) / (O - 1)`` (§4.1's TPOT).

    Args:
        first_token: First-token times, one per request.
        finish: Finish times.
        num_output: Output lengths ``O`` (requests with ``O <= 1`` add 0 to the numerator, as
            in the script).
        evicted_output: ``k`` per request: output tokens at its last eviction (0 if never).
    """
    num = 0.0
    den = 0
    for t0, t1, o, k in zip(first_token, finish, num_output, evicted_output, strict=True):
        o, k = int(o), int(k)
        den += o - 1
        if o > 1:
            num += (float(t1) - float(t0)) * o / (o - k)
    return num / den if den > 0 else 0.0


def make_infermax_policy(preset: str, **overrides) -> InferMaxPolicy:
    """Build a named preset (``vllm``, ``sarathi-ef``, ``rank-i``, ``evict-short``, ...).

    Args:
        preset: A key of :data:`PRESETS`.
        **overrides: Fields of :class:`InferMaxConfig` to change (e.g. ``prefill_tokens=256``).

    Raises:
        ConfigError: For an unknown preset or field.
    """
    if preset not in PRESETS:
        raise ConfigError(f"unknown InferMax preset {preset!r}; presets: {', '.join(PRESETS)}")
    try:
        cfg = replace(PRESETS[preset], **overrides)
    except TypeError as err:
        raise ConfigError(f"InferMax preset {preset!r}: {err}") from None
    return InferMaxPolicy(cfg, name=f"infermax:{preset}")
