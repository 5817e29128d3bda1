"""Paged KV blocks with vLLM V1's free queue and prefix-cache map (``vllm/v1/core/block_pool.py``).

Invariants (checked by the property tests):

* Block 0 is vLLM's null block: taken out of the free queue at start and never freed.
* ``num_free + (blocks with ref_cnt > 0) == num_gpu_blocks - 1`` at every moment.
* A block is in the free queue iff its ``ref_cnt`` is 0 (the null block excepted). Free blocks may
  still carry a hash: they are eviction candidates, reusable by a prefix hit until taken.

The free queue is a doubly linked list over block ids held in two int lists, so removing a hit
block from the middle is O(1) as in vLLM's ``FreeKVCacheBlockQueue``. It starts in block-id order.
New blocks come from the front; taking a hashed block evicts its hash then (lazy eviction). Freed
blocks without a hash go to the front, hashed ones to the back (LRU).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from operator import itemgetter

import cython


class BlockPool:
    """All KV blocks of one instance: reference counts, hashes, free queue and cache map."""

    def __init__(self, num_gpu_blocks: int, enable_caching: bool) -> None:
        n = num_gpu_blocks
        self.num_gpu_blocks = n
        self.enable_caching = enable_caching
        self.ref_cnt: list[int] = [0] * n
        self.block_hash: list[Hashable | None] = [None] * n
        # Blocks whose content is unique to one request (generated tokens whose ids are not
        # fixed, or prompts given by length only) can only ever be hit by that request after a
        # preemption. They carry a stamp instead of a map entry; the request keeps the stamps it
        # issued per block index (``KVCacheManager.free``), which reproduces the map's
        # first-inserted-wins semantics.
        self.tag: list[int] = [0] * n
        self._stamp = 0
        # Linked list over ids 0..n-1 with sentinels HEAD = n and TAIL = n + 1.
        self._head, self._tail = n, n + 1
        self._next: list[int] = list(range(1, n + 1)) + [0, -1]
        self._prev: list[int] = [n] + list(range(0, n - 1)) + [-1, n - 1]
        self._next[n - 1] = self._tail
        # key -> block id, or list of ids when several blocks hold the same content (vLLM does not
        # de-duplicate: block tables are append-only). Lookups return the first inserted.
        self._cached: dict[Hashable, int | list[int]] = {}
        self.num_free = n
        null = self._popleft()
        assert null == 0
        self.null_block = null

    # -- free queue -------------------------------------------------------------------------
    @cython.locals(b=cython.long, after=cython.long, nxt=list)
    def _popleft(self) -> int:
        nxt = self._next
        b = nxt[self._head]
        assert b != self._tail, "free queue empty"
        after = nxt[b]
        nxt[self._head] = after
        self._prev[after] = self._head
        self.num_free -= 1
        return b

    @cython.locals(p=cython.long, q=cython.long)
    def _remove(self, b: int) -> None:
        p, q = self._prev[b], self._next[b]
        self._next[p] = q
        self._prev[q] = p
        self.num_free -= 1

    def free_queue(self) -> list[int]:
        """Block ids in free-queue order, front (next to be taken) first. For tests and views."""
        out, b, nxt = [], self._next[self._head], self._next
        while b != self._tail:
            out.append(b)
            b = nxt[b]
        return out

    # -- prefix cache map --------------------------------------------------------------------
    def get_cached_block(self, key: Hashable) -> int | None:
        """The block holding ``key`` (the first inserted if several), or None on a miss."""
        hit = self._cached.get(key)
        if hit is None or type(hit) is int:
            return hit
        return hit[0]

    def _evict_hash(self, b: int) -> None:
        key = self.block_hash[b]
        if key is None:
            return
        self.block_hash[b] = None
        entry = self._cached[key]
        if type(entry) is int:
            del self._cached[key]
        else:
            entry.remove(b)
            if not entry:  # pragma: no cover - lists are collapsed below before emptying
                del self._cached[key]
            elif len(entry) == 1:
                self._cached[key] = entry[0]

    @cython.locals(b=cython.long, e=cython.long, tag=list)
    def valid_unique(self, entries: list[int]) -> int | None:
        """The first block of ``entries`` (packed ``stamp << 24 | block``) with its stamp intact."""
        tag = self.tag
        for e in entries:
            b = e & 0xFFFFFF
            if tag[b] == e >> 24:
                return b
        return None

    def cache_block(self, b: int, key: Hashable) -> None:
        """Register full block ``b`` under ``key`` (at schedule time, as vLLM does)."""
        if self.block_hash[b] is not None or self.tag[b]:  # already cached (e.g. a prefix hit)
            return
        self.block_hash[b] = key
        entry = self._cached.get(key)
        if entry is None:
            self._cached[key] = b
        elif type(entry) is int:
            self._cached[key] = [entry, b]
        else:
            entry.append(b)

    # -- allocation --------------------------------------------------------------------------
    # The hot loops below index the lists with C longs (``i``, ``p``) but store the int objects
    # the lists already hold (``b``, ``pb``): boxing a C long would allocate an int per write
    # (and free the one it replaces).
    @cython.locals(
        i=cython.long,
        head=cython.long,
        nxt=list,
        ref=list,
        bh=list,
        tag=list,
        cached=dict,
        out=list,
    )
    def get_new_blocks(self, k: int) -> list[int]:
        """Take ``k`` blocks from the front of the free queue, evicting their hashes."""
        assert k <= self.num_free, "caller must check free blocks first"
        nxt, ref, bh, tag, cached = (
            self._next,
            self.ref_cnt,
            self.block_hash,
            self.tag,
            self._cached,
        )
        head = self._head
        b = nxt[head]
        if k == 1:  # a decode crossing a block boundary: the common case, without the loop
            i = b
            if bh[i] is not None:
                self._evict_hash(i)
            tag[i] = 0
            ref[i] = 1
            after = nxt[i]
            nxt[head] = after
            i = after
            self._prev[i] = head
            self.num_free -= 1
            return [b]
        out = []
        for _ in range(k):
            i = b
            out.append(b)
            key = bh[i]
            if key is not None:
                if type(cached[key]) is int:  # the common case, inlined from _evict_hash
                    bh[i] = None
                    del cached[key]
                else:
                    self._evict_hash(i)
            tag[i] = 0
            ref[i] = 1
            b = nxt[i]
        nxt[head] = b
        i = b
        self._prev[i] = head
        self.num_free -= k
        return out

    @cython.locals(b=cython.long, ref=list)
    def touch(self, blocks: Sequence[int]) -> None:
        """Add a reference to prefix-hit blocks, taking free ones out of the free queue."""
        ref = self.ref_cnt
        for b in blocks:
            if ref[b] == 0:
                self._remove(b)
            ref[b] += 1

    def num_evictable(self, blocks: Sequence[int]) -> int:
        """How many of ``blocks`` sit in the free queue (touching them uses free capacity)."""
        if len(blocks) > 1:
            return itemgetter(*blocks)(self.ref_cnt).count(0)
        return 1 if blocks and self.ref_cnt[blocks[0]] == 0 else 0

    @cython.locals(b=cython.long, i=cython.long, ref=list, first=list, last=list)
    def free_request_blocks(self, blocks: list[int], num_hashed: int, exclusive: bool) -> None:
        """Free a request's blocks tail first; the first ``num_hashed`` of them are cached.

        As vLLM's ``free_blocks(reversed(blocks))``: blocks reaching zero references go to the
        front when uncached (or caching is off) and to the back when cached, tail first. A
        request's own blocks are cached in order, so "cached" is "among the leading
        ``num_hashed``"; blocks of unique content need no hash for this (see ``tag``).
        ``exclusive`` says no other request references any of them (true when none holds
        shareable content), so all are freed.
        """
        ref = self.ref_cnt
        if exclusive:
            for b in blocks:
                ref[b] = 0
            self._link_freed(blocks[num_hashed:][::-1], blocks[:num_hashed][::-1])
            return
        first: list[int] = []
        last: list[int] = []
        for i in range(len(blocks) - 1, -1, -1):
            b = blocks[i]
            ref[b] -= 1
            if ref[b] == 0:
                if i < num_hashed:
                    last.append(b)
                else:
                    first.append(b)
        self._link_freed(first, last)

    @cython.locals(p=cython.long, i=cython.long, nxt=list, prv=list)
    def _link_freed(self, first: list[int], last: list[int]) -> None:
        nxt, prv = self._next, self._prev
        if first:
            p = self._head
            pb = p
            old_first = nxt[p]
            for b in first:
                i = b
                prv[i] = pb
                nxt[p] = b
                p, pb = i, b
            nxt[p] = old_first
            prv[old_first] = pb
        if last:
            pb = prv[self._tail]
            p = pb
            for b in last:
                i = b
                prv[i] = pb
                nxt[p] = b
                p, pb = i, b
            nxt[p] = self._tail
            prv[self._tail] = pb
        self.num_free += len(first) + len(last)

    def usage(self) -> float:
        """vLLM's ``kv_cache_usage``: 1 - free / (num_gpu_blocks - 1)."""
        return 1.0 - self.num_free / (self.num_gpu_blocks - 1)
