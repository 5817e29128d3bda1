"""Scenario specs: declarative, versioned YAML (workload + engine + cost profile + SLOs + seed).

Shipped specs live in the repository's top-level ``envs/`` folder (installed as
``llmsched_gym.scenarios.specs``); any YAML path works too.

>>> from llmsched_gym.scenarios import load_scenario, list_scenarios
>>> sc = load_scenario("chat-azure-conv-v0")
>>> sc.engine_config().max_num_batched_tokens  # doctest: +SKIP
"""

from llmsched_gym.scenarios.spec import (
    WORKLOAD_KINDS,
    Scenario,
    list_scenarios,
    load_scenario,
    scenario_path,
)

__all__ = ["WORKLOAD_KINDS", "Scenario", "list_scenarios", "load_scenario", "scenario_path"]
