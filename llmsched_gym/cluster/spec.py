"""The ``cluster:`` section of a scenario: validation with errors that name the field.

::

    cluster:
      router: least-load:backlog        # a router name (llmsched_gym.cluster.routers)
      instances:                        # one entry per instance group
        - {name: a100, count: 2, cost_model: roofline:llama-3.1-70b@a100-80gb/tp8,
           engine: {max_num_batched_tokens: 16384}, scheduler: vllm-v1, role: both}
        - {name: a6000, count: 2, cost_model: roofline:llama-3.1-70b@a6000-48gb/tp8}
      pd: {link_gbps: 100}              # optional: PD settings (needs prefill and decode roles)

An entry's ``cost_model``, ``engine`` and ``scheduler`` default to the scenario's top-level ones
(its ``engine`` keys override the top-level engine's, key by key). A group of ``count`` > 1
instances is named ``<name>-0``, ``<name>-1``, ...; a single instance keeps its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmsched_gym.config import API_COST_MODEL, EngineConfig
from llmsched_gym.errors import ConfigError, CostModelError, show

__all__ = ["INSTANCE_KEYS", "PD_KEYS", "instance_specs", "validate_cluster"]

INSTANCE_KEYS = ("name", "count", "cost_model", "engine", "scheduler", "role")
PD_KEYS = ("link_gbps", "kv_bytes_per_token", "decode_router")
_CLUSTER_KEYS = ("router", "instances", "pd")


def validate_cluster(data: Any, where: str) -> dict[str, Any]:
    """Check a scenario's ``cluster`` mapping; returns it normalised (defaults filled).

    The result is itself a valid ``cluster`` mapping (scenarios round-trip through ``to_dict``).

    Raises:
        ConfigError: naming ``where``, the field and the bad value.
    """
    from llmsched_gym.cluster.cluster import ROLES
    from llmsched_gym.cluster.routers import make_router
    from llmsched_gym.cost.registry import load_cost_model
    from llmsched_gym.policies.registry import list_policies

    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping with 'instances', got {show(data)}")
    unknown = sorted(set(data) - set(_CLUSTER_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {unknown}; allowed: {list(_CLUSTER_KEYS)}")
    router = data.get("router", "round-robin")
    if not isinstance(router, str):
        raise ConfigError(f"{where}.router must be a router name, got {show(router)}")
    try:
        make_router(router)
    except ConfigError as err:
        raise ConfigError(f"{where}.router: {err}") from None
    groups = data.get("instances")
    if not isinstance(groups, list) or not groups:
        raise ConfigError(
            f"{where}.instances must be a non-empty list of instance groups, got {show(groups)} "
            "(a cluster needs at least one instance)"
        )
    out_groups: list[dict[str, Any]] = []
    names: set[str] = set()
    roles: list[str] = []
    for k, group in enumerate(groups):
        at = f"{where}.instances[{k}]"
        if not isinstance(group, Mapping):
            raise ConfigError(f"{at}: expected a mapping, got {show(group)}")
        unknown = sorted(set(group) - set(INSTANCE_KEYS))
        if unknown:
            raise ConfigError(f"{at}: unknown field(s) {unknown}; allowed: {list(INSTANCE_KEYS)}")
        name = group.get("name", f"i{k}")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{at}.name must be a non-empty string, got {name!r}")
        count = group.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigError(f"{at}.count must be an integer >= 1, got {show(count)}")
        role = group.get("role", "both")
        if role not in ROLES:
            raise ConfigError(f"{at}.role must be one of {list(ROLES)}, got {show(role)}")
        out: dict[str, Any] = {"name": name, "count": count, "role": role}
        if "cost_model" in group:
            spec = group["cost_model"]
            if not isinstance(spec, str) or not spec:
                raise ConfigError(f"{at}.cost_model must be a non-empty string, got {spec!r}")
            try:
                load_cost_model(spec)
            except CostModelError as err:
                raise ConfigError(f"{at}.cost_model {spec!r}: {err}") from None
            out["cost_model"] = spec
        if "engine" in group:
            engine = group["engine"]
            if not isinstance(engine, Mapping):
                raise ConfigError(f"{at}.engine must be a mapping, got {show(engine)}")
            EngineConfig.from_dict(dict(engine), source=f"{at}.engine")
            out["engine"] = dict(engine)
        if "scheduler" in group:
            scheduler = group["scheduler"]
            if scheduler not in list_policies():
                raise ConfigError(
                    f"{at}.scheduler must be one of {list(list_policies())}, got {show(scheduler)}"
                )
            out["scheduler"] = scheduler
        for n in _expand_names(name, count):
            if n in names:
                raise ConfigError(f"{at}.name: instance name {n!r} is used twice")
            names.add(n)
        roles.extend([role] * count)
        out_groups.append(out)
    result: dict[str, Any] = {"router": router, "instances": out_groups}
    disaggregated = {"prefill", "decode"} & set(roles)
    pd = data.get("pd")
    if pd is not None:
        if not isinstance(pd, Mapping):
            raise ConfigError(f"{where}.pd must be a mapping, got {pd!r}")
        unknown = sorted(set(pd) - set(PD_KEYS))
        if unknown:
            raise ConfigError(f"{where}.pd: unknown field(s) {unknown}; allowed: {list(PD_KEYS)}")
        if not disaggregated:
            raise ConfigError(
                f"{where}.pd is set but no instance has role 'prefill' or 'decode' (roles: "
                f"{sorted(set(roles))}); give instances PD roles or drop pd"
            )
        from llmsched_gym.cluster.pd import PDConfig

        try:
            PDConfig(**dict(pd))
        except ConfigError as err:
            raise ConfigError(f"{where}.{err}") from None
        if "decode_router" in pd:
            try:
                make_router(pd["decode_router"])
            except ConfigError as err:
                raise ConfigError(f"{where}.pd.decode_router: {err}") from None
        result["pd"] = dict(pd)
    if disaggregated and not {"prefill", "decode"} <= set(roles):
        missing = "decode" if "prefill" in roles else "prefill"
        raise ConfigError(
            f"{where}.instances: PD disaggregation needs a prefill and a decode instance, but no "
            f"instance has role {missing!r}"
        )
    return result


def _expand_names(name: str, count: int) -> list[str]:
    return [name] if count == 1 else [f"{name}-{i}" for i in range(count)]


def instance_specs(
    cluster: Mapping[str, Any],
    engine: Mapping[str, Any] | None = None,
    cost_model: str = API_COST_MODEL,
    scheduler: Any = "vllm-v1",
    scheduler_override: Any = None,
) -> list[Any]:
    """Expand a validated ``cluster`` mapping into one ``InstanceSpec`` per instance.

    Args:
        cluster: The validated section.
        engine: Top-level engine settings (each group's keys override them).
        cost_model: Top-level cost model (for groups without one).
        scheduler: Top-level scheduler name (for groups without one).
        scheduler_override: A scheduler name or policy replacing every instance's.
    """
    from llmsched_gym.cluster.cluster import InstanceSpec

    out = []
    for group in cluster["instances"]:
        settings = {**(engine or {}), **group.get("engine", {})}
        for name in _expand_names(group["name"], group["count"]):
            out.append(
                InstanceSpec(
                    name=name,
                    cost_model=group.get("cost_model", cost_model),
                    engine=settings,
                    scheduler=(
                        scheduler_override
                        if scheduler_override is not None
                        else group.get("scheduler", scheduler)
                    ),
                    role=group["role"],
                )
            )
    return out
