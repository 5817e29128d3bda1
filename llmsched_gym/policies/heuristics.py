"""Heuristic schedulers the four reference papers compare against, on the same engine accounting.

(Not to be confused with the top-level ``baselines/`` folder: learning recipes, PPO and friends.)

* ``vllm-v0``: what the papers call vLLM (vLLM 0.6-style): prefill-first, no chunked prefill,
  no hybrid batches. A step admits waiting requests (whole remaining sequence within the token
  budget, queue order, stop at the first that does not fit); if it admitted any, it is a
  prefill-only step; otherwise every running request decodes one token, the newest running
  request being preempted (by recompute) when blocks run out. By default the KV checks are the
  engine's (vLLM V1's admission gate); ``block_manager="v0.6"`` uses vLLM 0.6.6's
  ``SelfAttnBlockSpaceManager`` checks instead (``llmsched_gym.kv.vllm06``; see
  :class:`VllmV0Policy`).
* ``sarathi``: Sarathi-Serve: decode-first with chunked prefill and hybrid batches under a
  token budget (``max_num_batched_tokens`` is the chunk size): running decodes first, then
  running partial prefills, then new admissions, all in order; preempt the newest on shortage.
* ``static-priority``: vLLM's scheduler under the priority queue with a static per-request key
  (``priority``, ``shortest-prompt``, ``shortest-total`` = prompt + max_tokens, or the oracle
  ``shortest-output``).
"""

from __future__ import annotations

from collections.abc import Callable

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import SchedulingPolicy, StepContext
from llmsched_gym.core.hidden import note as note_hidden
from llmsched_gym.core.request import Request
from llmsched_gym.errors import ConfigError, PolicyError
from llmsched_gym.kv.vllm06 import can_allocate_v06, can_append_slots_v06
from llmsched_gym.policies.vllm_v1 import VllmV1Policy

BLOCK_MANAGERS = ("v1", "v0.6")


def _decode_or_preempt_newest(ctx: StepContext, req: Request, num_tokens: int) -> bool:
    """Schedule ``req``; on block shortage preempt the newest running request and retry."""
    running = ctx.running
    while not ctx.schedule_running(req, num_tokens):
        victim = running[-1]
        ctx.preempt(victim)
        if victim is req:
            return False
    return True


def decode_one(
    ctx: StepContext, req: Request, v06: bool, victim: Callable[[], Request] | None = None
) -> bool:
    """Schedule one decode token of ``req``; False if ``req`` itself was preempted.

    While blocks are short, preempt ``victim()`` (default: the newest running request).

    ``v06``: vLLM 0.6.6's ``can_append_slots`` worst case (every decode touches one block, so
    at least one free block is needed even when the last block has room) before allocating
    (:func:`~llmsched_gym.kv.vllm06.can_append_slots_v06`).
    """
    running = ctx.running
    while not ((not v06 or can_append_slots_v06(ctx)) and ctx.schedule_running(req, 1)):
        v = running[-1] if victim is None else victim()
        ctx.preempt(v)
        if v is req:
            return False
    return True


class VllmV0Policy(SchedulingPolicy):
    """Prefill-first, no chunking, no hybrid batches (the papers' "vLLM").

    ``block_manager`` picks the KV checks:

    * ``"v1"`` (default): the engine's, i.e. vLLM V1's: a waiting request is admitted when the
      blocks of its whole sequence minus its prefix hits fit the free blocks; a decode preempts
      only when it needs a new block and none is free.
    * ``"v0.6"``: vLLM 0.6.6's ``SelfAttnBlockSpaceManager`` (``vllm/core/block_manager.py``;
      the rules are in ``llmsched_gym.kv.vllm06``), which the RelServe paper's baselines ran
      on. ``can_allocate``: admit only while ``free - blocks(whole sequence) >=
      watermark_blocks`` with ``watermark_blocks = int(watermark * num_blocks)`` (``watermark``
      0.01 by default) and no credit for prefix hits (free counts evictable cached blocks, as
      ours does);
      ``can_append_slots``: every decode "touches" one block (worst case), so a decode needs
      at least one free block even when its last block has room, else the newest running
      request is preempted. The watermark is what keeps a just-preempted request from being
      re-admitted straight away (prefill-first would otherwise recompute it at once and
      preempt again at the next decode).
    """

    name = "vllm-v0"
    fast_forward_safe = True
    head_of_line = True

    def __init__(self, block_manager: str = "v1", watermark: float = 0.01) -> None:
        if block_manager not in BLOCK_MANAGERS:
            raise ConfigError(
                f"block_manager must be one of {BLOCK_MANAGERS}, got {block_manager!r}"
            )
        if not 0.0 <= watermark < 1.0:
            raise ConfigError(f"watermark must be in [0, 1), got {watermark!r}")
        self.block_manager = block_manager
        self.watermark = watermark
        if block_manager == "v0.6":
            # The worst-case append check can preempt where the engine's closed-form decode
            # stretches would not: step every decode.
            self.fast_forward_safe = False

    def can_allocate_v06(self, ctx: StepContext, req: Request) -> bool:
        """vLLM 0.6.6 ``can_allocate`` (see :func:`can_allocate_v06`; raises on ``NEVER``)."""
        return can_allocate_v06(ctx, req, self.watermark, self.name)

    def decode_or_preempt(self, ctx: StepContext, req: Request, victim=None) -> bool:
        """Decode ``req`` one token under the configured block manager (:func:`decode_one`)."""
        return decode_one(ctx, req, self.block_manager == "v0.6", victim)

    def lookup(self, ctx: StepContext, req: Request) -> tuple[list[int], int]:
        """Prefix hit of ``req`` (the engine's lookup; vLLM 0.6.6 variants count differently)."""
        return ctx.lookup(req)

    def admit_whole_prefills(self, ctx: StepContext) -> bool:
        """Admit waiting requests in queue order with their whole prompt while they fit.

        Returns whether any was admitted (then the step is prefill-only).
        """
        waiting, running = ctx.waiting, ctx.running
        admitted = False
        while waiting and len(running) < ctx.max_num_seqs:
            req = waiting.peek()
            hit = self.lookup(ctx, req)
            n = req.num_tokens - hit[1]
            if n > ctx.config.max_num_batched_tokens:
                raise PolicyError(
                    f"{self.name} cannot chunk prefills: request {req.request_id!r} needs {n} "
                    "tokens in one step but max_num_batched_tokens="
                    f"{ctx.config.max_num_batched_tokens}; raise max_num_batched_tokens or use a "
                    "chunking scheduler (vllm-v1, sarathi)"
                )
            if n > ctx.token_budget:
                break
            if self.block_manager == "v0.6" and not self.can_allocate_v06(ctx, req):
                break
            if ctx.admit(req, n, hit=hit) is None:
                break
            admitted = True
        return admitted

    def schedule(self, ctx: StepContext) -> None:
        """Admit whole prefills if any fit; otherwise decode every running request."""
        if self.admit_whole_prefills(ctx):
            return
        running = ctx.running
        if self.block_manager == "v1" and type(self).decode_or_preempt is _V0_DECODE:
            # The same decodes in one compiled pass per run of requests that get their slots:
            # ``threshold=1`` schedules one token of each (as ``schedule_running(req, 1)``),
            # preempted requests are skipped, and it stops when the budget is spent; a request
            # whose blocks ran out preempts the newest here (``decode_one``), then the pass goes
            # on after it.
            order = list(running)
            i = 0
            while True:
                i = ctx.schedule_in_order(order, i, threshold=1)
                if i < 0:
                    return
                decode_one(ctx, order[i], False)
                i += 1
        n = len(running)
        for req in list(running):
            # Only preemptions shrink the batch here: until one, every request is still in it
            # (no O(batch) membership scan per request).
            if ctx.token_budget == 0 or (len(running) != n and req not in running):
                continue
            self.decode_or_preempt(ctx, req)


_V0_DECODE = VllmV0Policy.decode_or_preempt


class SarathiPolicy(SchedulingPolicy):
    """Decode-first chunked prefill with hybrid batches (Sarathi-Serve)."""

    name = "sarathi"
    fast_forward_safe = True
    head_of_line = True

    def schedule(self, ctx: StepContext) -> None:
        """Decodes, then running prefill chunks, then new admissions, under the budget."""
        running = ctx.running
        decodes = [r for r in running if r.num_tokens - r.num_computed_tokens == 1]
        for req in decodes:
            if req in running and ctx.token_budget > 0:
                _decode_or_preempt_newest(ctx, req, 1)
        prefills = [r for r in running if r.num_tokens - r.num_computed_tokens > 1]
        for req in prefills:
            if ctx.token_budget == 0:
                break
            if req not in running:
                continue
            n = min(req.num_tokens - req.num_computed_tokens, ctx.token_budget)
            if not _decode_or_preempt_newest(ctx, req, n):
                break
        if ctx.preempted:
            return
        waiting = ctx.waiting
        while ctx.token_budget > 0 and waiting and len(running) < ctx.max_num_seqs:
            req = waiting.peek()
            if ctx.admit(req, hit=ctx.lookup(req)) is None:
                break


STATIC_KEYS: dict[str, tuple[Callable[[Request], tuple], bool]] = {
    "priority": (lambda r: (r.priority, r.arrival_time, r.request_id), False),
    "shortest-prompt": (lambda r: (r.num_prompt_tokens, r.arrival_time, r.request_id), False),
    "shortest-total": (
        lambda r: (r.num_prompt_tokens + r.max_tokens, r.arrival_time, r.request_id),
        False,
    ),
    "shortest-output": (lambda r: (_true_output(r), r.arrival_time, r.request_id), True),
}


def _true_output(req: Request) -> int:
    """The oracle key's read of the true output length, counted (``core.hidden``)."""
    note_hidden("true output length")
    return req._output_len


class StaticPriorityPolicy(VllmV1Policy):
    """vLLM V1 scheduling under a priority queue ordered by a static per-request key."""

    name = "static-priority"

    def __init__(self, key: str = "priority", preemption_rule: str = "0.32") -> None:
        super().__init__(preemption_rule)
        if key not in STATIC_KEYS:
            raise ConfigError(
                f"static-priority key must be one of {sorted(STATIC_KEYS)}, got {key!r}"
            )
        self.key_name = key
        self._key, self.oracle = STATIC_KEYS[key]
        self.name = f"static-priority:{key}"

    def priority_key(self, req: Request) -> tuple:
        """The static key (lower first)."""
        return self._key(req)

    def victim_key(self, req: Request) -> tuple:
        """The request served last under the key is preempted first."""
        return self._key(req)

    def queue_policy(self, config: EngineConfig) -> str:
        """Always a priority queue."""
        return "priority"
