"""Built-in local schedulers by name (``--scheduler``)."""

from __future__ import annotations

import difflib
import importlib
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


def _register_infermax(register: Callable[..., None]) -> None:
    """InferMax (Kim et al.): Table 1 rows (+ "-ef"), ranked schedulers, evict-short."""
    from llmsched_gym.policies.infermax import PRESET_HELP, PRESETS, make_infermax_policy

    for preset, cfg in PRESETS.items():
        base = preset.removesuffix("-ef")
        register(
            f"infermax:{preset}",
            lambda _p=preset, **kw: make_infermax_policy(_p, **kw),
            PRESET_HELP[base]
            + (" + eviction-free I+O-1 reservation" if preset.endswith("-ef") else "")
            + (" (oracle)" if cfg.oracle and "(oracle)" not in PRESET_HELP[base] else ""),
        )


def _register_module(module: str) -> Callable[[Callable[..., None]], None]:
    def register(register_fn: Callable[..., None]) -> None:
        importlib.import_module(module).register(register_fn)

    return register


_REFERENCE_AGENTS: tuple[Callable[[Callable[..., None]], None], ...] = (
    _register_infermax,
    _register_module("llmsched_gym.policies.proserve"),  # SlideBatching, ablations, baselines
    _register_module("llmsched_gym.policies.relserve"),  # DPU + ABA, PP/DP, vLLM-SP
    _register_module("llmsched_gym.policies.hexgen"),  # urgency queue and its ablations
)
"""The reference agents' schedulers, registered on first need (a plain run never imports them)."""
_reference_loaded = False


def _load_reference_agents() -> None:
    global _reference_loaded
    if not _reference_loaded:
        _reference_loaded = True
        for register in _REFERENCE_AGENTS:
            register(register_policy)


def list_policies(include_reference: bool = True) -> dict[str, str]:
    """Registered scheduler names with one-line descriptions.

    ``include_reference=False`` leaves out the reference agents not loaded yet (cheap).
    """
    if include_reference:
        _load_reference_agents()
    return {name: help for name, (_, help) in _REGISTRY.items()}


def make_policy(name: str, **kwargs) -> SchedulingPolicy:
    """Build a registered scheduler; unknown names list the choices."""
    if name not in _REGISTRY:
        _load_reference_agents()
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, _REGISTRY, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(f"unknown scheduler {name!r}{hint}; available: {', '.join(_REGISTRY)}")
    return _REGISTRY[name][0](**kwargs)
