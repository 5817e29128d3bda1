"""Fast-forward: stretches of pure-decode steps advanced at once, with the results of stepping.

A stretch is a run of steps whose schedule provably cannot change: every running request
decodes one token per step, none finishes before the last step, no waiting request can be
admitted (the head does not fit now, and during the stretch free blocks only shrink while its
need only grows), no block allocation fails, and no arrival or cancel comes before the last
step starts. The synchronous engine (``try_fast_forward`` below) and the async loop
(``AsyncLoop._try_stretch``) find their stretches with the helpers here, price them with
``StepPricer.decode_series`` (the same floats as stepping), and apply them to their requests;
the schedule log, step records and listeners then see every step as if it had been stepped.

The engine's stretches: ``try_fast_forward`` (find, price and apply one; called by
``Engine.advance`` before each step), ``advance_decode_stretch`` (apply one to the requests,
blocks, gaps, logs and listeners in one pass) and ``continue_stretch`` (price more of a pending
one). The async loop applies its own (``AsyncLoop._advance_stretch``: placeholders move too)
with the shared helpers:

* ``head_fits``: the waiting head's admission test, without changing anything;
* ``steps_before_hit_grows``: with generated ids fixed (multi-turn workloads), how many steps
  may pass before a running request registers a block that extends the head's prefix hit;
* ``steps_within_blocks``: how many steps the free blocks last (``max_steps_within_blocks`` on
  the requests' free slots, ``block_rooms``);
* ``stretch_end``: the next arrival or cancel, which ends a stretch;
* ``free_after_steps`` and ``place_blocks``: the block-boundary allocations, in the order
  stepping makes them (events ``step * n + position``, sorted);
* ``PendingStretch``: a stretch advanced on the clock but not applied to the requests yet (a
  cluster's ``lazy_stretches``, ``Engine.sync``).
"""

from __future__ import annotations

from operator import attrgetter
from operator import sub as _sub
from typing import TYPE_CHECKING, Any

import cython

from llmsched_gym.core.pricing import StepPricer
from llmsched_gym.core.request import Request
from llmsched_gym.core.steplog import record_decode_steps, write_decode_lines
from llmsched_gym.kv.block_pool import BlockPool
from llmsched_gym.kv.manager import KVCacheManager

if TYPE_CHECKING:  # the engine imports this module; its type comes from fastforward.pxd
    from llmsched_gym.core.engine import Engine

_output_len = attrgetter("_output_len")
_num_output_tokens = attrgetter("num_output_tokens")
_num_computed_tokens = attrgetter("num_computed_tokens")


class PendingStretch:
    """A pure-decode stretch advanced on the clock but not applied (``Engine.sync``).

    ``k`` bounds it (no request finishes before step ``k - 1``, blocks last); ``durations`` and
    ``starts`` price the steps taken so far; ``t_arr`` is the next arrival, which ends it.
    ``ahead_d`` / ``ahead_s`` (from ``ahead_pos`` on) price steps not taken yet, as
    ``decode_series`` returns them (``ahead_s[ahead_pos]`` is the clock): ``finish_start``
    prices them to bound the stretch's end, and ``continue_stretch`` takes them first.
    """

    __slots__ = (
        "ahead_d",
        "ahead_pos",
        "ahead_s",
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
        self.ahead_d: list[float] | None = None
        self.ahead_s: list[float] | None = None
        self.ahead_pos = 0
        self.memo: dict[str, Any] = {}
        """Readers' aggregates of the lagging counters (``Engine.peek_running``)."""

    def allocations(self, steps: int) -> int:
        """Blocks the stretch's first ``steps`` steps allocate."""
        if self.rooms is None:  # the requests' blocks do not change while it is pending
            self.rooms = block_rooms(self.running, self.bs)
        return count_allocations(self.rooms, self.bs, steps)


@cython.locals(req=Request, rooms=list)
def block_rooms(running: list[Request], bs: int) -> list[int]:
    """Free slots in each running request's blocks: request i allocates at steps o_i, o_i + bs..."""
    rooms = []
    for req in running:  # typed reads when compiled (a comprehension's variable is untyped)
        rooms.append(len(req.blocks) * bs - req.num_computed_tokens)
    return rooms


@cython.locals(total=cython.long, o=cython.long)
def count_allocations(offsets: list[int], bs: int, k: int) -> int:
    """Blocks allocated in steps [0, k) by requests allocating at steps o_i, o_i + bs, ..."""
    total = 0
    for o in offsets:
        if k > o:
            total += (k - o + bs - 1) // bs
    return total


@cython.locals(lo=cython.long, hi=cython.long, mid=cython.long)
def max_steps_within_blocks(offsets: list[int], bs: int, free: int, k_max: int) -> int:
    """Largest k <= k_max such that block allocations in steps [0, k) number at most ``free``.

    Request i allocates at steps o_i, o_i + bs, ...: ``ceil((k - o_i) / bs)`` of them before k.
    """
    # Nobody allocates more than ceil(k / bs) blocks in k steps: plenty of free blocks is O(1).
    if (
        len(offsets) * ((k_max + bs - 1) // bs) <= free
        or count_allocations(offsets, bs, k_max) <= free
    ):
        return k_max
    lo, hi = 0, k_max  # count_allocations(lo) <= free < count_allocations(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count_allocations(offsets, bs, mid) <= free:
            lo = mid
        else:
            hi = mid
    return lo


@cython.locals(n=cython.long)
def steps_within_blocks(
    running: list[Request], bs: int, free: int, k: int, rooms: list[int] | None = None
) -> int:
    """Most steps, up to ``k``, whose block-boundary allocations fit in ``free`` blocks.

    Nobody allocates more than ceil(k / bs) blocks in k steps, so plenty of free blocks is O(1);
    otherwise the requests' free slots (``rooms``, computed when not given) decide.
    """
    n = len(running)
    if n * ((k + bs - 1) // bs) <= free:
        return k
    return max_steps_within_blocks(
        block_rooms(running, bs) if rooms is None else rooms, bs, free, k
    )


@cython.locals(req=Request, left=cython.long, least=cython.long)
def steps_to_first_finish(running: list[Request]) -> int:
    """Decode steps until the first of ``running`` samples its last token (its tokens left)."""
    if not cython.compiled:  # the interpreter's fastest form: C-level reductions
        return min(map(_sub, map(_output_len, running), map(_num_output_tokens, running)))
    least = running[0]._output_len - running[0].num_output_tokens
    for req in running:  # compiled: typed reads of the requests' fields
        left = req._output_len - req.num_output_tokens
        if left < least:
            least = left
    return least


@cython.locals(req=Request, total=cython.long)
def context_sum(running: list[Request]) -> int:
    """The sum of the requests' computed tokens (a decode step's ``decode_kv``)."""
    if not cython.compiled:
        return sum(map(_num_computed_tokens, running))
    total = 0
    for req in running:
        total += req.num_computed_tokens
    return total


def head_fits(kv: KVCacheManager, head: Request) -> bool:
    """Whether the waiting queue's head would get blocks if admitted now (no side effects).

    Admission needs ``blocks_to_admit <= free``; during a stretch free blocks only shrink and
    the head's need only grows (prefix hits can only be evicted), so a head that does not fit
    now stays blocked until the stretch ends. One exception: when generated ids are fixed
    (``kv.output_keys``), a decoding request may fill a block the head's prompt holds and the
    head's hit grows; ``steps_before_hit_grows`` bounds the stretch then.
    """
    if kv.surely_blocked(head):
        return False
    hits, _ = kv.get_computed_blocks(head)
    return kv.blocks_to_admit(head, hits) <= kv.pool.num_free


@cython.locals(
    bs=cython.long, h=cython.long, j=cython.long, lag=cython.long, k=cython.long, req=Request
)
def steps_before_hit_grows(
    kv: KVCacheManager, head: Request, running: list[Request], k: int, lag: int
) -> int:
    """At most ``k``: steps of a decode stretch before the waiting head's prefix hit may grow.

    The head hits its first ``h`` blocks; only a running request registering a block with the
    head's key of block ``h`` extends that (registration chains from the start, so that block
    holds the head's whole prefix: a multi-turn parent decoding its answer while the next turn
    waits). Such a request, with ``c`` computed tokens, registers it in the step where
    ``c + j + lag == (h + 1) * block_size``: ``lag`` is 1 for the synchronous engine (a step
    registers the block its token fills) and 0 for the async loop (a batch registers only
    tokens whose ids are known, one behind). The head's admission test of that step may
    differ from the stretch's, so the stretch ends before it.
    """
    bs = kv.block_size
    hits, _ = kv.get_computed_blocks(head)
    h = len(hits)
    if h >= head._num_shareable_blocks or h >= (head.num_tokens - 1) // bs:
        return k  # the head's next block is unique to it, or the hit is at its cap
    key = head.content_keys(h + 1, bs)[h]
    for req in running:
        if (
            req._num_shareable_blocks > h
            and req.num_cached_blocks <= h
            and req.content_keys(h + 1, bs)[h] == key
        ):
            j = (h + 1) * bs - lag - req.num_computed_tokens
            if j < k:
                k = j
    return k if k > 0 else 0


def stretch_end(pending: list, next_arrival: int, cancels: list) -> float:
    """When a stretch must end: the next pending arrival or the earliest cancel (inf: none).

    ``cancels`` is the engine's heap of ``(cancel_time, seq, request)``.
    """
    t_arr = pending[next_arrival].arrival_time if next_arrival < len(pending) else float("inf")
    if cancels and cancels[0][0] < t_arr:
        t_arr = cancels[0][0]
    return t_arr


@cython.locals(ev=cython.long, j=cython.long, m=cython.long, step=cython.long)
def free_after_steps(events: list[int], n: int, k: int, free: int) -> list[int]:
    """Free blocks after each of ``k`` steps' allocations (sorted events ``step * n + pos``)."""
    out: list[int] = []
    ev = 0
    m = len(events)
    step = events[0] // n if m else k  # the step of event ``ev`` (C ints when compiled)
    for j in range(k):
        while ev < m and step == j:
            free -= 1
            ev += 1
            step = events[ev] // n if ev < m else k
        out.append(free)
    return out


@cython.locals(i=cython.long, e=cython.long, blocks=list)
def place_blocks(pool: BlockPool, running: list[Request], events: list[int], n: int) -> None:
    """Give each allocation event (``step * n + pos``, sorted) its block, as stepping would.

    Blocks come from the free queue's front in event order.
    """
    if events:
        blocks = pool.get_new_blocks(len(events))
        for i in range(len(events)):
            e = events[i]
            running[e % n].blocks.append(blocks[i])


# -- the engine's stretches -------------------------------------------------------------------
@cython.locals(
    eng="Engine",
    n=cython.long,
    k=cython.long,
    bs=cython.long,
    m0=cython.long,
    longest=cython.long,
    j=cython.long,
    running=list,
    pricer=StepPricer,
)
def try_fast_forward(eng: Engine) -> bool:
    """Advance a stretch of pure-decode steps at once; False if the state does not allow it."""
    policy = eng.policy
    if not policy.fast_forward_safe or eng.unlogged_aborts:
        return False  # (a stepped line carries the aborts)
    running = eng._running
    n = len(running)
    if n == 0 or n > eng.config.max_num_batched_tokens or eng.running_prefills:
        return False
    # The waiting head first: after a finish it is usually admissible (a stepped step).
    waiting = eng.waiting
    may_admit = waiting and n < eng.config.max_num_seqs
    if may_admit and (not policy.head_of_line or head_fits(eng._kv, waiting.peek())):
        return False
    # Every running request decodes: none has more than one token left and, as each has at
    # least one, the tokens left sum to n. So the check needs no pass over ``running`` in
    # Python: the next finisher and the context sum are C-level reductions, and the
    # per-request block offsets are needed only when free blocks might not last (the
    # stretch computes them again while it advances the requests).
    if eng.running_tokens != n:
        return False
    pricer = eng.pricer
    if pricer.phase_items and any(r.in_prefill_phase for r in running):
        return False  # a one-token prompt or refill chunk: priced as a prefill, stepped
    # Nobody finishes before the stretch's last step (finishers free after it).
    k = steps_to_first_finish(running)
    if k < 2:
        return False
    bs = eng.config.block_size
    k = steps_within_blocks(running, bs, eng._kv.pool.num_free, k)
    if may_admit and eng._kv.output_keys:
        k = steps_before_hit_grows(eng._kv, waiting.peek(), running, k, 1)
    if k < 2:
        return False
    m0 = context_sum(running)
    # A decode's price may need the longest context too (item-level cost models).
    longest = max(map(_num_computed_tokens, running)) if pricer.needs_longest else 0
    # Every step of the stretch must start before the next arrival or cancel (and before
    # ``until``).
    t_arr = stretch_end(eng._pending, eng._next_arrival, eng._cancels)
    until = eng._until
    durations, starts = pricer.decode_series(
        n, m0, longest, k, eng.now, until if until < t_arr else t_arr
    )
    j = len(durations)
    if eng.lazy_stretches and 0 < j < k and starts[j] < t_arr:
        # Cut only by ``until``: move the clock, keep the stretch pending (``sync``).
        eng._plan = PendingStretch(running, bs, k, n, m0, longest, t_arr, durations, starts)
        eng.now = starts[j]
        return True
    if j < 2:
        return False
    advance_decode_stretch(eng, j, durations, starts)
    return True


@cython.locals(
    plan=PendingStretch,
    j=cython.long,
    n=cython.long,
    p=cython.long,
    q=cython.long,
    m=cython.long,
    ahead_d=list,
    ahead_s=list,
)
def continue_stretch(eng: Engine, until: float) -> bool:
    """``advance`` with a pending stretch: take its next steps that start before ``until``.

    Steps priced ahead (``finish_start``) are taken first, then the rest are priced. The
    stretch is applied (``sync``) once it reaches its end or the next arrival.
    """
    plan = eng._plan
    now = eng.now
    if now >= until:
        return False
    t_arr = plan.t_arr
    cut = until if until < t_arr else t_arr
    end = now
    ahead_d = plan.ahead_d
    if ahead_d is not None:
        ahead_s = plan.ahead_s
        p = plan.ahead_pos
        m = len(ahead_d)
        q = p
        while q < m and ahead_s[q] < cut:
            q += 1
        plan.durations += ahead_d[p:q]
        plan.starts += ahead_s[p + 1 : q + 1]
        end = ahead_s[q]
        if q < m:
            plan.ahead_pos = q
        else:  # all taken: what follows is priced below
            plan.ahead_d = plan.ahead_s = None
    j = len(plan.durations)
    if end < cut and j < plan.k:
        n = plan.n
        durations, starts = eng.pricer.decode_series(
            n, plan.m0 + j * n, plan.longest + j, plan.k - j, end, cut
        )
        plan.durations += durations
        plan.starts += starts[1:]
        end = starts[-1]
    if len(plan.durations) == plan.k or end >= t_arr:
        eng.sync()
    else:
        eng.now = end
    return True


@cython.locals(
    plan=PendingStretch,
    j=cython.long,
    n=cython.long,
    last=cython.long,
    p=cython.long,
    idx=cython.long,
    cut=cython.double,
)
def finish_start(eng: Engine, stop: float) -> float:
    """A lower bound of when the engine's next step that may finish a request starts.

    Valid while the engine receives no request: the engine's next event time, or, in a pending
    stretch, the start of the stretch's last step (no request has its last token before that
    step, also when the stretch ends early where free blocks run out) or of its first step at
    or after its own next arrival, whichever comes first. Steps are priced ahead (kept for
    ``continue_stretch``) only while they start before ``stop``: a result at or after ``stop``
    says only that no step starting before it finishes a request.
    """
    plan = eng._plan
    if plan is None:
        return eng.next_event_time()
    t_arr = plan.t_arr
    cut = stop if stop < t_arr else t_arr
    j = len(plan.durations)
    last = plan.k - 1
    if plan.ahead_d is None:
        plan.ahead_d = []
        plan.ahead_s = [plan.starts[j]]
        plan.ahead_pos = 0
    p = plan.ahead_pos
    idx = p + last - j  # the last step's start in ahead_s
    if idx >= len(plan.ahead_s) and plan.ahead_s[-1] < cut:
        # Price from the first step not priced yet, to the last step or the cut.
        j += len(plan.ahead_d) - p
        n = plan.n
        durations, starts = eng.pricer.decode_series(
            n, plan.m0 + j * n, plan.longest + j, plan.k - j, plan.ahead_s[-1], cut
        )
        plan.ahead_d += durations
        plan.ahead_s += starts[1:]
    if idx < len(plan.ahead_s):
        return plan.ahead_s[idx]
    return plan.ahead_s[-1]  # at or after the cut: no step before it finishes


@cython.locals(
    req=Request,
    n=cython.long,
    bs=cython.long,
    stride=cython.long,
    end=cython.long,
    pos=cython.long,
    c=cython.long,
    room=cython.long,
    t=cython.long,
    o=cython.long,
    n_same_first=cython.long,
    own_gaps=cython.long,
    kv=KVCacheManager,
    pool=BlockPool,
    caching=cython.bint,
    events=list,
    finished=list,
    to_cache=list,
    itl_values=list,
    running=list,
    j=cython.long,
)
def advance_decode_stretch(
    eng: Engine, k: int, durations: list[float], starts: list[float]
) -> None:
    """Advance every running request (all decoding) by ``k`` steps in one pass.

    Block-boundary allocations are collected in the same pass and made afterwards, in the
    order stepping would make them; then full blocks are registered and finishers free.
    """
    running = eng._running
    n = len(running)
    bs = eng.config.block_size
    kv = eng._kv
    pool = kv.pool
    # Allocation events in (step, running position) order, as stepping would make them,
    # packed as step * n + position so that they sort as ints: request ``pos`` needs a
    # new block at steps room, room + bs, ... below k (``room``: its free slots before).
    events: list[int] = []
    stride = bs * n
    end = k * n
    first_end, last_end = starts[1], starts[k]
    now = eng.now
    caching = kv.enable_caching
    n_same_first = own_gaps = 0
    own_last = None
    finished: list[Request] = []
    to_cache: list[Request] = []
    itl_values = eng.itl_values
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
        elif own_gaps and last == own_last:
            own_gaps += 1
        else:  # grouped in runs as Engine._sample groups them
            if own_gaps:
                itl_values.append(first_end - own_last)
                eng.itl_weights.append(own_gaps)
            own_last = last
            own_gaps = 1
        req.last_token_time = last_end
        if o >= req._output_len:
            finished.append(req)
    if own_gaps:
        itl_values.append(first_end - own_last)
        eng.itl_weights.append(own_gaps)
    events.sort()
    free_after: list[int] | None = None
    if eng.schedule_log is not None or eng._steps is not None:
        free_after = free_after_steps(events, n, k, pool.num_free)
    place_blocks(pool, running, events, n)
    for req in to_cache:
        kv.cache_blocks(req, req.num_tokens - 1)
    if n_same_first:
        eng.itl_values.append(durations[0])
        eng.itl_weights.append(n_same_first)
    eng.itl_values.extend(durations[1:])
    eng.itl_weights.extend([n] * (k - 1))
    if eng.token_listeners:  # step j's tokens are delivered at its end, starts[j + 1]
        for j in range(1, k + 1):
            for listener in eng.token_listeners:
                listener(running, starts[j])
    if free_after is not None:
        _log_stretch(eng, k, starts, durations, free_after, [r.request_id for r in finished])
    if finished:  # freed in scheduling (= running) order, as a stepped finish would be
        eng._finish(finished, last_end)
    eng.now = last_end
    eng.num_steps += k
    eng.num_ff_steps += k
    eng._unsampled = eng._unsampled_preemptions = 0  # decode stretches sample


def _log_stretch(
    eng: Engine,
    k: int,
    starts: list[float],
    durations: list[float],
    free_after: list[int],
    finished_ids: list[str],
) -> None:
    """Emit the per-step log lines and records of a fast-forwarded stretch.

    Called before the finishers of the last step leave ``running``.
    """
    n_waiting = len(eng.waiting)
    if eng.schedule_log is not None:
        ids = [r.request_id for r in eng._running]
        write_decode_lines(
            eng.schedule_log, eng.num_steps, starts, free_after, ids, n_waiting, k,
            finished_ids,
        )  # fmt: skip
    if eng._steps is not None:
        record_decode_steps(
            eng._steps, eng.num_steps, starts, durations, free_after, len(eng._running),
            n_waiting, k, len(finished_ids),
        )  # fmt: skip
