"""Gymnasium contract of every registered environment: check_env, determinism, vector envs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import llmsched_gym.envs as E
from llmsched_gym.envs.registration import (
    CLUSTER_SCENARIOS,
    CLUSTER_TASKS,
    PAPER_PAIRS,
    SCENARIOS,
    TASKS,
    env_id,
    registered_ids,
)
from llmsched_gym.policies.registry import make_policy
from tests.envs.conftest import SMALL


def make(task: str, scenario: str = "chat-azure-conv-v0", **kw):
    return gym.make(env_id(task, scenario), scenario_overrides=SMALL[scenario], **kw)


def test_ids_registered() -> None:
    ids = registered_ids()
    assert "llmsched/Priority-ChatAzureConv-v0" in ids
    assert "llmsched/Knob-InfermaxOffline-v0" in ids
    assert "llmsched/Route-ChatAzureConv4x-v0" in ids
    assert "llmsched/Route-Text2sqlHetero1-v0" in ids
    assert "llmsched/BatchType-RelserveLlamaPdmx-v0" in ids
    assert "llmsched/Route-ProservePdSharegpt-v0" in ids
    assert "llmsched/Route-HexgenHetero2Trace3-v0" in ids
    grid = len(TASKS) * len(SCENARIOS) + len(CLUSTER_TASKS) * len(CLUSTER_SCENARIOS)
    assert len(ids) == len(set(ids)) == grid + len(PAPER_PAIRS)
    assert all(i in gym.registry for i in ids)


@pytest.mark.parametrize("eid", registered_ids())
def test_check_env(eid: str) -> None:
    task = eid.split("/")[1].split("-")[0]
    scenarios = (*SCENARIOS, *CLUSTER_SCENARIOS, *(s for _, s in PAPER_PAIRS))
    scenario = next(s for s in scenarios if env_id(task, s) == eid)
    env = gym.make(eid, scenario_overrides=SMALL[scenario])
    check_env(env.unwrapped, skip_render_check=True)


def test_overload_scenario_decisions_matter() -> None:
    """The recipes' training scenario has contention: the order of the batch changes latency."""
    env = gym.make(
        "llmsched/Priority-ChatSharegptOverload-v0",
        scenario_overrides={"workload.num_requests": 150},
    )
    fcfs = E.rollout(env, E.PolicyAgent(make_policy("vllm-v1")), seed=0)["return"]
    # Shortest first: score = -(prompt tokens + tokens left to compute), both squashed columns.
    shortest = E.rollout(env, lambda obs: -obs["requests"][:, 1] - obs["requests"][:, 10], seed=0)
    assert shortest["return"] > fcfs * 0.95  # returns are negative: at least 5% less latency


def _trajectory(env, seed: int, n: int = 60) -> list:
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    out = [obs]
    for _ in range(n):
        masks = getattr(env.unwrapped, "action_masks", None)
        if masks is not None:
            valid = np.flatnonzero(masks())
            action = int(valid[len(out) % len(valid)])
        else:
            action = env.action_space.sample()
        obs, r, term, trunc, info = env.step(action)
        out.append((obs, r, info["time_s"]))
        if term or trunc:
            break
    return out


@pytest.mark.parametrize("task", list(TASKS))
def test_same_seed_same_trajectory(task: str) -> None:
    a = _trajectory(make(task), 3)
    b = _trajectory(make(task), 3)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert gym.utils.env_checker.data_equivalence(x, y, exact=True)
    c = make(task)
    c.reset(seed=4)
    assert c.unwrapped.workload_seed == 4  # scenario seed 0 + 4


@pytest.mark.parametrize("task", list(TASKS))
def test_observations_finite_and_in_space(task: str) -> None:
    env = make(task, top_k=4)
    obs, _ = env.reset(seed=0)
    for _ in range(200):
        assert env.observation_space.contains(obs)
        assert all(np.isfinite(v).all() for v in obs.values())
        masks = getattr(env.unwrapped, "action_masks", None)
        action = int(np.flatnonzero(masks())[0]) if masks else env.action_space.sample()
        obs, r, term, trunc, _ = env.step(action)
        assert np.isfinite(r)
        if term or trunc:
            break


def test_truncation_by_time_and_steps() -> None:
    env = make("Priority", max_sim_time_s=2.0)
    env.reset(seed=0)
    term = trunc = False
    while not (term or trunc):
        _, _, term, trunc, info = env.step(np.zeros(16, np.float32))
    assert trunc and not term
    # The next step would start at or after 2 s: the clock is there, or idle until an arrival.
    assert info["time_s"] >= 2.0 or info["num_running"] + info["num_waiting"] == 0
    env = E.PriorityEnv(scenario_overrides=SMALL["chat-azure-conv-v0"], max_episode_steps=5)
    env.reset(seed=0)
    for _i in range(5):
        _, _, term, trunc, _ = env.step(np.zeros(16, np.float32))
    assert trunc and not term
    with pytest.raises(gym.error.ResetNeeded):
        env.step(np.zeros(16, np.float32))


def test_render_ansi() -> None:
    env = make("Select", render_mode="ansi")
    env.reset(seed=0)
    text = env.render()
    assert text.startswith("Select t=") and "running=" in text


def test_check_env_with_render_checks_leaves_stdout_clean(capsys) -> None:
    """Gymnasium's check_env renders every declared mode once; human goes to stderr."""
    eid = env_id("Select", "chat-azure-conv-v0")
    env = gym.make(eid, scenario_overrides=SMALL["chat-azure-conv-v0"])
    check_env(env.unwrapped)
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("Select t=0.000s") == 2  # human mode: at reset, and render()


def test_oracle_column_only_with_oracle() -> None:
    plain = make("Priority")
    oracle = make("Priority", oracle=True)
    assert plain.observation_space["requests"].shape == (16, 12)
    assert oracle.observation_space["requests"].shape == (16, 13)
    obs, _ = oracle.reset(seed=0)
    assert obs["requests"][0, 12] > 0


@pytest.mark.parametrize("vector", ["sync", "async"])
def test_gymnasium_vector_envs(vector: str) -> None:
    fns = [lambda: make("Priority") for _ in range(2)]
    cls = gym.vector.SyncVectorEnv if vector == "sync" else gym.vector.AsyncVectorEnv
    venv = cls(fns)
    try:
        obs, _ = venv.reset(seed=[0, 1])
        assert obs["requests"].shape == (2, 16, 12)
        for _ in range(30):
            obs, r, term, trunc, _ = venv.step(venv.action_space.sample())
            assert r.shape == (2,) and np.isfinite(r).all()
    finally:
        venv.close()


def test_sb3_dummy_vec_env() -> None:
    pytest.importorskip("stable_baselines3", reason="stable-baselines3 is the [rl] extra")
    from stable_baselines3.common.env_checker import check_env as sb3_check
    from stable_baselines3.common.vec_env import DummyVecEnv

    sb3_check(make("Select").unwrapped, warn=False)
    venv = DummyVecEnv([lambda: make("Priority", max_episode_steps=20) for _ in range(2)])
    venv.seed(0)
    venv.reset()
    for _ in range(45):
        _, _, dones, infos = venv.step(np.stack([venv.action_space.sample()] * 2))
        for done, info in zip(dones, infos):
            if done:
                assert "terminal_observation" in info and "TimeLimit.truncated" in info


@pytest.mark.parametrize(
    ("task", "action", "match"),
    [
        ("Priority", np.zeros(3, np.float32), "shape"),
        ("Priority", np.full(16, np.nan, np.float32), "finite"),
        ("Priority", "high", "numbers"),
        ("BatchType", 2, "out of range"),
        ("BatchType", 0.5, "one integer"),
        ("Select", 17, "out of range"),
        ("Preempt", -1, "out of range"),
        ("Knob", np.array([0.5, np.inf]), "finite"),
        ("Knob", np.zeros(3), "shape"),
    ],
)
def test_invalid_actions_raise(task: str, action, match: str) -> None:
    env = make(task)
    env.reset(seed=0)
    with pytest.raises(E.InvalidActionError, match=match):
        env.unwrapped.step(action)


def test_invalid_action_is_policy_and_value_error() -> None:
    from llmsched_gym.errors import PolicyError

    assert issubclass(E.InvalidActionError, PolicyError)
    assert issubclass(E.InvalidActionError, ValueError)


def test_masked_select_choice_raises_when_strict_else_is_replaced() -> None:
    env = make("Select", top_k=4, strict_masks=True)
    env.reset(seed=0)
    masks = env.unwrapped.action_masks()
    assert masks.any() and not masks[4]  # nothing picked yet: close is masked
    with pytest.raises(E.InvalidActionError, match="masked"):
        env.unwrapped.step(4)
    lenient = make("Select", top_k=4)
    lenient.reset(seed=0)
    _, _, _, _, info = lenient.step(4)
    assert info["action_replaced"] is True


def test_empty_preempt_row_raises_when_strict() -> None:
    env = gym.make(
        env_id("Preempt", "infermax-offline-v0"),
        scenario_overrides={"workload.num_requests": 300},
        top_k=300,
        strict_masks=True,
    )
    env.reset(seed=0)
    n = int(env.unwrapped.action_masks().sum())
    assert 0 < n <= 256  # max_num_seqs
    with pytest.raises(E.InvalidActionError, match="empty"):
        env.unwrapped.step(299)


def test_knob_clips_out_of_range() -> None:
    env = make("Knob")
    env.reset(seed=0)
    env.step(np.array([2.0, -1.0], np.float32))
    assert env.unwrapped._caps == (8192, 1)


def test_bad_constructor_arguments() -> None:
    from llmsched_gym.errors import ConfigError

    with pytest.raises(ConfigError, match="top_k"):
        E.PriorityEnv(top_k=0)
    with pytest.raises(ConfigError, match="reward must be one of"):
        E.PriorityEnv(reward="throughput")
    with pytest.raises(ConfigError, match="unknown scenario"):
        E.PriorityEnv("no-such-v0")


@pytest.mark.parametrize("task", ["Priority", "Select", "Preempt", "BatchType"])
def test_incremental_token_totals_match_recomputed(task: str) -> None:
    """After random actions (with preemptions), the observation's token totals are exact."""
    env = gym.make(
        env_id(task, "chat-azure-conv-v0"),
        scenario_overrides={"workload.limit": 60, "engine.num_gpu_blocks": 300},
    )
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    rng = np.random.default_rng(0)
    base = env.unwrapped
    m = float(base.engine.config.max_num_batched_tokens)
    for _ in range(100_000):
        eng = base.engine
        w = sum(r.num_tokens - r.num_computed_tokens for r in eng.waiting)
        r = sum(r.num_tokens - r.num_computed_tokens for r in eng.running)
        assert (eng.waiting_tokens, eng.running_tokens) == (w, r)
        assert eng.running_prefills == sum(
            1 for x in eng.running if x.num_tokens - x.num_computed_tokens > 1
        )
        expect = np.array([w / (w + m), r / (r + m)], dtype=np.float32)
        assert obs["global"][5:7].tolist() == expect.tolist()
        masks = getattr(base, "action_masks", None)
        if masks is not None:
            action = int(rng.choice(np.flatnonzero(masks())))
        else:
            action = env.action_space.sample()
        obs, _, term, trunc, _ = env.step(action)
        if term or trunc:
            break
    assert term or trunc
    assert task == "Preempt" or base.engine.num_preemptions > 0
    assert base.engine.waiting_tokens == base.engine.running_tokens == 0
