"""``SB3VecEnv``: the native vector env as an SB3 ``VecEnv`` equals SB3's ``DummyVecEnv``."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("sb3_contrib")

from sb3_contrib import MaskablePPO  # noqa: E402
from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv  # noqa: E402

import llmsched_gym  # noqa: E402, F401 - registers the ids
from llmsched_gym.envs.sb3_policies import MaskableRowScorePolicy, RowScorePolicy  # noqa: E402
from llmsched_gym.envs.sb3_vec import SB3VecEnv  # noqa: E402
from llmsched_gym.envs.vector import LLMSchedVectorEnv  # noqa: E402

CASES = [
    (
        "llmsched/Priority-ChatSharegptOverload-v0",
        {"scenario_overrides": {"workload.num_requests": 12}, "top_k": 4},
    ),
    (
        "llmsched/Select-ChatSharegptOverload-v0",
        {"scenario_overrides": {"workload.num_requests": 8}, "top_k": 4, "max_episode_steps": 30},
    ),
    ("llmsched/Route-ChatAzureConv4x-v0", {"scenario_overrides": {"workload.num_requests": 12}}),
]


@pytest.mark.parametrize("env_id, kw", CASES, ids=[c[0].split("/")[1] for c in CASES])
def test_sb3_vec_env_steps_as_dummy_vec_env(env_id, kw) -> None:
    """Seed for seed: observations, rewards, dones and the episode-end infos are SB3's."""
    n = 3
    ours = SB3VecEnv(gym.make_vec(env_id, num_envs=n, **kw))
    # The environment itself (gym.make would take max_episode_steps for a TimeLimit).
    spec = gym.spec(env_id)
    args = {**spec.kwargs, **kw}
    theirs = DummyVecEnv([lambda: LLMSchedVectorEnv(spec.entry_point, **args).envs[0]] * n)
    assert isinstance(ours, VecEnv) and ours.num_envs == n
    ours.seed(5)
    theirs.seed(5)
    a, b = ours.reset(), theirs.reset()
    rng = np.random.default_rng(0)
    masked = is_masking_supported(ours)
    assert masked == is_masking_supported(theirs)
    ended = 0
    for _ in range(60):
        for key in b:
            np.testing.assert_array_equal(a[key], b[key])
        if masked:
            m = get_action_masks(ours)
            np.testing.assert_array_equal(m, get_action_masks(theirs))
            actions = np.array([rng.choice(np.flatnonzero(row)) for row in m])
        else:
            actions = np.stack([ours.action_space.sample() for _ in range(n)])
        a, ra, da, ia = ours.step(actions)
        b, rb, db, ib = theirs.step(actions)
        np.testing.assert_array_equal(ra, rb)
        np.testing.assert_array_equal(da, db)
        for i in range(n):
            assert ia[i]["TimeLimit.truncated"] == ib[i]["TimeLimit.truncated"]
            if da[i]:
                ended += 1
                assert "episode" in ia[i] and ia[i]["episode"]["l"] > 0
                for key in b:
                    np.testing.assert_array_equal(
                        ia[i]["terminal_observation"][key], ib[i]["terminal_observation"][key]
                    )
    assert ended > 0
    assert len(ours.render()) == n
    ours.close()


def test_sb3_vec_env_refuses_a_single_env() -> None:
    with pytest.raises(TypeError, match="gym.make_vec"):
        SB3VecEnv(gym.make(CASES[0][0]))


@pytest.mark.slow  # ~5 s each (torch's optimizer import, then a short learn)
@pytest.mark.parametrize(
    "algorithm, policy, case",
    [(PPO, RowScorePolicy, CASES[0]), (MaskablePPO, MaskableRowScorePolicy, CASES[2])],
    ids=["PPO-Priority", "MaskablePPO-Route"],
)
def test_sb3_learns_on_the_native_vector_env(algorithm, policy, case) -> None:
    """A short learn, one forward pass for all environments; same seed, same weights."""
    env_id, kw = case

    def train():
        venv = SB3VecEnv(gym.make_vec(env_id, num_envs=2, **kw))
        model = algorithm(policy, venv, n_steps=32, batch_size=32, n_epochs=1, seed=3)
        model.learn(64)
        assert model.num_timesteps == 64
        return [p.detach().clone() for p in model.policy.parameters()]

    for x, y in zip(train(), train(), strict=True):
        assert np.array_equal(x.numpy(), y.numpy())


def test_sb3s_error_on_the_raw_vector_env_names_the_adapter() -> None:
    """SB3 refuses a Gymnasium vector env in a message quoting its class: that names SB3VecEnv."""
    venv = gym.make_vec(CASES[0][0], num_envs=2, **CASES[0][1])
    with pytest.raises(ValueError, match=r"SB3VecEnv\(venv\)"):
        PPO(RowScorePolicy, venv)
