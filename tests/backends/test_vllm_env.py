"""``gym.make(..., backend="vllm")``: the Priority environment on a live vLLM engine.

The live tests (marked ``live``) share one environment, hence one engine (built once, about 20 s
on two shared cores); the conftest's engine slot is emptied first so that never two engines are
alive. The other tests run in the default environment, without vLLM.
"""

from __future__ import annotations

import importlib.util
import json
import math
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

import llmsched_gym.envs  # noqa: F401  (registers the ids)
from llmsched_gym.config import EngineConfig
from llmsched_gym.core.request import RequestSpec, RequestStatus
from llmsched_gym.errors import ConfigError

HAS_VLLM = importlib.util.find_spec("vllm") is not None
SKIP_REASON = "vLLM is not installed here: run .ci/setup_vllm_venv.sh and use .venv-vllm/bin/python"

ENV_ID = "llmsched/Priority-ChatAzureConv-v0"
# Eight requests of the Azure trace arriving within microseconds (the schedule then cannot
# depend on step times), and a KV cache of 1536 tokens: too small for them, so steps preempt.
OVERRIDES = {"workload.limit": 8, "workload.rate_per_s": 1e6}
LIVE_KV_TOKENS = 1536


# -- without vLLM --------------------------------------------------------------------------------
def test_unknown_backend_is_rejected():
    with pytest.raises(ConfigError, match="backend must be one of"):
        gym.make(ENV_ID, backend="tpu")


def test_vllm_backend_without_vllm_names_what_to_install(monkeypatch):
    from llmsched_gym.backends.vllm import INSTALL_HINT, _deps

    monkeypatch.setattr(_deps, "vllm_available", lambda: False)
    with pytest.raises(ImportError) as err:
        gym.make(ENV_ID, backend="vllm", scenario_overrides=OVERRIDES)
    assert INSTALL_HINT in str(err.value)
    assert "llmsched-gym[vllm]" in str(err.value) and ".ci/setup_vllm_venv.sh" in str(err.value)


def test_only_the_priority_task_runs_live_and_live_options_need_it():
    with pytest.raises(ConfigError, match="Select environment runs on 'sim'"):
        gym.make("llmsched/Select-ChatAzureConv-v0", backend="vllm")
    with pytest.raises(ConfigError, match="need backend='vllm'"):
        gym.make(ENV_ID, live_clock="wall")


def test_the_simulator_env_stays_deterministic():
    env = gym.make(ENV_ID, scenario_overrides=OVERRIDES)
    assert env.unwrapped.backend == "sim"
    assert env.unwrapped.spec.nondeterministic is False
    env.close()


def test_live_engine_config_scales_the_scenario():
    from llmsched_gym.envs.live import live_engine_config

    scenario = EngineConfig(max_num_batched_tokens=8192, max_num_seqs=256, block_size=16,
                            num_gpu_blocks=28800, long_prefill_token_threshold=100000)  # fmt: skip
    specs = [RequestSpec("a", 0.0, 1000, 60, 100), RequestSpec("b", 1.0, 300, 900, 50)]
    cfg = live_engine_config(scenario, specs, max_kv_tokens=4096, cpu=True)
    e = cfg.engine
    assert cfg.max_model_len == 1088  # 1060 tokens rounded up to blocks of 32
    assert (e.block_size, e.num_gpu_blocks) == (32, 4096 // 32 + 1)
    assert (e.max_num_batched_tokens, e.max_num_seqs) == (8192, 256)
    assert e.scheduling_policy == "priority" and e.long_prefill_token_threshold == 1088
    # never below one request of max_model_len; the scenario's own capacity when smaller
    assert (
        live_engine_config(scenario, specs, max_kv_tokens=64, cpu=True).engine.num_gpu_blocks == 35
    )
    small = scenario.replace(num_gpu_blocks=101)
    assert live_engine_config(small, specs, cpu=False).engine.num_gpu_blocks == 101
    assert live_engine_config(small, specs, cpu=False).engine.block_size == 16


def _req(rid, status, seq, stamp=-1, arrival=0.0, priority=0):
    return SimpleNamespace(request_id=rid, status=status, seq=seq, preempt_stamp=stamp,
                           arrival_time=arrival, priority=priority)  # fmt: skip


def test_score_policy_ranks_rows_first_then_the_default_order():
    from llmsched_gym.envs.live import LiveScorePolicy, fcfs_key
    from llmsched_gym.envs.priority_v0 import set_scores

    W, R, P = RequestStatus.WAITING, RequestStatus.RUNNING, RequestStatus.PREEMPTED
    waiting = sorted([_req("w1", W, 1, arrival=1.0), _req("p1", P, 0, stamp=0),
                      _req("p2", P, 2, stamp=1), _req("w3", W, 3, arrival=3.0)], key=fcfs_key)  # fmt: skip
    assert [r.request_id for r in waiting] == ["p2", "p1", "w1", "w3"]
    running = [_req(f"r{i}", R, 10 + i) for i in range(3)]
    inst = SimpleNamespace(waiting=waiting, running=running)
    policy = LiveScorePolicy()
    # rows: the first two waiting requests, then the first two running ones
    visible = waiting[:2] + running[:2]
    set_scores(policy, visible, np.array([0.1, 0.9, 0.5, -0.5]), inst)
    policy.prepare(inst)
    order = sorted(waiting, key=policy.priority_key)
    assert [r.request_id for r in order] == ["p1", "p2", "w1", "w3"]
    # vLLM preempts the max victim_key: the invisible r2 first (as the simulator's
    # PriorityPolicy: rows first, the rest after them), then r1 (lowest score), then r0
    victims = sorted(running, key=policy.victim_key, reverse=True)
    assert [r.request_id for r in victims] == ["r2", "r1", "r0"]
    # without scores (fast-forwarded steps): queue order and admission order
    policy.prepare(inst)
    assert sorted(waiting, key=policy.priority_key) == waiting
    assert max(running, key=policy.victim_key).request_id == "r2"


# -- live ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def live_env(request):
    if not HAS_VLLM:
        pytest.skip(SKIP_REASON)
    live_engines = request.getfixturevalue("live_engines")
    live_engines.close()  # at most one engine alive
    env = gym.make(ENV_ID, backend="vllm", scenario_overrides=OVERRIDES,
                   live_max_kv_tokens=LIVE_KV_TOKENS)  # fmt: skip
    yield env
    env.close()


@pytest.mark.live
@pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)
def test_live_episode_has_the_simulators_spaces_and_rewards(live_env):
    sim = gym.make(ENV_ID, scenario_overrides=OVERRIDES)
    assert live_env.observation_space == sim.observation_space
    assert live_env.action_space == sim.action_space
    sim.close()
    env = live_env.unwrapped
    assert env.spec.nondeterministic is True
    obs, info = live_env.reset(seed=0)
    assert live_env.observation_space.contains(obs)
    assert info["num_waiting"] == 1 and obs["mask"].sum() == 1
    rng = np.random.default_rng(0)
    rewards, steps, terminated, truncated = [], 0, False, False
    while not (terminated or truncated):
        action = rng.uniform(-1, 1, live_env.action_space.shape).astype(np.float32)
        obs, reward, terminated, truncated, info = live_env.step(action)
        assert live_env.observation_space.contains(obs)
        assert math.isfinite(reward)
        rewards.append(reward)
        steps += 1
        assert steps < 2000
    assert terminated and not truncated
    assert info["num_finished_requests"] == 8 and info["num_running"] == 0
    assert info["time_s"] == env.engine.now > 0
    res = env.engine.run.result()
    assert res.summary["num_finished"] == 8
    # the latency reward telescopes to -scale * total end-to-end latency of the live records
    e2e = float(res.requests["e2e_s"].sum())
    assert sum(rewards) == pytest.approx(-0.01 * e2e, rel=1e-9)
    assert env.engine.num_steps > steps  # steps without a decision were fast-forwarded


@pytest.mark.live
@pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)
def test_row_order_scores_reproduce_vllm_v1_on_the_live_engine(live_env, tmp_path):
    """Scores in row order (PolicyAgent over vllm-v1) make vLLM schedule as the simulator's
    vllm-v1, step for step, preemptions included: waiting ranks follow the FCFS queue and the
    victim is the last admitted running request."""
    from llmsched_gym.backends.vllm.tokens import with_token_ids
    from llmsched_gym.envs import PolicyAgent, rollout
    from llmsched_gym.policies.registry import make_policy
    from llmsched_gym.simulation import simulate

    out = rollout(live_env, PolicyAgent(make_policy("vllm-v1")), seed=0)
    assert out["terminated"]
    env = live_env.unwrapped
    live = env.engine.run.result().schedule_log()
    engine = env._live.engine
    specs = with_token_ids(env.items, engine.config.tiny.vocab_size)
    config = engine.config.engine.replace(scheduling_policy="fcfs")
    path = tmp_path / "sim.jsonl"
    simulate(specs, config=config, scheduler="vllm-v1", cost_model="constant:0.01",
             schedule_log=path)  # fmt: skip
    log = [json.loads(x) for x in path.read_text().splitlines()]
    keys = ("scheduled", "new", "resumed", "preempted", "finished", "num_free_blocks")
    assert [{k: a[k] for k in keys} for a in live] == [{k: b[k] for k in keys} for b in log]
    assert sum(len(x["preempted"]) for x in live) > 0


@pytest.mark.live
@pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)
def test_gymnasium_check_env_passes_on_the_live_env(live_env):
    from gymnasium.utils.env_checker import check_env

    # Other render modes would build a second environment (and engine): not checked here.
    check_env(live_env.unwrapped, skip_render_check=True)
    assert live_env.unwrapped.render() is not None
