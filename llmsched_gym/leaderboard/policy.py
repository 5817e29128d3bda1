"""What a leaderboard evaluates: a policy reference, resolved to a fresh policy per workload.

``POLICY`` on the command line is one of:

* a registered scheduler (``vllm-v1``, ``static-priority:shortest-prompt``, ``proserve`` ...) for
  the engine tasks, or a registered router (``least-load:backlog``) for Route;
* ``random``: uniformly random actions in the task's action space (seeded per workload);
* ``rule:<name>``: a built-in rule acting through the task's action on the observation
  (``llmsched_gym.leaderboard.agents.RULES``), wrapped as an entry point's agent is;
* ``module:factory``: a Python entry point (``module`` importable, or a file path
  ``path/to/file.py:factory``) called as ``factory(task=TASK)`` (or with no argument when it
  takes none) for every workload; it returns a ``SchedulingPolicy``, a cluster router (an
  object with ``route``), or an agent (a callable observation -> action, or an object with SB3's
  ``predict``), which the harness wraps as ``AgentPolicy`` / ``AgentRouter`` for the task's
  environment. A factory that also takes ``workload`` is given the suite ``Workload`` it runs
  (scenario and seed: every future arrival and output length), which only an oracle reference
  may see: what it returns must say ``oracle = True`` (``llmsched_gym.leaderboard.oracle``);
* a submission folder (``leaderboards/<task>/<method>/``) whose ``submission.yaml`` names the
  entry point, or says ``policy: model``: a learned agent the project builds from the folder's
  ``model:`` field and weights (``llmsched_gym.leaderboard.weights``), running no folder code.

The harness owns engines and clusters; the policy only decides, through those interfaces. A
policy that reads true output lengths must say so (``oracle = True``); the engine refuses an
unflagged one, and oracle rows are ranked apart.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.weights import MODEL_POLICY

__all__ = ["PolicyRef", "RandomAgent", "Submission", "load_submission", "resolve_policy"]


class RandomAgent:
    """Uniformly random actions in a task's action space, seeded (SB3's ``predict`` shape).

    Priority and Knob: uniform in their boxes; BatchType and Select: uniform over the valid
    actions (the mask the harness passes); Preempt: uniform over the visible rows.
    """

    def __init__(self, task: str, top_k: int, seed: int) -> None:
        self.task = task
        self.top_k = top_k
        self.rng = np.random.default_rng(seed)

    def predict(
        self, obs: Any, deterministic: bool = True, action_masks: Any = None
    ) -> tuple[Any, None]:
        """One random action (``deterministic`` is ignored: the draw is the point)."""
        rng, k = self.rng, self.top_k
        if self.task == "Priority":
            return rng.uniform(-1.0, 1.0, k).astype(np.float32), None
        if self.task == "Knob":
            return rng.uniform(0.0, 1.0, 2).astype(np.float32), None
        if action_masks is not None:
            valid = np.flatnonzero(np.asarray(action_masks, dtype=bool))
        else:
            valid = np.flatnonzero(np.asarray(obs["mask"], dtype=bool))
        if valid.size == 0:
            return 0, None
        return int(valid[rng.integers(valid.size)]), None


@dataclass(frozen=True)
class PolicyRef:
    """A resolved policy reference: how to build a fresh policy for one workload."""

    spec: str
    """What the user wrote (name, entry point or folder)."""
    name: str
    """The row's name on a leaderboard."""
    kind: str
    """``scheduler``, ``router``, ``random`` or ``entry`` (a factory)."""
    factory: Callable[..., Any] | None = None
    folder: Path | None = None
    """The submission folder, when the reference is one."""

    @property
    def row_kind(self) -> str:
        """``agent`` (acts only through the task's decision: an agent's action, a router's
        instance) or ``reference`` (a registered scheduler that replaces the engine's own)."""
        return "reference" if self.kind == "scheduler" else "agent"

    def build(self, task: Any, seed: int, workload: Any = None) -> Any:
        """A fresh policy or router for one workload of ``task`` (a suite ``Task``).

        ``workload`` (the suite ``Workload``) goes to a factory that takes it (oracles only).
        """
        if self.kind == "scheduler":
            from llmsched_gym.policies.registry import make_policy

            return make_policy(self.spec)
        if self.kind == "router":
            from llmsched_gym.cluster.routers import make_router

            return make_router(self.spec)
        if self.kind == "random":
            if task.interface == "router":
                from llmsched_gym.cluster.routers import make_router

                return make_router("random")
            return _wrap(task, RandomAgent(task.name, _TOP_K, seed), "random")
        return _wrap(task, _call_factory(self.factory, task.name, self.spec, workload), self.name)


_TOP_K = 16
"""The environments' default ``top_k``, which entry-point agents are wrapped with."""


def _call_factory(factory: Callable[..., Any], task: str, spec: str, workload: Any = None) -> Any:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    kwargs: dict[str, Any] = {"task": task} if "task" in params else {}
    sees_workload = "workload" in params
    if sees_workload:
        if workload is None:
            raise ConfigError(
                f"policy {spec}: the factory takes a workload; it runs only in the leaderboard "
                "harness, which passes the workload it evaluates"
            )
        kwargs["workload"] = workload
    try:
        obj = factory(**kwargs)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"policy {spec}: the factory raised {type(exc).__name__}: {exc}") from exc
    if sees_workload and getattr(obj, "oracle", False) is not True:
        raise ConfigError(
            f"policy {spec}: the factory takes the workload (future arrivals, true output "
            "lengths), so what it returns is an oracle and must say oracle = True"
        )
    return obj


def _wrap(task: Any, obj: Any, name: str) -> Any:
    """A policy / router as is; an agent wrapped for the task's environment."""
    from llmsched_gym.core.engine import SchedulingPolicy

    if task.interface == "router":
        if hasattr(obj, "route"):
            return obj
        if callable(obj) or hasattr(obj, "predict"):
            from llmsched_gym.envs.adapters import AgentRouter

            return AgentRouter(obj, name=name)
        raise ConfigError(
            f"policy {name}: the Route task needs a router (an object with route) or an agent "
            f"(callable or predict), got {type(obj).__name__}"
        )
    if isinstance(obj, SchedulingPolicy):
        return obj
    if callable(obj) or hasattr(obj, "predict"):
        from llmsched_gym.envs.adapters import AgentPolicy
        from llmsched_gym.leaderboard.suite import TASK_ENVS

        module, _, cls = TASK_ENVS[task.name].partition(":")
        env_class = getattr(importlib.import_module(module), cls)
        top_k = getattr(obj, "top_k", _TOP_K)
        return AgentPolicy(env_class, obj, top_k=top_k, name=name)
    raise ConfigError(
        f"policy {name}: the {task.name} task needs a SchedulingPolicy or an agent (callable "
        f"or predict), got {type(obj).__name__}"
    )


def _load_entry(spec: str, base: Path | None = None) -> Callable[..., Any]:
    """The callable of ``module:attr`` or ``path/file.py:attr`` (relative to ``base``)."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr.isidentifier():
        raise ConfigError(f"entry point {spec!r} must look like 'package.module:factory'")
    if target.endswith(".py"):
        path = Path(target) if base is None else base / target
        if not path.is_file():
            raise ConfigError(f"entry point {spec!r}: no file {path}")
        # Imported once per process, as import_module does: every workload's resolution (and
        # each Ray task on the same worker) reuses the module instead of executing it again.
        digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:16]
        mod_name = f"_llmsched_submission_{digest}"
        module = sys.modules.get(mod_name)
        if module is None:
            module_spec = importlib.util.spec_from_file_location(mod_name, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[mod_name] = module
            try:
                module_spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[mod_name]
                raise ConfigError(
                    f"entry point {spec!r}: importing {path} raised {type(exc).__name__}: {exc}"
                ) from exc
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise ConfigError(f"entry point {spec!r}: cannot import {target!r}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"entry point {spec!r}: {target} has no callable {attr!r}")
    return factory


def resolve_policy(spec: str, task: Any) -> PolicyRef:
    """Resolve ``spec`` for ``task`` (a suite ``Task``): registered name, entry point or folder."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"policy must be a name, module:factory or folder, got {spec!r}")
    path = Path(spec)
    if path.is_dir():
        sub = load_submission(path)
        if sub.task.lower() != task.name.lower():
            raise ConfigError(
                f"{path / 'submission.yaml'}: task {sub.task!r} does not match --task {task.name}"
            )
        return sub.policy_ref(task)
    if spec == "random":
        return PolicyRef(spec, "random", "random")
    if spec.startswith("rule:"):
        from llmsched_gym.leaderboard.agents import RuleAgent

        rule = spec.removeprefix("rule:")
        RuleAgent(rule, task.name)  # the error names the rules that fit the task
        return PolicyRef(spec, spec, "entry", functools.partial(RuleAgent, rule))
    from llmsched_gym.cluster.routers import registered_policies

    known, what = registered_policies(task.interface == "router")
    if spec in known:
        return PolicyRef(spec, spec, what)
    if ":" in spec:
        return PolicyRef(spec, spec.rpartition(":")[2], "entry", _load_entry(spec))
    raise ConfigError(
        f"unknown policy {spec!r} for task {task.name}: not a registered {what} (see "
        f"'llmsched-gym list {what}s'), 'random', a rule:<name>, a module:factory entry point, "
        "or a submission folder"
    )


SUBMISSION_FIELDS = ("suite", "task", "method", "policy", "model", "kind", "oracle", "paper", "training")
KINDS = ("agent", "reference")
"""Row kinds: ``agent`` acts only through the task's decision (ranked); ``reference`` replaces
the engine's scheduler as a whole (ranked apart, labelled)."""
_REQUIRED = ("suite", "task", "policy")


@dataclass(frozen=True)
class Submission:
    """A validated submission folder."""

    folder: Path
    suite: str
    task: str
    method: str
    policy: str
    oracle: bool = False
    paper: str | None = None
    training: str | None = None
    kind: str = "agent"
    model: Mapping[str, Any] | None = None
    """``policy: model``: the checked ``model:`` spec the agent is built from."""

    @property
    def results_path(self) -> Path:
        """The committed ``results.csv``."""
        return self.folder / "results.csv"

    def policy_ref(self, task: Any) -> PolicyRef:
        """The policy this submission evaluates (a file entry point relative to the folder)."""
        import dataclasses
        import functools

        if self.model is not None:
            from llmsched_gym.leaderboard.weights import build_agent

            factory = functools.partial(build_agent, self.folder, self.model)
            return PolicyRef(str(self.folder), self.method, "entry", factory, self.folder)
        target = self.policy.rpartition(":")[0]
        if target.endswith(".py"):
            factory = _load_entry(self.policy, base=self.folder)
            return PolicyRef(str(self.folder), self.method, "entry", factory, self.folder)
        inner = resolve_policy(self.policy, task)
        return dataclasses.replace(inner, name=self.method, folder=self.folder)


def load_submission(folder: str | Path) -> Submission:
    """Read and validate ``folder/submission.yaml``; errors name the file and the field."""
    from llmsched_gym import _yaml
    from llmsched_gym.leaderboard.suite import load_suite

    folder = Path(folder)
    path = folder / "submission.yaml"
    if not path.is_file():
        raise ConfigError(f"{folder}: not a submission folder (no submission.yaml)")
    try:
        data = _yaml.safe_load(path.read_text())
    except Exception as exc:  # noqa: BLE001 - YAML errors of every kind name the file
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping of {list(SUBMISSION_FIELDS)}")
    unknown = sorted(set(data) - set(SUBMISSION_FIELDS))
    if unknown:
        raise ConfigError(f"{path}: unknown field(s) {unknown}; allowed: {list(SUBMISSION_FIELDS)}")
    for key in _REQUIRED:
        if key not in data or data[key] is None:
            raise ConfigError(f"{path}: field {key!r} is required (a non-empty string)")
        if not isinstance(data[key], str) or not data[key].strip():
            raise ConfigError(
                f"{path}: field {key!r} must be a non-empty string, got {data[key]!r}"
            )
    try:
        suite = load_suite(data["suite"])
    except ConfigError:
        from llmsched_gym.leaderboard.suite import SUITE_VERSION

        raise ConfigError(
            f"{path}: field 'suite': unknown suite version {data['suite']!r}; this package "
            f"evaluates {SUITE_VERSION}"
        ) from None
    try:
        task = suite.task(data["task"]).name
    except ConfigError:
        raise ConfigError(
            f"{path}: field 'task': unknown task {data['task']!r}; tasks of {suite.version}: "
            f"{list(suite.tasks)}"
        ) from None
    oracle = data.get("oracle", False)
    if not isinstance(oracle, bool):
        raise ConfigError(f"{path}: field 'oracle' must be true or false, got {oracle!r}")
    kind = data.get("kind", "agent")
    if kind not in KINDS:
        raise ConfigError(
            f"{path}: field 'kind' must be one of {list(KINDS)} (agent: acts only through the "
            f"task's decision; reference: replaces the scheduler), got {kind!r}"
        )
    method = data.get("method", folder.name)
    if not isinstance(method, str) or not method.strip():
        raise ConfigError(f"{path}: field 'method' must be a non-empty string, got {method!r}")
    for key in ("paper", "training"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ConfigError(f"{path}: field {key!r} must be a string or null")
    model = None
    if data["policy"].strip() == MODEL_POLICY or "model" in data:
        from llmsched_gym.leaderboard.weights import check_model_spec

        if data["policy"].strip() != MODEL_POLICY or data.get("model") is None:
            raise ConfigError(
                f"{path}: fields 'policy' and 'model' go together: 'policy: {MODEL_POLICY}' "
                "builds the agent from the 'model' mapping, which no other policy takes"
            )
        model = check_model_spec(data["model"], str(path), folder=folder, task=task)
    return Submission(
        folder=folder,
        suite=suite.version,
        task=task,
        method=method.strip(),
        policy=data["policy"].strip(),
        oracle=oracle,
        paper=data.get("paper"),
        training=data.get("training"),
        kind=kind,
        model=model,
    )
