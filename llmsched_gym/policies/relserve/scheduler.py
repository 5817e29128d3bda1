"""RelServe's scheduler: Dynamic Priority Updater (§4.2) + Adaptive Batch Arranger (§4.3).

:class:`RelServePolicy` is ``relserve`` and its ablations ``relserve-pp`` / ``relserve-dp``; its
options (:class:`RelServeOptions`) follow the authors' code by default (the package docstring's
table). :class:`RelServeBatchTypeAgent` runs its arranger's decision as an agent of the
``BatchType`` environments.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine, SchedulingPolicy, StepContext
from llmsched_gym.core.request import Request
from llmsched_gym.errors import ConfigError, PolicyError
from llmsched_gym.kv.vllm06 import PREFIX_HITS, V06PrefixHits, can_allocate_v06
from llmsched_gym.policies.heuristics import BLOCK_MANAGERS
from llmsched_gym.policies.relserve.predictors import LatencyPredictors, default_predictors
from llmsched_gym.policies.relserve.priority import delta_latency, pem_priority, running_priority
from llmsched_gym.policies.relserve.vllm06 import decode_all, relquery_id, steps_left

__all__ = ["RelServeBatchTypeAgent", "RelServeOptions", "RelServePolicy"]


@dataclass
class RelServeOptions:
    """RelServe knobs; defaults follow the authors' code (module docstring table)."""

    variant: str = "ada"
    """``ada`` (RelServe), ``pp`` (always prefill first), ``dp`` (decode in the tail)."""
    decomposition: str = "code"
    sample_size: int = 10
    sample: str = "first"
    reuse: str = "code"
    running_size: str = "own"
    delta: str = "code"
    starvation_s: float | None = 10.0
    """Seconds per waiting request at first sight (Eq. 13); None disables; ``ada`` only."""
    nft_reservation: bool = True
    tail_shortcut_steps: int = 10
    single_relquery_batch: bool | None = None
    """Prefill from one relQuery only (default: True for ``ada``/``dp``, False for ``pp``)."""
    zero_uncached_stops: bool = True
    """Code quirk: a request with nothing to compute stops the prefill batch."""
    nft_rule: str = "code"
    """``code``: admit while free blocks >= NFT blocks of the requests running when the step
    began (``scheduler.py:1310``), then vLLM's ``can_allocate``; the mimic batch is capped at
    free tokens - NFT tokens, each request costing its uncached tokens (``:1136``). ``strict``:
    free - blocks to admit >= NFT blocks of every running request (admitted ones included), the
    mimic reserving prompt + ``max_tokens`` per request (this package's first version)."""
    block_manager: str = "v0.6"
    """KV checks: ``v0.6`` = vLLM 0.6.6's (watermark 0.01 on admission, worst-case append, as the
    authors' engine); ``v1`` = the engine's (vLLM V1's admission gate)."""
    prefix_hits: str = "v0.6"
    """Prefix-hit counting: ``v0.6`` = vLLM 0.6.6's (no hits on blocks of the same batch, the
    count frozen at the first lookup; :class:`V06PrefixHits`), for the DPU's sample, the mimic
    batch and admissions; ``v1`` = the engine's fresh lookup."""
    seed: int = 0
    """Seed of ``sample="random"``."""

    def __post_init__(self) -> None:
        checks = {
            "variant": ("ada", "pp", "dp"),
            "decomposition": ("code", "alg1"),
            "sample": ("first", "random"),
            "reuse": ("code", "paper"),
            "running_size": ("own", "global"),
            "delta": ("code", "paper"),
            "nft_rule": ("code", "strict"),
            "block_manager": BLOCK_MANAGERS,
            "prefix_hits": PREFIX_HITS,
        }
        for name, allowed in checks.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(
                    f"RelServe {name} must be one of {allowed}, got {getattr(self, name)!r}"
                )
        if self.sample_size < 1:
            raise ConfigError(f"RelServe sample_size must be >= 1, got {self.sample_size!r}")


@dataclass
class _RQ:
    """Per-relQuery state kept by the DPU."""

    arrival: float
    threshold: float
    waiting: list[Request] = field(default_factory=list)
    prio: float | None = None
    ratio: float = 1.0
    last_count: int = -1
    all_waiting_prev: bool = False


class RelServePolicy(SchedulingPolicy):
    """RelServe's scheduler: Dynamic Priority Updater + Adaptive Batch Arranger.

    Each step: (1) DPU (§4.2) updates relQuery priorities: PEM by batch decomposition (Eq. 10,
    Alg. 1) of the waiting part with utok* from the cache-miss ratio of the first 10 waiting
    requests (Eq. 11, real prefix-cache lookups), reused by the code's waiting-count rule
    (Eq. 8/12), running-only relQueries by remaining steps × own-size decode cost, starvation
    prevention (Eq. 13); (2) ABA (§4.3, Eq. 14-17) picks a prefill batch (one relQuery, whole
    prompts, NFT KV reservation) or a decode batch of all running requests, never both.
    """

    fast_forward_safe = True
    head_of_line = False

    def __init__(
        self,
        predictors: LatencyPredictors | None = None,
        options: RelServeOptions | None = None,
        **kwargs: Any,
    ) -> None:
        self.options = options if options is not None else RelServeOptions(**kwargs)
        if options is not None and kwargs:
            raise ConfigError("pass either options or keyword options, not both")
        self.pred = predictors
        self._given_pred = predictors is not None
        v = self.options.variant
        self.name = {"ada": "relserve", "pp": "relserve-pp", "dp": "relserve-dp"}[v]
        self.single = (
            self.options.single_relquery_batch
            if self.options.single_relquery_batch is not None
            else v != "pp"
        )
        self.stats = {"prefill": 0, "decode": 0, "inter": 0, "delta_prefill": 0, "shortcut": 0}
        self.v06 = self.options.block_manager == "v0.6"
        if self.v06:
            self.fast_forward_safe = False  # worst-case append may preempt mid-stretch
        self._rqs: dict[str, _RQ] = {}
        self._tracked = 0
        self._rng = random.Random(self.options.seed)
        self._hits = V06PrefixHits()

    def _lookup(self, ctx: StepContext, req: Request) -> tuple[list[int], int]:
        if self.options.prefix_hits == "v0.6":
            return self._hits.lookup(ctx, req)
        return ctx.lookup(req)

    def queue_policy(self, config: EngineConfig) -> str:
        """FCFS engine queue; the DPU orders it itself every step."""
        return "fcfs"

    def reset(self, engine: Engine) -> None:
        """Fit the predictors on first use when none were given."""
        if not self._given_pred:
            self.pred = default_predictors(engine.cost_model, engine.config)
        self._rqs = {}
        self._tracked = 0
        self._rng = random.Random(self.options.seed)
        self._hits.reset()
        self.stats = dict.fromkeys(self.stats, 0)

    # -- DPU ---------------------------------------------------------------------------------
    def _sync(self, ctx: StepContext) -> None:
        """Rebuild per-relQuery waiting lists when arrivals or preemptions changed the queue."""
        if len(ctx.waiting) == self._tracked:
            return
        for rq in self._rqs.values():
            rq.waiting = []
        thr = self.options.starvation_s
        for req in ctx.waiting:
            key = relquery_id(req)
            rq = self._rqs.get(key)
            if rq is None:
                rq = self._rqs[key] = _RQ(arrival=req.arrival_time, threshold=float("inf"))
                rq.first_seen = True  # type: ignore[attr-defined]
            rq.waiting.append(req)
            rq.arrival = min(rq.arrival, req.arrival_time)
        for rq in self._rqs.values():
            if getattr(rq, "first_seen", False):
                rq.threshold = thr * len(rq.waiting) if thr is not None else float("inf")
                rq.first_seen = False  # type: ignore[attr-defined]
        self._tracked = len(ctx.waiting)

    def _miss_ratio(self, ctx: StepContext, reqs: list[Request]) -> float:
        """Eq. 11 over the first (or random) ``sample_size`` waiting requests, real lookups."""
        k = min(self.options.sample_size, len(reqs))
        sample = reqs[:k] if self.options.sample == "first" else self._rng.sample(reqs, k)
        unc = tot = 0
        for r in sample:
            hit = self._lookup(ctx, r)[1]
            unc += r.num_tokens - hit
            tot += r.num_tokens
        return unc / tot if tot else 1.0

    def _update_priorities(self, ctx: StepContext) -> dict[str, float]:
        """DPU: priority of every relQuery with waiting or running requests (lower first)."""
        o, pred, cfg = self.options, self.pred, ctx.config
        running_by: dict[str, list[Request]] = {}
        for r in ctx.running:
            running_by.setdefault(relquery_id(r), []).append(r)
        prios: dict[str, float] = {}
        for key, rq in list(self._rqs.items()):
            if not rq.waiting:
                if key not in running_by:
                    del self._rqs[key]
                continue
            n = len(rq.waiting)
            all_waiting = key not in running_by and n == rq.last_count
            if o.reuse == "code":
                reuse = rq.prio is not None and n == rq.last_count
            else:  # Eq. 12: every request of R at t-1 and t is waiting
                reuse = rq.prio is not None and all_waiting and rq.all_waiting_prev
            if not reuse:
                rq.ratio = self._miss_ratio(ctx, rq.waiting)
                rq.prio = pem_priority(
                    [r.num_tokens for r in rq.waiting],
                    [r.max_tokens for r in rq.waiting],
                    rq.ratio,
                    pred,
                    cfg.max_num_batched_tokens,
                    decomposition=o.decomposition,
                    cap=(cfg.num_gpu_blocks - 1) * cfg.block_size,
                    mns=cfg.max_num_seqs,
                )
            rq.all_waiting_prev = key not in running_by
            rq.last_count = n
            p = rq.prio
            if (
                o.variant == "ada"
                and o.starvation_s is not None
                and ctx.now - rq.arrival > rq.threshold
            ):
                p = 0.0  # Eq. 13: starvation prevention
            prios[key] = p
        total_running = len(ctx.running)
        for key, reqs in running_by.items():
            if key in prios:
                continue  # partially waiting: the waiting part's priority
            size = len(reqs) if o.running_size == "own" else total_running
            prios[key] = running_priority([steps_left(r) for r in reqs], size, pred)
        self._running_by = running_by
        return prios

    # -- ABA ---------------------------------------------------------------------------------
    def _nft_blocks(self, ctx: StepContext, extra_tokens: int = 0) -> int:
        """KV blocks reserved so every running request can decode to its limit (code's NFT)."""
        if not self.options.nft_reservation:
            return 0
        nft = sum(steps_left(r) for r in ctx.running) + extra_tokens
        return nft // ctx.block_size + 1

    def _candidates(self, ctx: StepContext, order: list[str]) -> list[Request]:
        """Waiting requests in prefill order: relQueries by priority, queue order inside."""
        out: list[Request] = []
        for key in order[:1] if self.single else order:
            out.extend(self._rqs[key].waiting)
        return out

    def _mimic(self, ctx: StepContext, cands: list[Request]) -> tuple[int, int, int]:
        """The candidate prefill batch without admitting: (uncached tokens, size, OL(p))."""
        budget = ctx.token_budget
        seqs = ctx.max_num_seqs - len(ctx.running)
        code = self.options.nft_rule == "code"
        if not self.options.nft_reservation:
            reserve = 0
        elif code:
            reserve = sum(steps_left(r) for r in ctx.running)  # NFT tokens
        else:
            reserve = self._nft_blocks(ctx) * ctx.block_size
        free_tokens = ctx.num_free_blocks * ctx.block_size - reserve
        utok = size = ol = 0
        for r in cands:
            n = r.num_tokens - self._lookup(ctx, r)[1]
            if n <= 0 and self.options.zero_uncached_stops:
                break
            cost = n if code else n + r.max_tokens
            if utok + n > budget or size + 1 > seqs or cost > free_tokens:
                break
            utok += n
            size += 1
            ol = max(ol, r.max_tokens - 1)
            free_tokens -= cost
        return utok, size, ol

    def _prefill(self, ctx: StepContext, cands: list[Request]) -> bool:
        """Admit whole prompts in order under the budget, ``max_num_seqs`` and the NFT reserve."""
        admitted = False
        code = self.options.nft_rule == "code"
        nft0 = self._nft_blocks(ctx)  # the code computes NFT once, before the prefill loop
        for r in cands:
            if len(ctx.running) >= ctx.max_num_seqs:
                break
            hit = self._lookup(ctx, r)
            n = r.num_tokens - hit[1]
            if n <= 0 and self.options.zero_uncached_stops:
                break
            if n > ctx.config.max_num_batched_tokens:
                raise PolicyError(
                    f"{self.name} cannot chunk prefills: request {r.request_id!r} needs {n} tokens"
                )
            if n > ctx.token_budget:
                break
            if self.options.nft_reservation:
                if code:
                    if ctx.num_free_blocks < nft0:
                        break
                elif ctx.num_free_blocks - ctx.blocks_needed_to_admit(r) < self._nft_blocks(ctx):
                    break
            if self.v06 and not can_allocate_v06(ctx, r, policy=self.name):
                break
            if ctx.admit(r, n, hit=hit) is None:
                break
            self._rqs[relquery_id(r)].waiting.remove(r)
            self._tracked -= 1
            admitted = True
        return admitted

    def _decode(self, ctx: StepContext) -> None:
        self.stats["decode"] += 1
        decode_all(ctx, lambda: ctx.running[-1], self.v06)
        if ctx.preempted:
            self._tracked = -1  # force a resync next step

    def schedule(self, ctx: StepContext) -> None:
        """One iteration: DPU priorities, then the ABA's prefill-or-decode decision."""
        self._sync(ctx)
        prios = self._update_priorities(ctx)
        waiting_keys = [k for k, rq in self._rqs.items() if rq.waiting]
        order = sorted(waiting_keys, key=lambda k: (prios[k], self._rqs[k].arrival, k))
        if not order:
            if ctx.running:
                self._decode(ctx)
            return
        if not ctx.running:
            if self._prefill(ctx, self._candidates(ctx, order)):
                self.stats["prefill"] += 1
            return
        prefill = self._arrange(ctx, prios, order)
        if prefill and self._prefill(ctx, self._candidates(ctx, order)):
            self.stats["prefill"] += 1
            return
        self._decode(ctx)

    def _arrange(self, ctx: StepContext, prios: dict[str, float], order: list[str]) -> bool:
        """ABA (Eq. 14-17): True to run the candidate prefill batch, False to decode."""
        o = self.options
        if o.variant == "pp":
            return True
        running_by = self._running_by
        running_only = [k for k in running_by if k not in self._rqs or not self._rqs[k].waiting]
        top_w = order[0]
        if not running_only:
            return True  # internal / cold start
        best_r = min(running_only, key=lambda k: prios[k])
        if prios[best_r] >= prios[top_w]:
            return True  # preemption (m+ > m-) or internal execution
        self.stats["inter"] += 1
        if o.variant == "dp":
            return False
        if o.tail_shortcut_steps and any(
            steps_left(r) < o.tail_shortcut_steps for r in running_by[best_r]
        ):
            self.stats["shortcut"] += 1
            return False
        utok, size, ol = self._mimic(ctx, self._candidates(ctx, order))
        if size == 0:
            return False
        rems = {k: max(steps_left(r) for r in running_by[k]) for k in running_by}
        ro = [(rems[k], max(r.max_tokens - 1 for r in running_by[k])) for k in running_only]
        delta, _, _ = delta_latency(
            self.pred, utok, size, ol, ro, max(rems.values()), len(order), form=o.delta
        )
        if delta < 0:
            self.stats["delta_prefill"] += 1
            return True
        return False


class RelServeBatchTypeAgent:
    """RelServe's ABA decision as an agent for ``llmsched/BatchType-*-v0`` (``act(env)``).

    Each decision runs the DPU and the ABA test of a :class:`RelServePolicy` on the env's engine
    and answers 0 (prefill-only) or 1 (decode-only). Approximate: the env builds the chosen batch
    with vLLM-v1 rules (FCFS queue, chunked prefill, no one-relQuery restriction, no NFT
    reservation), so only the batch-type decision is RelServe's. Bound to ``env``, the agent is
    also a callable observation -> action for ``llmsched_gym.envs.rollout``.
    """

    def __init__(self, policy: RelServePolicy | None = None, env: Any = None) -> None:
        self.policy = policy if policy is not None else RelServePolicy()
        self.env = env
        self._engine: Engine | None = None

    def __call__(self, obs: Any) -> int:
        """The action at the bound env's current decision (``obs`` is not needed)."""
        if self.env is None:
            raise ConfigError(
                "RelServeBatchTypeAgent(env=...) is needed to call it on observations"
            )
        return self.act(self.env)

    def act(self, env: Any) -> int:
        """0 = prefill-only, 1 = decode-only."""
        eng = env.unwrapped.engine
        pol = self.policy
        if eng is not self._engine:
            self._engine = eng
            pol._rqs, pol._tracked = {}, -1
            if pol.pred is None:
                pol.pred = default_predictors(eng.cost_model, eng.config)
        ctx = eng.ctx
        ctx._begin(eng.now, eng.num_steps)
        pol._tracked = -1  # the env's policy admitted requests: resync the waiting lists
        pol._sync(ctx)
        prios = pol._update_priorities(ctx)
        order = sorted(
            (k for k, rq in pol._rqs.items() if rq.waiting),
            key=lambda k: (prios[k], pol._rqs[k].arrival, k),
        )
        if not order:
            return 1
        if not ctx.running:
            return 0
        return 0 if pol._arrange(ctx, prios, order) else 1
