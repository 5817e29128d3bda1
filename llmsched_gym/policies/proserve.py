"""ProServe's SlideBatching (arXiv 2512.12928, Alg. 1) and the paper's batch-scheduling baselines.

* :class:`LatencyEstimator`: Eq. 4-7, ``T(B) = t_c + sum_prefill (a_p lq^2 + b_p lq lkv + c_p lq)
  + sum_decode (a_d lkv + b_d)``, fitted by least squares on profiling batches priced by the
  engine's own cost model (single-prefill batches over a (lq, lkv) grid and pure-decode batches
  over (n, KV) — exactly what the engine charges such steps), negative coefficients clamped to 0
  (xLLM ``profile_manager``). Online correction: ``beta <- theta beta + (1 - theta) mean(real /
  est)`` over the last ``window`` steps (paper §4.1), or the code's fixed factor 1.0
  (``theta=None``, default).
* :class:`SlideBatchingPolicy`: Alg. 1 with xLLM's defaults: eta = 0.65 x min TPOT SLO, gamma =
  1.0, phi_a (co-located, Eq. 8), t_min skipping hopeless requests, URGENT (decodes by density,
  then prefills by density) before NORMAL (EDF), decode deadline anchored on
  the actual TTFT (``deadline="code"``) or the paper's ``arrival + TTFT + (i-1) TPOT``
  (``"paper"``), GETMAXCHUNK with the 50-token floor, KV preemption from the tail, no new
  prefills at KV usage >= 0.95. Anti-starvation: xLLM @87e8d6e's comparator puts URGENT
  prefills that are more than one SLO past their deadline first, by remaining time, regardless
  of weight; Alg. 1 has no such rule, and the stored xLLM copy of
  ``priority_comparator.cpp`` (34f5e0c) sorts URGENT purely by density. Under sustained
  overload almost every waiting prefill is "starved", so the rule turns SlideBatching into
  weight-blind most-overdue-first: high priority ends below low and the TDG ratio collapses
  (ShareGPT/Qwen2-7B, 1,000 requests, 11 req/s: 0.453 with the rule vs 0.830 without; high/low
  0.438/0.478 vs 0.857/0.784). The default follows Alg. 1 (``starve_prevent=False``), which is
  also what reproduces Fig. 13; ``starve_prevent=True`` (``proserve-starve``) is the code's rule.
  Token weights (Eq. 2's wp:wd): §5.1 sets them to the dataset's mean input over mean output
  length. The default ``wp="dataset"`` estimates that ratio online (mean prompt of the requests
  seen over mean output of those finished, 1:1 before the first finish, wd = 1); a number fixes
  it. The registered ``proserve*`` policies and leaderboards/proserve use this same default. In
  the adaptive mode the ratio only orders recomputing (preempted) requests against fresh
  prefills among URGENT prefills; in ``only-density`` it orders decodes against prefills.
  Memory handling (``memory="vllm"``, the default and every committed result): a waiting request
  is admitted only if its whole prompt fits, none at KV usage >= ``kv_threshold`` (xLLM @87e8d6e's
  ``prefill_scheduling_memory_usage_threshold``), and only running requests preempt.
  ``memory="xllm-mix"`` is xLLM @87e8d6e's co-located ``MixScheduler`` taken literally: no
  threshold, a new prefill allocates only its chunk, any item whose allocation fails (a new
  prefill included) preempts KV holders from the tail of the order, and the first failure with
  no victim ends the batch. That form thrashes on Qwen3-32B's 1,640 blocks; the choice is
  recorded in leaderboards/proserve/README.md ("Memory handling: decision").
  Ablations (§5.4, Fig. 15: "the Adaptive Urgency Partition module is removed, retaining only
  the deadline-prioritized strategy or the density-prioritized strategy"); the latency budget
  (Alg. 1 lines 1-7) stays. In xLLM's ``MixScheduler`` these are its ``--priority_strategy``
  comparators (``create_comparator``), which replace the urgency comparator over the whole queue
  while t_budget is still computed. ``mode="only-deadline"``: ``DeadlineComparator``, EDF over
  every request (all NORMAL). ``"only-density"``: ``DensityComparator``, every request by density
  alone, decodes and prefills mixed, as Alg. 1 line 13 orders URGENT.
  ``"only-density-decode-first"`` (the earlier form of this ablation): all URGENT under the URGENT
  ordering of xLLM @87e8d6e, decodes first; xLLM's ``decode_density`` strategy.
  ``latency_aware=False``: no latency budget, token budget only (``enable_latency_aware_schedule``
  off).
* Baselines: :class:`SarathiPriorityPolicy`, :class:`FairBatchingPolicy`,
  :class:`WeightedVTCPolicy`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine, SchedulingPolicy, StepContext
from llmsched_gym.core.request import Request, RequestStatus

__all__ = [
    "FairBatchingPolicy",
    "LatencyEstimator",
    "SarathiPriorityPolicy",
    "SlideBatchingPolicy",
    "WeightedVTCPolicy",
    "register",
]

_INF = float("inf")


class LatencyEstimator:
    """ProServe's batch latency estimator (Eq. 4-7) with optional momentum correction."""

    def __init__(
        self,
        coef: dict[str, float],
        theta: float | None = None,
        window: int = 100,
    ) -> None:
        self.ap, self.bp, self.cp = coef["ap"], coef["bp"], coef["cp"]
        self.ad, self.bd, self.tc = coef["ad"], coef["bd"], coef["tc"]
        self.theta = theta
        self.beta = 1.0
        self._ratios: deque[float] = deque(maxlen=window)

    @classmethod
    def fit(cls, cost_model: Any, max_tokens: int = 8192, **kw: Any) -> LatencyEstimator:
        """Least-squares fit on profiling batches priced by ``cost_model`` (the engine's)."""
        rows, ys = [], []
        for lq in (16, 64, 128, 256, 512, 1024, 2048, 4096, max_tokens):
            for lkv in (0, 512, 2048, 8192):
                rows.append([1, lq * lq, lq * lkv, lq, 0, 0])
                ys.append(cost_model.step_time(lq, lq * lq + 2 * lkv * lq, 0, 1, 0))
        for n in (1, 4, 16, 64, 128, 256):
            for ctx_len in (128, 512, 1024, 2048, 4096):
                k = n * ctx_len
                rows.append([1, 0, 0, 0, k, n])
                ys.append(cost_model.step_time(n, 0, k, 0, n))
        a, y = np.asarray(rows, float), np.asarray(ys, float)
        scale = np.maximum(np.abs(a).max(axis=0), 1e-12)
        sol, *_ = np.linalg.lstsq(a / scale, y, rcond=None)
        sol = np.maximum(sol / scale, 0.0)
        names = ("tc", "ap", "bp", "cp", "ad", "bd")
        return cls(dict(zip(names, sol.tolist(), strict=True)), **kw)

    def prefill(self, lq: int, lkv: int) -> float:
        """Core prefill time of ``lq`` new tokens on ``lkv`` cached ones (Eq. 5), corrected."""
        return self.beta * (self.ap * lq * lq + self.bp * lq * lkv + self.cp * lq)

    def decode(self, lkv: int) -> float:
        """Core decode time of one sequence with ``lkv`` KV tokens (Eq. 6), corrected."""
        return self.beta * (self.ad * lkv + self.bd)

    @property
    def t_c(self) -> float:
        """Constant per-batch overhead, corrected."""
        return self.beta * self.tc

    def max_chunk(self, lkv: int, budget: float, limit: int) -> int:
        """GETMAXCHUNK: largest c <= limit with ``prefill(c, lkv) <= budget`` (quadratic root)."""
        if budget <= 0 or limit <= 0:
            return 0
        if math.isinf(budget):
            return limit
        a = self.beta * self.ap
        b = self.beta * (self.bp * lkv + self.cp)
        if a <= 0:
            c = budget / b if b > 0 else limit
        else:
            c = (-b + math.sqrt(b * b + 4 * a * budget)) / (2 * a)
        return int(min(limit, max(0, math.floor(c))))

    def observe(self, real: float, est: float) -> None:
        """Momentum update of the correction factor (no-op when ``theta`` is None)."""
        if self.theta is None or est <= 0:
            return
        self._ratios.append(real / (est / self.beta))
        self.beta = self.theta * self.beta + (1 - self.theta) * float(np.mean(self._ratios))


def _slo(v: float | None, default: float) -> float:
    return default if v is None else v


class SlideBatchingPolicy(SchedulingPolicy):
    """ProServe's SlideBatching (Alg. 1) with xLLM's defaults (see the module docstring)."""

    name = "proserve"

    def __init__(
        self,
        *,
        gamma: float = 1.0,
        eta_factor: float = 0.65,
        starve_threshold: float = 1.0,
        starve_prevent: bool = False,
        deadline: str = "code",
        mode: str = "adaptive",
        latency_aware: bool = True,
        theta: float | None = None,
        window: int = 100,
        wp: float | str = "dataset",
        wd: float = 1.0,
        min_chunk: int = 50,
        kv_threshold: float = 0.95,
        memory: str = "vllm",
        default_ttft_s: float = 1.0,
        default_tpot_s: float = 0.05,
        estimator: LatencyEstimator | None = None,
    ) -> None:
        if memory not in ("vllm", "xllm-mix"):
            raise ValueError(f"bad memory {memory!r}")
        if deadline not in ("code", "paper") or mode not in (
            "adaptive",
            "only-deadline",
            "only-density",
            "only-density-decode-first",
        ):
            raise ValueError(f"bad deadline {deadline!r} or mode {mode!r}")
        self.gamma, self.eta_factor, self.starve = gamma, eta_factor, starve_threshold
        self.starve_prevent = starve_prevent
        self.deadline, self.mode, self.latency_aware = deadline, mode, latency_aware
        self.theta, self.window = theta, window
        if isinstance(wp, str) and wp != "dataset":
            raise ValueError(f"wp must be a number or 'dataset', got {wp!r}")
        if (not isinstance(wp, str) and wp <= 0) or wd <= 0:
            raise ValueError(f"wp and wd must be > 0, got wp={wp!r}, wd={wd!r}")
        self.wp_mode = wp
        self.wp, self.wd = (1.0 if wp == "dataset" else float(wp)), float(wd)
        self._seen: set[str] = set()
        self._in_sum = self._out_sum = 0.0
        self._n_out = 0
        self.min_chunk, self.kv_threshold = min_chunk, kv_threshold
        self.memory = memory
        self.default_ttft, self.default_tpot = default_ttft_s, default_tpot_s
        self.est = estimator
        self._last: tuple[float, float] | None = None
        self.last_partition: dict[str, str] = {}

    def queue_policy(self, config: EngineConfig) -> str:
        """FCFS queue (the policy orders everything itself)."""
        return "fcfs"

    def reset(self, engine: Engine) -> None:
        """Fit the estimator on the engine's cost model (profiling)."""
        if self.est is None:
            self.est = LatencyEstimator.fit(
                engine.cost_model,
                engine.config.max_num_batched_tokens,
                theta=self.theta,
                window=self.window,
            )
        self._last = None
        if self.wp_mode == "dataset":
            self.wp = 1.0
        self._seen = set()
        self._in_sum = self._out_sum = 0.0
        self._n_out = 0

    def on_finish(self, req: Request, now: float) -> None:
        """Fold a finished request's output length into the online wp estimate."""
        self._out_sum += req.num_output_tokens
        self._n_out += 1

    def _update_wp(self, queue: list[Request]) -> None:
        """``wp = mean input / mean output`` (§5.1) over the requests seen so far (wd = 1).

        §5.1 sets wp:wd to the dataset's average input over average output length. A deployed
        scheduler knows the prompts it has received and the outputs it has finished, so the
        default estimates the ratio online: the mean prompt length of every request that has
        entered the queue over the mean output length of the finished ones; 1:1 until the
        first request finishes.
        """
        for r in queue:
            if r.request_id not in self._seen:
                self._seen.add(r.request_id)
                self._in_sum += r.spec.prompt_len
        if self._n_out and self._out_sum > 0 and self._seen:
            self.wp = (self._in_sum / len(self._seen)) / (self._out_sum / self._n_out)

    # -- request metrics ---------------------------------------------------------------------
    def remaining(self, r: Request, now: float) -> float:
        """Time left to the deadline of the request's next token."""
        s1 = _slo(r.spec.slo_ttft_s, self.default_ttft)
        s2 = _slo(r.spec.slo_tpot_s, self.default_tpot)
        i = r.num_output_tokens + 1
        if i == 1:
            return r.arrival_time + s1 - now
        if self.deadline == "code" and r.first_token_time is not None:
            return r.first_token_time + (i - 1) * s2 - now
        return r.arrival_time + s1 + (i - 1) * s2 - now

    def exec_time(self, r: Request) -> float:
        """Estimated core time of the request's next step (whole remaining prefill or a decode)."""
        left = r.num_tokens - r.num_computed_tokens
        m = r.num_computed_tokens
        if left <= 1:
            return self.est.decode(m)
        return self.est.prefill(left, m)

    def gain_weight(self, r: Request) -> float:
        """w_r(i) of the request's next token."""
        return (self.wp if r.num_output_tokens == 0 else self.wd) * r.spec.weight

    def order(self, queue: list[Request], now: float) -> tuple[list[Request], float, dict]:
        """Alg. 1 lines 1-13: (sorted queue, t_budget, per-request info)."""
        est = self.est
        tc = est.t_c
        info: dict[Request, tuple[float, float, float, bool]] = {}
        t_min = _INF
        tpot_min = _INF
        total = 0.0
        for r in queue:
            ex = self.exec_time(r)
            rem = self.remaining(r, now)
            dens = self.gain_weight(r) / ex if ex > 0 else _INF
            decode = r.status is RequestStatus.RUNNING and r.num_tokens - r.num_computed_tokens == 1
            info[r] = (ex, rem, dens, decode)
            total += ex
            if rem >= ex + tc and rem < t_min:  # hopeless requests are skipped
                t_min = rem
            tpot_min = min(tpot_min, _slo(r.spec.slo_tpot_s, self.default_tpot))
        eta = self.eta_factor * tpot_min if tpot_min < _INF else 0.0
        t_budget = max(t_min, eta) if t_min < _INF else eta
        if self.mode == "only-density":
            # xLLM's DensityComparator over the whole queue: no partition, no stage grouping.
            self.last_partition = {r.request_id: "URGENT" for r in queue}
            return sorted(queue, key=lambda r: (-info[r][2], r.arrival_time)), t_budget, info
        phi = total * t_budget / (t_budget - tc) if t_budget > tc else _INF
        urgent_d, urgent_p_starved, urgent_p, normal = [], [], [], []
        part: dict[str, str] = {}
        for r in queue:
            ex, rem, dens, decode = info[r]
            if self.mode == "only-deadline":
                urgent = False
            elif self.mode == "only-density-decode-first":
                urgent = True
            else:
                urgent = rem < self.gamma * phi
            part[r.request_id] = "URGENT" if urgent else "NORMAL"
            if not urgent:
                normal.append(r)
            elif decode:
                urgent_d.append(r)
            else:
                if r.num_output_tokens == 0:
                    slo = _slo(r.spec.slo_ttft_s, self.default_ttft)
                else:
                    slo = _slo(r.spec.slo_tpot_s, self.default_tpot)
                starved = self.starve_prevent and rem < -self.starve * slo
                (urgent_p_starved if starved else urgent_p).append(r)
        urgent_d.sort(key=lambda r: (-info[r][2], r.arrival_time))
        urgent_p_starved.sort(key=lambda r: (info[r][1], r.arrival_time))
        urgent_p.sort(key=lambda r: (-info[r][2], r.arrival_time))
        normal.sort(key=lambda r: (info[r][1], r.arrival_time))
        self.last_partition = part
        return urgent_d + urgent_p_starved + urgent_p + normal, t_budget, info

    # -- batch building ----------------------------------------------------------------------
    def schedule(self, ctx: StepContext) -> None:
        """Alg. 1 lines 14-19 on the engine's queues."""
        est = self.est
        now = ctx.now
        if self._last is not None and self.theta is not None:
            start, predicted = self._last
            if now > start:
                est.observe(now - start, predicted)
        queue = list(ctx.running) + list(ctx.waiting)
        if not queue:
            return
        if self.wp_mode == "dataset":
            self._update_wp(queue)
        order, t_budget, info = self.order(queue, now)
        if not self.latency_aware:
            t_budget = _INF
        t_batch = est.t_c
        running = ctx.running
        usable = ctx.num_gpu_blocks - 1
        pos = {r: i for i, r in enumerate(order)}
        admit_ok = True
        xmix = self.memory == "xllm-mix"
        for r in order:
            # The first request always gets its chance: when one step's fixed cost t_c alone
            # exceeds t_budget (steps of >= eta = 0.65 x TPOT SLO, e.g. 0.05 s steps for a late
            # one-token request), breaking here would schedule nothing, forever.
            if (t_batch >= t_budget and t_batch > est.t_c) or ctx.token_budget <= 0:
                break
            if r.status is not RequestStatus.RUNNING and r not in ctx.waiting:
                continue  # preempted earlier in this step
            if xmix and r in ctx.preempted:
                continue
            if r.status is RequestStatus.RUNNING:
                left = r.num_tokens - r.num_computed_tokens
                m = r.num_computed_tokens
            else:
                if not admit_ok or len(running) >= ctx.max_num_seqs:
                    continue
                if not xmix and 1.0 - ctx.num_free_blocks / usable >= self.kv_threshold:
                    admit_ok = False
                    continue
                hit = ctx.lookup(r)
                m = hit[1]
                left = r.num_tokens - m
            if left == 1:
                cost = est.decode(m)
                if t_batch + cost > t_budget and t_batch > est.t_c:
                    continue
                n = 1
            else:
                c = est.max_chunk(m, t_budget - t_batch, min(left, ctx.token_budget))
                if c < left and c <= self.min_chunk:
                    if t_batch > est.t_c:
                        break
                    c = min(left, ctx.token_budget, max(c, self.min_chunk))  # ensure progress
                n = c
                cost = est.prefill(n, m)
            if r.status is RequestStatus.RUNNING:
                if not self._run_or_preempt(ctx, r, n, order, pos):
                    if xmix:
                        break  # MixScheduler: a failure with no victim ends the batch
                    continue
            elif xmix:
                if not self._admit_or_preempt(ctx, r, n, pos):
                    break
            else:
                if ctx.admit(r, n, hit=hit) is None:
                    admit_ok = False
                    continue
            t_batch += cost
        self._last = (now, t_batch)

    def _admit_or_preempt(self, ctx: StepContext, r: Request, n: int, pos: dict) -> bool:
        """``memory="xllm-mix"``: allocate the chunk only; on failure preempt from the tail."""
        hit = ctx.lookup(r)
        while (
            ctx.admit(r, min(n, r.num_tokens - hit[1]), full_sequence_must_fit=False, hit=hit)
            is None
        ):
            victims = [v for v in ctx.running if v not in ctx.scheduled and pos.get(v, -1) > pos[r]]
            if not victims:
                return False
            ctx.preempt(max(victims, key=lambda v: pos.get(v, -1)))
            hit = ctx.lookup(r)  # a victim's freed blocks may be cached prefix blocks
        return True

    def _run_or_preempt(
        self, ctx: StepContext, r: Request, n: int, order: list[Request], pos: dict
    ) -> bool:
        """Schedule a running request; on block shortage preempt KV holders from the tail."""
        while not ctx.schedule_running(r, n):
            victims = [
                v
                for v in ctx.running
                if v is not r and v not in ctx.scheduled and pos.get(v, -1) > pos[r]
            ]
            if not victims:
                return False
            ctx.preempt(max(victims, key=lambda v: pos.get(v, -1)))
        return True


def _chunked_fill(ctx: StepContext, ordered: list[Request], victim_key: Callable) -> None:
    """Schedule requests in order under the token budget (chunked prefill), preempting by key.

    The first waiting request that cannot be admitted (KV) ends admissions for the step (vLLM's
    head-of-line rule) but not the step: running requests later in the order are still
    scheduled. (Ending the whole loop there starved every running decode ordered after a
    blocked prefill — FairBatching orders prefills before far-from-deadline decodes — and left
    steps empty: Qwen3-32B ShareGPT, TDG 0.23 at 0.4 req/s where the others reach 0.98.)
    """
    running = ctx.running
    admit_ok = True
    for r in ordered:
        if ctx.token_budget <= 0:
            break
        if r.status is RequestStatus.RUNNING:
            if r in ctx.scheduled:
                continue
            n = min(r.num_tokens - r.num_computed_tokens, ctx.token_budget)
            while not ctx.schedule_running(r, n):
                cands = [v for v in running if v not in ctx.scheduled]
                if not cands:
                    break
                victim = max(cands, key=victim_key)
                ctx.preempt(victim)
                if victim is r:
                    break
        elif r in ctx.waiting:
            if not admit_ok or len(running) >= ctx.max_num_seqs or ctx.preempted:
                continue
            hit = ctx.lookup(r)
            n = min(r.num_tokens - hit[1], ctx.token_budget)
            if ctx.admit(r, n, hit=hit) is None:
                admit_ok = False


class SarathiPriorityPolicy(SchedulingPolicy):
    """Sarathi-Priority: decodes first, then by priority (lower first), then arrival; chunked."""

    name = "sarathi-priority"

    def queue_policy(self, config: EngineConfig) -> str:
        """FCFS queue (ordered here)."""
        return "fcfs"

    def schedule(self, ctx: StepContext) -> None:
        """Decode-first, then priority-ordered prefills."""

        def key(r: Request) -> tuple:
            decode = r.status is RequestStatus.RUNNING and r.num_tokens - r.num_computed_tokens == 1
            return (not decode, r.priority, r.arrival_time)

        q = sorted(list(ctx.running) + list(ctx.waiting), key=key)
        _chunked_fill(ctx, q, victim_key=lambda v: (v.priority, v.arrival_time))


class FairBatchingPolicy(SchedulingPolicy):
    """FairBatching-style EDF: decodes near their deadline, then prefills (EDF), then decodes.

    A decode is "near" its deadline when its next token's deadline (paper form) is within
    ``near_factor`` TPOT SLOs; deadlines are ``arrival + TTFT + (i-1) TPOT``.
    """

    name = "fairbatching"

    def __init__(self, near_factor: float = 1.0, default_ttft_s: float = 1.0) -> None:
        self.near_factor = near_factor
        self.default_ttft = default_ttft_s

    def queue_policy(self, config: EngineConfig) -> str:
        """FCFS queue (ordered here)."""
        return "fcfs"

    def schedule(self, ctx: StepContext) -> None:
        """Near-deadline decodes, prefills by deadline, remaining decodes by deadline."""
        now = ctx.now

        def deadline(r: Request) -> float:
            s1 = _slo(r.spec.slo_ttft_s, self.default_ttft)
            s2 = _slo(r.spec.slo_tpot_s, 0.05)
            return r.arrival_time + s1 + r.num_output_tokens * s2

        def key(r: Request) -> tuple:
            d = deadline(r)
            decode = r.status is RequestStatus.RUNNING and r.num_tokens - r.num_computed_tokens == 1
            if decode:
                near = d - now < self.near_factor * _slo(r.spec.slo_tpot_s, 0.05)
                return (0 if near else 2, d, r.arrival_time)
            return (1, d, r.arrival_time)

        q = sorted(list(ctx.running) + list(ctx.waiting), key=key)
        # Preempt the running request served last in this order (a decode far from its
        # deadline); the earlier key ``(-class, deadline)`` preempted near-deadline decodes first.
        _chunked_fill(ctx, q, victim_key=key)


class WeightedVTCPolicy(SchedulingPolicy):
    """Weighted VTC, the ProServe baseline (§5.1).

    VTC is Sheng et al., "Fairness in Serving Large Language Models" (OSDI'24), Alg. 2, here in
    its weighted form (counters scaled by 1 / weight).

    Every client ``u`` has a virtual token counter ``c_u``; clients are ``client_id`` when set,
    else the priority class (ProServe's high/low clients). As in the authors' code
    (``slora/server/router/vtc_req_queue.py``):

    * **Arrival** (VTC's counter lift): when a request of ``u`` arrives while ``u`` has no waiting
      request, ``c_u <- max(c_u, min{c_v : v != u has a waiting request})``. An under-demanding
      client therefore cannot bank credit while it is idle or fully served.
    * **Admission**: repeatedly take the client with the smallest counter among those with waiting
      requests (ties: the earlier head request), admit its earliest request, charge
      ``c_u += w_in * prompt_len / weight_u``; stop at the first request that does not fit (VTC's
      ``break``), when the budget or ``max_num_seqs`` is exhausted, or after a preemption.
    * **Execution**: running requests continue first (decodes, then prefill chunks: the engine
      chunks prefills, VTC's does not); every sampled token charges ``c_u += w_out / weight_u``.
      Preemption (none in VTC) takes the newest request of the client with the largest counter;
      a recomputed prompt is not charged again.

    ``w_in = 1``, ``w_out = 2`` are VTC's default prices. The earlier version of this class lifted
    counters only for clients with no *running* request; under load both ProServe classes always
    have running requests, so the lift never fired, the weight-2 class (demand ~1/2 < its fair
    share 2/3) kept an ever-growing credit and the policy reduced to strict priority, i.e. exactly
    vLLM V1 under the priority queue (the scenario's ``scheduling_policy: priority``).
    """

    name = "wvtc"

    def __init__(self, w_in: float = 1.0, w_out: float = 2.0) -> None:
        self.w_in, self.w_out = w_in, w_out
        self.counters: dict[Any, float] = {}
        self._seen: set[str] = set()
        self._charged: set[str] = set()
        self._queued: dict[Any, int] = {}

    def queue_policy(self, config: EngineConfig) -> str:
        """FCFS queue (ordered here)."""
        return "fcfs"

    def reset(self, engine: Engine) -> None:
        """Clear counters."""
        self.counters, self._seen, self._charged, self._queued = {}, set(), set(), {}

    @staticmethod
    def client(r: Request) -> Any:
        """The request's client."""
        return r.spec.client_id if r.spec.client_id is not None else r.priority

    def _arrive(self, r: Request) -> None:
        """VTC ``append``: lift the counter of a client whose waiting list was empty."""
        cnt, queued = self.counters, self._queued
        u = self.client(r)
        cnt.setdefault(u, 0.0)
        if queued.get(u, 0) == 0:
            others = [cnt[v] for v, k in queued.items() if k > 0 and v != u]
            if others:
                cnt[u] = max(cnt[u], min(others))
        queued[u] = queued.get(u, 0) + 1

    def _charge(self, r: Request, tokens: float) -> None:
        u = self.client(r)
        self.counters[u] = self.counters.get(u, 0.0) + tokens / (r.spec.weight or 1.0)

    def schedule(self, ctx: StepContext) -> None:
        """Running first (decodes, then chunks), then admissions from the smallest counter."""
        cnt = self.counters
        waiting = list(ctx.waiting)
        new = [r for r in waiting if r.request_id not in self._seen]
        for r in sorted(new, key=lambda r: (r.arrival_time, r.seq)):
            self._seen.add(r.request_id)
            self._arrive(r)
        run = sorted(ctx.running, key=lambda r: r.num_tokens - r.num_computed_tokens > 1)
        _chunked_fill(
            ctx, run, victim_key=lambda v: (cnt.get(self.client(v), 0.0), v.arrival_time, v.seq)
        )
        if not ctx.preempted:
            self._admit(ctx)
        for r, n in ctx.scheduled.items():
            if r.num_computed_tokens + n >= r.num_tokens:  # samples a token this step
                self._charge(r, self.w_out)
        queued: dict[Any, int] = {}
        for r in ctx.waiting:
            u = self.client(r)
            queued[u] = queued.get(u, 0) + 1
        self._queued = queued

    def _admit(self, ctx: StepContext) -> None:
        cnt = self.counters
        per: dict[Any, deque[Request]] = {}
        for r in ctx.waiting:
            per.setdefault(self.client(r), deque()).append(r)
        while per and ctx.token_budget > 0 and len(ctx.running) < ctx.max_num_seqs:
            u = min(per, key=lambda c: (cnt.get(c, 0.0), per[c][0].arrival_time, per[c][0].seq))
            r = per[u][0]
            hit = ctx.lookup(r)
            n = min(r.num_tokens - hit[1], ctx.token_budget)
            if ctx.admit(r, n, hit=hit) is None:
                break
            per[u].popleft()
            if not per[u]:
                del per[u]
            if r.request_id not in self._charged:
                self._charged.add(r.request_id)
                self._charge(r, self.w_in * r.num_prompt_tokens)


def register(register_policy: Callable[..., None]) -> None:
    """Register ProServe's policies and baselines with a scheduler registry."""
    variants: dict[str, tuple[dict, str]] = {
        "proserve": ({}, "ProServe SlideBatching (Alg. 1; xLLM gamma 1, eta 0.65 TPOT)"),
        "proserve-momentum": (
            {"theta": 0.9, "window": 100},
            "SlideBatching with the paper's online momentum correction (theta 0.9, 100 steps)",
        ),
        "proserve-paper-deadline": (
            {"deadline": "paper"},
            "SlideBatching with the paper's buffered decode deadline",
        ),
        "proserve-starve": (
            {"starve_prevent": True},
            "SlideBatching with xLLM's starved-prefill-first rule (not in Alg. 1)",
        ),
        "proserve-only-deadline": ({"mode": "only-deadline"}, "ablation: all NORMAL (EDF)"),
        "proserve-only-density": (
            {"mode": "only-density"},
            "ablation: the whole queue by density (xLLM's density strategy)",
        ),
        "proserve-only-density-decode-first": (
            {"mode": "only-density-decode-first"},
            "ablation variant: all URGENT, decodes first, each group by density",
        ),
        "proserve-xllm-mix-memory": (
            {"memory": "xllm-mix"},
            "SlideBatching with xLLM MixScheduler's memory handling taken literally",
        ),
        "proserve-no-latency": (
            {"latency_aware": False},
            "ablation: no latency budget (token budget only)",
        ),
    }
    for name, (kw, help_) in variants.items():

        def factory(_kw: dict = kw, _name: str = name, **extra: Any) -> SlideBatchingPolicy:
            p = SlideBatchingPolicy(**{**_kw, **extra})
            p.name = _name
            return p

        register_policy(name, factory, help_)
    register_policy(
        "sarathi-priority", SarathiPriorityPolicy, "decode-first, then priority, then arrival"
    )
    register_policy("fairbatching", FairBatchingPolicy, "EDF: near-deadline decodes, prefills")
    register_policy("wvtc", WeightedVTCPolicy, "Weighted VTC (per-client weighted counters)")
