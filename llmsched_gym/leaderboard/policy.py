"""What a leaderboard evaluates: a policy reference, resolved to a fresh policy per workload.

``POLICY`` on the command line is one of:

* a registered scheduler (``vllm-v1``, ``static-priority:shortest-prompt``, ``proserve`` ...) for
  the engine tasks, or a registered router (``least-load:backlog``) for Route;
* ``random``: uniformly random actions in the task's action space (seeded per workload);
* ``lookahead-oracle``: ``llmsched_gym.leaderboard.oracle.lookahead`` (its task's default base
  policy, forks run to the episode's end), planning on the workload the harness runs: an oracle
  reference, which only the project's own code may be, since it sees the judge's workload;
* ``rule:<name>``: a built-in rule acting through the task's action on the observation
  (``llmsched_gym.leaderboard.agents.RULES``), wrapped as an entry point's agent is;
* ``module:factory``: a Python entry point (``module`` importable, or a file path
  ``path/to/file.py:factory``) called as ``factory(task=TASK)`` (or with no argument when it
  takes none) for every workload, in its own sandboxed process
  (``llmsched_gym.leaderboard.sandbox``); it returns an agent (a callable observation -> action,
  or an object with SB3's ``predict``), which the harness wraps as ``AgentPolicy`` /
  ``AgentRouter`` for the task's environment. A factory that takes ``workload`` or returns a
  whole scheduler or router is refused;
* a submission folder (``leaderboards/<task>/<method>/``) whose ``submission.yaml`` names the
  entry point, or says ``policy: model``: a learned agent the project builds from the folder's
  ``model:`` field and weights (``llmsched_gym.leaderboard.weights``), running no folder code
  (in the sandbox too).

The harness owns engines and clusters; the policy only decides, through those interfaces. A
policy that reads true output lengths must say so (``oracle = True``); the engine refuses an
unflagged one, and oracle rows are ranked apart.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.sandbox import SandboxedAgent, SandboxLimits
from llmsched_gym.leaderboard.weights import MODEL_POLICY
from llmsched_gym.tasks import task_spec

__all__ = ["PolicyRef", "RandomAgent", "Submission", "load_submission", "resolve_policy"]

ORACLES = ("lookahead-oracle",)
"""Built-in oracle references: the project's code, given the workload the harness runs."""


class RandomAgent:
    """Uniformly random actions in a task's action space, seeded (SB3's ``predict`` shape).

    Priority and Knob: uniform in their boxes; BatchType and Select: uniform over the valid
    actions (the mask the harness passes); Preempt: uniform over the visible rows.
    """

    def __init__(self, task: str, top_k: int, seed: int) -> None:
        self.task = task
        self.top_k = top_k
        self.rng = np.random.default_rng(seed)
        self._env_class = task_spec(task).env_class()

    def predict(
        self, obs: Any, deterministic: bool = True, action_masks: Any = None
    ) -> tuple[Any, None]:
        """One random action (``deterministic`` is ignored: the draw is the point); the task's
        ``random_action``."""
        return self._env_class.random_action(self.rng, self.top_k, obs, action_masks), None


@dataclass(frozen=True)
class PolicyRef:
    """A resolved policy reference: how to build a fresh policy for one workload."""

    spec: str
    """What the user wrote (name, entry point or folder)."""
    name: str
    """The row's name on a leaderboard."""
    kind: str
    """``scheduler``, ``router``, ``random``, ``oracle``, ``rule`` (the project's rule agents,
    in-process), ``entry`` (a submission's code) or ``model`` (its weights), both sandboxed."""
    entry: str | None = None
    """``/absolute/path/file.py:factory`` or ``module:factory``, for ``entry``; the folder, for
    ``model``."""
    folder: Path | None = None
    """The submission folder, when the reference is one."""
    model: Mapping[str, Any] | None = None
    """The checked ``model:`` spec, for ``model`` (weights the project's network loads)."""
    horizon_s: float | None = None
    """For ``oracle``: the lookahead's horizon in simulated seconds (None: to the end)."""

    @property
    def row_kind(self) -> str:
        """``agent`` (acts only through the task's decision: an agent's action, a router's
        instance) or ``reference`` (a registered scheduler that replaces the engine's own)."""
        return "reference" if self.kind == "scheduler" else "agent"

    def build(
        self,
        task: Any,
        seed: int,
        workload: Any = None,
        *,
        limits: SandboxLimits | None = None,
        trust_pickle: bool = False,
        deadline_s: float | None = None,
    ) -> Any:
        """A fresh policy or router for one workload of ``task`` (a suite ``Task``).

        ``workload`` (the suite ``Workload``) goes to the built-in oracles only. An entry point
        starts a sandbox (``SandboxedAgent``) under ``limits``, done by ``deadline_s``
        (``time.monotonic()``); the caller stops it with ``sandbox.close_policy``.
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
            return wrap_agent(task, RandomAgent(task.name, _TOP_K, seed), "random")
        if self.kind == "oracle":
            if workload is None:
                raise ConfigError(
                    f"policy {self.spec}: an oracle reference plans on the workload it is scored "
                    "on; it runs only in the leaderboard harness, which passes that workload"
                )
            from llmsched_gym.leaderboard.oracle import lookahead

            return lookahead(task.name, workload, horizon_s=self.horizon_s)
        if self.kind == "rule":
            from llmsched_gym.leaderboard.agents import RuleAgent

            rule = RuleAgent(self.spec.removeprefix("rule:"), task.name)
            return wrap_agent(task, rule, self.name)
        agent = SandboxedAgent(
            self.entry,
            task.name,
            name=self.name,
            limits=limits or SandboxLimits(),
            trust_pickle=trust_pickle,
            deadline_s=deadline_s,
            model=self.model,
        )
        return wrap_agent(task, agent, self.name)


_TOP_K = 16
"""The environments' default ``top_k``, which ``random`` acts with."""


def wrap_agent(task: Any, agent: Any, name: str) -> Any:
    """An agent wrapped for the task's environment: ``AgentRouter`` or ``AgentPolicy``."""
    if task.interface == "router":
        from llmsched_gym.envs.adapters import AgentRouter

        return AgentRouter(agent, name=name)
    from llmsched_gym.envs.adapters import AgentPolicy

    env_class = task_spec(task.name).env_class()
    return AgentPolicy(env_class, agent, top_k=getattr(agent, "top_k", _TOP_K), name=name)


def _split_entry(spec: str) -> tuple[str, str]:
    target, _, attr = spec.rpartition(":")
    if not target or not attr.isidentifier():
        raise ConfigError(f"entry point {spec!r} must look like 'package.module:factory'")
    return target, attr


def _command_line_entry(spec: str) -> str:
    """``spec`` checked without running it: a file that exists (made absolute) or a module found.

    Only the top-level package is looked up (finding a submodule would import its package).
    """
    target, attr = _split_entry(spec)
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise ConfigError(f"entry point {spec!r}: no file {path}")
        return f"{path.resolve()}:{attr}"
    top = target.partition(".")[0]
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(
            f"entry point {spec!r}: cannot import {target!r}: no module named {top!r}"
        )
    return spec


def resolve_policy(spec: str, task: Any) -> PolicyRef:
    """Resolve ``spec`` for ``task`` (a suite ``Task``): registered name, entry point or folder.

    Nothing of the policy's own code runs here: entry points are checked for existence only.
    """
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
    if spec in ORACLES:
        return PolicyRef(spec, spec, "oracle")
    if spec.startswith("rule:"):
        from llmsched_gym.leaderboard.agents import RuleAgent

        RuleAgent(spec.removeprefix("rule:"), task.name)  # the error names the rules that fit
        return PolicyRef(spec, spec, "rule")
    from llmsched_gym.cluster.routers import registered_policies

    known, what = registered_policies(task.interface == "router")
    if spec in known:
        return PolicyRef(spec, spec, what)
    if ":" in spec:
        target, attr = _split_entry(spec)
        # A file's row is named by the file (``my_policy:make``), not by the factory alone.
        name = f"{Path(target).stem}:{attr}" if target.endswith(".py") else spec
        return PolicyRef(spec, name, "entry", _command_line_entry(spec))
    raise ConfigError(
        f"unknown policy {spec!r} for task {task.name}: not a registered {what} (see "
        f"'llmsched-gym list {what}s'), 'random', a rule:<name>, {', '.join(map(repr, ORACLES))}, "
        "a module:factory entry point, or a submission folder"
    )


def _folder_entry(folder: Path, spec: str) -> str:
    """A submission's ``file.py:factory``, as an absolute path that stays inside ``folder``.

    Refused, before anything runs: an absolute path, a ``..`` component, a path whose resolved
    form leaves the folder, and any symbolic link in the folder pointing outside it.
    """
    where = f"{folder / 'submission.yaml'}: field 'policy'"
    target, attr = _split_entry(spec)
    rel = Path(target)
    if rel.is_absolute() or ".." in rel.parts:
        raise ConfigError(
            f"{where}: {target!r} must be a file inside the submission folder, named relative to "
            "it without '..' (e.g. policy.py:make)"
        )
    root = folder.resolve()
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            link = Path(dirpath, name)
            if link.is_symlink() and not link.resolve().is_relative_to(root):
                raise ConfigError(
                    f"{folder}: {link.relative_to(folder)} is a symbolic link to "
                    f"{os.readlink(link)}, outside the submission folder; copy the file in instead"
                )
    path = (folder / rel).resolve()
    if not path.is_relative_to(root):
        raise ConfigError(f"{where}: {target!r} resolves to {path}, outside the folder {root}")
    if not path.is_file():
        raise ConfigError(f"{where}: no file {folder / rel}")
    return f"{path}:{attr}"


SUBMISSION_FIELDS = (
    "suite", "task", "method", "policy", "model", "kind", "oracle", "paper", "training"
)
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
        """The policy this submission evaluates (a file entry point inside the folder)."""
        import dataclasses

        if self.model is not None:
            return PolicyRef(
                str(self.folder), self.method, "model", str(self.folder.resolve()), self.folder,
                model=self.model,
            )
        target = self.policy.rpartition(":")[0]
        if target.endswith(".py"):
            entry = _folder_entry(self.folder, self.policy)
            return PolicyRef(str(self.folder), self.method, "entry", entry, self.folder)
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
