"""ProServe's SlideBatching (arXiv 2512.12928, Alg. 1) with xLLM's defaults.

Defaults: eta = 0.65 x min TPOT SLO, gamma =
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
"""

from __future__ import annotations

import math
from typing import Any

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine, SchedulingPolicy, StepContext
from llmsched_gym.core.request import Request, RequestStatus
from llmsched_gym.policies.proserve.estimator import LatencyEstimator

__all__ = ["SlideBatchingPolicy", "slo_or"]

_INF = float("inf")


def slo_or(v: float | None, default: float) -> float:
    """``v``, or ``default`` when the request has no such SLO."""
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
        self.record_fill = False
        """Keep ``last_fill`` (for probes such as ``leaderboards/proserve/knee_probe.py``)."""
        self.last_fill: dict[str, Any] = {}
        """With ``record_fill``, the last step's ``t_budget``, why the fill loop ended
        (``end``: ``queue-exhausted``, ``t_budget``, ``token_budget``, ``min_chunk``,
        ``no-victim``; ``empty`` for an empty queue) and how often it skipped a request, by
        reason (``skips``)."""

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
        s1 = slo_or(r.spec.slo_ttft_s, self.default_ttft)
        s2 = slo_or(r.spec.slo_tpot_s, self.default_tpot)
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
            tpot_min = min(tpot_min, slo_or(r.spec.slo_tpot_s, self.default_tpot))
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
                    slo = slo_or(r.spec.slo_ttft_s, self.default_ttft)
                else:
                    slo = slo_or(r.spec.slo_tpot_s, self.default_tpot)
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
            if self.record_fill:
                self.last_fill = {"t_budget": math.nan, "end": "empty", "skips": {}}
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
        skips: dict[str, int] | None = {} if self.record_fill else None
        end = "queue-exhausted"
        for r in order:
            # The first request always gets its chance: when one step's fixed cost t_c alone
            # exceeds t_budget (steps of >= eta = 0.65 x TPOT SLO, e.g. 0.05 s steps for a late
            # one-token request), breaking here would schedule nothing, forever.
            if (t_batch >= t_budget and t_batch > est.t_c) or ctx.token_budget <= 0:
                end = "t_budget" if t_batch >= t_budget and t_batch > est.t_c else "token_budget"
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
                    if skips is not None:
                        skips["admit-closed"] = skips.get("admit-closed", 0) + 1
                    continue
                if not xmix and 1.0 - ctx.num_free_blocks / usable >= self.kv_threshold:
                    admit_ok = False
                    if skips is not None:
                        skips["kv_threshold"] = skips.get("kv_threshold", 0) + 1
                    continue
                hit = ctx.lookup(r)
                m = hit[1]
                left = r.num_tokens - m
            if left == 1:
                cost = est.decode(m)
                if t_batch + cost > t_budget and t_batch > est.t_c:
                    if skips is not None:
                        skips["decode-over-budget"] = skips.get("decode-over-budget", 0) + 1
                    continue
                n = 1
            else:
                c = est.max_chunk(m, t_budget - t_batch, min(left, ctx.token_budget))
                if c < left and c <= self.min_chunk:
                    if t_batch > est.t_c:
                        end = "min_chunk"
                        break
                    c = min(left, ctx.token_budget, max(c, self.min_chunk))  # ensure progress
                n = c
                cost = est.prefill(n, m)
            if r.status is RequestStatus.RUNNING:
                if not self._run_or_preempt(ctx, r, n, order, pos):
                    if xmix:
                        end = "no-victim"
                        break  # MixScheduler: a failure with no victim ends the batch
                    if skips is not None:
                        skips["run-blocked"] = skips.get("run-blocked", 0) + 1
                    continue
            elif xmix:
                if not self._admit_or_preempt(ctx, r, n, pos):
                    end = "no-victim"
                    break
            else:
                if ctx.admit(r, n, hit=hit) is None:
                    admit_ok = False
                    if skips is not None:
                        skips["admit-refused"] = skips.get("admit-refused", 0) + 1
                    continue
            t_batch += cost
        self._last = (now, t_batch)
        if skips is not None:
            self.last_fill = {"t_budget": t_budget, "end": end, "skips": skips}

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
