"""RelServe (PVLDB): Dynamic Priority Updater + Adaptive Batch Arranger, and its baselines.

Reference scheduler for relQuery serving (``llmsched_gym.workloads.relquery``). Every policy here
runs on the vLLM-0.6-style engine of ``vllm-v0``: whole (unchunked) prefills, a step is either a
prefill-only or a decode-only batch (no hybrid batches), recompute preemption.

* ``relserve`` (the code's ``priority_ada_pabs``): DPU (Eq. 8-13) + ABA (Eq. 14-17).
* ``relserve-pp`` (``priority_ovlp_pabs``): DPU, always prefill when possible; the prefill batch
  may mix relQueries; no starvation handling.
* ``relserve-dp`` (``priority_islt_pabs``): DPU, never prefill in the transitional state.
* ``vllm-sp``: vLLM's priority policy with the static relQuery priority
  Σ (prompt tokens + ``max_tokens``) (lower first) and vLLM 0.6 priority preemption.
* ``vllm-0.6``: ``vllm-v0`` with vLLM 0.6.6's block-manager checks and prefix-hit counting
  (the paper's vLLM).
* ``sarathi-0.6``: vLLM 0.6.6 with chunked prefill (the paper's Sarathi).

Where the paper and the authors' code (``CSLabor/vllm_relserve@f643fc5``,
``vllm/core/scheduler.py``) differ, the code is the default and the paper's form is an
option of :class:`RelServeOptions`:

===========================  ==============================  ==================================
choice                       default (code)                  option (paper)
===========================  ==============================  ==================================
batch decomposition (PEM)    ``decomposition="code"``:       ``"alg1"``: Algorithm 1 (prefill
                             close a batch at mnbt, each     until ``cap``/``mns``, then decode
                             batch decoded on its own        to completion)
cache-miss sample (Eq. 11)   ``sample="first"``: first 10    ``"random"``: 10 random waiting
                             waiting requests                requests (seeded)
reuse (Eq. 12)               ``reuse="code"``: waiting       ``"paper"``: only relQueries with
                             count unchanged                 every request waiting at t-1 and t
running priority             ``running_size="own"``          ``"global"``: all running requests
Δ (Eq. 15-17)                ``delta="code"``: rem. steps,   ``"paper"``: |R+|·L^p + Σ α^d·|p|·
                             per running-only R              min(OL(R), OL(p)); Δ- with max OL
starvation (Eq. 13)          ``starvation_s=10`` s/request   (same rule; the README uses 100)
NFT KV reservation           ``nft_reservation=True``        ``False``
NFT admission rule           ``nft_rule="code"``: free >=    ``"strict"``: free - blocks to
                             NFT blocks at step start        admit >= NFT of all running
<10-remaining shortcut       ``tail_shortcut_steps=10``      ``0`` (off)
KV checks                    ``block_manager="v0.6"``:       ``"v1"``: the engine's (vLLM V1)
                             vLLM 0.6.6's (watermark 0.01,   admission gate
                             no hit credit, worst-case
                             append)
prefix-hit counting          ``prefix_hits="v0.6"``: no      ``"v1"``: the engine's fresh
                             hits on blocks of the same      lookup (vLLM V1)
                             batch, count frozen at the
                             first lookup (all policies)
===========================  ==============================  ==================================

``OL`` is always the user limit ``max_tokens - 1`` (the scheduler never sees true lengths).

The latency predictors L^prefill(uncached tokens) and L^decode(#running) (Eq. 9) are fitted by
:func:`fit_latency_predictors` from the per-step records of a vLLM-SP run, as the authors'
``slope_calc.py`` does. Without explicit predictors a policy fits them on first use
(:func:`default_predictors`): one vLLM-SP run of a small calibration relQuery workload on the
engine's own cost model and config, cached per (cost model, config).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine, SchedulingPolicy, StepContext
from llmsched_gym.core.request import Request
from llmsched_gym.errors import ConfigError, LLMSchedError, PolicyError
from llmsched_gym.policies.baselines import (
    BLOCK_MANAGERS,
    VllmV0Policy,
    can_allocate_v06,
    decode_one,
)

__all__ = [
    "LatencyPredictors",
    "RelServeOptions",
    "RelServeBatchTypeAgent",
    "RelServePolicy",
    "Sarathi06Policy",
    "V06PrefixHits",
    "Vllm06Policy",
    "VllmSPPolicy",
    "default_predictors",
    "delta_latency",
    "fit_latency_predictors",
    "pem_priority",
    "register",
    "running_priority",
]

WARMUP_STEPS = 10
"""Steps dropped from the start of a fitting run (``slope_calc.py``)."""


# --------------------------------------------------------------------------------------------
# Latency predictors (Eq. 9) and their fit
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LatencyPredictors:
    """Eq. 9: L^prefill(p) = α^p·utok(p) + β^p and L^decode(d) = α^d·req(d) + β^d (seconds)."""

    alpha_p: float
    beta_p: float
    alpha_d: float
    beta_d: float

    def prefill(self, uncached_tokens: float) -> float:
        """L^prefill of a batch with ``uncached_tokens`` tokens to compute."""
        return self.alpha_p * uncached_tokens + self.beta_p

    def decode(self, num_requests: float) -> float:
        """L^decode of a decode batch of ``num_requests`` sequences."""
        return self.alpha_d * num_requests + self.beta_d


def fit_latency_predictors(result: Any, warmup: int = WARMUP_STEPS) -> LatencyPredictors:
    """Fit Eq. 9 from a vLLM-SP run's step records, as the authors' ``slope_calc.py``.

    Args:
        result: A ``SimulationResult`` of ``simulate(..., record_steps=True)`` (or its ``steps``
            DataFrame) of a run without hybrid batches (``vllm-sp``, ``vllm-v0``).
        warmup: Leading steps dropped as warm-up (10 in the authors' script).

    Returns:
        ``np.polyfit(deg=1)`` of step time on uncached prefill tokens (prefill-only steps) and on
        the number of running sequences (decode-only steps).

    Raises:
        ConfigError: No step records, or fewer than two prefill or decode steps after warm-up.
    """
    steps = getattr(result, "steps", result)
    if steps is None:
        raise ConfigError("fit_latency_predictors needs step records (record_steps=True)")
    steps = steps.iloc[warmup:]
    pre = steps[(steps["num_prefill"] > 0) & (steps["num_decode"] == 0)]
    dec = steps[(steps["num_prefill"] == 0) & (steps["num_decode"] > 0)]
    if len(pre) < 2 or len(dec) < 2:
        raise ConfigError(
            f"fit_latency_predictors: need >= 2 prefill-only and decode-only steps after "
            f"{warmup} warm-up steps, got {len(pre)} and {len(dec)}"
        )
    ap, bp = np.polyfit(pre["num_scheduled_tokens"].to_numpy(float), pre["duration_s"], 1)
    ad, bd = np.polyfit(dec["num_decode"].to_numpy(float), dec["duration_s"], 1)
    return LatencyPredictors(float(ap), float(bp), float(ad), float(bd))


_FIT_CACHE: dict[tuple, LatencyPredictors] = {}


def default_predictors(cost_model: Any, config: EngineConfig) -> LatencyPredictors:
    """Predictors fitted on first use for an engine, cached per (cost model, config).

    Runs ``vllm-sp`` on a calibration workload (30 relQueries over all four tables at 1 rQ/s,
    seed 0, the engine's ``max_model_len`` rule taken as 2048 for OPT-sized budgets) with the
    engine's own cost model and config, and fits it with :func:`fit_latency_predictors`.
    Scenario runs that want the authors' exact procedure (same model, dataset and rate) pass
    predictors fitted on that scenario instead (see ``leaderboards/relserve/reproduce.py``).
    """
    key = (getattr(cost_model, "name", repr(cost_model)), tuple(sorted(config.to_dict().items())))
    if key not in _FIT_CACHE:
        from llmsched_gym.simulation import simulate
        from llmsched_gym.workloads.relquery import relquery_jobs

        mml = min(8192, config.max_num_batched_tokens)
        # On a KV cache smaller than the longest calibration request, the requests are capped
        # at what the cache holds (on larger ones the workload is unchanged).
        kv_tokens = (config.num_gpu_blocks - 1) * config.block_size
        try:
            try:
                jobs = relquery_jobs("all", 30, 1.0, seed=0, max_model_len=mml)
                res = simulate(jobs, config, VllmSPPolicy(), cost_model, record_steps=True)
            except LLMSchedError:
                if kv_tokens >= mml:
                    raise
                jobs = relquery_jobs("all", 30, 1.0, seed=0, max_model_len=kv_tokens)
                res = simulate(jobs, config, VllmSPPolicy(), cost_model, record_steps=True)
            _FIT_CACHE[key] = fit_latency_predictors(res)
        except LLMSchedError as exc:
            raise ConfigError(
                "relserve fits its latency predictors (Eq. 9) on an internal calibration run "
                "(30 relQueries of its own, ids rq*, under vllm-sp on this engine); that run "
                f"failed, so none of these requests is yours: {exc}. Give the engine more KV "
                "blocks (num_gpu_blocks) or a larger max_num_batched_tokens, or pass predictors "
                "fitted on your workload (RelServePolicy(predictors=...))"
            ) from None
    return _FIT_CACHE[key]


# --------------------------------------------------------------------------------------------
# Priority Estimation Model (Eq. 10, Algorithm 1) and the running priority
# --------------------------------------------------------------------------------------------
def pem_priority(
    prompt_lens: Iterable[int],
    max_tokens: Iterable[int],
    miss_ratio: float,
    pred: LatencyPredictors,
    mnbt: int,
    *,
    decomposition: str = "code",
    cap: int | None = None,
    mns: int | None = None,
) -> float:
    """PEM(R) (Eq. 10) of the waiting requests of one relQuery, with utok* = tok × ratio (Eq. 11).

    ``decomposition="code"`` (``_calc_single_query_priority``): walk the requests in queue order,
    close a prefill batch when its utok* would exceed ``mnbt``; each closed batch costs
    L^prefill(Σ utok*) + L^decode(|batch|) × max OL in the batch (OL = ``max_tokens`` - 1).

    ``decomposition="alg1"`` (Algorithm 1): prefill batches are cut at ``mnbt``; when the
    accumulated utok* would exceed ``cap`` or the decode batch ``mns``, the GPU decodes to
    completion: OL(R) decode batches of the accumulated size.

    Args:
        prompt_lens: tok(r) of the waiting requests, in queue order.
        max_tokens: ``max_tokens`` of the same requests.
        miss_ratio: The relQuery's cache-miss ratio (Eq. 11).
        pred: The fitted predictors (Eq. 9).
        mnbt: ``max_num_batched_tokens``.
        decomposition: ``code`` or ``alg1``.
        cap: KV capacity in tokens (``alg1`` only).
        mns: ``max_num_seqs`` (``alg1`` only).

    Returns:
        The estimated execution duration in seconds (the priority value; lower first).
    """
    toks = [p * miss_ratio for p in prompt_lens]
    ols = [m - 1 for m in max_tokens]
    total = 0.0
    if decomposition == "code":
        acc, n, ol = 0.0, 0, 0
        for u, o in zip(toks, ols, strict=True):
            if n and acc + u > mnbt:
                total += pred.prefill(acc) + pred.decode(n) * ol
                acc, n, ol = 0.0, 0, 0
            acc += u
            n += 1
            ol = max(ol, o)
        if n:
            total += pred.prefill(acc) + pred.decode(n) * ol
        return total
    if decomposition != "alg1":
        raise ConfigError(f"decomposition must be 'code' or 'alg1', got {decomposition!r}")
    cap = cap if cap is not None else 1 << 62
    mns = mns if mns is not None else 1 << 62
    ol_r = max(ols, default=0)
    p_tok, d_n, accum = 0.0, 0, 0.0
    for u in toks:
        if d_n and (u + accum > cap or d_n + 1 > mns):  # lines 4-8: decode to completion
            if p_tok:
                total += pred.prefill(p_tok)
            total += pred.decode(d_n) * ol_r
            p_tok, d_n, accum = 0.0, 0, 0.0
        if p_tok and u + p_tok > mnbt:  # lines 9-10: the prefill batch is full
            total += pred.prefill(p_tok)
            p_tok = 0.0
        p_tok += u
        d_n += 1
        accum += u
    if d_n:  # lines 12-15: leftovers
        if p_tok:
            total += pred.prefill(p_tok)
        total += pred.decode(d_n) * ol_r
    return total


def running_priority(
    remaining_steps: Iterable[int], num_running: int, pred: LatencyPredictors
) -> float:
    """Priority of a running-only relQuery (``_update_running_priority_abs``).

    max over its running requests of (``max_tokens`` - generated) × L^decode(``num_running``),
    where ``num_running`` is its own number of running requests in the code.
    """
    return max(remaining_steps, default=0) * pred.decode(num_running)


def delta_latency(
    pred: LatencyPredictors,
    prefill_uncached: float,
    prefill_size: int,
    prefill_ol: int,
    running_only: list[tuple[int, int]],
    max_running_remaining: int,
    num_waiting_relqueries: int,
    *,
    form: str = "code",
) -> tuple[float, float, float]:
    """Δ = Δ+ - Δ- of prefilling the candidate batch p before decoding (Eq. 15-17).

    Code form (``predict_delta_latency``): Δ+ = Σ_{R running-only} [L^prefill(p) + α^d·|p|·
    min(OL(p), rem(R))] and Δ- = |R-|·β^d·min(OL(p), max_R rem(R)), where rem(R) is R's largest
    remaining step count and |R-| counts every waiting relQuery (the candidate's included).

    Paper form: Δ+ = L^prefill(p)·|R+| + Σ_R α^d·|p|·min(OL(R), OL(p)) and
    Δ- = |R-|·β^d·min(OL(p), max_R OL(R)).

    Args:
        pred: Eq. 9 predictors.
        prefill_uncached: utok(p) of the candidate prefill batch.
        prefill_size: req(p).
        prefill_ol: OL(p) = max ``max_tokens`` - 1 over p.
        running_only: (rem(R), OL(R)) of each running-only relQuery R.
        max_running_remaining: max rem(R) over the running relQueries (code form); the paper
            form uses max OL(R) over ``running_only`` instead.
        num_waiting_relqueries: |R-|.
        form: ``code`` or ``paper``.

    Returns:
        (Δ, Δ+, Δ-); the arranger prefills iff Δ < 0.
    """
    lp = pred.prefill(prefill_uncached)
    if form == "code":
        plus = sum(
            lp + pred.alpha_d * prefill_size * min(prefill_ol, rem) for rem, _ in running_only
        )
        minus = num_waiting_relqueries * pred.beta_d * min(prefill_ol, max_running_remaining)
    elif form == "paper":
        plus = lp * len(running_only) + sum(
            pred.alpha_d * prefill_size * min(ol, prefill_ol) for _, ol in running_only
        )
        max_ol = max((ol for _, ol in running_only), default=0)
        minus = num_waiting_relqueries * pred.beta_d * min(prefill_ol, max_ol)
    else:
        raise ConfigError(f"delta form must be 'code' or 'paper', got {form!r}")
    return plus - minus, plus, minus


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------
def _rq(req: Request) -> str:
    """The relQuery id of a request (its job; a request outside jobs is its own relQuery)."""
    return req.spec.job_id or req.request_id


def _decode_all(ctx: StepContext, victim: Callable[[], Request], v06: bool = False) -> None:
    """One decode token for every running request; preempt ``victim()`` when blocks run out.

    ``v06``: vLLM 0.6.6's worst-case ``can_append_slots`` (a decode needs one free block).
    """
    running = ctx.running
    for req in list(running):
        if req not in running or ctx.token_budget == 0:
            continue
        decode_one(ctx, req, v06, victim)


def _remaining(req: Request) -> int:
    """Decode steps left under the user limit: ``max_tokens`` - generated."""
    return req.max_tokens - req.num_output_tokens


PREFIX_HITS = ("v0.6", "v1")
"""How prefix-cache hits are counted: ``v0.6`` as vLLM 0.6.6's V0 scheduler (the authors'
engine), ``v1`` as the engine's lookup (vLLM V1)."""


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

    def lookup(self, ctx: StepContext, req: Request) -> tuple[list[int], int]:
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


def _check_prefix_hits(value: str) -> str:
    if value not in PREFIX_HITS:
        raise ConfigError(f"prefix_hits must be one of {PREFIX_HITS}, got {value!r}")
    return value


# --------------------------------------------------------------------------------------------
# vLLM 0.6.6 (the paper's vLLM) and vLLM-SP
# --------------------------------------------------------------------------------------------
class Vllm06Policy(VllmV0Policy):
    """The paper's vLLM: ``vllm-v0`` with vLLM 0.6.6's KV checks and prefix-hit counting.

    ``vllm-v0`` is FCFS, prefill-first, whole prompts, no hybrid batches; the block-manager checks
    are ``block_manager="v0.6"`` (see :class:`VllmV0Policy`) and the hit counting
    ``prefix_hits="v0.6"`` (see :class:`V06PrefixHits`). ``"v1"`` for either restores the
    engine's (vLLM V1) behaviour.
    """

    name = "vllm-0.6"

    def __init__(
        self, block_manager: str = "v0.6", watermark: float = 0.01, prefix_hits: str = "v0.6"
    ) -> None:
        super().__init__(block_manager, watermark)
        self.prefix_hits = _check_prefix_hits(prefix_hits)
        self._hits = V06PrefixHits()

    def reset(self, engine: Engine) -> None:
        """Forget the frozen hit counts of the previous run."""
        self._hits.reset()

    def lookup(self, ctx: StepContext, req: Request) -> tuple[list[int], int]:
        """Prefix hit of ``req`` under the configured counting."""
        return self._hits.lookup(ctx, req) if self.prefix_hits == "v0.6" else ctx.lookup(req)


class VllmSPPolicy(Vllm06Policy):
    """vLLM-SP: ``vllm-v0`` under vLLM's priority policy with a static relQuery priority.

    Priority of every request of relQuery R = Σ_{r ∈ R} (prompt tokens + ``max_tokens``)
    (``rel_bench.py``), lower first, ties by (arrival, request id). As vLLM 0.6.6's
    ``_schedule_default``: prefills first (whole prompts, queue order); if none was admitted,
    ``_schedule_priority_preemption`` preempts (recompute) the worst running request while the
    waiting head cannot be admitted (blocks or ``max_num_seqs``) and has a better priority; then
    the remaining running requests decode, the worst-priority one preempted on block shortage.
    KV checks and prefix-hit counting are vLLM 0.6.6's by default (``block_manager="v0.6"``:
    watermark on admission, no prefix-hit credit, worst-case append; ``prefix_hits="v0.6"``: no
    hits within a batch, frozen counts; see :class:`Vllm06Policy`); ``"v1"`` is the engine's.
    """

    name = "vllm-sp"
    fast_forward_safe = False  # a blocked head may still preempt (priority inversion)
    head_of_line = True

    def __init__(
        self, block_manager: str = "v0.6", watermark: float = 0.01, prefix_hits: str = "v0.6"
    ) -> None:
        super().__init__(block_manager, watermark, prefix_hits)
        self.fast_forward_safe = False
        self._engine: Engine | None = None
        self._sums: dict[str, int] = {}

    def reset(self, engine: Engine) -> None:
        """Remember the engine (for the relQuery's released requests); clear frozen hits."""
        super().reset(engine)
        self._engine = engine
        self._sums = {}

    def relquery_priority(self, req: Request) -> int:
        """Σ (prompt + ``max_tokens``) over the released requests of ``req``'s relQuery."""
        rq = _rq(req)
        if rq not in self._sums:
            eng = self._engine
            jobs = None if eng is None else eng.jobs
            spec = req.spec
            if jobs is None or spec.job_id not in jobs.jobs:
                self._sums[rq] = spec.prompt_len + spec.max_tokens
            else:
                job = jobs.jobs[spec.job_id]
                stages = [s for s in job.stages if s.name == spec.stage] or list(job.stages[:1])
                self._sums[rq] = sum(s.prompt_len + s.max_tokens for s in stages[0].requests)
        return self._sums[rq]

    def priority_key(self, req: Request) -> tuple:
        """(relQuery priority, arrival, request id)."""
        return (self.relquery_priority(req), req.arrival_time, req.request_id)

    def queue_policy(self, config: EngineConfig) -> str:
        """Always vLLM's priority queue."""
        return "priority"

    def _worst_running(self, ctx: StepContext) -> Request:
        return max(ctx.running, key=self.priority_key)

    def schedule(self, ctx: StepContext) -> None:
        """Prefill-first (``vllm-v0``); without prefills, priority preemption, then decode."""
        if self.admit_whole_prefills(ctx):
            return
        waiting, running = ctx.waiting, ctx.running
        if waiting and running:  # vLLM 0.6.6 _schedule_priority_preemption (no prefill this step)
            head = waiting.peek()
            hk = self.priority_key(head)
            while running:
                worst = self._worst_running(ctx)
                if self.priority_key(worst) <= hk:
                    break
                if len(running) < ctx.max_num_seqs and self._admissible(ctx, head):
                    break
                ctx.preempt(worst)
        _decode_all(ctx, lambda: self._worst_running(ctx), self.block_manager == "v0.6")

    def _admissible(self, ctx: StepContext, head: Request) -> bool:
        if self.block_manager == "v0.6":
            return self.can_allocate_v06(ctx, head)
        return ctx.blocks_needed_to_admit(head) <= ctx.num_free_blocks


# --------------------------------------------------------------------------------------------
# Sarathi as vLLM 0.6.6 with --enable-chunked-prefill
# --------------------------------------------------------------------------------------------
class Sarathi06Policy(SchedulingPolicy):
    """The paper's Sarathi: vLLM 0.6.6's ``_schedule_chunked_prefill`` (FCFS, hybrid batches).

    Unlike the shared ``sarathi`` baseline (the engine's V1-style KV checks):

    * running requests are served in running order, each a decode or its next prefill chunk;
      the chunk is the budget left rounded down to whole blocks (prefix caching on); a chunk of
      0 ends the running phase; each needs a free block (``can_append_slots``' worst case),
      else the newest running request is preempted (recompute);
    * new admissions follow even after a preemption (the preempted rejoin the waiting head
      only after the prefill phase), gated by ``can_allocate`` (whole sequence, no hit
      credit, watermark 0.01), and get **all their prompt blocks at admission**, as vLLM 0.6's
      block manager allocates the whole prompt (here: the first chunk plus lookahead slots);
    * prefix hits counted as vLLM 0.6.6 does (``prefix_hits="v0.6"``, :class:`V06PrefixHits`).

    Outcomes vLLM 0.6.6 would not survive, made explicit (:class:`PolicyError` naming the
    request, never a hang):

    * ``can_allocate`` says ``NEVER`` (the watermark, or a recompute-preempted sequence that
      grew past the cache): vLLM ignores the request (``FINISHED_IGNORED``); see
      :func:`~llmsched_gym.policies.baselines.can_allocate_v06`.
    * **Livelock**: a request whose whole sequence fills every block cannot run its next
      chunk or decode (no free block for the worst-case append), so it preempts itself; when
      re-admitted it again gets one chunk and preempts itself, and no token is ever sampled if
      its sequence needs more than one chunk and no prefix-cache hit shortens it (two such
      requests evict each other's cached blocks). vLLM 0.6.6's scheduler spins forever there.
      The policy raises once the same request has preempted itself ``livelock_repeats`` times
      at the same length, alone in the running queue, with no token sampled by any request
      in between.
    * ``max_num_batched_tokens`` not a multiple of ``block_size`` with prefix caching:
      vLLM 0.6.6 raises ``ValueError`` (chunks are whole blocks); here :class:`ConfigError`.
    """

    name = "sarathi-0.6"
    fast_forward_safe = False
    head_of_line = True

    def __init__(
        self, watermark: float = 0.01, livelock_repeats: int = 3, prefix_hits: str = "v0.6"
    ) -> None:
        if livelock_repeats < 2:
            raise ConfigError(f"livelock_repeats must be >= 2, got {livelock_repeats!r}")
        self.watermark = watermark
        self.livelock_repeats = livelock_repeats
        self.prefix_hits = _check_prefix_hits(prefix_hits)
        self._hits = V06PrefixHits()
        self._samples = 0
        self._lone: dict[str, tuple[int, int, int]] = {}

    def reset(self, engine: Engine) -> None:
        """Check vLLM 0.6.6's chunk-size rule; clear the livelock guard."""
        cfg = engine.config
        if cfg.enable_prefix_caching and cfg.max_num_batched_tokens % cfg.block_size:
            raise ConfigError(
                f"{self.name}: with prefix caching vLLM 0.6.6's chunked prefill needs "
                f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) to be a multiple of "
                f"block_size ({cfg.block_size}); change either or disable prefix caching"
            )
        self._samples = 0
        self._lone = {}
        self._hits.reset()

    def _chunk(self, ctx: StepContext, left: int) -> int:
        budget = ctx.token_budget
        if ctx.config.enable_prefix_caching:
            budget = budget // ctx.block_size * ctx.block_size
        return min(left, budget)

    def _self_preempted_alone(self, ctx: StepContext, req: Request) -> None:
        """Livelock guard: ``req`` preempted itself with nothing else running."""
        key = req.request_id
        prev = self._lone.get(key)
        count = 1
        if prev is not None and prev[0] == req.num_tokens and prev[1] == self._samples:
            count = prev[2] + 1
        self._lone[key] = (req.num_tokens, self._samples, count)
        if count >= self.livelock_repeats:
            raise PolicyError(
                f"{self.name}: livelock at t={ctx.now:.3f} s: request {key!r} ({req.num_tokens} "
                f"tokens, {-(-req.num_tokens // ctx.block_size)} of the cache's "
                f"{ctx.num_gpu_blocks - 1} blocks) preempted itself {count} times, alone in the "
                "running queue, with no token sampled by any request in between: its sequence "
                "fills the cache, so the worst-case append (one free block) of its next chunk "
                "never fits and each re-admission recomputes one chunk only; vLLM 0.6.6 spins "
                "here forever; raise num_gpu_blocks or max_num_batched_tokens"
            )

    def schedule(self, ctx: StepContext) -> None:
        """Running phase in running order, then chunked admissions."""
        running = ctx.running
        for req in list(running):
            if req not in running:
                continue
            left = req.num_tokens - req.num_computed_tokens
            n = 1 if left == 1 else self._chunk(ctx, left)
            if n <= 0 or ctx.token_budget <= 0:
                break
            while not (ctx.num_free_blocks >= 1 and ctx.schedule_running(req, n)):
                victim = running[-1]
                ctx.preempt(victim)
                if victim is req:
                    if not running:
                        self._self_preempted_alone(ctx, req)
                    break
        # vLLM re-queues this step's victims at the waiting head only after the prefill phase.
        skip = set(ctx.preempted)  # prepended by ctx.preempt: they sit at the waiting head
        waiting = ctx.waiting
        while len(running) < ctx.max_num_seqs:
            req = next((r for r in waiting if r not in skip), None)
            if req is None:
                break
            # Cached tokens are counted (and frozen) before can_allocate, as in vLLM 0.6.6.
            hit = self._hits.lookup(ctx, req) if self.prefix_hits == "v0.6" else ctx.lookup(req)
            if not can_allocate_v06(ctx, req, self.watermark, self.name):
                break
            left = req.num_tokens - hit[1]
            n = self._chunk(ctx, left)
            if n <= 0:
                break
            if ctx.admit(req, n, num_lookahead_tokens=left - n, hit=hit) is None:
                break
        # Requests whose scheduled tokens reach their sequence end sample a token this step.
        for req, n in ctx.scheduled.items():
            if req.num_computed_tokens + n >= req.num_tokens:
                self._samples += 1
                break


# --------------------------------------------------------------------------------------------
# RelServe
# --------------------------------------------------------------------------------------------
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
            key = _rq(req)
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
            running_by.setdefault(_rq(r), []).append(r)
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
            prios[key] = running_priority([_remaining(r) for r in reqs], size, pred)
        self._running_by = running_by
        return prios

    # -- ABA ---------------------------------------------------------------------------------
    def _nft_blocks(self, ctx: StepContext, extra_tokens: int = 0) -> int:
        """KV blocks reserved so every running request can decode to its limit (code's NFT)."""
        if not self.options.nft_reservation:
            return 0
        nft = sum(_remaining(r) for r in ctx.running) + extra_tokens
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
            reserve = sum(_remaining(r) for r in ctx.running)  # NFT tokens
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
            self._rqs[_rq(r)].waiting.remove(r)
            self._tracked -= 1
            admitted = True
        return admitted

    def _decode(self, ctx: StepContext) -> None:
        self.stats["decode"] += 1
        _decode_all(ctx, lambda: ctx.running[-1], self.v06)
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
            _remaining(r) < o.tail_shortcut_steps for r in running_by[best_r]
        ):
            self.stats["shortcut"] += 1
            return False
        utok, size, ol = self._mimic(ctx, self._candidates(ctx, order))
        if size == 0:
            return False
        rems = {k: max(_remaining(r) for r in running_by[k]) for k in running_by}
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


def register(register_policy: Callable[..., None]) -> None:
    """Register the RelServe policies and the paper's vLLM 0.6.6 baselines.

    Constructors accept ``predictors=`` (a :class:`LatencyPredictors`) and RelServe option
    keywords; without predictors they are fitted on first use (:func:`default_predictors`).
    """
    register_policy(
        "relserve",
        lambda **kw: RelServePolicy(variant="ada", **kw),
        "RelServe (PVLDB): dynamic relQuery priorities + adaptive prefill/decode arrangement",
    )
    register_policy(
        "relserve-pp",
        lambda **kw: RelServePolicy(variant="pp", **kw),
        "RelServe ablation: dynamic priorities, always prefill first",
    )
    register_policy(
        "relserve-dp",
        lambda **kw: RelServePolicy(variant="dp", **kw),
        "RelServe ablation: dynamic priorities, decode first in the tail",
    )
    register_policy(
        "sarathi-0.6",
        Sarathi06Policy,
        "Sarathi as the RelServe paper ran it: vLLM 0.6.6 chunked prefill (whole-prompt blocks, "
        "watermark)",
    )
    register_policy(
        "vllm-0.6",
        Vllm06Policy,
        "vllm-v0 with vLLM 0.6.6's block-manager checks (watermark, no hit credit) and prefix-hit "
        "counting (no hits within a batch, frozen counts)",
    )
    register_policy(
        "vllm-sp",
        VllmSPPolicy,
        "vLLM-SP: vllm-v0 under a static relQuery priority sum(prompt + max_tokens)",
    )
