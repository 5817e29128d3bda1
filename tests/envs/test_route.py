"""Route: routers through the env equal simulate_cluster; the return is -scale * total latency."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence

import llmsched_gym.envs as E
from llmsched_gym.envs.registration import env_id
from llmsched_gym.errors import ConfigError
from llmsched_gym.scenarios.spec import load_scenario
from tests.envs.conftest import SMALL

CHAT4X = ("chat-azure-conv-4x-v0", {"workload.limit": 200})
HETERO2 = ("text2sql-hetero2-v0", {"workload.num_queries": 3})
PD = ("pd-azure-conv-v0", {"workload.limit": 120})


def _same_records(a, b) -> None:
    assert list(a.request_table) == list(b.request_table)
    for column in a.request_table:
        x, y = a.request_table[column], b.request_table[column]
        if x.dtype.kind in "fiub" and y.dtype.kind in "fiub":
            assert np.array_equal(x.astype(float), y.astype(float), equal_nan=True), column
        else:
            assert list(x) == list(y) or all(
                (u == v) or (u != u and v != v) for u, v in zip(x, y)
            ), column


def _total_latency(result) -> float:
    if result.jobs is not None:
        return math.fsum(result.jobs["latency_s"])
    return math.fsum(result.request_table["e2e_s"])


@pytest.mark.parametrize(
    ("scenario", "overrides", "router"),
    [
        (*CHAT4X, "least-load:backlog"),
        (*CHAT4X, "power-of-two:requests"),
        (*HETERO2, "round-robin"),
        (*HETERO2, "least-load:backlog"),
        (*PD, "round-robin"),
    ],
)
def test_router_through_env_equals_simulate_cluster(scenario, overrides, router) -> None:
    """Same records as simulate_cluster with that router; return = -scale * total latency."""
    if scenario == "pd-azure-conv-v0":  # not registered: a PD cluster
        env = E.RouteEnv(scenario, scenario_overrides=overrides)
    else:
        env = gym.make(env_id("Route", scenario), scenario_overrides=overrides)
    out = E.rollout(env, E.RouterAgent(router), seed=0)
    assert out["terminated"] and not out["truncated"]
    base = env.unwrapped
    ref = load_scenario(scenario, overrides).simulate(seed=0, router=router)
    mine = base.records()
    _same_records(mine, ref)
    assert out["steps"] == len(ref.request_table["request_id"]) == base.cluster.num_routed
    assert out["return"] == pytest.approx(-0.01 * _total_latency(ref), rel=1e-9, abs=1e-9)
    assert out["info"]["num_finished_units"] == base.ledger.num_units


@pytest.mark.parametrize(("scenario", "overrides"), [CHAT4X, HETERO2, PD])
def test_random_routing_return_is_total_latency_of_its_records(scenario, overrides) -> None:
    """Any routing: the return and info terms add up to -scale * total latency of the run."""
    env = E.RouteEnv(scenario, scenario_overrides=overrides, reward_scale=0.5)
    rng = np.random.default_rng(1)
    obs, _ = env.reset(seed=2)
    total = area = slo = 0.0
    done = False
    while not done:
        assert env.observation_space.contains(obs)
        assert np.array_equal(obs["mask"].astype(bool), env.action_masks())
        a = int(rng.choice(np.flatnonzero(env.action_masks())))
        obs, r, term, trunc, info = env.step(a)
        assert info["instance"] == a and not info["action_replaced"]
        total += r
        area += info["latency_area_s"]
        slo += info["reward_slo"]
        done = term or trunc
    assert term
    rec = env.records()
    expected = _total_latency(rec)
    assert total == pytest.approx(-0.5 * expected, rel=1e-9)
    assert area == pytest.approx(expected, rel=1e-9)
    met = rec.jobs["slo_met"] if rec.jobs is not None else rec.request_table["slo_met"]
    assert slo == pytest.approx(0.5 * float(np.nansum(np.asarray(met, dtype=float))))


def test_rewards_are_latency_accrued_between_decisions() -> None:
    """Each reward is -scale * (L(t_next) - L(t)) with L from the finished records."""
    scenario, overrides = CHAT4X
    env = E.RouteEnv(scenario, scenario_overrides=overrides, reward_scale=1.0)
    env.reset(seed=0)
    agent = E.RouterAgent("round-robin")
    times = [env.decision.now]
    rewards = []
    done = False
    while not done:
        _, r, term, trunc, info = env.step(agent.act(env))
        times.append(info["time_s"])
        rewards.append(r)
        done = term or trunc
    rec = env.records()
    arr = np.asarray(rec.request_table["arrival_time_s"], float)
    fin = np.asarray(rec.request_table["finish_time_s"], float)

    def area(t: float) -> float:
        return float(np.sum(np.clip(np.minimum(fin, t) - arr, 0.0, None)))

    for k in (0, len(rewards) // 3, len(rewards) // 2, len(rewards) - 1):
        assert rewards[k] == pytest.approx(-(area(times[k + 1]) - area(times[k])), abs=1e-7)


def test_agent_router_in_simulate_equals_env_rollout() -> None:
    """A trained agent as a Router sees the env's observations: same choices, same records."""
    scenario, overrides = CHAT4X

    def least_backlog(obs):  # lowest backlog column among candidates
        backlog = np.where(obs["mask"] > 0, obs["instances"][:, 4], np.inf)
        return int(np.argmin(backlog))

    env = E.RouteEnv(scenario, scenario_overrides=overrides)
    E.rollout(env, least_backlog, seed=0)
    res = load_scenario(scenario, overrides).simulate(seed=0, router=E.AgentRouter(least_backlog))
    _same_records(env.records(), res)
    assert res.router == "agent:Route"


def test_agent_router_rejects_masked_choice() -> None:
    scenario, overrides = PD
    with pytest.raises(E.InvalidActionError, match="candidates"):
        load_scenario(scenario, overrides).simulate(seed=0, router=E.AgentRouter(lambda obs: 3))


def test_masked_instance_raises_when_strict_else_is_replaced() -> None:
    scenario, overrides = PD  # one prefill instance (index 0) takes new requests
    env = E.RouteEnv(scenario, scenario_overrides=overrides, strict_masks=True)
    env.reset(seed=0)
    assert env.action_masks().tolist() == [True, False, False, False]
    with pytest.raises(E.InvalidActionError, match="masked"):
        env.step(2)
    with pytest.raises(E.InvalidActionError, match="out of range"):
        env.step(4)
    lenient = E.RouteEnv(scenario, scenario_overrides=overrides)
    lenient.reset(seed=0)
    _, _, _, _, info = lenient.step(2)
    assert info["action_replaced"] and info["instance"] == 0


def test_truncation_by_time_and_steps() -> None:
    scenario, overrides = CHAT4X
    env = E.RouteEnv(scenario, scenario_overrides=overrides, max_sim_time_s=5.0)
    env.reset(seed=0)
    done = False
    while not done:
        _, _, term, trunc, info = env.step(int(np.flatnonzero(env.action_masks())[0]))
        done = term or trunc
    assert trunc and not term and info["time_s"] >= 5.0
    env = E.RouteEnv(scenario, scenario_overrides=overrides, max_episode_steps=7)
    env.reset(seed=0)
    for _ in range(7):
        _, _, term, trunc, _ = env.step(0)
    assert trunc and not term
    with pytest.raises(gym.error.ResetNeeded):
        env.step(0)


def test_same_seed_same_trajectory_and_oracle_column() -> None:
    scenario = "chat-azure-conv-4x-v0"

    def run(**kw):
        env = E.RouteEnv(scenario, scenario_overrides=SMALL[scenario], **kw)
        obs, _ = env.reset(seed=3)
        out = [obs]
        for i in range(30):
            obs, r, term, trunc, _ = env.step(i % 4)
            out.append((obs, r))
            if term or trunc:
                break
        return env, out

    (_, a), (_, b) = run(), run()
    assert data_equivalence(a, b, exact=True)
    env, c = run(oracle=True)
    assert env.observation_space["request"].shape == (9,)
    assert a[0]["request"].shape == (8,) and c[0]["request"][8] > 0
    assert a[0]["instances"].shape == (4, 11)


def test_scenario_kind_checked() -> None:
    with pytest.raises(ConfigError, match="no cluster section"):
        E.RouteEnv("chat-azure-conv-v0")
    with pytest.raises(ConfigError, match="Route"):
        E.PriorityEnv("chat-azure-conv-4x-v0")


def test_render_ansi() -> None:
    env = E.RouteEnv(
        "text2sql-hetero2-v0", scenario_overrides=SMALL["text2sql-hetero2-v0"], render_mode="ansi"
    )
    env.reset(seed=0)
    text = env.render()
    assert text.startswith("Route t=") and "l40s" in text and "backlog=" in text
