"""Local schedulers by name (``--scheduler``): the built-in ones and, on first need, the papers'.

The four papers' packages (``policies/infermax``, ``proserve``, ``relserve``, ``hexgen``) each
have a ``register(register_policy)``; ProServe and HexGen-Text2SQL also have a
``register_routers(register_router)`` that the cluster's router registry calls through
:func:`register_reference_routers`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from llmsched_gym.core.engine import SchedulingPolicy
from llmsched_gym.errors import ConfigError
from llmsched_gym.policies.heuristics import (
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


_reference_loaded = False


def _load_reference_agents() -> None:
    """Register the four papers' schedulers on first need (a plain run never imports them)."""
    global _reference_loaded
    if not _reference_loaded:
        _reference_loaded = True
        from llmsched_gym.policies import hexgen, infermax, proserve, relserve

        for paper in (infermax, proserve, relserve, hexgen):
            paper.register(register_policy)


def register_reference_routers(register_router: Callable[..., None]) -> None:
    """Have the papers' packages register their routers with the cluster's registry.

    The cluster calls this with its own ``register_router`` (``llmsched_gym.cluster.routers``),
    so the policies never import the cluster: ProServe's GoRouting and HexGen-Text2SQL's
    dispatchers (``hexgen-wb-tuned`` replays through the ``run_cluster`` the cluster binds).
    """
    from llmsched_gym.policies import hexgen, proserve

    proserve.register_routers(register_router)
    hexgen.register_routers(register_router)


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
