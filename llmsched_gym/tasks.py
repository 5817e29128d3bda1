"""Task descriptors: the one place that says which tasks exist and what each is.

A task is a decision point of the engine (or of a cluster's router) that an agent acts at.
Its descriptor (``TaskSpec``) names the environment class, whether it decides for one engine
or for a cluster, and the kind of action; what the task *does* lives in its environment module,
as methods the rest of the package calls instead of branching on the task's name:

* ``policy_action(policy)``: the action a built-in scheduler takes at the current decision
  (``adapters.PolicyAgent``);
* ``drive_agent(inner, ctx, decide)``: one engine step driven by a trained agent
  (``adapters.AgentPolicy``), through the same ``_apply`` code as the environment;
* ``random_action(rng, top_k, obs, action_masks)``: the ``random`` agent's draw;
* ``lookahead_options(own, candidates)`` and ``check_lookahead_candidates(candidates)``: the
  actions the lookahead oracle tries (``llmsched_gym.lookahead``).

A new task touches its descriptor here, its environment module and the suite file, nothing
else: registration (``registration``), the suite's task map (``leaderboard.suite``), the
harness's agents and the lookahead oracle read these.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from llmsched_gym.errors import ConfigError

__all__ = ["TASKS", "TaskSpec", "task_spec"]


@dataclass(frozen=True)
class TaskSpec:
    """One task: its name, environment and the shape of its decision."""

    name: str
    """The task's name in environment ids (``llmsched/<name>-<Scenario>-v0``) and suites."""
    entry_point: str
    """``module:Class`` of its environment (a ``LLMSchedEnv``)."""
    interface: str
    """``scheduler`` (decides inside one engine's step) or ``router`` (picks a cluster's
    instance per arriving request)."""
    action: str
    """``scores`` (a Box of one score per visible row), ``fractions`` (a Box in [0, 1]) or
    ``choice`` (a masked Discrete: every valid action can be tried)."""
    summary: str
    """One line on the decision, for listings."""
    lookahead_base: str = "vllm-v1"
    """The policy the lookahead oracle continues its forks with (and whose action it tries
    first): a registered scheduler, or a registered router for a router task."""

    @property
    def cluster(self) -> bool:
        """Whether the task decides for a cluster (its environment runs a ``Cluster``)."""
        return self.interface == "router"

    @property
    def size_key(self) -> str:
        """The setting that sizes a learned agent's network: ``instances`` or ``top_k``."""
        return "instances" if self.cluster else "top_k"

    def env_class(self) -> type:
        """The environment class (imported on first use: registration stays import-light)."""
        module, _, name = self.entry_point.partition(":")
        return getattr(importlib.import_module(module), name)


TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        TaskSpec(
            "Priority",
            "llmsched_gym.envs.priority_v0:PriorityEnv",
            "scheduler",
            "scores",
            "the order of the waiting and running queues each engine step (scores over the "
            "top-K requests)",
        ),
        TaskSpec(
            "BatchType",
            "llmsched_gym.envs.batch_type_v0:BatchTypeEnv",
            "scheduler",
            "choice",
            "a prefill-only or a decode-only step",
        ),
        TaskSpec(
            "Select",
            "llmsched_gym.envs.select_v0:SelectEnv",
            "scheduler",
            "choice",
            "the batch, request by request (masked), until the agent stops or nothing fits",
        ),
        TaskSpec(
            "Preempt",
            "llmsched_gym.envs.preempt_v0:PreemptEnv",
            "scheduler",
            "choice",
            "the victim when a running request needs KV blocks that are not free",
        ),
        TaskSpec(
            "Knob",
            "llmsched_gym.envs.knob_v0:KnobEnv",
            "scheduler",
            "fractions",
            "the token budget and the sequence cap per time window",
        ),
        TaskSpec(
            "Route",
            "llmsched_gym.envs.route_v0:RouteEnv",
            "router",
            "choice",
            "the instance of each arriving request (masked to the candidates)",
            lookahead_base="least-load:requests",
        ),
    )
}
"""Every task, by name, in listing order."""


def task_spec(name: str, where: str = "task") -> TaskSpec:
    """The descriptor of task ``name``, or a ``ConfigError`` naming the known tasks."""
    spec = TASKS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise ConfigError(f"{where}: unknown task {name!r}; tasks: {list(TASKS)}")
    return spec
