"""``RecordTimeline``: an episode's schedule timeline, the same as ``simulate``'s."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import llmsched_gym.envs as E
from llmsched_gym.envs.registration import env_id
from llmsched_gym.envs.timeline import RecordTimeline
from llmsched_gym.errors import ConfigError
from llmsched_gym.metrics.timeline import check_trace
from llmsched_gym.policies.registry import make_policy
from llmsched_gym.scenarios.spec import load_scenario

CHAT = ("chat-azure-conv-v0", {"workload.limit": 40})
CHAT4X = ("chat-azure-conv-4x-v0", {"workload.limit": 40})


def _requests(trace) -> list:
    """The request lanes' events, without the process they sit in."""
    return sorted(
        (e["tid"], e["ts"], e["dur"], e["cat"], e["name"], json.dumps(e["args"], sort_keys=True))
        for e in trace["traceEvents"]
        if e["ph"] == "X" and e["tid"] > 0
    )


def test_an_episode_under_vllm_v1_draws_the_timeline_simulate_draws(tmp_path) -> None:
    name, overrides = CHAT
    env = RecordTimeline(gym.make(env_id("Priority", name), scenario_overrides=overrides))
    E.rollout(env, E.PolicyAgent(make_policy("vllm-v1")), seed=0)
    trace = env.timeline()
    check_trace(trace)
    assert trace["otherData"]["task"] == "Priority" and trace["otherData"]["seed"] == 0
    sim = load_scenario(name, overrides).simulate(timeline=True)
    assert _requests(trace) == _requests(sim.timeline)
    statuses = {e["args"]["status"] for e in trace["traceEvents"] if e.get("cat") == "request"}
    assert statuses == {"finished"}
    path = env.write_timeline(tmp_path / "episode.json")
    assert json.loads(path.read_text()) == trace
    env.close()
    assert env.unwrapped.engine_hooks == []


def test_a_timeline_mid_episode_and_a_fresh_one_at_reset() -> None:
    name, overrides = CHAT
    env = RecordTimeline(gym.make(env_id("Priority", name), scenario_overrides=overrides))
    with pytest.raises(ConfigError, match="reset"):
        env.timeline()
    env.reset(seed=1)
    for _ in range(5):
        env.step(env.action_space.sample())
    first = env.timeline()
    check_trace(first)
    statuses = [e["args"]["status"] for e in first["traceEvents"] if e.get("cat") == "request"]
    assert "unfinished" in statuses
    env.reset(seed=1)
    again = env.timeline()
    steps = [e for e in again["traceEvents"] if e.get("cat") == "step"]
    assert len(steps) < len([e for e in first["traceEvents"] if e.get("cat") == "step"])


def test_route_draws_one_process_per_instance() -> None:
    name, overrides = CHAT4X
    env = RecordTimeline(gym.make(env_id("Route", name), scenario_overrides=overrides))
    E.rollout(env, E.RouterAgent("round-robin"), seed=0)
    trace = env.timeline()
    check_trace(trace)
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert len(names) == env.unwrapped.num_instances > 1
    assert sum(1 for e in trace["traceEvents"] if e.get("cat") == "request") == 40


def test_only_llmsched_environments_are_wrapped() -> None:
    with pytest.raises(ConfigError, match="wraps llmsched environments"):
        RecordTimeline(gym.make("CartPole-v1"))
