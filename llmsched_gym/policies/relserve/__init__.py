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

Modules: :mod:`.predictors` (Eq. 9 and its fit), :mod:`.priority` (PEM, running priority, Δ),
:mod:`.scheduler` (DPU + ABA, the BatchType agent), :mod:`.vllm06` (the paper's vLLM 0.6.6,
vLLM-SP and Sarathi baselines).
"""

from __future__ import annotations

from collections.abc import Callable

from llmsched_gym.kv.vllm06 import V06PrefixHits
from llmsched_gym.policies.relserve.predictors import (
    LatencyPredictors,
    default_predictors,
    fit_latency_predictors,
)
from llmsched_gym.policies.relserve.priority import delta_latency, pem_priority, running_priority
from llmsched_gym.policies.relserve.scheduler import (
    RelServeBatchTypeAgent,
    RelServeOptions,
    RelServePolicy,
)
from llmsched_gym.policies.relserve.vllm06 import Sarathi06Policy, Vllm06Policy, VllmSPPolicy

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
