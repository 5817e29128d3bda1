"""Many instances under one clock: routers, PD disaggregation, job orchestration (issue 5).

Each instance is an :class:`~llmsched_gym.core.engine.Engine` (own config, cost model, KV cache,
local scheduler); a router (``llmsched_gym.cluster.routers``) places every arriving request, job
stages are released globally as their predecessors finish on any instance, and ``prefill`` /
``decode`` roles split requests with a modelled KV transfer (``llmsched_gym.cluster.pd``).

>>> from llmsched_gym.scenarios import load_scenario
>>> result = load_scenario("text2sql-hetero1-v0").simulate()  # doctest: +SKIP
>>> result.instances[["name", "gpu", "num_requests", "utilization"]]  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from llmsched_gym.cluster.cluster import (
    ROLES,
    Cluster,
    Instance,
    InstanceSpec,
    RoutingDecision,
    run_cluster,
)
from llmsched_gym.cluster.pd import PDConfig
from llmsched_gym.cluster.records import ClusterResult
from llmsched_gym.cluster.routers import (
    InstanceView,
    Router,
    estimate_backlog_s,
    list_routers,
    make_router,
    register_router,
)
from llmsched_gym.errors import ConfigError

__all__ = [
    "ROLES",
    "Cluster",
    "ClusterResult",
    "Instance",
    "InstanceSpec",
    "InstanceView",
    "PDConfig",
    "Router",
    "RoutingDecision",
    "estimate_backlog_s",
    "list_routers",
    "make_router",
    "register_router",
    "run_cluster",
    "simulate_cluster",
]


def simulate_cluster(
    scenario: Any,
    scheduler: Any = None,
    *,
    seed: int | None = None,
    fast_forward: bool = True,
    progress: bool = False,
    record_steps: bool = False,
    router: Any = None,
    engine: Mapping[str, Any] | None = None,
    schedule_log: Any = None,
    items: list[Any] | None = None,
    timeline: bool = False,
    **_: Any,
) -> ClusterResult:
    """Run a scenario with a ``cluster`` section (what ``Scenario.simulate`` calls).

    Args:
        scenario: A validated :class:`~llmsched_gym.scenarios.spec.Scenario` with ``cluster``.
        scheduler: A scheduler name or policy for every instance (default: the spec's).
        seed: Seed of the workload and of seeded routers (default: the scenario's).
        fast_forward: Let engines advance pure-decode stretches in closed form.
        progress: Show a progress bar.
        record_steps: Keep per-step records of every instance (``result.steps``).
        router: A router name or object replacing the spec's.
        engine: Engine settings applied on top of every instance's (e.g. CLI flags).
        schedule_log: Not supported on clusters (must be None).
        items: The workload as ``scenario.build_workload(seed)`` builds it, when the caller has
            it already (``Scenario.simulate`` passes its cached build).
        timeline: Record the schedule timeline (``result.timeline``, one trace process per
            instance).

    Returns:
        The run's :class:`ClusterResult`.
    """
    from llmsched_gym.cluster.spec import instance_specs
    from llmsched_gym.cost.registry import load_cost_model

    if scenario.cluster is None:
        raise ConfigError(f"scenario {scenario.name} has no cluster section; use simulate()")
    if schedule_log is not None:
        raise ConfigError("schedule_log is per engine; it is not supported on a cluster run")
    run_seed = scenario.seed if seed is None else seed
    model = load_cost_model(scenario.cost_model)
    if items is None:
        items = scenario.build_workload(run_seed, cost_model=model)
    cluster = scenario.cluster
    instances = instance_specs(
        cluster,
        engine=scenario.engine,
        cost_model=scenario.cost_model,
        scheduler=scenario.scheduler,
        scheduler_override=scheduler,
    )
    if engine:
        instances = [dataclasses.replace(x, engine={**x.engine, **engine}) for x in instances]
    return run_cluster(
        items,
        instances,
        cluster["router"] if router is None else router,
        pd=cluster.get("pd"),
        seed=run_seed,
        fast_forward=fast_forward,
        record_steps=record_steps,
        progress=progress,
        timeline=timeline,
    )
