"""The native vector environments equal single environments, seed for seed, across resets."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import llmsched_gym  # noqa: F401 - registers the ids
from llmsched_gym.envs.vector import LLMSchedVectorEnv

CASES = [
    (
        "llmsched/Priority-ChatSharegptOverload-v0",
        {"scenario_overrides": {"workload.num_requests": 25}},
    ),
    (
        "llmsched/Select-ChatSharegptOverload-v0",
        {"scenario_overrides": {"workload.num_requests": 20}, "top_k": 4, "max_episode_steps": 40},
    ),
    ("llmsched/Route-ChatAzureConv4x-v0", {"scenario_overrides": {"workload.num_requests": 30}}),
]


@pytest.mark.parametrize("env_id, kw", CASES, ids=[c[0] for c in CASES])
def test_vector_env_equals_single_envs_seed_for_seed(env_id, kw):
    n, steps = 3, 120
    venv = gym.make_vec(env_id, num_envs=n, **kw)
    assert isinstance(venv, LLMSchedVectorEnv)
    assert venv.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    singles = [gym.make(env_id, **kw) for _ in range(n)]
    masks = hasattr(singles[0].unwrapped, "action_masks")
    obs, _ = venv.reset(seed=7)
    single_obs = [e.reset(seed=7 + i)[0] for i, e in enumerate(singles)]
    rng = np.random.default_rng(0)
    done = [False] * n
    episodes_ended = 0
    for _ in range(steps):
        for i in range(n):
            for key, value in single_obs[i].items():
                np.testing.assert_array_equal(obs[key][i], value)
        if masks:
            m = venv.action_masks()
            acts = [int(rng.choice(np.flatnonzero(m[i]))) for i in range(n)]
        else:
            acts = [singles[0].action_space.sample() for _ in range(n)]
        batched = np.stack([np.asarray(a) for a in acts])
        obs, rew, term, trunc, _ = venv.step(batched)
        for i, e in enumerate(singles):
            if done[i]:
                single_obs[i], _ = e.reset()
                assert rew[i] == 0.0 and not term[i] and not trunc[i]
                done[i] = False
                continue
            o, r, t, tr, _ = e.step(acts[i])
            single_obs[i] = o
            assert rew[i] == r and term[i] == t and trunc[i] == tr
            done[i] = t or tr
            episodes_ended += int(t or tr)
    assert episodes_ended >= 1  # the auto-reset path ran


def test_bad_num_envs_is_a_clear_error():
    from llmsched_gym.errors import ConfigError

    with pytest.raises(ConfigError, match="num_envs must be an integer >= 1"):
        gym.make_vec("llmsched/Priority-ChatSharegptOverload-v0", num_envs=0)
