"""HexGen-Text2SQL (paper §4): the dispatcher, the urgency queue, α tuning, and their metrics.

* :mod:`.tcomp`: Eq. 2's per-request cost (:class:`TCompModel`) and the stage-length predictor.
* :mod:`.dispatch`: the workload-balanced dispatcher (§4.1, Eq. 2-4) as routers ``hexgen-wb``,
  ``hexgen-wb:alpha=<a>`` and ``hexgen-wb-code`` (Hexgen-Flow's implemented score).
* :mod:`.tuning`: §4.3's online α tuning by replay, router ``hexgen-wb-tuned``.
* :mod:`.urgency`: the local urgency queue (§4.2, Eq. 5-7), policies ``hexgen-pq*`` and
  ``hexgen-fcfs-serial``.
* :mod:`.pricing`: cost models re-priced as Hexgen-Flow's code prices steps.
* :mod:`.metrics`: per-query latency, SLO attainment vs SLO scale, deadlines, throughput.

The code compared against is ``Relaxed-System-Lab/Hexgen-Flow@396a3ba``.
"""

from __future__ import annotations

from typing import Any

from llmsched_gym.policies.hexgen.dispatch import (
    ALPHA_GRID,
    DEFAULT_ALPHA,
    DEFAULT_KAPPA,
    HexGenCodeRouter,
    HexGenWBRouter,
    eq4_score,
)
from llmsched_gym.policies.hexgen.metrics import (
    drain_bound_s,
    hexgen_base_slo,
    hexgen_metrics,
    slo_attainment,
)
from llmsched_gym.policies.hexgen.pricing import CODE_DECODE_S, HexGenCodeCost, gpu_key, hexgen_cost
from llmsched_gym.policies.hexgen.tcomp import StagePredictor, TCompModel, stage_abbr
from llmsched_gym.policies.hexgen.tuning import HexGenTunedRouter
from llmsched_gym.policies.hexgen.urgency import (
    HexGenPQPolicy,
    TemplateState,
    eq5_budget,
    eq6_urgency,
)

__all__ = [
    "ALPHA_GRID",
    "CODE_DECODE_S",
    "DEFAULT_ALPHA",
    "DEFAULT_KAPPA",
    "HexGenCodeCost",
    "HexGenCodeRouter",
    "HexGenPQPolicy",
    "HexGenTunedRouter",
    "HexGenWBRouter",
    "StagePredictor",
    "TCompModel",
    "TemplateState",
    "drain_bound_s",
    "eq4_score",
    "eq5_budget",
    "eq6_urgency",
    "gpu_key",
    "hexgen_base_slo",
    "hexgen_cost",
    "hexgen_metrics",
    "register",
    "register_routers",
    "slo_attainment",
    "stage_abbr",
]


def _with_alpha(cls: type, alpha: float) -> Any:
    def factory(**kw: Any) -> Any:
        kw.setdefault("alpha", alpha)
        return cls(**kw)

    return factory


def register(register_policy: Any) -> None:
    """Register ``hexgen-pq`` (paper) and its variants.

    ``hexgen-pq-hol`` and ``hexgen-pq-code`` (the code's choices), ``hexgen-pq-serial`` and
    ``hexgen-fcfs-serial`` (Hexgen-Flow's engine step), ``hexgen-pq-admit1`` (one admission per
    vLLM step).

    Args:
        register_policy: ``llmsched_gym.policies.registry.register_policy``.
    """
    register_policy("hexgen-pq", HexGenPQPolicy, "HexGen-Text2SQL urgency queue (Eq. 5-7)")
    register_policy(
        "hexgen-pq-hol",
        lambda **kw: HexGenPQPolicy(head_of_line=True, **kw),
        "HexGen-Text2SQL urgency queue, head-of-line blocking (Hexgen-Flow's engine)",
    )
    register_policy(
        "hexgen-pq-serial",
        lambda **kw: HexGenPQPolicy(serial_prefill=True, head_of_line=True, **kw),
        "HexGen-Text2SQL urgency queue on Hexgen-Flow's engine step (one prefill alone per "
        "step, else one decode step; head-of-line)",
    )
    register_policy(
        "hexgen-fcfs-serial",
        lambda **kw: HexGenPQPolicy(fcfs=True, serial_prefill=True, **kw),
        "FCFS on Hexgen-Flow's engine step (its RR+FCFS / WB+FCFS baselines)",
    )
    register_policy(
        "hexgen-pq-admit1",
        lambda **kw: HexGenPQPolicy(max_admit=1, **kw),
        "HexGen-Text2SQL urgency queue, one admission per vLLM step (batched with decodes)",
    )
    register_policy(
        "hexgen-pq-code",
        lambda **kw: HexGenPQPolicy(head_of_line=True, template="shared", **kw),
        "HexGen-Text2SQL urgency queue as coded (shared template list, head-of-line)",
    )


def register_routers(register_router: Any) -> None:
    """Register the HexGen-Text2SQL routers with a router registry.

    Names: ``hexgen-wb`` (Eq. 4, ``alpha`` = ``DEFAULT_ALPHA``), ``hexgen-wb:alpha=<a>`` for
    ``a`` in ``ALPHA_GRID``, ``hexgen-wb-code`` (Hexgen-Flow's score, ``DEFAULT_ALPHA``) and
    ``hexgen-wb-tuned`` (Eq. 4 with §4.3's online tuning from alpha 0).

    Args:
        register_router: ``llmsched_gym.cluster.routers.register_router`` (the cluster passes
            it in: see ``llmsched_gym.policies.registry.register_reference_routers``).
    """
    register_router(
        "hexgen-wb",
        _with_alpha(HexGenWBRouter, DEFAULT_ALPHA),
        f"HexGen-Text2SQL Eq. 4 workload-balanced dispatch (alpha {DEFAULT_ALPHA})",
    )
    for a in ALPHA_GRID:
        register_router(
            f"hexgen-wb:alpha={a:.1f}",
            _with_alpha(HexGenWBRouter, a),
            f"HexGen-Text2SQL Eq. 4 dispatch at alpha {a:.1f}",
        )
    register_router(
        "hexgen-wb-code",
        _with_alpha(HexGenCodeRouter, DEFAULT_ALPHA),
        f"HexGen-Flow's cumulative-work dispatch score (kappa, no beta; alpha {DEFAULT_ALPHA})",
    )
    register_router(
        "hexgen-wb-tuned",
        HexGenTunedRouter,
        "HexGen-Text2SQL Eq. 4 dispatch, alpha tuned online by replay (paper §4.3)",
    )
