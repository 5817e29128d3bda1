"""Paged KV blocks with vLLM V1's free queue and prefix-cache map (``vllm/v1/core/block_pool.py``).

Invariants (checked by the property tests):

* Block 0 is vLLM's null block: taken out of the free queue at start and never freed.
* ``num_free + (blocks with ref_cnt > 0) == num_gpu_blocks - 1`` at every moment.
* A block is in the free queue iff its ``ref_cnt`` is 0 (the null block excepted). Free blocks may
  still carry a hash: they are eviction candidates, reusable by a prefix hit until taken.

The free queue is a doubly linked list over block ids held in two int arrays, so removing a hit
block from the middle is O(1) as in vLLM's ``FreeKVCacheBlockQueue``. It starts in block-id order.
The int state (links, reference counts, stamps) lives in ``array("l")`` objects: compiled, the
hot loops read and write them through typed views as C longs, with no int objects boxed.
New blocks come from the front; taking a hashed block evicts its hash then (lazy eviction). Freed
blocks without a hash go to the front, hashed ones to the back (LRU).
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Sequence
from typing import Any

import cython

_IOTA = array("l")
"""-1, 0, 1, 2, ...: the free queue's initial links are slices of it (copied at C speed)."""
_IDS: list[int] = []
"""The int objects 0, 1, 2, ..., shared by every pool's block tables (read-only)."""


def _iota(n: int) -> array:
    """``_IOTA`` up to at least ``n`` (``_IDS`` grows with it)."""
    global _IOTA, _IDS
    if len(_IOTA) < n + 2:
        _IDS = list(range(n + 1))
        _IOTA = array("l", range(-1, n + 1))
    return _IOTA


class BlockPool:
    """All KV blocks of one instance: reference counts, hashes, free queue and cache map."""

    def __init__(self, num_gpu_blocks: int, enable_caching: bool) -> None:
        n = num_gpu_blocks
        self.num_gpu_blocks = n
        self.enable_caching = enable_caching
        self.ref_cnt: array[int] = array("l", bytes(8 * n))
        self.block_hash: list[Hashable | None] = [None] * n
        # Blocks whose content is unique to one request (generated tokens whose ids are not
        # fixed, or prompts given by length only) can only ever be hit by that request after a
        # preemption. They carry a stamp instead of a map entry; the request keeps the stamps it
        # issued per block index (``KVCacheManager.free``), which reproduces the map's
        # first-inserted-wins semantics.
        self.tag: array[int] = array("l", bytes(8 * n))
        self._stamp = 0
        # Linked list over ids 0..n-1 with sentinels HEAD = n and TAIL = n + 1: next[i] = i + 1,
        # prev[i] = i - 1, built from slices of one shared 0, 1, 2, ... (a large pool is
        # rebuilt at every environment reset; a list of its ids would take ~100 ms).
        iota = _iota(n + 2)  # iota[i] == i - 1
        self._head, self._tail = n, n + 1
        self._next: array[int] = iota[2 : n + 4]
        self._next[n - 1], self._next[n], self._next[n + 1] = n + 1, 0, -1
        self._prev: array[int] = iota[0 : n + 2]
        self._prev[0], self._prev[n], self._prev[n + 1] = n, -1, n - 1
        # key -> block id, or list of ids when several blocks hold the same content (vLLM does not
        # de-duplicate: block tables are append-only). Lookups return the first inserted.
        self._cached: dict[Hashable, int | list[int]] = {}
        self.num_free = n
        self._bind()
        null = self._popleft()
        assert null == 0
        self.null_block = null

    def _bind(self) -> None:
        """Point the typed views the hot loops use at the int arrays (C views when compiled)."""
        self._rc = self.ref_cnt
        self._tg = self.tag
        self._nx = self._next
        self._pv = self._prev
        _iota(self.num_gpu_blocks)
        self._ids = _IDS  # shared id objects for block tables

    def __reduce__(self) -> tuple[Any, tuple]:
        """Pickle and copy (``copy.deepcopy``, ``fork``) by state: the views are rebuilt."""
        state = (
            self.num_gpu_blocks, self.enable_caching, self.ref_cnt, self.block_hash, self.tag,
            self._stamp, self._next, self._prev, self._cached, self.num_free, self.null_block,
        )  # fmt: skip
        return _restore, state

    # -- free queue -------------------------------------------------------------------------
    @cython.locals(b=cython.long, after=cython.long, nxt=cython.long[::1])
    def _popleft(self) -> int:
        nxt = self._nx
        b = nxt[self._head]
        assert b != self._tail, "free queue empty"
        after = nxt[b]
        nxt[self._head] = after
        self._pv[after] = self._head
        self.num_free -= 1
        return b

    @cython.locals(p=cython.long, q=cython.long)
    def _remove(self, b: int) -> None:
        p, q = self._pv[b], self._nx[b]
        self._nx[p] = q
        self._pv[q] = p
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

    @cython.locals(b=cython.long, e=cython.long, tag=cython.long[::1])
    def valid_unique(self, entries: list[int]) -> int | None:
        """The first block of ``entries`` (packed ``stamp << 24 | block``) with its stamp intact."""
        tag = self._tg
        for e in entries:
            b = e & 0xFFFFFF
            if tag[b] == e >> 24:
                return b
        return None

    def cache_block(self, b: int, key: Hashable) -> None:
        """Register full block ``b`` under ``key`` (at schedule time, as vLLM does)."""
        if self.block_hash[b] is not None or self._tg[b]:  # already cached (e.g. a prefix hit)
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
    @cython.locals(
        b=cython.long,
        _j=cython.long,
        head=cython.long,
        nxt=cython.long[::1],
        ref=cython.long[::1],
        tag=cython.long[::1],
        bh=list,
        cached=dict,
        ids=list,
        out=list,
    )
    def get_new_blocks(self, k: int) -> list[int]:
        """Take ``k`` blocks from the front of the free queue, evicting their hashes."""
        assert k <= self.num_free, "caller must check free blocks first"
        nxt, ref, bh, tag, cached = self._nx, self._rc, self.block_hash, self._tg, self._cached
        ids = self._ids
        head = self._head
        b = nxt[head]
        out = []
        if not self.enable_caching:  # no block carries a hash or a stamp
            for _j in range(k):
                out.append(ids[b])  # the pool's own id object: no int allocated per block
                ref[b] = 1
                b = nxt[b]
            nxt[head] = b
            self._pv[b] = head
            self.num_free -= k
            return out
        for _j in range(k):
            out.append(ids[b])
            key = bh[b]
            if key is not None:
                if type(cached[key]) is int:  # the common case, inlined from _evict_hash
                    bh[b] = None
                    del cached[key]
                else:
                    self._evict_hash(b)
            tag[b] = 0
            ref[b] = 1
            b = nxt[b]
        nxt[head] = b
        self._pv[b] = head
        self.num_free -= k
        return out

    @cython.locals(b=cython.long, ref=cython.long[::1])
    def touch(self, blocks: Sequence[int]) -> None:
        """Add a reference to prefix-hit blocks, taking free ones out of the free queue."""
        ref = self._rc
        for b in blocks:
            if ref[b] == 0:
                self._remove(b)
            ref[b] += 1

    @cython.locals(b=cython.long, n=cython.long, ref=cython.long[::1])
    def num_evictable(self, blocks: Sequence[int]) -> int:
        """How many of ``blocks`` sit in the free queue (touching them uses free capacity)."""
        ref = self._rc
        n = 0
        for b in blocks:
            if ref[b] == 0:
                n += 1
        return n

    @cython.locals(
        b=cython.long,
        i=cython.long,
        n=cython.long,
        h=cython.long,
        p=cython.long,
        old=cython.long,
        ref=cython.long[::1],
        nxt=cython.long[::1],
        prv=cython.long[::1],
    )
    def free_request_blocks(self, blocks: list[int], num_hashed: int, exclusive: bool) -> None:
        """Free a request's blocks tail first; the first ``num_hashed`` of them are cached.

        As vLLM's ``free_blocks(reversed(blocks))``: blocks reaching zero references go to the
        front when uncached (or caching is off) and to the back when cached, tail first. A
        request's own blocks are cached in order, so "cached" is "among the leading
        ``num_hashed``"; blocks of unique content need no hash for this (see ``tag``).
        ``exclusive`` says no other request references any of them (true when none holds
        shareable content), so all are freed: linked in place, as ``_link_freed`` would link
        ``blocks[num_hashed:][::-1]`` and ``blocks[:num_hashed][::-1]``.
        """
        ref = self._rc
        n = len(blocks)
        if exclusive:
            nxt, prv = self._nx, self._pv
            h = num_hashed if num_hashed < n else n
            if n > h:  # the uncached tail, last block first, to the front
                p = self._head
                old = nxt[p]
                for i in range(n - 1, h - 1, -1):
                    b = blocks[i]
                    ref[b] = 0
                    prv[b] = p
                    nxt[p] = b
                    p = b
                nxt[p] = old
                prv[old] = p
            if h > 0:  # the cached head, last block first, to the back
                p = prv[self._tail]
                for i in range(h - 1, -1, -1):
                    b = blocks[i]
                    ref[b] = 0
                    prv[b] = p
                    nxt[p] = b
                    p = b
                nxt[p] = self._tail
                prv[self._tail] = p
            self.num_free += n
            return
        first: list[int] = []
        last: list[int] = []
        for i in range(n - 1, -1, -1):
            b = blocks[i]
            ref[b] -= 1
            if ref[b] == 0:
                if i < num_hashed:
                    last.append(b)
                else:
                    first.append(b)
        self._link_freed(first, last)

    @cython.locals(
        b=cython.long, p=cython.long, old=cython.long, nxt=cython.long[::1], prv=cython.long[::1]
    )
    def _link_freed(self, first: list[int], last: list[int]) -> None:
        """Put ``first`` at the front of the free queue and ``last`` at its back, in order."""
        nxt, prv = self._nx, self._pv
        if first:
            p = self._head
            old = nxt[p]
            for b in first:
                prv[b] = p
                nxt[p] = b
                p = b
            nxt[p] = old
            prv[old] = p
        if last:
            p = prv[self._tail]
            for b in last:
                prv[b] = p
                nxt[p] = b
                p = b
            nxt[p] = self._tail
            prv[self._tail] = p
        self.num_free += len(first) + len(last)

    def usage(self) -> float:
        """vLLM's ``kv_cache_usage``: 1 - free / (num_gpu_blocks - 1)."""
        return 1.0 - self.num_free / (self.num_gpu_blocks - 1)


def _restore(
    num_gpu_blocks: int,
    enable_caching: bool,
    ref_cnt: array,
    block_hash: list,
    tag: array,
    stamp: int,
    next_: array,
    prev: array,
    cached: dict,
    num_free: int,
    null_block: int,
) -> BlockPool:
    """A pool from ``BlockPool.__reduce__``'s state (which a copy has already copied)."""
    pool = BlockPool.__new__(BlockPool)
    pool.num_gpu_blocks, pool.enable_caching = num_gpu_blocks, enable_caching
    pool.ref_cnt, pool.block_hash, pool.tag, pool._stamp = ref_cnt, block_hash, tag, stamp
    pool._head, pool._tail = num_gpu_blocks, num_gpu_blocks + 1
    pool._next, pool._prev, pool._cached = next_, prev, cached
    pool.num_free, pool.null_block = num_free, null_block
    pool._bind()
    return pool
