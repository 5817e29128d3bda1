"""The cluster as a PettingZoo ParallelEnv: API test, and exact against simulate_cluster."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="PettingZoo is in the rl extra: pip install -e '.[rl]'")

from pettingzoo.test import parallel_api_test  # noqa: E402

from llmsched_gym.envs.adapters import RouterAgent  # noqa: E402
from llmsched_gym.envs.multi_agent import ClusterParallelEnv  # noqa: E402
from llmsched_gym.errors import ConfigError  # noqa: E402
from llmsched_gym.scenarios.spec import load_scenario  # noqa: E402

OVERRIDES = {"workload.num_requests": 80}


def test_parallel_api():
    parallel_api_test(ClusterParallelEnv(scenario_overrides=OVERRIDES), num_cycles=200)


def test_full_knobs_and_a_router_reproduce_simulate_cluster():
    env = ClusterParallelEnv(scenario_overrides=OVERRIDES)
    router = RouterAgent("least-load:backlog")
    obs, infos = env.reset(seed=3)
    total = 0.0
    while env.agents:
        actions = {a: np.ones(2, np.float32) for a in env.agents if a != "router"}
        actions["router"] = router.act(env._route)
        obs, rewards, term, trunc, infos = env.step(actions)
        assert len(set(rewards.values())) == 1  # a shared team reward
        total += rewards["router"]
    sc = load_scenario("chat-azure-conv-4x-v0", OVERRIDES)
    result = sc.simulate(router="least-load:backlog", seed=sc.seed + 3)
    e2e = result.request_table["finish_time_s"] - result.request_table["arrival_time_s"]
    assert total == pytest.approx(-0.01 * float(np.sum(e2e)), rel=1e-9)


def test_small_knobs_change_the_outcome_and_bad_steps_are_errors():
    env = ClusterParallelEnv(scenario_overrides=OVERRIDES)

    def episode(knob):
        env.reset(seed=0)
        total = 0.0
        while env.agents:
            actions = {a: np.full(2, knob, np.float32) for a in env.agents if a != "router"}
            actions["router"] = int(np.flatnonzero(env._route.action_masks())[0])
            total += env.step(actions)[1]["router"]
        return total

    assert episode(0.02) != episode(1.0)
    env.reset(seed=0)
    with pytest.raises(ConfigError, match=r"missing \['instance_0'"):
        env.step({"router": 0})
