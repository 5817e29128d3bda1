"""The permutation-invariant SB3 policies: scores move with their rows, values do not move."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the rl extra (torch, stable-baselines3) is absent")
pytest.importorskip("stable_baselines3", reason="the rl extra (stable-baselines3) is absent")
pytest.importorskip("sb3_contrib", reason="the rl extra (sb3-contrib) is absent")

import llmsched_gym  # noqa: E402,F401 - registers the ids
from llmsched_gym.envs.sb3_policies import MaskableRowScorePolicy, RowScorePolicy  # noqa: E402


def _policy_and_obs(env_id, cls, **kw):
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO

    env = gym.make(env_id, **kw)
    algo = MaskablePPO if cls is MaskableRowScorePolicy else PPO
    model = algo(cls, env, n_steps=16, batch_size=16, seed=0, device="cpu")
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(40):  # a state with several visible rows
        masks = getattr(env.unwrapped, "action_masks", None)
        if masks is not None:
            action = int(rng.choice(np.flatnonzero(masks())))
        else:
            action = env.action_space.sample()
        obs, _, term, trunc, _ = env.step(action)
        if term or trunc:
            obs, _ = env.reset(seed=1)
    return model.policy, obs


def _scores_and_value(policy, obs):
    o = {k: torch.as_tensor(np.asarray(v))[None] for k, v in obs.items()}
    with torch.no_grad():
        f = policy.extract_features(o, policy.features_extractor)
        return policy.mlp_extractor.row_scores(f)[0][0], policy.predict_values(o)[0]


@pytest.mark.parametrize(
    "env_id, cls, table, kw",
    [
        (
            "llmsched/Priority-ChatSharegptOverload-v0",
            RowScorePolicy,
            "requests",
            {"scenario_overrides": {"workload.num_requests": 60}},
        ),
        (
            "llmsched/Select-ChatSharegptOverload-v0",
            MaskableRowScorePolicy,
            "requests",
            {"scenario_overrides": {"workload.num_requests": 60}, "top_k": 8},
        ),
        (
            "llmsched/Route-ChatAzureConv4x-v0",
            MaskableRowScorePolicy,
            "instances",
            {"scenario_overrides": {"workload.num_requests": 60}},
        ),
    ],
)
def test_shuffled_rows_give_shuffled_scores_and_the_same_value(env_id, cls, table, kw):
    policy, obs = _policy_and_obs(env_id, cls, **kw)
    scores, value = _scores_and_value(policy, obs)
    k = obs[table].shape[0]
    perm = np.random.default_rng(1).permutation(k)
    shuffled = dict(obs)
    shuffled[table] = obs[table][perm]
    shuffled["mask"] = obs["mask"][perm]
    s2, v2 = _scores_and_value(policy, shuffled)
    torch.testing.assert_close(s2[:k], scores[:k][perm], atol=1e-6, rtol=1e-5)
    if len(scores) > k:  # Select's stop logit depends on the set only
        torch.testing.assert_close(s2[k:], scores[k:], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(v2, value, atol=1e-6, rtol=1e-5)


def test_action_net_is_identity_and_log_std_is_shared():
    policy, _ = _policy_and_obs(
        "llmsched/Priority-ChatSharegptOverload-v0",
        RowScorePolicy,
        scenario_overrides={"workload.num_requests": 30},
    )
    assert isinstance(policy.action_net, torch.nn.Identity)
    assert policy.log_std.shape == (1,)
    names = {id(p) for p in policy.parameters()}
    assert all(id(p) in names for g in policy.optimizer.param_groups for p in g["params"])
    assert len({id(p) for g in policy.optimizer.param_groups for p in g["params"]}) == len(names)


def test_priority_gaussian_ignores_padding_rows_and_sde_holds_its_noise():
    """Only visible rows count in the log-probability; gSDE keeps one perturbation until reset."""
    from stable_baselines3 import PPO

    env = gym.make(
        "llmsched/Priority-ChatSharegptOverload-v0",
        scenario_overrides={"workload.num_requests": 60},
    )
    obs, _ = env.reset(seed=0)
    o = {k: torch.as_tensor(np.asarray(v))[None] for k, v in obs.items()}
    o["mask"] = o["mask"].clone()
    o["mask"][0, 3:] = 0  # rows 3.. are padding
    for use_sde in (False, True):
        model = PPO(RowScorePolicy, env, n_steps=16, batch_size=16, seed=0, use_sde=use_sde)
        policy = model.policy
        with torch.no_grad():
            dist = policy.get_distribution(o)
            a = dist.sample()
            b = a.clone()
            b[0, 3:] += 5.0  # moving padding rows' scores changes nothing
            torch.testing.assert_close(dist.log_prob(a), dist.log_prob(b))
            if use_sde:
                torch.testing.assert_close(policy.get_distribution(o).sample(), a)
                policy.reset_noise(1)
                assert not torch.allclose(policy.get_distribution(o).sample(), a)
    with pytest.raises(ValueError, match="exploration='sde' needs use_sde=True"):
        PPO(RowScorePolicy, env, policy_kwargs={"exploration": "sde"})


def _module_features(ext, obs):
    """The extractor's features computed through its ``nn.Sequential`` modules (pre-issue 40)."""
    rows = obs[ext.table_key].float()
    b, k, _ = rows.shape
    ctx = torch.cat([obs[key].float().reshape(b, -1) for key in ext.context_keys], 1)
    h = ext.phi(torch.cat([rows, ctx.unsqueeze(1).expand(b, k, ctx.shape[1])], dim=2))
    mask = obs["mask"].float().reshape(b, k, 1)
    p = ext.rho(torch.cat([(h * mask).sum(1) / mask.sum(1).clamp(min=1.0), ctx], dim=1))
    return torch.cat([h.reshape(b, k * ext.embed_dim), p, mask.reshape(b, k)], dim=1)


def _module_heads(heads, features):
    h, p, mask = heads._split(features)
    b, k, d = h.shape
    z = heads.score_hidden(torch.cat([h, p.unsqueeze(1).expand(b, k, d)], dim=2))
    scores = heads.score_out(z).squeeze(2)
    if heads.stop is not None:
        scores = torch.cat([scores, heads.stop(p)], dim=1)
    if heads.with_rows:
        scores = torch.cat([scores, mask, z.reshape(b, -1)], dim=1)
    return scores, heads.critic(p)


@pytest.mark.parametrize("batch", [1, 8, 256])
@pytest.mark.parametrize(
    "env_id, cls, kw",
    [
        ("llmsched/Priority-ChatSharegptOverload-v0", RowScorePolicy, {}),
        ("llmsched/Select-ChatSharegptOverload-v0", MaskableRowScorePolicy, {}),
        ("llmsched/Route-ChatAzureConv4x-v0", MaskableRowScorePolicy, {}),
    ],
    ids=["Priority", "Select", "Route"],
)
def test_functional_forward_equals_the_modules_bit_for_bit(env_id, cls, kw, batch) -> None:
    """``_linear`` (matmul + add, issue 40) gives nn.Linear's numbers: evaluation is unchanged."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO

    env = gym.make(env_id, **kw)
    algo = MaskablePPO if cls is MaskableRowScorePolicy else PPO
    policy = algo(cls, env, n_steps=16, batch_size=16, seed=0, device="cpu").policy
    gen = torch.Generator().manual_seed(batch)
    obs = {}
    for key, space in env.observation_space.spaces.items():
        if key == "mask":
            obs[key] = (torch.rand((batch, *space.shape), generator=gen) < 0.7).float()
        else:
            obs[key] = torch.randn((batch, *space.shape), generator=gen) * 3
    with torch.no_grad():
        features = policy.features_extractor(obs)
        assert torch.equal(features, _module_features(policy.features_extractor, obs))
        actor, critic = policy.mlp_extractor(features)
        want_actor, want_critic = _module_heads(policy.mlp_extractor, features)
    assert torch.equal(actor, want_actor) and torch.equal(critic, want_critic)


@pytest.mark.parametrize("masked", [True, False])
def test_unchecked_maskable_categorical_equals_sb3_contribs(masked) -> None:
    """The one-construction masked categorical (issue 40) gives sb3-contrib's numbers."""
    from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution

    from llmsched_gym.envs.sb3_policies import _unchecked_maskable

    gen = torch.Generator().manual_seed(1)
    logits = torch.randn((64, 17), generator=gen) * 4
    masks = (torch.rand((64, 17), generator=gen) < 0.5).numpy()
    masks[:, 3] = True
    ours, theirs = _unchecked_maskable(17), MaskableCategoricalDistribution(17)
    for dist in (ours, theirs):
        dist.proba_distribution(logits)
        if masked:
            dist.apply_masking(masks)
    a, b = ours.distribution, theirs.distribution
    assert torch.equal(a.logits, b.logits) and torch.equal(a.probs, b.probs)
    actions = torch.arange(64) % 17
    assert torch.equal(ours.log_prob(actions), theirs.log_prob(actions))
    assert torch.equal(ours.entropy(), theirs.entropy())
    assert torch.equal(ours.mode(), theirs.mode())
    torch.manual_seed(5)
    x = ours.sample()
    torch.manual_seed(5)
    assert torch.equal(x, theirs.sample())
