"""The RelServe paper's baselines as it ran them: vLLM 0.6.6, vLLM-SP and Sarathi on vLLM 0.6.6.

* ``vllm-0.6`` (:class:`Vllm06Policy`): ``vllm-v0`` with vLLM 0.6.6's block-manager checks and
  prefix-hit counting (``llmsched_gym.kv.vllm06``);
* ``vllm-sp`` (:class:`VllmSPPolicy`): vLLM's priority policy with the static relQuery priority
  Σ (prompt tokens + ``max_tokens``) (lower first) and vLLM 0.6 priority preemption; its step
  records calibrate RelServe's latency predictors (:mod:`.predictors`);
* ``sarathi-0.6`` (:class:`Sarathi06Policy`): vLLM 0.6.6 with chunked prefill.

The helpers :func:`relquery_id`, :func:`decode_all` and :func:`steps_left` are shared with
RelServe's own scheduler (:mod:`.scheduler`).
"""

from __future__ import annotations

from collections.abc import Callable

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine, SchedulingPolicy, StepContext
from llmsched_gym.core.request import Request
from llmsched_gym.errors import ConfigError, PolicyError
from llmsched_gym.kv.vllm06 import (
    V06PrefixHits,
    can_allocate_v06,
    can_append_slots_v06,
    check_prefix_hits,
)
from llmsched_gym.policies.heuristics import VllmV0Policy, decode_one

__all__ = [
    "Sarathi06Policy",
    "Vllm06Policy",
    "VllmSPPolicy",
    "decode_all",
    "relquery_id",
    "steps_left",
]


def relquery_id(req: Request) -> str:
    """The relQuery id of a request (its job; a request outside jobs is its own relQuery)."""
    return req.spec.job_id or req.request_id


def decode_all(ctx: StepContext, victim: Callable[[], Request], v06: bool = False) -> None:
    """One decode token for every running request; preempt ``victim()`` when blocks run out.

    ``v06``: vLLM 0.6.6's worst-case ``can_append_slots`` (a decode needs one free block,
    :func:`~llmsched_gym.kv.vllm06.can_append_slots_v06`).
    """
    running = ctx.running
    for req in list(running):
        if req not in running or ctx.token_budget == 0:
            continue
        decode_one(ctx, req, v06, victim)


def steps_left(req: Request) -> int:
    """Decode steps left under the user limit: ``max_tokens`` - generated."""
    return req.max_tokens - req.num_output_tokens


class Vllm06Policy(VllmV0Policy):
    """The paper's vLLM: ``vllm-v0`` with vLLM 0.6.6's KV checks and prefix-hit counting.

    ``vllm-v0`` is FCFS, prefill-first, whole prompts, no hybrid batches; the block-manager checks
    are ``block_manager="v0.6"`` (see :class:`VllmV0Policy`) and the hit counting
    ``prefix_hits="v0.6"`` (see :class:`V06PrefixHits`). ``"v1"`` for either restores the
    engine's (vLLM V1) behaviour.
    """

    name = "vllm-0.6"

    def __init__(
        self, block_manager: str = "v0.6", watermark: float = 0.01, prefix_hits: str = "v0.6"
    ) -> None:
        super().__init__(block_manager, watermark)
        self.prefix_hits = check_prefix_hits(prefix_hits)
        self._hits = V06PrefixHits()

    def reset(self, engine: Engine) -> None:
        """Forget the frozen hit counts of the previous run."""
        self._hits.reset()

    def lookup(self, ctx: StepContext, req: Request) -> tuple[list[int], int]:
        """Prefix hit of ``req`` under the configured counting."""
        return self._hits.lookup(ctx, req) if self.prefix_hits == "v0.6" else ctx.lookup(req)


class VllmSPPolicy(Vllm06Policy):
    """vLLM-SP: ``vllm-v0`` under vLLM's priority policy with a static relQuery priority.

    Priority of every request of relQuery R = Σ_{r ∈ R} (prompt tokens + ``max_tokens``)
    (``rel_bench.py``), lower first, ties by (arrival, request id). As vLLM 0.6.6's
    ``_schedule_default``: prefills first (whole prompts, queue order); if none was admitted,
    ``_schedule_priority_preemption`` preempts (recompute) the worst running request while the
    waiting head cannot be admitted (blocks or ``max_num_seqs``) and has a better priority; then
    the remaining running requests decode, the worst-priority one preempted on block shortage.
    KV checks and prefix-hit counting are vLLM 0.6.6's by default (``block_manager="v0.6"``:
    watermark on admission, no prefix-hit credit, worst-case append; ``prefix_hits="v0.6"``: no
    hits within a batch, frozen counts; see :class:`Vllm06Policy`); ``"v1"`` is the engine's.
    """

    name = "vllm-sp"
    fast_forward_safe = False  # a blocked head may still preempt (priority inversion)
    head_of_line = True

    def __init__(
        self, block_manager: str = "v0.6", watermark: float = 0.01, prefix_hits: str = "v0.6"
    ) -> None:
        super().__init__(block_manager, watermark, prefix_hits)
        self.fast_forward_safe = False
        self._engine: Engine | None = None
        self._sums: dict[str, int] = {}

    def reset(self, engine: Engine) -> None:
        """Remember the engine (for the relQuery's released requests); clear frozen hits."""
        super().reset(engine)
        self._engine = engine
        self._sums = {}

    def relquery_priority(self, req: Request) -> int:
        """Σ (prompt + ``max_tokens``) over the released requests of ``req``'s relQuery."""
        rq = relquery_id(req)
        if rq not in self._sums:
            eng = self._engine
            jobs = None if eng is None else eng.jobs
            spec = req.spec
            if jobs is None or spec.job_id not in jobs.jobs:
                self._sums[rq] = spec.prompt_len + spec.max_tokens
            else:
                job = jobs.jobs[spec.job_id]
                stages = [s for s in job.stages if s.name == spec.stage] or list(job.stages[:1])
                self._sums[rq] = sum(s.prompt_len + s.max_tokens for s in stages[0].requests)
        return self._sums[rq]

    def priority_key(self, req: Request) -> tuple:
        """(relQuery priority, arrival, request id)."""
        return (self.relquery_priority(req), req.arrival_time, req.request_id)

    def queue_policy(self, config: EngineConfig) -> str:
        """Always vLLM's priority queue."""
        return "priority"

    def _worst_running(self, ctx: StepContext) -> Request:
        return max(ctx.running, key=self.priority_key)

    def schedule(self, ctx: StepContext) -> None:
        """Prefill-first (``vllm-v0``); without prefills, priority preemption, then decode."""
        if self.admit_whole_prefills(ctx):
            return
        waiting, running = ctx.waiting, ctx.running
        if waiting and running:  # vLLM 0.6.6 _schedule_priority_preemption (no prefill this step)
            head = waiting.peek()
            hk = self.priority_key(head)
            while running:
                worst = self._worst_running(ctx)
                if self.priority_key(worst) <= hk:
                    break
                if len(running) < ctx.max_num_seqs and self._admissible(ctx, head):
                    break
                ctx.preempt(worst)
        decode_all(ctx, lambda: self._worst_running(ctx), self.block_manager == "v0.6")

    def _admissible(self, ctx: StepContext, head: Request) -> bool:
        if self.block_manager == "v0.6":
            return self.can_allocate_v06(ctx, head)
        return ctx.blocks_needed_to_admit(head) <= ctx.num_free_blocks


class Sarathi06Policy(SchedulingPolicy):
    """The paper's Sarathi: vLLM 0.6.6's ``_schedule_chunked_prefill`` (FCFS, hybrid batches).

    Unlike the shared ``sarathi`` baseline (the engine's V1-style KV checks):

    * running requests are served in running order, each a decode or its next prefill chunk;
      the chunk is the budget left rounded down to whole blocks (prefix caching on); a chunk of
      0 ends the running phase; each needs a free block (``can_append_slots``' worst case),
      else the newest running request is preempted (recompute);
    * new admissions follow even after a preemption (the preempted rejoin the waiting head
      only after the prefill phase), gated by ``can_allocate`` (whole sequence, no hit
      credit, watermark 0.01), and get **all their prompt blocks at admission**, as vLLM 0.6's
      block manager allocates the whole prompt (here: the first chunk plus lookahead slots);
    * prefix hits counted as vLLM 0.6.6 does (``prefix_hits="v0.6"``, :class:`V06PrefixHits`).

    Outcomes vLLM 0.6.6 would not survive, made explicit (:class:`PolicyError` naming the
    request, never a hang):

    * ``can_allocate`` says ``NEVER`` (the watermark, or a recompute-preempted sequence that
      grew past the cache): vLLM ignores the request (``FINISHED_IGNORED``); see
      :func:`~llmsched_gym.kv.vllm06.can_allocate_v06`.
    * **Livelock**: a request whose whole sequence fills every block cannot run its next
      chunk or decode (no free block for the worst-case append), so it preempts itself; when
      re-admitted it again gets one chunk and preempts itself, and no token is ever sampled if
      its sequence needs more than one chunk and no prefix-cache hit shortens it (two such
      requests evict each other's cached blocks). vLLM 0.6.6's scheduler spins forever there.
      The policy raises once the same request has preempted itself ``livelock_repeats`` times
      at the same length, alone in the running queue, with no token sampled by any request
      in between.
    * ``max_num_batched_tokens`` not a multiple of ``block_size`` with prefix caching:
      vLLM 0.6.6 raises ``ValueError`` (chunks are whole blocks); here :class:`ConfigError`.
    """

    name = "sarathi-0.6"
    fast_forward_safe = False
    head_of_line = True

    def __init__(
        self, watermark: float = 0.01, livelock_repeats: int = 3, prefix_hits: str = "v0.6"
    ) -> None:
        if livelock_repeats < 2:
            raise ConfigError(f"livelock_repeats must be >= 2, got {livelock_repeats!r}")
        self.watermark = watermark
        self.livelock_repeats = livelock_repeats
        self.prefix_hits = check_prefix_hits(prefix_hits)
        self._hits = V06PrefixHits()
        self._samples = 0
        self._lone: dict[str, tuple[int, int, int]] = {}

    def reset(self, engine: Engine) -> None:
        """Check vLLM 0.6.6's chunk-size rule; clear the livelock guard."""
        cfg = engine.config
        if cfg.enable_prefix_caching and cfg.max_num_batched_tokens % cfg.block_size:
            raise ConfigError(
                f"{self.name}: with prefix caching vLLM 0.6.6's chunked prefill needs "
                f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) to be a multiple of "
                f"block_size ({cfg.block_size}); change either or disable prefix caching"
            )
        self._samples = 0
        self._lone = {}
        self._hits.reset()

    def _chunk(self, ctx: StepContext, left: int) -> int:
        budget = ctx.token_budget
        if ctx.config.enable_prefix_caching:
            budget = budget // ctx.block_size * ctx.block_size
        return min(left, budget)

    def _self_preempted_alone(self, ctx: StepContext, req: Request) -> None:
        """Livelock guard: ``req`` preempted itself with nothing else running."""
        key = req.request_id
        prev = self._lone.get(key)
        count = 1
        if prev is not None and prev[0] == req.num_tokens and prev[1] == self._samples:
            count = prev[2] + 1
        self._lone[key] = (req.num_tokens, self._samples, count)
        if count >= self.livelock_repeats:
            raise PolicyError(
                f"{self.name}: livelock at t={ctx.now:.3f} s: request {key!r} ({req.num_tokens} "
                f"tokens, {-(-req.num_tokens // ctx.block_size)} of the cache's "
                f"{ctx.num_gpu_blocks - 1} blocks) preempted itself {count} times, alone in the "
                "running queue, with no token sampled by any request in between: its sequence "
                "fills the cache, so the worst-case append (one free block) of its next chunk "
                "never fits and each re-admission recomputes one chunk only; vLLM 0.6.6 spins "
                "here forever; raise num_gpu_blocks or max_num_batched_tokens"
            )

    def schedule(self, ctx: StepContext) -> None:
        """Running phase in running order, then chunked admissions."""
        running = ctx.running
        for req in list(running):
            if req not in running:
                continue
            left = req.num_tokens - req.num_computed_tokens
            n = 1 if left == 1 else self._chunk(ctx, left)
            if n <= 0 or ctx.token_budget <= 0:
                break
            while not (can_append_slots_v06(ctx) and ctx.schedule_running(req, n)):
                victim = running[-1]
                ctx.preempt(victim)
                if victim is req:
                    if not running:
                        self._self_preempted_alone(ctx, req)
                    break
        # vLLM re-queues this step's victims at the waiting head only after the prefill phase.
        skip = set(ctx.preempted)  # prepended by ctx.preempt: they sit at the waiting head
        waiting = ctx.waiting
        while len(running) < ctx.max_num_seqs:
            req = next((r for r in waiting if r not in skip), None)
            if req is None:
                break
            # Cached tokens are counted (and frozen) before can_allocate, as in vLLM 0.6.6.
            hit = self._hits.lookup(ctx, req) if self.prefix_hits == "v0.6" else ctx.lookup(req)
            if not can_allocate_v06(ctx, req, self.watermark, self.name):
                break
            left = req.num_tokens - hit[1]
            n = self._chunk(ctx, left)
            if n <= 0:
                break
            if ctx.admit(req, n, num_lookahead_tokens=left - n, hit=hit) is None:
                break
        # Requests whose scheduled tokens reach their sequence end sample a token this step.
        for req, n in ctx.scheduled.items():
            if req.num_computed_tokens + n >= req.num_tokens:
                self._samples += 1
                break
