"""ProServe (arXiv 2512.12928): SlideBatching, GoRouting, their latency estimator, the baselines.

* :mod:`.estimator`: :class:`LatencyEstimator`, Eq. 4-7 fitted on the engine's own cost model.
* :mod:`.slide_batching`: :class:`SlideBatchingPolicy`, Alg. 1 (``proserve`` and its ablations).
* :mod:`.gorouting`: :class:`GoRouter`, Alg. 2 (routers ``gorouting``, ``gorouting-random``).
* :mod:`.comparisons`: the baselines :class:`SarathiPriorityPolicy`, :class:`FairBatchingPolicy`,
  :class:`WeightedVTCPolicy`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmsched_gym.policies.proserve.comparisons import (
    FairBatchingPolicy,
    SarathiPriorityPolicy,
    WeightedVTCPolicy,
)
from llmsched_gym.policies.proserve.estimator import LatencyEstimator
from llmsched_gym.policies.proserve.gorouting import GoRouter
from llmsched_gym.policies.proserve.gorouting import register as register_routers
from llmsched_gym.policies.proserve.slide_batching import SlideBatchingPolicy

__all__ = [
    "FairBatchingPolicy",
    "GoRouter",
    "LatencyEstimator",
    "SarathiPriorityPolicy",
    "SlideBatchingPolicy",
    "WeightedVTCPolicy",
    "register",
    "register_routers",
]


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
