"""Built-in local schedulers by name (``--scheduler``)."""

from __future__ import annotations

import difflib
from collections.abc import Callable

from llmsched_gym.core.engine import SchedulingPolicy
from llmsched_gym.errors import ConfigError
from llmsched_gym.policies.baselines import (
    STATIC_KEYS,
    SarathiPolicy,
    StaticPriorityPolicy,
    VllmV0Policy,
)
from llmsched_gym.policies.vllm_v1 import VllmV1Policy

_REGISTRY: dict[str, tuple[Callable[..., SchedulingPolicy], str]] = {}


def register_policy(name: str, factory: Callable[..., SchedulingPolicy], help: str) -> None:
    """Register a scheduler under ``name``; duplicate names are errors."""
    if name in _REGISTRY:
        raise ConfigError(f"a scheduler named {name!r} is already registered")
    _REGISTRY[name] = (factory, help)


register_policy("vllm-v1", VllmV1Policy, "vLLM 0.32.0's V1 scheduler, exact (default)")
register_policy(
    "vllm-v1-0.33",
    lambda **kw: VllmV1Policy(preemption_rule="0.33", **kw),
    "vLLM V1 with vLLM 0.33's priority-preemption rule (continue after self-preemption)",
)
register_policy("vllm-v0", VllmV0Policy, "prefill-first, no chunking, no hybrid batches")
register_policy("sarathi", SarathiPolicy, "decode-first, chunked prefill, hybrid batches")
for _key in STATIC_KEYS:
    register_policy(
        f"static-priority:{_key}",
        lambda _k=_key, **kw: StaticPriorityPolicy(key=_k, **kw),
        f"vLLM V1 under a priority queue ordered by {_key}"
        + (" (oracle)" if STATIC_KEYS[_key][1] else ""),
    )

# InferMax (Kim et al.) unified scheduler presets: Table 1 rows (+ "-ef"), ranked, evict-short.
from llmsched_gym.policies.infermax import PRESET_HELP as _IM_HELP  # noqa: E402
from llmsched_gym.policies.infermax import PRESETS as _IM_PRESETS  # noqa: E402
from llmsched_gym.policies.infermax import make_infermax_policy  # noqa: E402

for _preset, _im_cfg in _IM_PRESETS.items():
    _base = _preset.removesuffix("-ef")
    register_policy(
        f"infermax:{_preset}",
        lambda _p=_preset, **kw: make_infermax_policy(_p, **kw),
        _IM_HELP[_base]
        + (" + eviction-free I+O-1 reservation" if _preset.endswith("-ef") else "")
        + (" (oracle)" if _im_cfg.oracle else ""),
    )

# ProServe (SlideBatching, its ablations) and the baselines it compares against.
from llmsched_gym.policies import proserve as _proserve  # noqa: E402

_proserve.register(register_policy)

# RelServe (its DPU + ABA, the PP and DP ablations) and vLLM-SP.
from llmsched_gym.policies import relserve as _relserve  # noqa: E402

_relserve.register(register_policy)

# HexGen-Text2SQL's local urgency queue and its ablations.
from llmsched_gym.policies import hexgen as _hexgen  # noqa: E402

_hexgen.register(register_policy)


def list_policies() -> dict[str, str]:
    """Registered scheduler names with one-line descriptions."""
    return {name: help for name, (_, help) in _REGISTRY.items()}


def make_policy(name: str, **kwargs) -> SchedulingPolicy:
    """Build a registered scheduler; unknown names list the choices."""
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, _REGISTRY, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(f"unknown scheduler {name!r}{hint}; available: {', '.join(_REGISTRY)}")
    return _REGISTRY[name][0](**kwargs)
