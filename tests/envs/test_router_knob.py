"""Knob on a cluster (HexGen's alpha per window): exact with a fixed alpha, and alpha matters."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import llmsched_gym.envs as E
from llmsched_gym.envs.base import InvalidActionError
from llmsched_gym.envs.registration import env_id
from llmsched_gym.errors import ConfigError
from llmsched_gym.scenarios.spec import load_scenario
from tests.envs.test_route import _same_records, _total_latency

SCENARIO = "hexgen-hetero1-trace1-v0"
OVERRIDES = {"workload.num_queries": 6}


def _episode(env, alpha: float | None, seed: int = 0) -> tuple[float, int, dict]:
    _, info = env.reset(seed=seed)
    a = info["alpha"] if alpha is None else alpha
    total, steps = 0.0, 0
    while True:
        _, r, term, trunc, info = env.step(np.array([a], np.float32))
        total += r
        steps += 1
        if term or trunc:
            assert term and not trunc
            return total, steps, info


def test_scenario_alpha_through_env_equals_simulate() -> None:
    """Holding the scenario's alpha gives simulate's records; return = -scale * job latency."""
    env = gym.make(env_id("Knob", SCENARIO), scenario_overrides=OVERRIDES, window_s=5.0)
    total, steps, _ = _episode(env, None)
    assert steps > 1  # several windows
    ref = load_scenario(SCENARIO, OVERRIDES).simulate(seed=0)
    got = env.unwrapped.records()
    _same_records(got, ref)
    assert total == pytest.approx(-0.01 * _total_latency(ref), rel=1e-9)


def test_alpha_changes_the_routing() -> None:
    env = E.RouterKnobEnv(SCENARIO, scenario_overrides=OVERRIDES, window_s=5.0)
    routes = []
    for alpha in (0.0, 1.0):
        _episode(env, alpha)
        routes.append(list(env.records().request_table["instance_id"]))
    assert routes[0] != routes[1]


def test_router_knob_contract() -> None:
    env = E.RouterKnobEnv(SCENARIO, scenario_overrides=OVERRIDES)
    assert env.action_space.shape == (1,)
    env.reset(seed=0)
    with pytest.raises(InvalidActionError, match="finite"):
        env.step(np.array([math.nan]))
    with pytest.raises(InvalidActionError, match="shape"):
        env.step(np.array([0.1, 0.2]))
    _, _, _, _, info = env.step(np.array([7.0]))  # clipped, documented
    assert info["alpha"] == 1.0
    with pytest.raises(ConfigError, match="set_alpha"):
        E.RouterKnobEnv("text2sql-hetero1-v0", scenario_overrides={"workload.num_queries": 2})
    with pytest.raises(ConfigError, match="window_s"):
        E.RouterKnobEnv(SCENARIO, window_s=0)
