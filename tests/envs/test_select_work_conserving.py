"""Select's ``work_conserving`` option: close only once no pick is valid, same task otherwise."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import llmsched_gym  # noqa: F401 - registers the ids
from llmsched_gym.envs import rollout
from llmsched_gym.envs.select_v0 import WorkConservingAgent, work_conserving_mask
from llmsched_gym.errors import ConfigError

ENV = "llmsched/Select-ChatSharegptOverload-v0"
SMALL = {
    "workload.num_requests": 80,
    "engine.max_num_seqs": 4,
    "engine.max_num_batched_tokens": 512,
}


class LastValid:
    """A masked 'model': picks the last valid action, so it would close at once if allowed."""

    def predict(self, obs, state=None, episode_start=None, deterministic=True, action_masks=None):
        return int(np.flatnonzero(action_masks)[-1]), state


def test_mask_allows_close_only_without_a_valid_pick() -> None:
    assert work_conserving_mask(np.array([1, 0, 1], bool)).tolist() == [True, False, False]
    assert work_conserving_mask(np.array([0, 0, 1], bool)).tolist() == [False, False, True]
    mask = np.array([1, 0, 1], bool)
    work_conserving_mask(mask)
    assert mask.tolist() == [True, False, True]  # the input is not changed


def test_env_never_offers_close_while_a_pick_is_valid() -> None:
    """Decisions exist only while a pick is valid (the batch closes by itself after), so with
    the option close is never offered, and a random agent still drains the workload."""
    env = gym.make(ENV, scenario_overrides=SMALL, top_k=4, work_conserving=True)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(20000):
        mask = env.unwrapped.action_masks()
        assert mask[:-1].any() and not mask[-1]
        _, _, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(mask))))
        if term or trunc:
            break
    assert term and info["num_finished_requests"] == 80


def test_agent_on_the_default_task_equals_the_option() -> None:
    """A model trained with the option acts identically on the unchanged task when wrapped."""
    model = LastValid()
    with_option = gym.make(ENV, scenario_overrides=SMALL, top_k=4, work_conserving=True)
    default = gym.make(ENV, scenario_overrides=SMALL, top_k=4)

    def act(env, agent):
        return lambda obs: agent.predict(obs, action_masks=env.unwrapped.action_masks())[0]

    a = rollout(with_option, act(with_option, model), seed=3)
    b = rollout(default, act(default, WorkConservingAgent(model)), seed=3)
    greedy_close = rollout(default, act(default, model), seed=3)
    assert a["return"] == b["return"]
    assert greedy_close["return"] < a["return"]  # closing early starves the batch


def test_masked_close_is_replaced_or_refused() -> None:
    env = gym.make(ENV, scenario_overrides=SMALL, top_k=4, work_conserving=True, strict_masks=True)
    env.reset(seed=0)
    for _ in range(50):  # to a decision where the default task would allow closing
        if env.unwrapped.builder.valid[-1]:
            break
        env.step(int(np.flatnonzero(env.unwrapped.action_masks())[0]))
    assert env.unwrapped.builder.valid[-1] and env.unwrapped.action_masks()[:-1].any()
    with pytest.raises(Exception, match="work_conserving: a pick is still valid"):
        env.step(4)


def test_bad_value_names_the_option() -> None:
    with pytest.raises(ConfigError, match="work_conserving must be True or False, got 'yes'"):
        gym.make(ENV, scenario_overrides=SMALL, work_conserving="yes")
