"""The lookahead oracle: never worse than its base to the episode's end, deterministic, clear errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from llmsched_gym.counterfactual import fork
from llmsched_gym.envs.adapters import PolicyAgent, RouterAgent, rollout
from llmsched_gym.envs.batch_type_v0 import BatchTypeEnv
from llmsched_gym.envs.knob_v0 import KnobEnv
from llmsched_gym.envs.preempt_v0 import PreemptEnv
from llmsched_gym.envs.priority_v0 import PriorityEnv
from llmsched_gym.envs.route_v0 import RouteEnv
from llmsched_gym.envs.select_v0 import SelectEnv
from llmsched_gym.errors import ConfigError, PolicyError
from llmsched_gym.leaderboard.oracle import Lockstep, lookahead
from llmsched_gym.leaderboard.suite import Workload
from llmsched_gym.lookahead import LookaheadAgent
from llmsched_gym.policies.registry import make_policy

KV_SHORT = {"workload.num_requests": 40, "workload.rate_per_s": 2.0, "engine.num_gpu_blocks": 513}
"""Preempt: a KV cache small enough that vLLM preempts a few times in 40 requests."""

CASES = {
    "Preempt": (PreemptEnv, "chat-sharegpt-overload-v0", KV_SHORT),
    "Route": (RouteEnv, "chat-azure-conv-4x-v0", {"workload.limit": 30, "workload.rate_per_s": 40.0}),
    "Knob": (KnobEnv, "chat-sharegpt-overload-v0", {"workload.num_requests": 30}),
    "Priority": (PriorityEnv, "chat-sharegpt-overload-v0", {"workload.num_requests": 30}),
    "BatchType": (BatchTypeEnv, "relquery-rotten-v0", {"workload.num_queries": 2}),
    "Select": (SelectEnv, "chat-sharegpt-overload-v0", {"workload.num_requests": 8, "engine.max_num_seqs": 4}),
}  # fmt: skip


def _env(task):
    env_class, scenario, overrides = CASES[task]
    return env_class(scenario=scenario, scenario_overrides=overrides)


def _base(task):
    if task == "Route":
        return RouterAgent("least-load:requests")
    return PolicyAgent(make_policy("vllm-v1"))


@pytest.mark.parametrize("task", list(CASES))
def test_to_the_end_it_never_does_worse_than_its_base(task):
    # The rollout algorithm's cost improvement: the base's action is always a candidate and its
    # fork continues exactly as the base, so the agent's total latency is at most the base's.
    env = _env(task)
    base = rollout(env, _base(task), seed=3)
    agent = LookaheadAgent(task)
    mine = rollout(env, agent, seed=3)
    assert base["terminated"] and mine["terminated"]
    assert mine["return"] >= base["return"]
    assert agent.stats["decisions"] == mine["steps"] and agent.stats["forks"] > 0
    if task in ("Preempt", "Route", "Select"):  # these tiny runs leave room to improve
        assert mine["return"] > base["return"] and agent.stats["left_base"] > 0


def test_same_state_same_choice():
    env = _env("Preempt")
    env.reset(seed=3)
    agent = LookaheadAgent("Preempt")
    while len(env.action_masks().nonzero()[0]) < 3:  # a decision with several victims
        env.step(0)
    copy = fork(env)
    first = agent.act(env)
    assert LookaheadAgent("Preempt").act(copy) == first == agent.act(fork(copy))
    # Two agents over whole episodes: the same actions.
    a, b = LookaheadAgent("Route", horizon_s=2.0), LookaheadAgent("Route", horizon_s=2.0)
    runs = []
    for agent in (a, b):
        env = _env("Route")
        env.reset(seed=5)
        actions, done = [], False
        while not done:
            actions.append(agent.act(env))
            _, _, term, trunc, _ = env.step(actions[-1])
            done = term or trunc
        runs.append(actions)
    assert runs[0] == runs[1] and a.stats == b.stats


def test_box_tasks_try_the_declared_candidates():
    env = _env("Knob")
    env.reset(seed=0)
    agent = LookaheadAgent("Knob", candidates=[(1.0, 1.0), (0.1, 0.1)])
    action = agent.act(env)
    assert any(np.array_equal(action, c) for c in ([1, 1], [0.1, 0.1]))
    assert agent.stats["forks"] == 2  # the base's (1, 1) and one more
    env = _env("Priority")
    env.reset(seed=0)
    one = LookaheadAgent("Priority", candidates=["vllm-v1"])
    assert np.array_equal(one.act(env), PolicyAgent(make_policy("vllm-v1")).act(env))
    assert one.stats["forks"] == 0  # a single distinct candidate: nothing to try


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"task": "Juggle"}, "task must be one of"),
        ({"task": "Route", "base": "vllm-v1"}, "not a registered router for Route"),
        ({"task": "Preempt", "base": "round-robin"}, "not a registered scheduler for Preempt"),
        ({"task": "Preempt", "horizon_s": 0}, "horizon_s must be a finite number of seconds > 0"),
        ({"task": "Preempt", "horizon_s": -1.0}, "horizon_s must be"),
        ({"task": "Preempt", "horizon_s": float("inf")}, "horizon_s must be"),
        ({"task": "Preempt", "horizon_s": True}, "horizon_s must be"),
        ({"task": "Preempt", "horizon_s": "5"}, "horizon_s must be"),
        ({"task": "Route", "candidates": [0, 1]}, "Route tries every valid action"),
        ({"task": "Priority", "candidates": []}, "non-empty list of scheduler names"),
        ({"task": "Priority", "candidates": "vllm-v1"}, "non-empty list of scheduler names"),
        ({"task": "Priority", "candidates": ["fifo"]}, r"\['fifo'\] are not registered"),
        ({"task": "Knob", "candidates": [(1.0,)]}, "pairs"),
        ({"task": "Knob", "candidates": [(1.0, 1.5)]}, r"must lie in \[0, 1\]"),
        ({"task": "Knob", "candidates": "ab"}, "pairs"),
    ],
)
def test_bad_parameters_are_clear_errors(kwargs, match):
    task = kwargs.pop("task")
    with pytest.raises(ConfigError, match=match):
        LookaheadAgent(task, **kwargs)


def test_acting_in_another_task_is_a_clear_error():
    env = _env("Preempt")
    env.reset(seed=0)
    with pytest.raises(ConfigError, match="LookaheadAgent for Route cannot act in PreemptEnv"):
        LookaheadAgent("Route").act(env)


# -- the leaderboard harness -------------------------------------------------------------------
def _workload(task, seed=1):
    _, scenario, overrides = CASES[task]
    return Workload(
        suite="llmsched-v1", task=task, scenario_id="tiny", level="knee", base=scenario,
        source="tiny", split="test", seed=seed, window_s=None, rate_per_s=0.0,
        overrides=overrides, metric="e2e_s_mean",
    )  # fmt: skip


@pytest.mark.parametrize("task", ["Preempt", "Route", "Priority"])
def test_harness_runs_it_in_step_with_its_own_environment(task):
    # What the harness does: simulate the workload with the returned policy (or router). The
    # planner's environment must see every decision the harness's engine asks for.
    w = _workload(task)
    policy = lookahead(task, w)
    assert policy.oracle is True
    sc = w.scenario()
    if task == "Route":
        mine = sc.simulate(router=policy, seed=w.seed)
        base = sc.simulate(router="least-load:requests", seed=w.seed)
    else:
        mine = sc.simulate(policy, seed=w.seed)
        base = sc.simulate("vllm-v1", seed=w.seed)
    planner = policy.agent
    assert planner._ended  # the harness asked for every decision of the planner's episode
    assert planner.decisions > 0 and planner.agent.stats["decisions"] == planner.decisions
    assert mine.summary["num_finished"] == base.summary["num_finished"]
    assert mine.summary["e2e_s_mean"] <= base.summary["e2e_s_mean"] * (1 + 1e-12)


def test_lockstep_refuses_a_run_it_is_not_in():
    w = _workload("Preempt")
    policy = lookahead("Preempt", w)
    other = dataclasses.replace(w, seed=2)  # another workload: the observations differ
    with pytest.raises(PolicyError, match="observation .* differs from the planner's"):
        other.scenario().simulate(policy, seed=other.seed)
    env = _env("Preempt")
    planner = Lockstep(env, LookaheadAgent("Preempt"), seed=1)
    planner._ended = True
    with pytest.raises(PolicyError, match="ended its episode"):
        planner.predict(planner.obs)
    with pytest.raises(ConfigError, match="the workload .* is of Preempt"):
        lookahead("Route", w)


def test_harness_gives_the_workload_to_its_builtin_oracle_only(tmp_path):
    from llmsched_gym.errors import SandboxError
    from llmsched_gym.leaderboard.policy import resolve_policy
    from llmsched_gym.leaderboard.suite import load_suite

    suite = load_suite()
    task = suite.task("Preempt")
    (tmp_path / "peek.py").write_text(
        "from llmsched_gym.policies.registry import make_policy\n"
        "def make(task, workload):\n"
        "    return make_policy('vllm-v1')  # would see the judge's workload\n"
    )
    ref = resolve_policy(f"{tmp_path / 'peek.py'}:make", task)
    w = suite.workloads("test", tasks=["Preempt"], quick=True)[0]
    with pytest.raises(SandboxError, match="takes a workload; .* never sees the judge's workload"):
        ref.build(task, w.seed, w)
    oracle = resolve_policy("lookahead-oracle", task)
    assert oracle.build(task, w.seed, w).oracle is True
    with pytest.raises(ConfigError, match="runs only in the leaderboard harness"):
        oracle.build(task, w.seed)
