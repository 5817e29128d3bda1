"""Tiny-engine scenarios asserting exact block ids and eviction order (vLLM's test_prefill style)."""

from __future__ import annotations

import json

import pytest
from engine_helpers import spec, tiny_engine

from llmsched_gym.kv.block_pool import BlockPool

SHARED = list(range(1, 13))  # 12 tokens = 3 full blocks of 4


@pytest.mark.parametrize("n", [10, 2, 3, 5000, 7])  # one shared id range, grown on demand
def test_block_pool_starts_in_id_order_with_null_block_reserved(n):
    pool = BlockPool(n, enable_caching=True)
    assert pool.null_block == 0
    assert pool.free_queue() == list(range(1, n))
    assert pool.num_free == n - 1
    head, tail = n, n + 1
    assert list(pool._prev) == [head, head, *range(1, n - 1), -1, n - 1]  # back links
    assert pool._next[head] == 1 and pool._next[tail] == -1
    assert pool.get_new_blocks(n - 1) == list(range(1, n))


@pytest.mark.parametrize("exclusive", [False, True])
def test_freed_blocks_unhashed_to_front_hashed_to_back_tail_first(exclusive):
    pool = BlockPool(8, enable_caching=True)
    blocks = pool.get_new_blocks(4)
    assert blocks == [1, 2, 3, 4]
    for i, b in enumerate(blocks[:3]):
        pool.cache_block(b, ("k", i))
    pool.free_request_blocks(blocks, num_hashed=3, exclusive=exclusive)
    # 4 has no hash -> front; 3, 2, 1 hashed -> back, chain tail first.
    assert pool.free_queue() == [4, 5, 6, 7, 3, 2, 1]
    assert pool.num_free == 7 and list(pool.ref_cnt[1:5]) == [0, 0, 0, 0]
    # Taking a hashed block evicts its hash (lazy eviction).
    assert pool.get_new_blocks(5) == [4, 5, 6, 7, 3]
    assert pool.get_cached_block(("k", 2)) is None
    assert pool.get_cached_block(("k", 1)) == 2


def test_block_pool_without_caching_reuses_freed_blocks_front_first():
    pool = BlockPool(6, enable_caching=False)
    a, b = pool.get_new_blocks(2), pool.get_new_blocks(3)
    assert (a, b) == ([1, 2], [3, 4, 5]) and pool.num_free == 0
    assert list(pool.ref_cnt) == [0, 1, 1, 1, 1, 1]
    pool.free_request_blocks(a, num_hashed=0, exclusive=True)  # tail first to the front
    assert pool.free_queue() == [2, 1] and pool.num_free == 2
    assert pool.get_new_blocks(2) == [2, 1]


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_block_pool_copies_continue_as_the_original(how):
    """A copy (fork, pickle) has its own arrays and views: both go on alike, independently."""
    import copy
    import pickle

    pool = BlockPool(12, enable_caching=True)
    blocks = pool.get_new_blocks(5)
    pool.cache_block(blocks[0], ("k", 0))
    pool.free_request_blocks(blocks[2:], num_hashed=0, exclusive=True)
    twin = copy.deepcopy(pool) if how == "deepcopy" else pickle.loads(pickle.dumps(pool))
    for p in (pool, twin):
        got = p.get_new_blocks(4)
        p.free_request_blocks(blocks[:2], num_hashed=1, exclusive=False)
        p.touch([got[0]])
    assert twin.free_queue() == pool.free_queue()
    assert list(twin.ref_cnt) == list(pool.ref_cnt) and twin.num_free == pool.num_free
    assert twin.get_cached_block(("k", 0)) == pool.get_cached_block(("k", 0)) == blocks[0]
    twin.get_new_blocks(1)
    assert twin.num_free == pool.num_free - 1  # the original's arrays were not shared


def test_remove_identical_removes_the_first_same_object():
    from llmsched_gym.core.request import remove_identical

    x, y = [1000], [1000]  # equal, not identical
    items = [y, x, y]
    remove_identical(items, y)
    assert items == [x, y] and items[0] is x
    with pytest.raises(ValueError, match="not in items"):
        remove_identical(items, [1000])


def test_prefix_hits_exact_blocks_and_lru_eviction_order():
    eng, _ = tiny_engine(num_gpu_blocks=10)
    eng.add_requests([spec("A", SHARED + [50, 51]), spec("B", SHARED + [60, 61, 62])])
    eng.step()
    a, b = sorted(eng.finished, key=lambda r: r.seq)
    # Both were admitted in the same step: B hits A's three full blocks, registered at schedule
    # time although they were still being computed.
    assert (a.num_cached_tokens, b.num_cached_tokens) == (0, 12)
    # A held [1, 2, 3, 4]; B [1, 2, 3, 5]. A frees tail first: 4 (unhashed) to the front;
    # B then frees 5 to the front and the hashed chain 3, 2, 1 to the back.
    assert eng.kv.pool.free_queue() == [5, 4, 6, 7, 8, 9, 3, 2, 1]
    # C hits the cached chain (touching removes it from the free queue) and takes block 5.
    eng.add_requests([spec("C", SHARED + [70], arrival=eng.now)])
    eng.step()
    c = eng.finished[-1]
    assert c.num_cached_tokens == 12
    assert eng.kv.pool.free_queue() == [5, 4, 6, 7, 8, 9, 3, 2, 1]  # C freed the same way
    # D (24-token length-only prompt: unique content) takes 5, 4, 6, 7, 8, 9; its six full
    # blocks are hashed at schedule time, so they return to the back, tail first.
    eng.add_requests([spec("D", 24, arrival=eng.now)])
    eng.step()
    assert eng.finished[-1].request_id == "D"
    assert eng.kv.pool.free_queue() == [3, 2, 1, 9, 8, 7, 6, 4, 5]
    # E takes the two least recently used blocks: the shared chain's tail (3) before its
    # middle (2); the head (1) survives, so F hits one block only.
    eng.add_requests([spec("E", 8, arrival=eng.now)])
    eng.step()
    # E's two full blocks are cached (unique content) and return to the back, tail first.
    assert eng.kv.pool.free_queue() == [1, 9, 8, 7, 6, 4, 5, 2, 3]
    eng.add_requests([spec("F", SHARED + [80], arrival=eng.now)])
    eng.step()
    assert eng.finished[-1].num_cached_tokens == 4


def test_hit_capped_to_recompute_last_token():
    eng, _ = tiny_engine()
    eng.add_requests([spec("A", SHARED, output_len=1)])
    eng.step()
    eng.add_requests([spec("B", SHARED, output_len=1, arrival=eng.now)])
    eng.step()
    # 12 tokens fully cached, but the last token must be computed: hit = floor(11/4) blocks.
    assert eng.finished[-1].num_cached_tokens == 8


def _self_preemption_step(policy: str) -> dict:
    """The schedule-log line of step 2 of a two-request priority scenario."""
    eng, log = tiny_engine(
        policy, log=True, num_gpu_blocks=5, scheduling_policy="priority", max_num_seqs=4
    )
    # X (worse priority) is admitted first; Y joins a step later, so running = [X, Y].
    eng.add_requests([spec("X", 7, 5, arrival=0.0, priority=1), spec("Y", 5, 3, arrival=0.5)])
    eng.run()
    return [json.loads(line) for line in log.getvalue().splitlines()][2]


def test_priority_self_preemption_stops_in_032_continues_in_033():
    # Step 2: X needs a third block, none is free, and X itself is the worst running request.
    v032 = _self_preemption_step("vllm-v1")
    assert v032["preempted"] == ["X"] and v032["scheduled"] == {}  # phase (a) stops (vLLM 0.32)
    v033 = _self_preemption_step("vllm-v1-0.33")
    assert v033["preempted"] == ["X"] and v033["scheduled"] == {"Y": 1}  # goes on with Y (0.33)
