"""The scheduler/KV boundary (vLLM's ``KVCacheManager`` for one full-attention group).

``allocate_slots`` returns None when blocks run out; the caller (a policy through the engine)
decides whether to preempt. Token layout of one allocation, as in vLLM::

    | < computed > | < new hit > | < new tokens > | < reserve > |
                                 |<- computed this step ->|
                   |<-------- blocks to allocate --------------->|
"""

from __future__ import annotations

import cython

from llmsched_gym.core.request import Request
from llmsched_gym.kv.block_pool import BlockPool


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative ints."""
    return -(-a // b)


class KVCacheManager:
    """Allocates, caches and frees one instance's KV blocks for requests."""

    def __init__(self, num_gpu_blocks: int, block_size: int, enable_caching: bool) -> None:
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.pool = BlockPool(num_gpu_blocks, enable_caching)
        self.output_keys = False
        """Whether some request's generated ids are fixed (``RequestSpec.output_token_ids``, set
        by the engine at arrival): then a running request's decode can register a block that
        another request's prompt holds, and a waiting request's prefix hit can grow."""
        # Prefix-cache statistics (vLLM's PrefixCacheStats), split by first admission and resume.
        self.queries = 0
        self.hits = 0
        self.preempted_queries = 0
        self.preempted_hits = 0

    @property
    def num_free_blocks(self) -> int:
        """Free blocks, cached-but-unused ones included, the null block excluded."""
        return self.pool.num_free

    @cython.locals(
        bs=cython.long,
        max_blocks=cython.long,
        shareable=cython.long,
        i=cython.long,
        first=cython.long,
        hit=list,
        entries=list,
        tag=cython.long[::1],
        pool=BlockPool,
    )
    def get_computed_blocks(self, req: Request) -> tuple[list[int], int]:
        """Longest run of cached full blocks from the start of ``req``'s sequence.

        Capped so that the last token is always computed:
        ``hit <= floor((num_tokens - 1) / block_size)`` blocks. No side effects.
        """
        if not self.enable_caching:
            return [], 0
        bs = self.block_size
        pool = self.pool
        hit: list[int] = []
        max_blocks = (req.num_tokens - 1) // bs
        shareable = min(req._num_shareable_blocks, max_blocks)
        if shareable:
            keys = req.content_keys(shareable, bs)
            get = pool._cached.get  # BlockPool.get_cached_block, inlined: one call per block
            for i in range(shareable):
                b = get(keys[i])
                if b is None:
                    return hit, len(hit) * bs
                hit.append(b if type(b) is int else b[0])
        entries = req._unique_entries
        tag = pool._tg
        first = req._num_shareable_blocks
        for i in range(shareable, min(max_blocks, first + len(entries))):
            e = entries[i - first]
            if type(e) is int:
                b = e & 0xFFFFFF
                if tag[b] != e >> 24:
                    break
            else:
                b = pool.valid_unique(e)
                if b is None:
                    break
            hit.append(b)
        return hit, len(hit) * bs

    def record_lookup(self, req: Request, num_hit_tokens: int) -> None:
        """Count an admission's lookup in the prefix-cache stats (queries in tokens)."""
        if not self.enable_caching:
            return
        if req.num_preemptions > 0:
            self.preempted_queries += req.num_tokens
            self.preempted_hits += num_hit_tokens
        else:
            self.queries += req.num_tokens
            self.hits += num_hit_tokens

    def surely_blocked(self, req: Request) -> bool:
        """Whether the full-sequence admission gate must fail for waiting ``req`` right now.

        A cheap bound without a prefix lookup: only hit blocks still referenced by running
        requests reduce the need, and those can only be blocks with a content key (a waiting
        request's unique blocks are unreferenced), so need >= blocks(seq) - shareable blocks.
        """
        need_lb = cdiv(req.num_tokens, self.block_size) - req._num_shareable_blocks
        return need_lb > self.pool.num_free

    def blocks_to_admit(self, req: Request, hit_blocks: list[int]) -> int:
        """Free blocks a waiting request needs to hold its whole current sequence.

        vLLM 0.32's admission gate (``scheduler_reserve_full_isl``): blocks of the full sequence
        minus hit blocks, plus hit blocks that sit in the free queue (touching takes them out).
        """
        need = cdiv(req.num_tokens, self.block_size) - len(hit_blocks) - len(req.blocks)
        return max(need, 0) + self.pool.num_evictable(hit_blocks)

    @cython.locals(
        bs=cython.long,
        num_local_computed=cython.long,
        evictable=cython.long,
        have=cython.long,
        need_slots=cython.long,
        need=cython.long,
        num_alloc=cython.long,
        pool=BlockPool,
    )
    def allocate_slots(
        self,
        req: Request,
        num_new_tokens: int,
        hit_blocks: list[int] | None = None,
        num_lookahead_tokens: int = 0,
        full_sequence_must_fit: bool = False,
    ) -> list[int] | None:
        """Give ``req`` slots for ``num_new_tokens`` more tokens (plus lookahead), or None.

        ``hit_blocks`` are prefix-hit blocks of a request being admitted. On success the hits are
        touched, new blocks appended, and every block that is full after this step's tokens is
        registered in the prefix cache. On failure nothing changes.
        """
        bs = self.block_size
        pool = self.pool
        hits = hit_blocks or []
        num_local_computed = req.num_computed_tokens + len(hits) * bs
        evictable = pool.num_evictable(hits) if hits else 0
        have = len(req.blocks) + len(hits)
        if full_sequence_must_fit and self.blocks_to_admit(req, hits) > pool.num_free:
            return None
        need_slots = num_local_computed + num_new_tokens + num_lookahead_tokens
        need = max(cdiv(need_slots, bs) - have, 0) + evictable
        if need > pool.num_free:
            return None
        if hits:
            pool.touch(hits)
            req.blocks.extend(hits)
            req.num_cached_blocks = len(req.blocks)
        num_alloc = cdiv(need_slots, bs) - len(req.blocks)
        new_blocks = pool.get_new_blocks(num_alloc) if num_alloc > 0 else []
        if new_blocks:
            req.blocks.extend(new_blocks)
        if self.enable_caching:
            self.cache_blocks(req, min(num_local_computed + num_new_tokens, req.num_tokens))
        return new_blocks

    @cython.locals(
        num_full=cython.long,
        start=cython.long,
        shareable=cython.long,
        end=cython.long,
        i=cython.long,
        blocks=list,
    )
    def cache_blocks(self, req: Request, num_tokens: int) -> None:
        """Register every block that is full within the first ``num_tokens`` tokens."""
        num_full = num_tokens // self.block_size
        start = req.num_cached_blocks
        if start >= num_full:
            return
        shareable = req._num_shareable_blocks
        if start < shareable:
            end = num_full if num_full < shareable else shareable
            keys = req.content_keys(end, self.block_size)
            blocks, cache = req.blocks, self.pool.cache_block
            for i in range(start, end):
                cache(blocks[i], keys[i])
        # Blocks of unique content need no registration now: only their owner can hit them,
        # and only after a preemption, so ``free`` stamps them then (see BlockPool.tag).
        req.num_cached_blocks = num_full

    @cython.locals(
        num_hashed=cython.long,
        shareable=cython.long,
        stamp=cython.long,
        i=cython.long,
        b=cython.long,
        packed=cython.long,
        j=cython.long,
        blocks=list,
        entries=list,
        tag=cython.long[::1],
        pool=BlockPool,
    )
    def free(self, req: Request, preempted: bool = False) -> None:
        """Release all of ``req``'s blocks, tail first (so a chain's tail is evicted first).

        A preempted request may come back and hit its own cached blocks of unique content, so
        those are stamped first, in block order; a stamp still valid at its lookup is a hit.
        """
        blocks = req.blocks
        if not blocks:
            req.num_cached_blocks = 0
            return
        pool = self.pool
        num_hashed = req.num_cached_blocks if self.enable_caching else 0
        if preempted and num_hashed > req._num_shareable_blocks:
            # Stamp unique cached blocks in block order (BlockPool.tag): entry j holds the packed
            # stamp of block index shareable + j, or a list of them once a later preemption
            # stamps a new block there (the first still valid wins, as vLLM's map would).
            shareable = req._num_shareable_blocks
            entries = req._unique_entries
            tag = pool._tg
            stamp = pool._stamp
            for i in range(shareable, num_hashed):
                b = blocks[i]
                if tag[b]:  # a block hit on an earlier resume keeps its first stamp
                    continue
                stamp += 1
                tag[b] = stamp
                packed = (stamp << 24) | b
                j = i - shareable
                if j == len(entries):
                    entries.append(packed)
                else:
                    old = entries[j]
                    entries[j] = [old, packed] if type(old) is int else [*old, packed]
            pool._stamp = stamp
        pool.free_request_blocks(blocks, num_hashed, exclusive=not req._num_shareable_blocks)
        req.blocks = []
        req.num_cached_blocks = 0
