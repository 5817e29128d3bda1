"""InferMax (Kim et al., PVLDB): the unified scheduler, its named presets, and the CSP bound.

* :mod:`.scheduler`: :class:`InferMaxPolicy`, Alg. 1's ``GETNEXTBATCH`` with configurable
  grouping, hybrid batching, chunked prefill, eviction and the evict-short histogram gate.
* :mod:`.presets`: :class:`InferMaxConfig` and :data:`PRESETS` (Table 1, §4.6, §6), registered as
  ``infermax:<preset>``.
* :mod:`.csp`: §5's optimal schedule as a constraint satisfaction problem (CP-SAT), and a
  brute-force reference for tiny instances.
* :mod:`.warm_start`: the solver's hint from a heuristic run (on the simulation floor; import it
  from there).

The batch cost model of §3.2 is ``llmsched_gym.cost.infermax`` (``infermax:<model>``): the engine
prices steps with it, so it lives with the cost models, below the policies.
"""

from __future__ import annotations

from collections.abc import Callable

from llmsched_gym.policies.infermax.presets import PRESET_HELP, PRESETS, InferMaxConfig
from llmsched_gym.policies.infermax.scheduler import (
    InferMaxPolicy,
    OutputLengthHistogram,
    code_tpot,
    make_infermax_policy,
)

__all__ = [
    "PRESETS",
    "PRESET_HELP",
    "InferMaxConfig",
    "InferMaxPolicy",
    "OutputLengthHistogram",
    "code_tpot",
    "make_infermax_policy",
    "register",
]


def register(register_policy: Callable[..., None]) -> None:
    """Register ``infermax:<preset>``: Table 1 rows (+ "-ef"), ranked schedulers, evict-short."""
    for preset, cfg in PRESETS.items():
        base = preset.removesuffix("-ef")
        register_policy(
            f"infermax:{preset}",
            lambda _p=preset, **kw: make_infermax_policy(_p, **kw),
            PRESET_HELP[base]
            + (" + eviction-free I+O-1 reservation" if preset.endswith("-ef") else "")
            + (" (oracle)" if cfg.oracle and "(oracle)" not in PRESET_HELP[base] else ""),
        )
