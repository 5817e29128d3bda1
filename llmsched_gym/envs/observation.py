"""Observations: a global vector and a top-K request table, read from the engine at a decision.

Every value is float32 in [-1, 1] and finite: counts and durations are squashed as
``x / (x + s)`` with a typical magnitude ``s`` (so ``x = s`` reads 0.5), signed quantities as
``x / (|x| + s)``, fractions are used as they are. True output lengths never appear unless the
environment was made with ``oracle=True`` (the ``remaining_output`` column).

Global features (``global``, shape ``(10,)``):

====  =====================  ==========================================  ===  ===
idx   name                   definition                                  min  max
====  =====================  ==========================================  ===  ===
0     clock                  now / (now + 600 s)                         0    1
1     num_waiting            n / (n + 64)                                0    1
2     num_running            n / max_num_seqs                            0    1
3     kv_cache_usage         1 - free blocks / (num_gpu_blocks - 1)      0    1
4     prefix_hit_rate        prefix-hit tokens / queried tokens so far   0    1
5     waiting_tokens         tokens left to compute, waiting, squashed   0    1
                             by max_num_batched_tokens
6     running_tokens         tokens left to compute, running, same       0    1
7     token_budget           budget left this step / max_num_batched...  0    1
8     free_seqs              (max_num_seqs - running) / max_num_seqs     0    1
9     progress               finished / (finished + running + waiting)   0    1
                             requests
====  =====================  ==========================================  ===  ===

Request table (``requests``, shape ``(K, F)``; rows past the visible requests are zero and
``mask`` is 0 there):

====  =====================  ==========================================  ===  ===
col   name                   definition                                  min  max
====  =====================  ==========================================  ===  ===
0     age                    (now - arrival) squashed by 10 s            0    1
1     prompt_tokens          num_prompt_tokens squashed by 1024          0    1
2     computed_fraction      num_computed_tokens / num_tokens            0    1
3     cached_fraction        prefix-hit tokens / prompt tokens (waiting:  0    1
                             what a lookup would hit now; running: hit
                             at first admission)
4     generated_tokens       num_output_tokens squashed by 256           0    1
5     max_tokens             max_tokens squashed by 1024                 0    1
6     priority               priority / (abs(priority) + 1) (lower       -1   1
                             is served first, as in vLLM)
7     slack                  seconds to the next SLO bound (TTFT before  -1   1
                             the first token, then TPOT pace, deadline),
                             signed-squashed by 1 s; 1 without SLO
8     job_progress           finished / released requests of its job     0    1
9     is_running             1 running, 0 waiting or preempted           0    1
10    tokens_to_compute      num_tokens - num_computed squashed by 512   0    1
11    num_preemptions        n / (n + 1)                                 0    1
12    remaining_output       (oracle only) true tokens left, by 256      0    1
====  =====================  ==========================================  ===  ===
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from typing import Any

import numpy as np
from gymnasium import spaces

from llmsched_gym.core.engine import Engine
from llmsched_gym.core.request import Request, RequestStatus

try:  # the ufunc behind np.clip (numpy >= 2; numpy 1.x keeps it in numpy.core)
    from numpy._core.umath import clip as _clip_ufunc
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core.umath import clip as _clip_ufunc

GLOBAL_FEATURES = (
    "clock",
    "num_waiting",
    "num_running",
    "kv_cache_usage",
    "prefix_hit_rate",
    "waiting_tokens",
    "running_tokens",
    "token_budget",
    "free_seqs",
    "progress",
)
REQUEST_FEATURES = (
    "age",
    "prompt_tokens",
    "computed_fraction",
    "cached_fraction",
    "generated_tokens",
    "max_tokens",
    "priority",
    "slack",
    "job_progress",
    "is_running",
    "tokens_to_compute",
    "num_preemptions",
)
ORACLE_FEATURES = ("remaining_output",)


def observation_space(top_k: int, oracle: bool) -> spaces.Dict:
    """The Dict space of every environment's observation."""
    f = len(REQUEST_FEATURES) + (len(ORACLE_FEATURES) if oracle else 0)
    return spaces.Dict(
        {
            "global": spaces.Box(0.0, 1.0, (len(GLOBAL_FEATURES),), np.float32),
            "requests": spaces.Box(-1.0, 1.0, (top_k, f), np.float32),
            "mask": spaces.MultiBinary(top_k),
        }
    )


def first_waiting(engine: Engine, k: int) -> list[Request]:
    """The first ``k`` waiting requests in service order."""
    first = getattr(engine.waiting, "first", None)
    return first(k) if first is not None else list(islice(engine.waiting, k))


class Observer:
    """Builds observations of one engine (shared by the environments and ``AgentPolicy``)."""

    def __init__(
        self, engine: Engine, top_k: int, *, oracle: bool = False, lookup_prefix: bool = True
    ) -> None:
        self.engine = engine
        self.top_k = top_k
        self.oracle = oracle
        self.lookup_prefix = lookup_prefix
        self.num_features = len(REQUEST_FEATURES) + (len(ORACLE_FEATURES) if oracle else 0)
        cfg = engine.config
        self._m = float(cfg.max_num_batched_tokens)
        self._seqs = float(cfg.max_num_seqs)
        f = self.num_features
        # Per visible-row count: the mask, and the zeros that pad the table to top_k rows.
        self._masks = [
            np.concatenate([np.ones(n, np.int8), np.zeros(top_k - n, np.int8)])
            for n in range(top_k + 1)
        ]
        self._padding = [[0.0] * ((top_k - n) * f) for n in range(top_k + 1)]
        self._statics: dict[Request, tuple] = {}
        """Per request, the columns and SLO fields that never change (``_static_features``)."""

    def global_features(self, token_budget: int | None = None) -> Any:
        """The ``global`` vector (see the module table).

        Token totals come from the engine's incremental counters (``Engine.waiting_tokens``,
        ``Engine.running_tokens``), not from a pass over the queues.
        """
        eng = self.engine
        now = eng.now
        nw, nr, nf = len(eng.waiting), len(eng.running), len(eng.finished)
        w_tokens = eng.waiting_tokens
        r_tokens = eng.running_tokens
        kv = eng.kv
        queries = kv.queries
        hit_rate = kv.hits / queries if queries else 0.0
        m = self._m
        budget = m if token_budget is None else token_budget
        seqs = self._seqs
        out = np.array(
            (
                now / (now + 600.0) if now > 0 else 0.0,
                nw / (nw + 64.0),
                min(1.0, nr / seqs),
                kv.pool.usage(),
                min(1.0, hit_rate),
                w_tokens / (w_tokens + m),
                r_tokens / (r_tokens + m),
                min(1.0, max(0.0, budget / m)),
                max(0.0, (seqs - nr) / seqs),
                nf / (nf + nw + nr) if nf + nw + nr else 0.0,
            ),
            dtype=np.float32,
        )
        _clip(out, 0.0, 1.0)
        return out

    def table(self, reqs: Sequence[Request]) -> tuple[np.ndarray, np.ndarray]:
        """The ``requests`` table and ``mask`` for the visible requests (at most ``top_k``)."""
        k = self.top_k
        n = min(len(reqs), k)
        mask = self._masks[n].copy()
        if n == 0:
            return np.zeros((k, self.num_features), dtype=np.float32), mask
        eng = self.engine
        now = eng.now
        jobs = eng.jobs
        states = jobs.states if jobs is not None else None
        ctx = eng.ctx
        lookup = ctx.lookup if self.lookup_prefix else None
        oracle = self.oracle
        running_status = RequestStatus.RUNNING
        statics = self._statics
        rows: list[float] = []
        append = rows.append
        extend = rows.extend
        for req in reqs[:n] if n < len(reqs) else reqs:
            st = statics.get(req)
            if st is None:
                st = statics[req] = _static_features(req)
            prompt_col, max_tokens_col, priority_col, ttft, tpot, deadline, job_id = st
            running = req.status is running_status
            if running or lookup is None:
                cached = req.num_cached_tokens
                if cached < 0:
                    cached = 0
            else:
                cached = lookup(req)[1]
            arrival = req.arrival_time
            age = now - arrival
            gen = req.num_output_tokens
            # Seconds to the next SLO bound: the TTFT bound until the first token, then the
            # TPOT bound of the next token, capped by the deadline; 1e9 without any.
            first = req.first_token_time
            if first is None:
                bound = None if ttft is None else arrival + ttft
            else:
                bound = None if tpot is None else first + tpot * gen
            if deadline is not None:
                bound = deadline if bound is None else min(bound, deadline)
            slack = 1e9 if bound is None else bound - now
            job_progress = 0.0
            if states is not None and job_id is not None:
                state = states.get(job_id)
                if state is not None and state.num_released:
                    job_progress = state.num_finished / state.num_released
            computed = req.num_computed_tokens
            total = req.num_tokens
            left = total - computed
            pre = req.num_preemptions
            cf = cached / req.num_prompt_tokens
            extend(
                (
                    age / (age + 10.0) if age > 0 else 0.0,
                    prompt_col,
                    computed / total,
                    cf if cf < 1.0 else 1.0,
                    gen / (gen + 256.0),
                    max_tokens_col,
                    priority_col,
                    slack / (abs(slack) + 1.0),
                    job_progress,
                    1.0 if running else 0.0,
                    left / (left + 512.0),
                    pre / (pre + 1.0),
                )
            )
            if oracle:
                true_left = max(0, ctx.true_output_len(req) - gen)
                append(true_left / (true_left + 256.0))
        if n < k:
            extend(self._padding[n])
        out = np.array(rows, dtype=np.float32).reshape(k, self.num_features)
        _clip(out, -1.0, 1.0)
        return out, mask


def _static_features(req: Request) -> tuple:
    """A request's fixed columns (prompt, max_tokens, priority) and the spec fields slack reads."""
    spec = req.spec
    prompt, mt, p = req.num_prompt_tokens, req.max_tokens, req.priority
    return (
        prompt / (prompt + 1024.0),
        mt / (mt + 1024.0),
        p / (abs(p) + 1.0),
        spec.slo_ttft_s,
        spec.slo_tpot_s,
        spec.deadline_s,
        spec.job_id,
    )


_BOUNDS = {x: np.float32(x) for x in (-1.0, 0.0, 1.0)}


def _clip(out: np.ndarray, lo: float, hi: float) -> None:
    """``np.clip(out, lo, hi, out=out)`` without its Python wrapper (the same ufunc).

    The bounds go in as float32 scalars (the common ones made once): the same float32 loop
    as Python floats get, without converting them on every call.
    """
    _clip_ufunc(out, _BOUNDS.get(lo, lo), _BOUNDS.get(hi, hi), out=out)
