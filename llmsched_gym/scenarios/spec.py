"""Scenario spec: schema, validation with errors that name the field, loading by name.

A scenario file (``envs/<name>-v<N>.yaml``)::

    name: chat-azure-conv-v0          # must equal the file name without .yaml
    description: One line a user reads in `llmsched-gym workloads`.
    paper: null                       # relserve | proserve | hexgen-text2sql | infermax | null
    seed: 0
    workload:                         # kind + that kind's parameters (WORKLOAD_KINDS)
      kind: trace
      trace: azure-conv-2023
    engine: {max_num_batched_tokens: 8192}   # EngineConfig keys only (vLLM names)
    cost_model: vidur:llama-2-70b@a100-80gb/tp2
    scheduler: vllm-v1
    slo: {ttft_s: 2.0, tpot_s: 0.2}   # stamped on requests / jobs that carry none

Changing a scenario's behaviour means a new version (``-v1``); ``-v0`` files are frozen.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmsched_gym import _yaml
from llmsched_gym.config import SCENARIO_COST_MODEL, EngineConfig
from llmsched_gym.core.job import Job
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import ConfigError, LLMSchedError, show
from llmsched_gym.scenarios.workload_kinds import (
    REQUIRED,
    WORKLOAD_KINDS,
    Param,
    WorkloadKind,
    positive,
)

__all__ = [
    "WORKLOAD_KINDS",
    "Param",
    "Scenario",
    "WorkloadKind",
    "list_scenarios",
    "load_scenario",
    "scenario_path",
]

_NAME = re.compile(r"^[a-z0-9][a-z0-9.\-]*-v\d+$")
PAPERS = ("relserve", "proserve", "hexgen-text2sql", "infermax")
SLO_KEYS = ("ttft_s", "tpot_s", "e2e_s")


@dataclass(frozen=True)
class Scenario:
    """A validated scenario: everything one run needs, as data."""

    name: str
    description: str
    workload: Mapping[str, Any]
    engine: Mapping[str, Any] = field(default_factory=dict)
    cost_model: str = SCENARIO_COST_MODEL
    scheduler: str = "vllm-v1"
    seed: int = 0
    slo: Mapping[str, float] = field(default_factory=dict)
    paper: str | None = None
    cluster: Mapping[str, Any] | None = None
    """Instances, router and PD settings (``llmsched_gym.cluster.spec``); None: one engine."""
    source: str = "<dict>"

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> Scenario:
        """Validate a parsed scenario mapping; errors name the file, field and value."""
        where = f"scenario {source}"
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
        allowed = {f.name for f in dataclasses.fields(cls)} - {"source"}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {unknown}; allowed: {sorted(allowed)}")
        for key in ("name", "description", "workload"):
            if key not in data:
                raise ConfigError(f"{where}: missing required field {key!r}")
        name = data["name"]
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(
                f"{where}: name must look like 'chat-azure-conv-v0' (lower case, ending in "
                f"-v<N>), got {name!r}"
            )
        desc = data["description"]
        if not isinstance(desc, str) or not desc.strip():
            raise ConfigError(f"{where}: description must be a non-empty string, got {show(desc)}")
        paper = data.get("paper")
        if paper is not None and paper not in PAPERS:
            raise ConfigError(
                f"{where}: paper must be one of {list(PAPERS)} or null, got {show(paper)}"
            )
        seed = data.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"{where}: seed must be an integer >= 0, got {show(seed)}")
        for key in ("cost_model", "scheduler"):
            if key in data and (not isinstance(data[key], str) or not data[key]):
                raise ConfigError(
                    f"{where}: {key} must be a non-empty string, got {show(data[key])}"
                )
        engine = data.get("engine") or {}
        if not isinstance(engine, dict):
            raise ConfigError(f"{where}: engine must be a mapping, got {show(engine)}")
        EngineConfig.from_dict(dict(engine), source=f"{where}: engine").verify_vllm_limits(
            f"{where}: engine"
        )
        slo = data.get("slo") or {}
        if not isinstance(slo, dict):
            raise ConfigError(f"{where}: slo must be a mapping, got {show(slo)}")
        for key, value in slo.items():
            if key not in SLO_KEYS:
                raise ConfigError(f"{where}: unknown slo field {key!r}; allowed: {list(SLO_KEYS)}")
            positive((float, int)).validate(f"{where}: slo.{key}", value)
        workload = validate_workload(data["workload"], f"{where}: workload")
        cluster = data.get("cluster")
        if cluster is not None:
            from llmsched_gym.cluster.spec import validate_cluster

            cluster = validate_cluster(cluster, f"{where}: cluster")
        return cls(
            name=name,
            description=desc.strip(),
            workload=workload,
            engine=dict(engine),
            cost_model=data.get("cost_model", cls.cost_model),
            scheduler=data.get("scheduler", cls.scheduler),
            seed=seed,
            slo={k: float(v) for k, v in slo.items()},
            paper=paper,
            cluster=cluster,
            source=source,
        )

    def to_dict(self) -> dict[str, Any]:
        """The scenario as a plain mapping (the YAML layout)."""
        out = dataclasses.asdict(self)
        del out["source"]
        out["workload"] = dict(self.workload)
        return out

    def with_overrides(self, overrides: Mapping[str, Any]) -> Scenario:
        """A re-validated copy with fields replaced.

        Dotted keys reach inside: ``workload.rate_per_s``, ``engine.max_num_seqs``, ``slo.ttft_s``.
        """
        data = self.to_dict()
        data["workload"] = dict(data["workload"])
        for key, value in overrides.items():
            head, _, tail = key.partition(".")
            if tail:
                if head not in ("workload", "engine", "slo", "cluster"):
                    raise ConfigError(
                        f"scenario {self.name}: cannot override {key!r}; dotted overrides reach "
                        "into workload, engine, slo or cluster"
                    )
                data[head] = {**(data.get(head) or {}), tail: value}
            else:
                data[key] = value
        return Scenario.from_dict(data, source=f"{self.source} (overridden)")

    def engine_config(self, cost_model: Any = None) -> EngineConfig:
        """The engine settings, ``num_gpu_blocks`` and ``max_model_len`` derived when unset.

        Both come from the cost profile (``resolve_config``), as vLLM derives them.
        """
        from llmsched_gym.simulation import resolve_config

        if cost_model is None:
            from llmsched_gym.cost.registry import load_cost_model

            cost_model = load_cost_model(self.cost_model)
        return resolve_config(dict(self.engine), cost_model)

    def build_workload(
        self, seed: int | None = None, cost_model: Any = None
    ) -> list[RequestSpec | Job]:
        """Requests and jobs of the workload, deterministic under ``seed`` (default: the spec's).

        ``cost_model`` (default: the scenario's) sizes SLOs given as multiples of unloaded
        latency. The scenario's SLOs are stamped on requests (TTFT, TPOT) and jobs (end-to-end)
        that carry none of their own.
        """
        if cost_model is None:
            from llmsched_gym.cost.registry import load_cost_model

            cost_model = load_cost_model(self.cost_model)
        kind = WORKLOAD_KINDS[self.workload["kind"]]
        params = {k: v for k, v in self.workload.items() if k != "kind"}
        try:
            items = kind.build(params, self.seed if seed is None else seed, cost_model)
        except LLMSchedError:
            raise
        except ValueError as exc:  # a generator's own check of a parameter value
            raise ConfigError(f"scenario {self.name}: workload: {exc}") from None
        return stamp_slos(items, self.slo)

    def simulate(
        self,
        scheduler: Any = None,
        *,
        seed: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run the scenario on one engine (``llmsched_gym.simulation.simulate``), or on its cluster.

        ``scheduler`` (a name or policy) replaces the spec's; other keyword arguments go to
        ``simulate`` (``fast_forward``, ``schedule_log``, ``record_steps``, ``progress``,
        ``timeline``).
        """
        from llmsched_gym.cost.registry import load_cost_model

        model = load_cost_model(self.cost_model)
        items = cached_workload(self, self.seed if seed is None else seed, model)
        if self.cluster is not None:
            from llmsched_gym.cluster import simulate_cluster

            return simulate_cluster(self, scheduler, seed=seed, items=items, **kwargs)
        from llmsched_gym.simulation import simulate

        return simulate(
            items,
            self.engine_config(model),
            self.scheduler if scheduler is None else scheduler,
            model,
            **kwargs,
        )


_WORKLOAD_CACHE: OrderedDict[tuple, list] = OrderedDict()
_WORKLOAD_CACHE_SIZE = 16
"""Most workloads kept (least recently used go first)."""
_WORKLOAD_CACHE_ITEMS = 100_000
"""Most requests and jobs kept over all cached workloads (the newest is always kept): resets
with a fresh seed each episode would otherwise hold 16 whole workloads (issue 29)."""


def cached_workload(
    scenario: Scenario, seed: int, cost_model: Any, max_requests: int | None = None
) -> list:
    """``scenario.build_workload(seed)`` (its first ``max_requests``), built once per process.

    ``cost_model`` must be the scenario's own (``load_cost_model(scenario.cost_model)``): it
    sizes SLOs, and the key names only the scenario. Shared by the environments' resets and
    ``Scenario.simulate``, so a reference run on an episode's workload (reward shaping) reuses
    the episode's build. Specs and jobs are immutable, so sharing them changes no run.
    """
    key = (repr(scenario.to_dict()), seed, max_requests)
    items = _WORKLOAD_CACHE.get(key)
    if items is None:
        items = scenario.build_workload(seed, cost_model=cost_model)
        if max_requests is not None:
            items = sorted(items, key=lambda x: float(x.arrival_time))[:max_requests]
        _WORKLOAD_CACHE[key] = items
        held = sum(map(len, _WORKLOAD_CACHE.values()))
        while len(_WORKLOAD_CACHE) > 1 and (
            len(_WORKLOAD_CACHE) > _WORKLOAD_CACHE_SIZE or held > _WORKLOAD_CACHE_ITEMS
        ):
            held -= len(_WORKLOAD_CACHE.popitem(last=False)[1])
    else:
        _WORKLOAD_CACHE.move_to_end(key)
    return items


def stamp_slos(items: Sequence[RequestSpec | Job], slo: Mapping[str, float]) -> list:
    """Give requests (also inside jobs) and jobs the scenario's SLOs where they have none."""
    ttft, tpot, e2e = slo.get("ttft_s"), slo.get("tpot_s"), slo.get("e2e_s")
    if ttft is None and tpot is None and e2e is None:
        return list(items)

    def fix(spec: RequestSpec) -> RequestSpec:
        changes = {}
        if ttft is not None and spec.slo_ttft_s is None:
            changes["slo_ttft_s"] = ttft
        if tpot is not None and spec.slo_tpot_s is None:
            changes["slo_tpot_s"] = tpot
        return dataclasses.replace(spec, **changes) if changes else spec

    out: list[RequestSpec | Job] = []
    for item in items:
        if isinstance(item, Job):
            stages = tuple(
                dataclasses.replace(s, requests=tuple(fix(r) for r in s.requests))
                for s in item.stages
            )
            slo_e2e = item.slo_e2e_s if item.slo_e2e_s is not None else e2e
            out.append(dataclasses.replace(item, stages=stages, slo_e2e_s=slo_e2e))
        else:
            out.append(fix(item))
    return out


def validate_workload(data: Any, where: str) -> dict[str, Any]:
    """Check a workload mapping against its kind's parameters; fill defaults."""
    _ensure_kinds()
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with a 'kind', got {show(data)}")
    kind_name = data.get("kind")
    if kind_name not in WORKLOAD_KINDS:
        raise ConfigError(
            f"{where}.kind must be one of {sorted(WORKLOAD_KINDS)}, got {kind_name!r}"
        )
    kind = WORKLOAD_KINDS[kind_name]
    unknown = sorted(set(data) - set(kind.params) - {"kind"})
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {unknown} for kind {kind_name!r}; allowed: "
            f"{sorted(kind.params)}"
        )
    out: dict[str, Any] = {"kind": kind_name}
    for key, param in kind.params.items():
        if key in data:
            out[key] = param.validate(f"{where}.{key}", data[key])
        elif param.default is REQUIRED:
            raise ConfigError(f"{where}: kind {kind_name!r} needs field {key!r} ({param.doc})")
        else:
            out[key] = param.default
    problem = kind.check(out) if kind.check is not None else None
    if problem:
        raise ConfigError(f"{where}: kind {kind_name!r} {problem}")
    return out


def _ensure_kinds() -> None:
    if not WORKLOAD_KINDS:
        import llmsched_gym.scenarios.kinds  # noqa: F401 - registers the kinds


def _shipped_dir() -> Any:
    return importlib.resources.files("llmsched_gym.scenarios.specs")


def list_scenarios() -> dict[str, str]:
    """Shipped scenario names and their one-line descriptions, sorted by name."""
    out = {}
    for entry in sorted(_shipped_dir().iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            scenario = _read(entry.read_text(), entry.name)
            out[scenario.name] = scenario.description
    return out


def scenario_path(name: str) -> Any:
    """The shipped file of scenario ``name`` (a Traversable)."""
    entry = _shipped_dir() / f"{name}.yaml"
    if not entry.is_file():
        import difflib

        names = list(list_scenarios())
        close = difflib.get_close_matches(str(name), names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        known = ", ".join(names) or "none"
        raise ConfigError(f"unknown scenario {name!r}{hint}; shipped scenarios: {known}")
    return entry


def load_scenario(name_or_path: str | Path, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """A shipped scenario by name, or a scenario YAML file by path, validated."""
    text_path = Path(name_or_path)
    if str(name_or_path).endswith((".yaml", ".yml")) or text_path.is_file():
        try:
            text = text_path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read scenario {text_path}: {exc.strerror}") from None
        scenario = _read(text, str(text_path))
        stem = text_path.name.rsplit(".", 1)[0]
        if scenario.name != stem:
            line = next(
                (i for i, row in enumerate(text.splitlines(), 1) if row.startswith("name:")), 0
            )
            raise ConfigError(
                f"scenario {text_path}:{line}: key 'name' is {scenario.name!r} but the file is "
                f"named {text_path.name}; rename the file to {scenario.name}.yaml or set "
                f"name: {stem}"
            )
    else:
        entry = scenario_path(str(name_or_path))
        scenario = _read(entry.read_text(), entry.name)
        if scenario.name != str(name_or_path):
            raise ConfigError(
                f"scenario file {entry.name} names itself {scenario.name!r}; they must match"
            )
    return scenario.with_overrides(overrides) if overrides else scenario


def _read(text: str, source: str) -> Scenario:
    import yaml

    try:
        data = _yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"scenario {source} is not valid YAML: {exc}") from None
    return Scenario.from_dict(data, source=source)
