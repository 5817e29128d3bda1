"""Adapters both ways, and the reward proof: return == -scale * sum(e2e) of the same run."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import llmsched_gym.envs as E
from llmsched_gym.envs.registration import TASKS, env_id
from llmsched_gym.metrics.table import request_columns
from llmsched_gym.policies.registry import make_policy
from llmsched_gym.scenarios.spec import load_scenario

CHAT = {"workload.limit": 150}
# Enough requests at t = 0 that KV blocks run out and vLLM preempts.
OFFLINE = {"workload.num_requests": 300}


def run_env(task: str, scenario: str, overrides: dict, **kw):
    env = gym.make(env_id(task, scenario), scenario_overrides=overrides, **kw)
    out = E.rollout(env, E.PolicyAgent(make_policy("vllm-v1")), seed=0)
    return env.unwrapped, out


@pytest.mark.parametrize(
    ("task", "scenario", "overrides"),
    [
        ("Priority", "chat-azure-conv-v0", CHAT),
        ("Select", "chat-azure-conv-v0", CHAT),
        ("Knob", "chat-azure-conv-v0", CHAT),
        ("Preempt", "infermax-offline-v0", OFFLINE),
        ("Priority", "infermax-offline-v0", OFFLINE),
        pytest.param("Select", "infermax-offline-v0", OFFLINE, marks=pytest.mark.slow),
        ("Preempt", "priority-sharegpt-v0", {"workload.num_requests": 150}),
        ("Select", "relquery-rotten-v0", {"workload.num_queries": 4}),
    ],
)
def test_vllm_v1_through_env_equals_simulate(task: str, scenario: str, overrides: dict) -> None:
    """Same records as `simulate` on the same scenario and seed; return = -scale * sum(e2e)."""
    env, out = run_env(task, scenario, overrides)
    assert out["terminated"]
    sim = load_scenario(scenario, overrides).simulate(seed=0)
    rows = request_columns(env.engine.finished)
    sim_table = sim.request_table
    for column, values in rows.items():
        assert list(sim_table[column]) == values or np.array_equal(
            np.asarray(sim_table[column], dtype=float), np.asarray(values, dtype=float), True
        ), column
    if sim.jobs is not None:
        total = math.fsum(sim.jobs["latency_s"])
    else:
        total = math.fsum(sim.request_table["e2e_s"])
    assert out["return"] == pytest.approx(-env.reward_scale * total, rel=1e-9, abs=1e-9)
    if task == "Preempt" and scenario == "infermax-offline-v0":
        assert sim.summary["num_preemptions"] > 0 and out["steps"] > 1


def test_priority_env_metric_equals_simulate_cli_metric(tmp_path) -> None:
    """The env's records summarise to the same metrics as `llmsched-gym simulate`."""
    from llmsched_gym.metrics.summary import summary_values
    from llmsched_gym.metrics.table import request_table

    env, out = run_env("Priority", "chat-azure-conv-v0", CHAT)
    sim = load_scenario("chat-azure-conv-v0", CHAT).simulate(seed=0)
    mine = summary_values(request_table(request_columns(env.engine.finished)))
    theirs = summary_values(sim.request_table)
    for key in ("e2e_s_mean", "ttft_s_p99", "goodput", "slo_attainment", "num_preemptions"):
        assert mine[key] == theirs[key] or (math.isnan(mine[key]) and math.isnan(theirs[key]))
    n = mine["num_finished"]
    assert out["return"] == pytest.approx(-0.01 * mine["e2e_s_mean"] * n, rel=1e-9)


@pytest.mark.parametrize("reward", ["slo", "goodput"])
def test_slo_rewards_count_the_metric(reward: str) -> None:
    scenario, overrides = "priority-sharegpt-v0", {"workload.num_requests": 150}
    env, out = run_env("Priority", scenario, overrides, reward=reward, reward_scale=1.0)
    sim = load_scenario(scenario, overrides).simulate(seed=0)
    s = sim.summary
    if reward == "slo":
        num_slo = int(np.sum(~np.isnan(sim.request_table["slo_ttft_s"])))
        expected = s["slo_attainment"] * num_slo
    else:
        expected = s["goodput"] * s["duration_s"]
    assert out["return"] == pytest.approx(expected, rel=1e-9)
    assert out["info"]["num_slo_met"] >= 0


def test_job_reward_is_total_job_latency() -> None:
    env, out = run_env("Priority", "relquery-rotten-v0", {"workload.num_queries": 4})
    sim = load_scenario("relquery-rotten-v0", {"workload.num_queries": 4}).simulate(seed=0)
    assert env.ledger.has_jobs and env.ledger.num_closed == 4
    assert out["return"] == pytest.approx(-0.01 * math.fsum(sim.jobs["latency_s"]), rel=1e-9)


def test_reward_terms_in_info_sum_to_return() -> None:
    env = gym.make(env_id("BatchType", "chat-azure-conv-v0"), scenario_overrides=CHAT)
    env.reset(seed=1)
    total = latency = area = 0.0
    done = False
    while not done:
        _, r, term, trunc, info = env.step(0)
        total += r
        latency += info["reward_latency"]
        area += info["latency_area_s"]
        done = term or trunc
    assert total == pytest.approx(latency) and latency == pytest.approx(-0.01 * area)


def _row_order_agent(obs):
    k = obs["mask"].shape[0]
    return np.linspace(1.0, -1.0, k, dtype=np.float32)


@pytest.mark.parametrize("task", list(TASKS))
def test_agent_policy_in_simulate(task: str) -> None:
    """A trained agent as a SchedulingPolicy; the vLLM-equivalent agent reproduces vllm-v1."""
    sc = load_scenario("chat-azure-conv-v0", CHAT)
    agents = {
        "Priority": _row_order_agent,
        "BatchType": lambda obs: 0,
        "Select": None,
        "Preempt": lambda obs: 0,
        "Knob": lambda obs: np.ones(2, np.float32),
    }
    env_class = getattr(E, f"{task}Env")
    if task == "Select":

        class Masked:  # first candidate while valid, else close (vLLM's order)
            def predict(self, obs, deterministic=True, action_masks=None):
                return (0 if action_masks[0] else 16), None

        agents["Select"] = Masked()
    policy = E.AgentPolicy(env_class, agents[task])
    res = sc.simulate(policy, seed=0)
    ref = sc.simulate(seed=0)
    assert res.summary["num_finished"] == ref.summary["num_finished"]
    if task != "BatchType":
        assert np.array_equal(
            res.request_table["finish_time_s"], ref.request_table["finish_time_s"]
        )
    assert res.scheduler == f"agent:{task}"


def test_policy_agent_rejects_non_policies() -> None:
    from llmsched_gym.errors import ConfigError

    with pytest.raises(ConfigError):
        E.PolicyAgent("vllm-v1")
    with pytest.raises(ConfigError):
        E.AgentPolicy(object, lambda o: 0)
