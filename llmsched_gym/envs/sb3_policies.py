"""Permutation-invariant actor-critic policies for stable-baselines3 (needs the ``rl`` extra).

The decisions of these environments rank rows: requests (Priority, Select, Preempt) or instances
(Route). A row's score should not depend on where the row sits in the table, and the value of a
state should not depend on the table's order. ``RowSetExtractor`` embeds every row with the same
weights (a DeepSets encoder, Zaheer et al., NeurIPS 2017, arXiv 1703.06114): with ``x_k`` the
row, ``c`` the context (every other observation key but the mask, e.g. the global features),

    h_k = phi([x_k, c])                  (shared MLP, one embedding per row)
    p   = rho([mean_{k: mask_k} h_k, c]) (masked mean: invariant to row order)

and ``RowHeads`` turns them into the actor's per-row scores and the critic's latent:

    score_k = psi([h_k, p])              (shared: equivariant, row k's score moves with row k)
    stop    = sigma(p)                   (Select's extra "close the batch" action)
    value   = V(p)                       (invariant)

The scores are the action distribution's parameters as they are (SB3's ``action_net`` is the
identity): the mean of the Gaussian for Priority's Box action, with one log std shared by every
row; the logits of the categorical for Select, Preempt and Route (MaskablePPO masks them).

>>> from stable_baselines3 import PPO  # doctest: +SKIP
>>> model = PPO(RowScorePolicy, env)  # doctest: +SKIP
>>> from sb3_contrib import MaskablePPO  # doctest: +SKIP
>>> model = MaskablePPO(MaskableRowScorePolicy, env)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from stable_baselines3.common.distributions import DiagGaussianDistribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

__all__ = ["MaskableRowScorePolicy", "RowHeads", "RowScorePolicy", "RowSetExtractor"]


def _table_key(space: spaces.Dict) -> str:
    for key in ("requests", "instances"):
        if key in space.spaces:
            return key
    raise ValueError(f"observation space has no row table ('requests' or 'instances'): {space}")


def _mlp(sizes: list[int], last_act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if last_act or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class RowSetExtractor(BaseFeaturesExtractor):
    """Per-row embeddings (shared weights) and their masked-mean pool, flattened for SB3.

    Output: ``[h_1, ..., h_K, p]`` of ``(K + 1) * embed_dim`` features; ``RowHeads`` splits it.

    Args:
        observation_space: A Dict with a row table (``requests`` or ``instances``, shape
            ``(K, F)``), a ``mask`` over the rows (``K``), and context vectors (any other keys).
        embed_dim: Size of a row embedding and of the pool.
        hidden: Hidden width of phi and rho.
    """

    def __init__(self, observation_space: spaces.Dict, embed_dim: int = 32, hidden: int = 64):
        self.table_key = _table_key(observation_space)
        k, f = observation_space.spaces[self.table_key].shape
        self.context_keys = sorted(
            key for key in observation_space.spaces if key not in (self.table_key, "mask")
        )
        c = sum(int(observation_space.spaces[key].shape[0]) for key in self.context_keys)
        super().__init__(observation_space, features_dim=(k + 1) * embed_dim)
        self.num_rows, self.embed_dim = k, embed_dim
        self.phi = _mlp([f + c, hidden, embed_dim])
        self.rho = _mlp([embed_dim + c, hidden, embed_dim])

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(batch, (K + 1) * embed_dim)`` features."""
        rows = observations[self.table_key].float()
        b, k, _ = rows.shape
        if self.context_keys:
            ctx = torch.cat(
                [observations[key].float().reshape(b, -1) for key in self.context_keys], 1
            )
        else:
            ctx = rows.new_zeros((b, 0))
        h = self.phi(torch.cat([rows, ctx.unsqueeze(1).expand(b, k, ctx.shape[1])], dim=2))
        mask = observations["mask"].float().reshape(b, k, 1)
        pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        p = self.rho(torch.cat([pooled, ctx], dim=1))
        return torch.cat([h.reshape(b, k * self.embed_dim), p], dim=1)


class RowHeads(nn.Module):
    """SB3's ``mlp_extractor``: per-row scores for the actor, the pool's latent for the critic.

    Args:
        num_rows: K, rows of the table.
        embed_dim: The extractor's ``embed_dim``.
        num_actions: K (one score per row), or K + 1 (plus a stop logit from the pool).
        hidden: Hidden width of the heads.
    """

    def __init__(self, num_rows: int, embed_dim: int, num_actions: int, hidden: int = 64) -> None:
        super().__init__()
        if num_actions not in (num_rows, num_rows + 1):
            raise ValueError(f"{num_actions} actions for {num_rows} rows: need K or K + 1")
        self.num_rows, self.embed_dim = num_rows, embed_dim
        self.latent_dim_pi = num_actions
        self.latent_dim_vf = hidden
        self.score = _mlp([2 * embed_dim, hidden, 1], last_act=False)
        self.stop = _mlp([embed_dim, hidden, 1], last_act=False) if num_actions > num_rows else None
        self.critic = _mlp([embed_dim, hidden])

    def _split(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = features.shape[0]
        k, d = self.num_rows, self.embed_dim
        return features[:, : k * d].reshape(b, k, d), features[:, k * d :]

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        """Per-row scores ``(batch, K)`` (``(batch, K + 1)`` with the stop logit last)."""
        h, p = self._split(features)
        b, k, d = h.shape
        scores = self.score(torch.cat([h, p.unsqueeze(1).expand(b, k, d)], dim=2)).squeeze(2)
        if self.stop is not None:
            scores = torch.cat([scores, self.stop(p)], dim=1)
        return scores

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        """The critic's latent, from the pool only (so the value is order-invariant)."""
        return self.critic(self._split(features)[1])

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actor latent, critic latent)``, as SB3's ``MlpExtractor``."""
        return self.forward_actor(features), self.forward_critic(features)


class _RowScoring:
    """Mixin: ``RowHeads`` as the mlp_extractor, an identity action net, one shared log std."""

    def __init__(
        self, observation_space: spaces.Dict, action_space: spaces.Space, *args: Any, **kwargs: Any
    ):
        kwargs.setdefault("features_extractor_class", RowSetExtractor)
        super().__init__(observation_space, action_space, *args, **kwargs)

    def _num_actions(self) -> int:
        space = self.action_space
        if isinstance(space, spaces.Box):
            return int(space.shape[0])
        if isinstance(space, spaces.Discrete):
            return int(space.n)
        raise ValueError(f"row-scoring policies need a Box or Discrete action, got {space}")

    def _build_mlp_extractor(self) -> None:
        ext = self.features_extractor
        self.mlp_extractor = RowHeads(ext.num_rows, ext.embed_dim, self._num_actions())

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        # The scores are the distribution's parameters: no mixing across rows after them.
        self.action_net = nn.Identity()
        if isinstance(self.action_dist, DiagGaussianDistribution):
            self.log_std = nn.Parameter(torch.full((1,), float(self.log_std_init)))
        if self.ortho_init:  # small initial scores, as SB3 initialises its action net
            last = self.mlp_extractor.score[-1]
            nn.init.orthogonal_(last.weight, gain=0.01)
            nn.init.zeros_(last.bias)
        self.optimizer = self.optimizer_class(
            self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
        )


class RowScorePolicy(_RowScoring, ActorCriticPolicy):
    """PPO / A2C policy: shared per-row scores (Priority's Box, or a Discrete over rows)."""


def _maskable_base() -> type:
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    return MaskableActorCriticPolicy


class MaskableRowScorePolicy(_RowScoring, _maskable_base()):
    """MaskablePPO policy: per-row logits (Select: plus a stop logit; Route: per instance)."""
