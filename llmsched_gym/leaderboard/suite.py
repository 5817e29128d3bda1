"""The benchmark suite as data: tasks, scenarios at named load levels, train and test workloads.

A suite file (``llmsched_gym/leaderboard/suites/<version>.yaml``) declares, per task, the metric
it is scored on, the reference policy scores are relative to, the baselines submitted for it and
its scenarios. A scenario is a shipped scenario (``base``) at a load level: its arrival rate is
``load`` times the instance's (or cluster's) measured capacity for each workload *source* (a
trace, dataset or generator). A source lists the seeds and trace time windows of its **train**
split (what a learner may use) and of its **test** split (held out: other seeds, the other half
of a real trace, or another trace altogether, which then has no train split).

Capacity is measured, not guessed (``measure_capacity``): the source's calibration workload (seed
0, the train window where there is one) arrives all at once and is served by the reference
policy; capacity is units (requests, or jobs for job workloads) per second of that makespan. The
measured figures are committed in the suite file so evaluation never depends on re-measuring
them, and a test re-measures them.
"""

from __future__ import annotations

import functools
import importlib.resources
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmsched_gym.tasks import TASKS
from llmsched_gym.errors import ConfigError

__all__ = [
    "SUITE_VERSION",
    "Source",
    "Suite",
    "SuiteScenario",
    "Task",
    "Workload",
    "load_suite",
    "measure_capacity",
]

SUITE_VERSION = "llmsched-v2"
"""The suite this package evaluates by default; results name it, and submissions must match."""

SHIPPED_SUITES = ("llmsched-v1", "llmsched-v2")
"""Every suite version this package ships (older ones frozen, loadable, marked superseded)."""

TASK_ENVS = {name: t.entry_point for name, t in TASKS.items()}
"""Tasks and the environment class whose action space a learned agent of the task acts in
(``llmsched_gym.tasks``, the tasks' descriptors)."""

LOWER_IS_BETTER = {
    "e2e_s_mean": True,
    "e2e_s_p99": True,
    "ttft_s_mean": True,
    "ttft_s_p99": True,
    "tpot_s_mean": True,
    "job_latency_s_mean": True,
    "job_latency_s_p99": True,
    "slo_attainment": False,
    "goodput": False,
}
"""Metrics a task can be scored on (``summary`` keys) and whether lower values are better."""

LEVELS = ("under", "knee", "overload")
"""Named load levels: below capacity, at it, and 2-3x above it."""

_SPLITS = ("train", "test")


def _where(source: str, *path: Any) -> str:
    return source + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in path)


def _req(data: Mapping, key: str, where: str, types: tuple[type, ...]) -> Any:
    if key not in data:
        raise ConfigError(f"{where}: missing required field {key!r}")
    value = data[key]
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        names = " or ".join(t.__name__ for t in types)
        raise ConfigError(f"{where}.{key} must be {names}, got {value!r}")
    return value


def _only(data: Any, allowed: Sequence[str], where: str) -> Mapping:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {unknown}; allowed: {sorted(allowed)}")
    return data


@dataclass(frozen=True)
class Split:
    """The seeds (and trace window) of one split of a source."""

    seeds: tuple[int, ...]
    window_s: tuple[float, float] | None = None
    """``[start, end)`` in the trace's own time; None: the whole trace (or a generator)."""

    @classmethod
    def parse(cls, data: Any, where: str) -> Split:
        """Validate ``{seeds: [a, b, ...] | {from: a, to: b}, window_s: [start, end]}``."""
        data = _only(data, ("seeds", "window_s"), where)
        raw = data.get("seeds")
        if isinstance(raw, Mapping):
            _only(raw, ("from", "to"), f"{where}.seeds")
            lo = _req(raw, "from", f"{where}.seeds", (int,))
            hi = _req(raw, "to", f"{where}.seeds", (int,))
            if not 0 <= lo <= hi:
                raise ConfigError(f"{where}.seeds: need 0 <= from <= to, got {lo}..{hi}")
            seeds = tuple(range(lo, hi + 1))
        elif isinstance(raw, list) and raw:
            if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in raw):
                raise ConfigError(f"{where}.seeds must be integers >= 0, got {raw!r}")
            if len(set(raw)) != len(raw):
                raise ConfigError(f"{where}.seeds repeats a seed: {raw!r}")
            seeds = tuple(raw)
        else:
            raise ConfigError(
                f"{where}.seeds must be a non-empty list or {{from: A, to: B}}, got {raw!r}"
            )
        window = data.get("window_s")
        if window is not None:
            ok = (
                isinstance(window, list)
                and len(window) == 2
                and all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in window)
                and 0 <= window[0] < window[1]
            )
            if not ok:
                raise ConfigError(f"{where}.window_s must be [start, end] with 0 <= start < end")
            window = (float(window[0]), float(window[1]))
        return cls(seeds=seeds, window_s=window)


@dataclass(frozen=True)
class Source:
    """Where a scenario's workloads come from: scenario overrides plus train and test splits."""

    name: str
    overrides: Mapping[str, Any]
    test: Split
    train: Split | None = None
    """None for a test-only source (another trace: a held-out distribution)."""
    rate_key: str = "workload.rate_per_s"

    def calibration(self) -> tuple[int, tuple[float, float] | None]:
        """(seed, window) of the workload capacity is measured on: seed 0, train window first."""
        split = self.train or self.test
        return 0, split.window_s


@dataclass(frozen=True)
class SuiteScenario:
    """A base scenario at one load level, with its sources and measured capacities."""

    id: str
    base: str
    level: str
    load: float
    sources: tuple[Source, ...]
    capacity: Mapping[str, float]
    """Source name -> measured capacity in units (requests or jobs) per second."""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    quick: bool = False
    metric: str | None = None
    """The task's metric unless set (e.g. job latency on a job workload)."""


@dataclass(frozen=True)
class Task:
    """A decision, the scenarios it is evaluated on and how a policy is scored."""

    name: str
    decision: str
    metric: str
    tail_metric: str
    reference: str
    baselines: tuple[str, ...]
    scenarios: tuple[SuiteScenario, ...]
    interface: str = "scheduler"
    """``scheduler`` (a ``SchedulingPolicy`` per instance) or ``router`` (a cluster router)."""
    references: tuple[str, ...] = ()
    """Baselines that replace the engine's scheduler as a whole (ranked apart from agents)."""
    scored: bool = True
    """False: the task is listed and runnable but outside the scored set (``unscored_reason``)."""
    unscored_reason: str | None = None
    """The measurement that took the task out of the scored set."""

    def kind_of(self, spec: str) -> str:
        """``reference`` for a registered scheduler, else ``agent``: the harness's own rule.

        Agents act only through the task's action interface (rules, learned agents, routers,
        ``random``); references replace the scheduler (``proserve``, ``static-priority:*``).
        The same rule as the rows' (``PolicyRef.row_kind``), so a suite's declared
        ``references`` (checked against it when the suite loads) and its rows never disagree.
        """
        return "reference" if spec in _whole_schedulers(self.interface, (spec,)) else "agent"

    def metric_of(self, scenario: SuiteScenario) -> str:
        """The metric ``scenario`` is scored on."""
        return scenario.metric or self.metric


@dataclass(frozen=True)
class Workload:
    """One concrete workload: a scenario at a load level, a source, a split and a seed."""

    suite: str
    task: str
    scenario_id: str
    level: str
    base: str
    source: str
    split: str
    seed: int
    window_s: tuple[float, float] | None
    rate_per_s: float
    overrides: Mapping[str, Any]
    """Every override applied to ``base`` (scenario's, source's, window, rate), sorted."""
    metric: str

    @property
    def id(self) -> str:
        """``Task/scenario/source/split/seed``: unique within a suite."""
        return f"{self.task}/{self.scenario_id}/{self.source}/{self.split}/{self.seed}"

    def scenario(self) -> Any:
        """The validated ``Scenario`` this workload runs (the engine's or the cluster's)."""
        from llmsched_gym.scenarios.spec import load_scenario

        return load_scenario(self.base, dict(self.overrides))


@dataclass(frozen=True)
class Suite:
    """A versioned benchmark suite."""

    version: str
    description: str
    tasks: Mapping[str, Task]
    per_step_limit_s: float
    """A run fails when its policy takes more than this wall time per engine step on average."""
    workload_limit_s: float
    """A run fails when one workload takes longer than this (wall seconds)."""
    tie_threshold: float
    """A task whose best baseline beats the reference by less than this fraction is flagged."""
    source: str = "<dict>"
    memory_mb: int = 4096
    """Address space of a submission's sandboxed process, in MiB (RLIMIT_AS): room for torch and
    SB3 with a small model, not for a policy that hoards memory."""
    startup_s: float = 120.0
    """Wall seconds a submission's process has to import its code and build its agent."""
    per_action_s: float = 10.0
    """Wall seconds a submission's agent has to answer one observation."""
    superseded: str | None = None
    """Why and by what a frozen older version is superseded (None: current)."""

    def task(self, name: str) -> Task:
        """The task called ``name`` (case-insensitive), or an error listing the tasks."""
        for key, task in self.tasks.items():
            if key.lower() == str(name).lower():
                return task
        raise ConfigError(
            f"unknown task {name!r} in suite {self.version}; tasks: {list(self.tasks)}"
        )

    def workloads(
        self, split: str = "test", *, tasks: Sequence[str] | None = None, quick: bool = False
    ) -> list[Workload]:
        """Every workload of ``split`` (``test`` or ``train``; train lists the first seed only)."""
        if split not in _SPLITS:
            raise ConfigError(f"split must be one of {list(_SPLITS)}, got {split!r}")
        names = list(self.tasks) if tasks is None else [self.task(t).name for t in tasks]
        out = []
        for name in names:
            task = self.tasks[name]
            for sc in task.scenarios:
                if quick and not sc.quick:
                    continue
                for src in sc.sources:
                    sp = src.test if split == "test" else src.train
                    if sp is None:
                        continue
                    seeds = sp.seeds if split == "test" else sp.seeds[:1]
                    out.extend(self._workload(task, sc, src, split, s) for s in seeds)
        return out

    def train_workloads(self, task: str, scenario_id: str | None = None) -> Iterator[Workload]:
        """Train workloads a learner may use: every train seed of every source with a train split.

        Never yields a test workload: test-only sources have no train split, and a test seed or
        window never appears here (the suite loader rejects overlaps).
        """
        t = self.task(task)
        for sc in t.scenarios:
            if scenario_id is not None and sc.id != scenario_id:
                continue
            for src in sc.sources:
                if src.train is not None:
                    for s in src.train.seeds:
                        yield self._workload(t, sc, src, "train", s)

    def _workload(
        self, task: Task, sc: SuiteScenario, src: Source, split: str, seed: int
    ) -> Workload:
        sp = src.test if split == "test" else src.train
        rate = sc.load * sc.capacity[src.name]
        return Workload(
            suite=self.version,
            task=task.name,
            scenario_id=sc.id,
            level=sc.level,
            base=sc.base,
            source=src.name,
            split=split,
            seed=seed,
            window_s=sp.window_s,
            rate_per_s=rate,
            overrides=_workload_overrides(sc, src, sp.window_s, rate),
            metric=task.metric_of(sc),
        )


def _workload_overrides(
    sc: SuiteScenario, src: Source, window: tuple[float, float] | None, rate: float | None
) -> dict[str, Any]:
    out = {**sc.overrides, **src.overrides}
    if window is not None:
        out["workload.start_s"] = window[0]
        out["workload.duration_s"] = window[1] - window[0]
    if rate is not None:
        out[src.rate_key] = rate
    return dict(sorted(out.items()))


def measure_capacity(sc: SuiteScenario, src: Source, reference: str, interface: str) -> float:
    """Units per second the reference policy serves when the calibration workload arrives at once.

    "At once" is a rate of 10^6 units/s: every arrival falls within the first step or so.
    """
    seed, window = src.calibration()
    overrides = _workload_overrides(sc, src, window, 1e6)
    from llmsched_gym.scenarios.spec import load_scenario

    scenario = load_scenario(sc.base, overrides)
    if interface == "router":
        result = scenario.simulate(router=reference, seed=seed)
    else:
        result = scenario.simulate(reference, seed=seed)
    summary = result.summary
    units = summary.get("num_jobs") or summary["num_finished"]
    table = result.request_table
    makespan = float(max(table["finish_time_s"])) - float(min(table["arrival_time_s"]))
    return units / makespan


def _parse_sources(data: Any, where: str) -> dict[str, Source]:
    out = {}
    for name, raw in data.items():
        w = f"{where}.{name}"
        raw = _only(raw, ("overrides", "train", "test", "rate_key"), w)
        overrides = raw.get("overrides") or {}
        if not isinstance(overrides, Mapping):
            raise ConfigError(f"{w}.overrides must be a mapping, got {overrides!r}")
        test = Split.parse(_req(raw, "test", w, (dict,)), f"{w}.test")
        train = Split.parse(raw["train"], f"{w}.train") if raw.get("train") is not None else None
        if train is not None:
            _check_disjoint(train, test, w)
        rate_key = raw.get("rate_key", "workload.rate_per_s")
        out[name] = Source(str(name), dict(overrides), test, train, rate_key)
    return out


def _check_disjoint(train: Split, test: Split, where: str) -> None:
    """Train and test must not share a workload: disjoint windows, or disjoint seeds."""
    if train.window_s is not None and test.window_s is not None:
        (a0, a1), (b0, b1) = train.window_s, test.window_s
        if a0 < b1 and b0 < a1:
            raise ConfigError(
                f"{where}: train window {list(train.window_s)} overlaps test window "
                f"{list(test.window_s)}"
            )
        return
    shared = sorted(set(train.seeds) & set(test.seeds))
    if shared:
        raise ConfigError(f"{where}: seeds {shared[:5]} are in both train and test")


def _whole_schedulers(interface: str, specs: Sequence[str]) -> list[str]:
    """The ``specs`` a task of ``interface`` runs as whole schedulers: its registered ones.

    A router (Route) decides only the instance, so it is an agent of its task.
    """
    if interface == "router":
        return []
    from llmsched_gym.cluster.routers import registered_policies

    known, _ = registered_policies(False)
    return [s for s in specs if s in known]


def _parse_task(
    name: str, data: Any, sources: Mapping[str, Source], where: str, require_capacity: bool
) -> Task:
    data = _only(
        data,
        (
            "decision",
            "metric",
            "tail_metric",
            "reference",
            "baselines",
            "references",
            "interface",
            "scored",
            "unscored_reason",
            "scenarios",
        ),
        where,
    )
    if name not in TASK_ENVS:
        raise ConfigError(f"{where}: unknown task {name!r}; tasks: {list(TASK_ENVS)}")
    metric = _req(data, "metric", where, (str,))
    tail = data.get("tail_metric", "e2e_s_p99")
    for key, value in (("metric", metric), ("tail_metric", tail)):
        if value not in LOWER_IS_BETTER:
            raise ConfigError(
                f"{where}.{key}: unknown metric {value!r}; known: {list(LOWER_IS_BETTER)}"
            )
    interface = data.get("interface", TASKS[name].interface)
    if interface not in ("scheduler", "router"):
        raise ConfigError(f"{where}.interface must be scheduler or router, got {interface!r}")
    baselines = [str(b) for b in _req(data, "baselines", where, (list,))]
    references = data.get("references") or []
    if not isinstance(references, list):
        raise ConfigError(f"{where}.references must be a list of baselines, got {references!r}")
    references = [str(r) for r in references]
    extra = [r for r in references if r not in baselines]
    if extra:
        raise ConfigError(f"{where}.references {extra} are not among the task's baselines")
    derived = _whole_schedulers(interface, baselines)
    if "references" in data and sorted(references) != sorted(derived):
        raise ConfigError(
            f"{where}.references must list exactly the baselines the harness runs as whole "
            f"schedulers (the registered schedulers among them): {derived}, got {references}"
        )
    scored = data.get("scored", True)
    reason = data.get("unscored_reason")
    if not isinstance(scored, bool):
        raise ConfigError(f"{where}.scored must be true or false, got {scored!r}")
    if scored and reason is not None:
        raise ConfigError(f"{where}.unscored_reason is only for a task with scored: false")
    if not scored and not (isinstance(reason, str) and reason.strip()):
        raise ConfigError(
            f"{where}: scored: false needs unscored_reason (the measurement that decided it)"
        )
    scenarios = []
    ids = set()
    for i, raw in enumerate(_req(data, "scenarios", where, (list,))):
        w = _where(where, "scenarios", i)
        raw = _only(
            raw,
            ("id", "base", "level", "load", "sources", "capacity", "overrides", "quick", "metric"),
            w,
        )
        sid = _req(raw, "id", w, (str,))
        if sid in ids:
            raise ConfigError(f"{w}.id: duplicate scenario id {sid!r}")
        ids.add(sid)
        level = _req(raw, "level", w, (str,))
        if level not in LEVELS:
            raise ConfigError(f"{w}.level must be one of {list(LEVELS)}, got {level!r}")
        load = float(_req(raw, "load", w, (int, float)))
        if not (math.isfinite(load) and load > 0):
            raise ConfigError(f"{w}.load must be > 0, got {load!r}")
        srcs = []
        for s in _req(raw, "sources", w, (list,)):
            if s not in sources:
                raise ConfigError(f"{w}.sources: unknown source {s!r}; sources: {list(sources)}")
            srcs.append(sources[s])
        capacity = raw.get("capacity") or {}
        if not isinstance(capacity, Mapping):
            raise ConfigError(f"{w}.capacity must be a mapping source -> units/s")
        missing = [s.name for s in srcs if s.name not in capacity]
        if missing and not require_capacity:
            capacity = {**capacity, **dict.fromkeys(missing, math.nan)}
        elif missing:
            raise ConfigError(
                f"{w}.capacity: no measured capacity for source(s) {missing}; run "
                "'python -m llmsched_gym.leaderboard.suite --capacity' and copy its figures"
            )
        metric_sc = raw.get("metric")
        if metric_sc is not None and metric_sc not in LOWER_IS_BETTER:
            raise ConfigError(f"{w}.metric: unknown metric {metric_sc!r}")
        scenarios.append(
            SuiteScenario(
                id=sid,
                base=_req(raw, "base", w, (str,)),
                level=level,
                load=load,
                sources=tuple(srcs),
                capacity={k: float(v) for k, v in capacity.items()},
                overrides=dict(raw.get("overrides") or {}),
                quick=bool(raw.get("quick", False)),
                metric=metric_sc,
            )
        )
    return Task(
        name=name,
        decision=_req(data, "decision", where, (str,)).strip(),
        metric=metric,
        tail_metric=tail,
        reference=_req(data, "reference", where, (str,)),
        baselines=tuple(baselines),
        scenarios=tuple(scenarios),
        interface=interface,
        references=tuple(references),
        scored=scored,
        unscored_reason=None if reason is None else " ".join(reason.split()),
    )


_LIMITS = ("per_step_s", "per_workload_s", "memory_mb", "startup_s", "per_action_s")
def _positive_number(data: Mapping, key: str, default: float, where: str) -> float:
    """A finite number > 0 (not a bool or a string), or an error naming the field and value."""
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}.{key} must be a number of seconds > 0, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{where}.{key} must be a finite number > 0, got {value!r}")
    return float(value)


def _check_scenarios(tasks: Mapping[str, Task], where: str) -> None:
    """Every scenario's base exists and takes its overrides (found now, not as failed rows)."""
    from llmsched_gym.scenarios.spec import list_scenarios, load_scenario

    known = set(list_scenarios())
    for task in tasks.values():
        for sc in task.scenarios:
            w = f"{where}.tasks.{task.name}: scenario {sc.id!r}"
            if sc.base not in known and not Path(sc.base).is_file():
                import difflib

                close = difflib.get_close_matches(sc.base, sorted(known), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(
                    f"{w}: base {sc.base!r} is not a shipped scenario{hint}; see "
                    "'llmsched-gym list scenarios'"
                )
            for src in sc.sources:
                for split in (src.train, src.test):
                    if split is None:
                        continue
                    try:
                        load_scenario(sc.base, _workload_overrides(sc, src, split.window_s, 1.0))
                    except ConfigError as exc:
                        raise ConfigError(f"{w}, source {src.name!r}: {exc}") from None


def parse_suite(data: Any, source: str = "<dict>", *, require_capacity: bool = True) -> Suite:
    """Validate a parsed suite mapping; errors name the file and the field.

    Every value is checked before anything runs: limits are finite seconds > 0, the tie
    threshold a fraction in [0, 1), every base scenario exists. ``require_capacity=False``
    accepts scenarios without measured capacities (NaN): only for measuring them.
    """
    data = _only(
        data,
        ("suite", "description", "superseded", "limits", "tie_threshold", "sources", "tasks"),
        source,
    )
    version = _req(data, "suite", source, (str,))
    limits = _only(data.get("limits") or {}, _LIMITS, f"{source}.limits")
    per_step = _positive_number(limits, "per_step_s", 0.05, f"{source}.limits")
    per_workload = _positive_number(limits, "per_workload_s", 600.0, f"{source}.limits")
    startup = _positive_number(limits, "startup_s", Suite.startup_s, f"{source}.limits")
    per_action = _positive_number(limits, "per_action_s", Suite.per_action_s, f"{source}.limits")
    memory = limits.get("memory_mb", Suite.memory_mb)
    if isinstance(memory, bool) or not isinstance(memory, int) or memory < 256:
        raise ConfigError(f"{source}.limits.memory_mb must be an int >= 256 (MiB), got {memory!r}")
    tie = data.get("tie_threshold", 0.01)
    if isinstance(tie, bool) or not isinstance(tie, (int, float)) or not 0 <= tie < 1:
        raise ConfigError(f"{source}.tie_threshold must be a fraction in [0, 1), got {tie!r}")
    superseded = data.get("superseded")
    if superseded is not None and not (isinstance(superseded, str) and superseded.strip()):
        raise ConfigError(f"{source}.superseded must be a non-empty string, got {superseded!r}")
    sources = _parse_sources(_req(data, "sources", source, (dict,)), f"{source}.sources")
    tasks = {
        str(name): _parse_task(str(name), raw, sources, f"{source}.tasks.{name}", require_capacity)
        for name, raw in _req(data, "tasks", source, (dict,)).items()
    }
    _check_scenarios(tasks, source)
    return Suite(
        version=version,
        description=str(data.get("description", "")).strip(),
        tasks=tasks,
        per_step_limit_s=per_step,
        workload_limit_s=per_workload,
        tie_threshold=float(tie),
        source=source,
        memory_mb=memory,
        startup_s=startup,
        per_action_s=per_action,
        superseded=None if superseded is None else " ".join(superseded.split()),
    )


@functools.lru_cache(maxsize=8)
def load_suite(name_or_path: str | Path = SUITE_VERSION, require_capacity: bool = True) -> Suite:
    """A shipped suite by version (``llmsched-v1``) or a suite YAML file by path."""
    from llmsched_gym import _yaml

    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        try:
            text, where = path.read_text(), str(path)
        except OSError as exc:
            raise ConfigError(f"cannot read suite {path}: {exc.strerror}") from None
    else:
        entry = importlib.resources.files("llmsched_gym.leaderboard") / "suites" / f"{path}.yaml"
        if not entry.is_file():
            raise ConfigError(
                f"unknown suite {str(name_or_path)!r}; shipped: {', '.join(SHIPPED_SUITES)}"
            )
        text, where = entry.read_text(), f"suites/{path}.yaml"
    return parse_suite(_yaml.safe_load(text), where, require_capacity=require_capacity)


def _print_capacities(suite: Suite) -> None:
    """Measure and print every scenario's capacities (the figures the suite file records)."""
    for task in suite.tasks.values():
        for sc in task.scenarios:
            caps = {
                src.name: round(measure_capacity(sc, src, task.reference, task.interface), 4)
                for src in sc.sources
            }
            print(f"{task.name}/{sc.id}: capacity: {caps}")


if __name__ == "__main__":  # pragma: no cover
    import argparse

    parser = argparse.ArgumentParser(description="Measure the suite's capacities.")
    parser.add_argument("--suite", default=SUITE_VERSION)
    parser.add_argument("--capacity", action="store_true", help="measure and print capacities")
    args = parser.parse_args()
    _print_capacities(load_suite(args.suite, require_capacity=False))
