"""Environment ids: ``llmsched/<Task>-<Scenario>-v0`` for the shipped scenarios.

``<Scenario>`` is the scenario name in CamelCase without its version
(``chat-azure-conv-v0`` -> ``ChatAzureConv``); the id's version is the environment's, and a
change of dynamics, reward, spaces, defaults or the scenario's own version bumps it.
"""

from __future__ import annotations

import gymnasium as gym

from llmsched_gym.tasks import TASKS as _SPECS

TASKS = {name: t.entry_point for name, t in _SPECS.items() if not t.cluster}
"""Task name -> entry point, for tasks in one engine (``llmsched_gym.tasks``)."""

SCENARIOS = (
    "chat-azure-conv-v0",
    "chat-sharegpt-overload-v0",
    "relquery-rotten-v0",
    "priority-sharegpt-v0",
    "priority-azure-conv-v0",
    "infermax-offline-v0",
)
"""Shipped single-engine scenarios with registered environments (every task but Route)."""

CLUSTER_TASKS = {name: t.entry_point for name, t in _SPECS.items() if t.cluster}
"""Task name -> entry point, for tasks over a scenario's cluster (``llmsched_gym.tasks``)."""

ROUTER_KNOB = "llmsched_gym.envs.router_knob_v0:RouterKnobEnv"
"""Entry point of the Knob task on a cluster (a router parameter per window)."""

CLUSTER_SCENARIOS = (
    "text2sql-hetero1-v0",
    "text2sql-hetero2-v0",
    "chat-azure-conv-4x-v0",
)
"""Shipped cluster scenarios with registered environments."""


PAPER_PAIRS = (
    # RelServe: the Adaptive Batch Arranger's decision (prefill-only or decode-only steps).
    ("BatchType", "relserve-qwen-amazon-v0"),
    ("BatchType", "relserve-llama-amazon-v0"),
    ("BatchType", "relserve-llama-pdmx-v0"),
    # ProServe: local priorities on the single-node settings, routing on the multi-node ones.
    ("Priority", "proserve-sharegpt-qwen2-7b-v0"),
    ("Priority", "proserve-azure-qwen2-7b-v0"),
    ("Priority", "proserve-sharegpt-qwen3-32b-v0"),
    ("Route", "proserve-colocated-azure-v0"),
    ("Route", "proserve-pd-sharegpt-v0"),
    # HexGen-Text2SQL: dispatch over the heterogeneous clusters, each trace.
    *(("Route", f"hexgen-hetero{h}-trace{t}-v0") for h in (1, 2) for t in (1, 2, 3)),
    # HexGen-Text2SQL: alpha of the workload-balanced dispatcher per window (§4.3's knob).
    *(("Knob", f"hexgen-hetero{h}-trace{t}-v0") for h in (1, 2) for t in (1, 2, 3)),
)
"""(task, scenario) ids on the reference papers' scenarios: the decision each paper studies."""


def scenario_camel(name: str) -> str:
    """``chat-azure-conv-v0`` -> ``ChatAzureConv``."""
    base = name.rsplit("-v", 1)[0]
    return "".join(part[:1].upper() + part[1:] for part in base.split("-"))


def env_id(task: str, scenario: str) -> str:
    """The registered id of ``task`` on ``scenario``."""
    return f"llmsched/{task}-{scenario_camel(scenario)}-v0"


def _pairs() -> list[tuple[str, str, str]]:
    """(task, scenario, entry point) of every registered id."""
    out = [(t, s, e) for s in SCENARIOS for t, e in TASKS.items()]
    out += [(t, s, e) for s in CLUSTER_SCENARIOS for t, e in CLUSTER_TASKS.items()]
    # Every Knob pair of PAPER_PAIRS is on a cluster: its knob is the router's.
    out += [
        (t, s, ROUTER_KNOB if t == "Knob" else TASKS.get(t) or CLUSTER_TASKS[t])
        for t, s in PAPER_PAIRS
    ]
    return out


def registered_ids() -> list[str]:
    """Every id this package registers."""
    return [env_id(t, s) for t, s, _ in _pairs()]


def register_envs() -> None:
    """Register every id (idempotent: ids already present are left alone).

    Each id also has a ``vector_entry_point``, so ``gym.make_vec(id, num_envs=N)`` returns the
    native ``llmsched_gym.envs.vector.LLMSchedVectorEnv``.
    """
    from llmsched_gym.envs.vector import vector_entry_point

    for task, scenario, entry in _pairs():
        eid = env_id(task, scenario)
        if eid in gym.registry:
            continue
        gym.register(
            id=eid,
            entry_point=entry,
            vector_entry_point=vector_entry_point(entry),
            kwargs={"scenario": scenario},
            disable_env_checker=False,
        )
