"""Task descriptors (``llmsched_gym.tasks``): one place says which tasks exist; the rest reads it.

A new task touches its descriptor, its environment module and the suite file only, so no module
may branch on a task's name (the built-in rules, each written for one task, aside), and every
consumer (PolicyAgent, AgentPolicy, the random agent, the lookahead oracle) dispatches through
the environment's hooks: a task known only to its descriptor works in all of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from llmsched_gym.envs.adapters import AgentPolicy, PolicyAgent, rollout
from llmsched_gym.envs.base import InvalidActionError
from llmsched_gym.envs.select_v0 import SelectEnv
from llmsched_gym.errors import ConfigError
from llmsched_gym.tasks import TASKS, TaskSpec, task_spec

PACKAGE = Path(__file__).resolve().parents[2] / "llmsched_gym"

NAME_BRANCHES_ALLOWED = {
    # The built-in rules: each rule's key is written for the tasks it has a form in.
    "leaderboard/agents.py",
    # The paper pairs' Knob on a cluster is the router's knob (RouterKnobEnv), a scenario
    # property rather than a task's.
    "envs/registration.py",
}


def test_each_descriptor_names_its_environment():
    from llmsched_gym.leaderboard.spaces import task_spaces

    for name, spec in TASKS.items():
        cls = spec.env_class()
        assert cls.task == name
        assert cls.cluster_task == spec.cluster
        _, act = task_spaces(name, top_k=8, instances=4)
        kind = "choice" if isinstance(act, gym.spaces.Discrete) else None
        if isinstance(act, gym.spaces.Box):
            kind = "scores" if float(act.low.min()) < 0 else "fractions"
        assert kind == spec.action, name


def test_every_task_map_is_read_from_the_descriptors():
    from llmsched_gym import lookahead
    from llmsched_gym.envs import registration
    from llmsched_gym.leaderboard import suite

    entries = {n: t.entry_point for n, t in TASKS.items()}
    assert suite.TASK_ENVS == entries
    assert {**registration.TASKS, **registration.CLUSTER_TASKS} == entries
    assert set(registration.CLUSTER_TASKS) == {n for n, t in TASKS.items() if t.cluster}
    assert lookahead.TASKS == tuple(TASKS)
    assert lookahead.BASES == {"Route": "least-load:requests"}


def test_unknown_task_is_named():
    with pytest.raises(ConfigError, match=r"suite\.tasks\[3\]: unknown task 'Prio'; tasks: "):
        task_spec("Prio", "suite.tasks[3]")


def test_no_module_branches_on_a_task_name():
    names = set(TASKS)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in NAME_BRANCHES_ALLOWED or rel == "tasks.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            for part in (node.left, *node.comparators):
                for c in ast.walk(part):
                    if isinstance(c, ast.Constant) and c.value in names:
                        found.append(f"{rel}:{node.lineno} compares with {c.value!r}")
    assert not found, "branch on the task's descriptor or hooks instead:\n" + "\n".join(found)


class EchoSelectEnv(SelectEnv):
    """Select under another name: a task that only its descriptor and this class know."""

    task = "EchoSelect"


@pytest.fixture
def echo_task(monkeypatch):
    spec = TaskSpec("EchoSelect", f"{__name__}:EchoSelectEnv", "scheduler", "choice", "echo")
    monkeypatch.setitem(TASKS, "EchoSelect", spec)
    return spec


def _env(cls):
    return cls(scenario="chat-sharegpt-overload-v0", max_requests=30, top_k=8)


def test_a_task_known_only_to_its_descriptor_runs_everywhere(echo_task):
    from llmsched_gym.leaderboard.policy import RandomAgent
    from llmsched_gym.lookahead import LookaheadAgent
    from llmsched_gym.policies.registry import make_policy

    # PolicyAgent (policy_action) gives Select's episode under vllm-v1.
    ours = rollout(_env(EchoSelectEnv), PolicyAgent(make_policy("vllm-v1")), seed=1)
    theirs = rollout(_env(SelectEnv), PolicyAgent(make_policy("vllm-v1")), seed=1)
    assert (ours["steps"], ours["return"]) == (theirs["steps"], theirs["return"])
    # The random agent draws through the task's random_action, as for Select.
    a = rollout(_env(EchoSelectEnv), RandomAgent("EchoSelect", 8, 3), seed=2)
    b = rollout(_env(SelectEnv), RandomAgent("Select", 8, 3), seed=2)
    assert (a["steps"], a["return"]) == (b["steps"], b["return"])
    # The lookahead reads the base and the candidates from the descriptor and the hooks.
    agent = LookaheadAgent("EchoSelect", horizon_s=0.5)
    assert agent.base == "vllm-v1" and agent.candidates == ()
    env = _env(EchoSelectEnv)
    env.reset(seed=0)
    assert agent.act(env) in np.flatnonzero(env.action_masks())


def test_agent_policy_drives_the_task_through_its_hook(echo_task):
    """A trained agent in ``simulate`` goes through the task's ``drive_agent``: picking the
    first candidate serves everything; closing an empty batch is a masked choice, refused."""
    from llmsched_gym.scenarios.spec import load_scenario

    def close(obs, mask=None):
        return 8

    sc = load_scenario("chat-sharegpt-overload-v0", {"workload.num_requests": 5})
    first = AgentPolicy(EchoSelectEnv, lambda obs: int(np.flatnonzero(obs["mask"])[0]), top_k=8)
    out = sc.simulate(first, seed=0)
    assert out.summary["num_finished"] == 5
    with pytest.raises(InvalidActionError, match="Select: the agent chose masked action 8"):
        sc.simulate(AgentPolicy(EchoSelectEnv, close, top_k=8), seed=0)
