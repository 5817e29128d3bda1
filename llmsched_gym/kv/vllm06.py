"""vLLM 0.6.6's block-manager rules, for the policies that run as the papers' vLLM 0.6 did.

The engine's KV checks are vLLM V1's (``llmsched_gym.kv.manager``). The RelServe paper's
baselines ran on vLLM 0.6.6 (``CSLabor/vllm_relserve@f643fc5``), whose
``SelfAttnBlockSpaceManager`` (``vllm/core/block_manager.py``) and prefix-caching allocator
(``vllm/core/block/prefix_caching_block.py``) decide differently:

* ``can_allocate`` (:func:`alloc_status_v06`, :func:`can_allocate_v06`): a waiting sequence is
  admitted only while ``free - blocks(whole sequence) >= watermark_blocks``, with no credit for
  prefix hits (free blocks include evictable cached ones, as ours do);
* ``can_append_slots`` (:func:`can_append_slots_v06`): every decode or chunk "touches" one block
  (the worst case), so it needs at least one free block even when its last block has room;
* prefix hits (:class:`V06PrefixHits`): no hits on blocks filled by the same batch, and a
  sequence's count frozen at its first lookup.

Each rule reads a step context duck-typed: ``num_gpu_blocks``, ``num_free_blocks``,
``block_size`` and, for the hits, ``lookup``, ``new`` and ``resumed``
(``llmsched_gym.core.engine.StepContext``). The policies built on them are ``vllm-v0`` with
``block_manager="v0.6"`` (``llmsched_gym.policies.heuristics``) and RelServe's baselines
(``llmsched_gym.policies.relserve``).
"""

from __future__ import annotations

from typing import Any

from llmsched_gym.errors import ConfigError, PolicyError

__all__ = [
    "PREFIX_HITS",
    "V06PrefixHits",
    "alloc_status_v06",
    "can_allocate_v06",
    "can_append_slots_v06",
    "check_prefix_hits",
    "watermark_blocks",
]


def watermark_blocks(ctx: Any, watermark: float = 0.01) -> int:
    """vLLM 0.6's ``int(watermark * num_gpu_blocks)``.

    Our block count includes the null block; vLLM 0.6 has none, so its count is ours minus one.
    """
    return int(watermark * (ctx.num_gpu_blocks - 1))


def alloc_status_v06(ctx: Any, req: Any, watermark: float = 0.01) -> str:
    """vLLM 0.6.6 ``SelfAttnBlockSpaceManager.can_allocate``: ``"ok"``, ``"later"`` or ``"never"``.

    ``need = ceil(len(seq) / block_size)``: the blocks of the whole current sequence (prompt plus
    the generated tokens of a preempted one), no credit for prefix hits; free blocks include
    evictable cached ones (``PrefixCachingBlockAllocator.get_num_free_blocks``). ``"never"``
    when ``num_blocks - need < watermark_blocks`` (the request could not be admitted even into
    an empty cache), ``"ok"`` when ``free - need >= watermark_blocks``, else ``"later"``.
    """
    need = -(-req.num_tokens // ctx.block_size)
    wm = watermark_blocks(ctx, watermark)
    if ctx.num_gpu_blocks - 1 - need < wm:
        return "never"
    return "ok" if ctx.num_free_blocks - need >= wm else "later"


def can_allocate_v06(ctx: Any, req: Any, watermark: float = 0.01, policy: str = "vLLM 0.6") -> bool:
    """vLLM 0.6.6 ``can_allocate(...) == AllocStatus.OK`` (see :func:`alloc_status_v06`).

    Raises:
        PolicyError: ``AllocStatus.NEVER``: the sequence can never be admitted, even into an
            empty cache, because of the watermark (or because a recompute-preempted sequence
            grew past the cache). vLLM 0.6.6 marks such a request ``FINISHED_IGNORED`` and drops
            it (``Scheduler._schedule_prefills``: "... exceeds the capacity of block_manager");
            the simulator keeps every request it was given, so it stops with this error instead
            of dropping the request or waiting for it forever.
    """
    status = alloc_status_v06(ctx, req, watermark)
    if status == "never":
        need = -(-req.num_tokens // ctx.block_size)
        total = ctx.num_gpu_blocks - 1
        raise PolicyError(
            f"{policy}: request {req.request_id!r} can never be allocated (vLLM 0.6.6 "
            f"AllocStatus.NEVER): its {req.num_tokens} tokens need {need} blocks of "
            f"{ctx.block_size} but the cache has {total} blocks of which the watermark "
            f"({watermark}) keeps {watermark_blocks(ctx, watermark)} free; vLLM 0.6.6 would "
            "ignore the request (FINISHED_IGNORED); raise num_gpu_blocks, lower the watermark "
            "or drop the request"
        )
    return status == "ok"


def can_append_slots_v06(ctx: Any) -> bool:
    """vLLM 0.6.6 ``can_append_slots``' worst case: a decode or chunk needs one free block."""
    return ctx.num_free_blocks >= 1


PREFIX_HITS = ("v0.6", "v1")
"""How prefix-cache hits are counted: ``v0.6`` as vLLM 0.6.6's V0 scheduler (the authors'
engine), ``v1`` as the engine's lookup (vLLM V1)."""


def check_prefix_hits(value: str) -> str:
    """``value`` if it names a hit counting of :data:`PREFIX_HITS`, else a ``ConfigError``."""
    if value not in PREFIX_HITS:
        raise ConfigError(f"prefix_hits must be one of {PREFIX_HITS}, got {value!r}")
    return value


class V06PrefixHits:
    """Prefix-cache hits as vLLM 0.6.6's V0 scheduler counts them (the authors' engine).

    The engine's lookup is vLLM V1's: a block is a hit as soon as an earlier admission of the
    same step filled it, and the count is fresh at every lookup. vLLM 0.6.6
    (``CSLabor/vllm_relserve@f643fc5``, ``vllm/core/block/prefix_caching_block.py``) differs twice:

    1. **No hits on blocks of the same batch.** A block first filled by this batch is only
       "touched" when it is promoted ("this block cannot be marked as computed yet because other
       sequences in the same batch cannot reuse this block", ``:456-464``); ``Scheduler.schedule``
       marks touched blocks computed only after the whole batch is built (``scheduler.py:3276``,
       ``mark_blocks_as_computed``, ``:529-533``), and ``find_cached_blocks_prefix`` counts computed
       blocks only (``:650-656``). Rows of one relQuery sorted by prompt share their leading
       cells, so most of that sharing falls inside one prefill batch and is recomputed.
    2. **Frozen count.** ``ComputedBlocksTracker.get_num_cached_tokens`` computes a sequence's
       cached tokens at its first lookup and returns that number unchanged while the sequence is
       in prefill (``:979-1001``), until the sequence is freed (``remove_seq`` on preemption,
       ``block_manager.py:265``). The count is what the token budget charges and what the model
       runner skips (``get_common_computed_block_ids``, ``block_manager.py:308-330``). RelServe's
       DPU looks up the first 10 waiting requests of each relQuery when it computes the
       cache-miss ratio (``scheduler.py:2240-2255`` via ``get_num_cached_tokens``, ``:3565``),
       i.e. when the relQuery arrives, so those requests keep the hits they had then.

    ``lookup`` returns the engine's hit truncated to both rules (never more than the engine's
    hit, so a block evicted since the first lookup is recomputed). vLLM 0.6.6 still shares the
    physical blocks of rule 1; here the uncounted blocks are allocated anew, so KV use is
    slightly above vLLM 0.6.6's.
    """

    def __init__(self) -> None:
        self._first: dict[tuple[str, int], int] = {}

    def reset(self) -> None:
        """Forget every frozen count (a new run)."""
        self._first = {}

    def lookup(self, ctx: Any, req: Any) -> tuple[list[int], int]:
        """(hit block ids, hit tokens) of ``req`` as vLLM 0.6.6 would count them now."""
        blocks, tokens = ctx.lookup(req)
        bs = ctx.block_size
        if tokens != len(blocks) * bs:  # KV handed over from another instance: not a V0 notion
            return blocks, tokens
        k = len(blocks)
        if k and (ctx.new or ctx.resumed):
            fresh: set[int] = set()
            for r, hit in (*ctx.new, *ctx.resumed):
                fresh.update(r.blocks[hit // bs :])
            for i, b in enumerate(blocks):
                if b in fresh:
                    k = i
                    break
        k = min(k, self._first.setdefault((req.request_id, req.num_preemptions), k))
        return blocks[:k], k * bs
