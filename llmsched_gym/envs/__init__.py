"""Gymnasium environments: views of the engine's decision points (one engine, no second simulator).

Tasks (``llmsched/<Task>-<Scenario>-v0``): ``Priority`` (scores over the top-K requests),
``BatchType`` (prefill-only vs decode-only step), ``Select`` (build the batch request by
request, masked), ``Preempt`` (victim on KV shortage, masked), ``Knob`` (token budget and
sequence cap per window) on one engine; ``Route`` (instance per arriving request, masked) on a
cluster scenario. ``PolicyAgent`` lets any built-in policy act in an environment and
``RouterAgent`` any router in Route; ``AgentPolicy`` turns a trained agent into a
``SchedulingPolicy`` and ``AgentRouter`` a trained Route agent into a router. See README.md here.

``backend="vllm"`` (Priority tasks) runs the same spaces on a live vLLM engine whose clock is the
engine's measured time (``PriorityEnv`` docstring, ``llmsched_gym.envs.live``).
"""

import importlib
from typing import Any

from llmsched_gym.envs.registration import env_id, register_envs, registered_ids

_LAZY = {
    "AgentPolicy": "adapters",
    "AgentRouter": "adapters",
    "PolicyAgent": "adapters",
    "RouterAgent": "adapters",
    "rollout": "adapters",
    "InvalidActionError": "base",
    "LLMSchedEnv": "base",
    "BatchTypeEnv": "batch_type_v0",
    "KnobEnv": "knob_v0",
    "PreemptEnv": "preempt_v0",
    "PriorityEnv": "priority_v0",
    "RecordTimeline": "timeline",
    "RouteEnv": "route_v0",
    "RouterKnobEnv": "router_knob_v0",
    "SelectEnv": "select_v0",
}

__all__ = [*_LAZY, "env_id", "register_envs", "registered_ids"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'llmsched_gym.envs' has no attribute {name!r}")
    return getattr(importlib.import_module(f"llmsched_gym.envs.{module}"), name)


# Registration needs only gymnasium and string entry points: the environment modules (and
# pandas) load when an environment is made.
register_envs()
