"""The cluster as a PettingZoo ParallelEnv: API test, and exact against simulate_cluster."""

from __future__ import annotations

import warnings

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


def _simulated_return(router: str, seed: int) -> float:
    sc = load_scenario("chat-azure-conv-4x-v0", OVERRIDES)
    result = sc.simulate(router=router, seed=sc.seed + seed)
    e2e = result.request_table["finish_time_s"] - result.request_table["arrival_time_s"]
    return -0.01 * float(np.sum(e2e))


def test_agent_group_vecenv_drives_the_router_exactly():
    """The router as the VecEnv's only member, fed least-load:backlog's choices, reproduces
    simulate_cluster; the episode's end resets onto the next seed with a terminal observation."""
    pytest.importorskip("stable_baselines3")
    from llmsched_gym.envs.sb3_multi_agent import AgentGroupVecEnv, default_knobs, router_actor

    env = ClusterParallelEnv(scenario_overrides=OVERRIDES)
    knobs = {a: default_knobs for a in env.possible_agents if a != "router"}
    venv = AgentGroupVecEnv(env, ["router"], knobs, seeds=[3, 5])
    pick = router_actor(env, "least-load:backlog")
    obs = venv.reset()
    assert obs["instances"].shape[0] == 1 and venv.action_masks().shape == (1, 4)
    done, total = False, 0.0
    while not done:
        obs, reward, dones, infos = venv.step(np.array([pick(None, {})]))
        total += float(reward[0])
        done = bool(dones[0])
    expected = _simulated_return("least-load:backlog", 3)
    assert infos[0]["episode"]["r"] == pytest.approx(expected, rel=1e-9)
    assert total == pytest.approx(expected, rel=1e-6)  # SB3's float32 step rewards
    assert set(infos[0]["terminal_observation"]) == set(obs)
    assert venv.episode_returns == [infos[0]["episode"]["r"]]


def test_agent_group_vecenv_shares_one_policy_over_the_instances():
    pytest.importorskip("stable_baselines3")
    from llmsched_gym.envs.sb3_multi_agent import AgentGroupVecEnv, router_actor

    env = ClusterParallelEnv(scenario_overrides=OVERRIDES)
    group = [a for a in env.possible_agents if a != "router"]
    with warnings.catch_warnings():  # SB3 reads render_mode through get_attr: no warning
        warnings.simplefilter("error")
        venv = AgentGroupVecEnv(env, group, {"router": router_actor(env, "round-robin")}, seeds=[1])
    obs = venv.reset()
    assert venv.num_envs == 4 and obs["requests"].shape[0] == 4
    obs, reward, dones, _ = venv.step(np.ones((4, 2), np.float32))
    assert len(set(reward.tolist())) == 1 and not dones.any()
    with pytest.raises(ConfigError, match="no action mask"):
        venv.action_masks()


def test_agent_group_vecenv_rejects_bad_groups():
    pytest.importorskip("stable_baselines3")
    from llmsched_gym.envs.sb3_multi_agent import AgentGroupVecEnv, default_knobs

    env = ClusterParallelEnv(scenario_overrides=OVERRIDES)
    knobs = {a: default_knobs for a in env.possible_agents if a != "router"}
    with pytest.raises(ConfigError, match=r"unknown agent\(s\) \['pilot'\]"):
        AgentGroupVecEnv(env, ["pilot"], knobs)
    with pytest.raises(ConfigError, match="both learning and fixed"):
        AgentGroupVecEnv(env, ["instance_0"], knobs)
    with pytest.raises(ConfigError, match=r"\['instance_3'\] neither learn"):
        AgentGroupVecEnv(env, ["router"], {a: knobs[a] for a in list(knobs)[:3]})
    with pytest.raises(ConfigError, match="different spaces"):
        AgentGroupVecEnv(env, ["router", "instance_0"], {a: knobs[a] for a in list(knobs)[1:]})
    with pytest.raises(ConfigError, match="at least one seed"):
        AgentGroupVecEnv(env, ["router"], knobs, seeds=[])


@pytest.mark.slow
def test_independent_cluster_recipe_runs(tmp_path):
    pytest.importorskip("sb3_contrib")
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "baselines"
    sys.path.insert(0, str(root))
    spec = importlib.util.spec_from_file_location("indep", root / "independent_cluster.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = ["--router-steps", "128", "--knob-steps", "64", "--n-steps", "64", "--max-requests",
            "40", "--test-workloads", "2", "--train-workloads", "3", "--out", str(tmp_path)]  # fmt: skip
    assert module.main(argv) == 0
    text = (tmp_path / "summary.md").read_text()
    assert "least-load:backlog + vLLM knobs | 1.000" in text
    assert (tmp_path / "router.zip").is_file() and (tmp_path / "learning_curve.png").is_file()
